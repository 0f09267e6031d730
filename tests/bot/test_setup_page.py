"""The setup page (setup mode: no App credentials) against the GitHub emulator, over loopback HTTP."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest

from baton import envfile, settings
from baton.github_web import web_base
from baton.settings import Settings
from bot.app import WEBHOOK_PATH, create_app
from bot.manifest import DEFAULT_MANIFEST, PendingStates, load
from emulator import EmulatorServer
from emulator.admin.client import AdminClient
from emulator.manifests import problems
from tests.bot.conftest import SETUP_TOKEN, form_fields, register, running_serve, setup_link
from tests.conftest import serve_app

SECRET_FILES = (envfile.ENV_NAME, envfile.APP_KEY_NAME, "baton-signing-key.pem")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_setup_mode_means_no_app_credentials() -> None:
    assert Settings().setup_mode
    assert Settings(webhook_secrets=(b"s",)).setup_mode  # a secret alone is not an App
    assert Settings(app_id="1").setup_mode
    assert not Settings(app_id="1", private_key="-----BEGIN RSA PRIVATE KEY-----\n").setup_mode


@pytest.mark.parametrize(
    ("api", "web"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com"),
        ("https://ghe.example.com/api/v3/", "https://ghe.example.com"),
        ("http://127.0.0.1:8123", "http://127.0.0.1:8123"),
    ],
)
def test_githubs_web_pages_are_found_from_its_api_root(api: str, web: str) -> None:
    assert web_base(api) == web


def test_the_page_offers_the_manifest_with_this_address(setup_base: str, github: EmulatorServer) -> None:
    page = httpx.get(setup_link(setup_base), timeout=10)
    assert page.status_code == 200
    assert page.headers["x-content-type-options"] == "nosniff"
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy  # no script at all: default-src 'none' covers it
    assert f"form-action 'self' {github.url}" in policy
    fields = form_fields(page.text)
    manifest = json.loads(fields["manifest"])
    template = load(DEFAULT_MANIFEST)
    assert manifest["name"] == template["name"]
    assert manifest["default_permissions"] == template["default_permissions"]
    assert manifest["default_events"] == template["default_events"]
    assert manifest["url"] == setup_base + "/"
    assert manifest["hook_attributes"] == {"url": setup_base + WEBHOOK_PATH, "active": True}
    assert manifest["redirect_url"] == setup_base + "/setup/callback"
    assert manifest["setup_url"] == setup_base + "/"
    assert problems(manifest) == []  # what GitHub would accept
    assert len(fields["state"]) >= 40
    assert form_fields(httpx.get(setup_link(setup_base), timeout=10).text)["state"] != fields["state"]


@pytest.mark.parametrize("query", ["", "?token=", "?token=wrong-token-0123456789", f"?token={SETUP_TOKEN}x"])
def test_the_page_opens_only_with_the_token_serve_printed(setup_base: str, env_dir: Path, query: str) -> None:
    """A stranger who finds an unconfigured Baton cannot register an App of their own on it."""
    refused = httpx.get(f"{setup_base}/{query}", timeout=10)
    assert refused.status_code == 403
    assert 'name="manifest"' not in refused.text
    assert 'name="state"' not in refused.text
    assert "the link `baton serve` printed" in refused.text
    (env_dir / ".env").write_text("APP_ID=1\n")  # nor does it say where the credentials are
    assert str(env_dir) not in httpx.get(f"{setup_base}/{query}", timeout=10).text


def test_a_setup_token_too_short_to_guard_anything_is_refused(github: EmulatorServer, env_dir: Path) -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(Settings(github_api_url=github.url), None, env_dir=env_dir, setup_token="short")


def test_public_url_wins_over_the_address_reached(
    github: EmulatorServer, redis_url: str, env_dir: Path
) -> None:
    config = Settings(github_api_url=github.url, public_url="https://baton.example.com")
    with serve_app(create_app(config, redis_url, env_dir=env_dir, setup_token=SETUP_TOKEN)) as base:
        manifest = json.loads(form_fields(httpx.get(setup_link(base), timeout=10).text)["manifest"])
    assert manifest["hook_attributes"]["url"] == "https://baton.example.com/api/github/webhooks"
    assert manifest["redirect_url"] == "https://baton.example.com/setup/callback"


def test_registration_writes_a_private_env_that_configures_baton(
    setup_base: str, github: EmulatorServer, env_dir: Path
) -> None:
    _, back = register(setup_base)
    done = httpx.get(back.headers["location"], timeout=30)
    assert done.status_code == 200, done.text
    assert done.headers["cache-control"] == "no-store"
    for name in SECRET_FILES:
        assert _mode(env_dir / name) == 0o600, name
    values = envfile.read(env_dir / ".env")
    assert list(values) == list(envfile.NAMES)
    config = settings.load({**values, "GITHUB_API_URL": github.url})
    assert not config.setup_mode
    assert config.signing_key is not None
    assert config.missing_evidence() is None
    app = github.emulator.state.apps[int(values["APP_ID"])]
    assert (app.name, app.owner, app.webhook_secret) == ("Baton", "octocat", values["WEBHOOK_SECRET"])
    assert app.webhook_url == setup_base + WEBHOOK_PATH
    # The key GitHub handed over works: the App's JWT is accepted.
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 500, "iss": str(app.id)}, config.private_key or "",
                       algorithm="RS256")  # fmt: skip
    me = httpx.get(f"{github.url}/app", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert (me.status_code, me.json()["id"]) == (200, app.id)
    # What to do next, and not one secret on the page.
    assert f"{github.url}/apps/baton/installations/new" in done.text
    assert "fly secrets set" in done.text
    pem_body = (env_dir / envfile.APP_KEY_NAME).read_text().splitlines()[1]
    for secret in (values["WEBHOOK_SECRET"], values["BATON_AUDIT_SECRET"], pem_body):
        assert secret not in done.text
    # Once written, the page offers no second registration.
    again = httpx.get(setup_link(setup_base), timeout=10)
    assert "already written" in again.text
    assert 'name="manifest"' not in again.text


def test_a_wrong_or_reused_state_is_refused_and_nothing_is_written(
    setup_base: str, github: EmulatorServer, env_dir: Path
) -> None:
    _, back = register(setup_base)
    query = parse_qs(urlsplit(back.headers["location"]).query)
    code, state = query["code"][0], query["state"][0]
    callback = setup_base + "/setup/callback"
    for wrong in ({"code": code, "state": state + "x"}, {"code": code}, {"code": code, "state": ""}):
        refused = httpx.get(callback, params=wrong, timeout=10)
        assert refused.status_code == 400
        assert "Nothing was written" in refused.text
    assert list(env_dir.iterdir()) == []
    assert httpx.get(callback, params={"code": code, "state": state}, timeout=30).status_code == 200
    before = {p.name: p.read_bytes() for p in env_dir.iterdir()}
    reused = httpx.get(callback, params={"code": code, "state": state}, timeout=10)
    assert reused.status_code == 400
    assert {p.name: p.read_bytes() for p in env_dir.iterdir()} == before


def test_an_existing_env_is_never_overwritten(setup_base: str, env_dir: Path) -> None:
    _, back = register(setup_base)
    mine = env_dir / ".env"
    mine.write_text("APP_ID=1\n")
    refused = httpx.get(back.headers["location"], timeout=10)
    assert refused.status_code == 409
    assert "never overwrites" in refused.text
    assert mine.read_text() == "APP_ID=1\n"
    assert [p.name for p in env_dir.iterdir()] == [".env"]
    # Moved away, the same link (its state still unused, its code still good) finishes the job.
    mine.rename(env_dir.parent / "old.env")
    assert httpx.get(back.headers["location"], timeout=30).status_code == 200
    assert envfile.read(mine)["APP_ID"].isdigit()


def test_an_organisation_gets_the_app(setup_base: str, github: EmulatorServer, env_dir: Path) -> None:
    fields = {**form_fields(httpx.get(setup_link(setup_base), timeout=10).text), "org": "acme"}
    start = httpx.post(setup_base + "/setup/start", data=fields, timeout=10)
    assert start.status_code == 307
    target = urlsplit(start.headers["location"])
    assert target.path == "/organizations/acme/settings/apps/new"
    assert parse_qs(target.query)["state"] == [fields["state"]]
    back = httpx.post(start.headers["location"], data=fields, timeout=30)
    assert httpx.get(back.headers["location"], timeout=30).status_code == 200
    app_id = int(envfile.read(env_dir / ".env")["APP_ID"])
    assert github.emulator.state.apps[app_id].owner == "acme"
    for bad in ("-acme", "a" * 40, "ac me", "<script>"):
        refused = httpx.post(setup_base + "/setup/start", data={**fields, "org": bad}, timeout=10)
        assert refused.status_code == 400
        assert "<script>" not in refused.text


def test_the_start_refuses_a_form_this_baton_did_not_make(setup_base: str) -> None:
    fields = form_fields(httpx.get(setup_link(setup_base), timeout=10).text)
    forged = httpx.post(setup_base + "/setup/start", data={**fields, "state": "forged"}, timeout=10)
    assert forged.status_code == 400
    empty = httpx.post(setup_base + "/setup/start", data={"state": fields["state"]}, timeout=10)
    assert empty.status_code == 400


def test_a_used_or_unknown_code_is_refused_by_github(setup_base: str, env_dir: Path) -> None:
    fields = form_fields(httpx.get(setup_link(setup_base), timeout=10).text)
    unknown = httpx.get(setup_base + "/setup/callback", params={"code": "0" * 40, "state": fields["state"]},
                        timeout=30)  # fmt: skip
    assert unknown.status_code == 502
    assert "does not know this code" in unknown.text
    assert list(env_dir.iterdir()) == []


def test_states_are_single_use_and_expire() -> None:
    now = [1000.0]
    states = PendingStates(clock=lambda: now[0])
    one, two = states.new(), states.new()
    assert states.pending(one)
    expiry = states.consume(one)
    assert expiry == 1000.0 + 3600
    assert states.consume(one) is None
    states.give_back(one, expiry)  # a use that failed before GitHub answered
    assert states.pending(one)
    assert not states.pending("made-up")
    now[0] += 3601
    assert not states.pending(two)


def test_the_next_start_of_serve_loads_the_env(
    setup_base: str, github: EmulatorServer, env_dir: Path, redis_url: str, tmp_path: Path
) -> None:
    """`baton serve`, started where `.env` was written, is configured: the status page shows the App."""
    _, back = register(setup_base)
    assert httpx.get(back.headers["location"], timeout=30).status_code == 200
    log = tmp_path / "serve.log"
    with running_serve(env_dir, redis_url=redis_url, github_url=github.url, log=log) as base:
        assert httpx.get(base + "/healthz", timeout=5).json()["setup_mode"] is False
        status = httpx.get(base + "/", timeout=10)
        assert status.status_code == 200
        assert "Baton</a>, App id" in status.text
        assert "Not installed anywhere yet" in status.text
    said = log.read_text()
    assert "settings from ./.env: APP_ID, BATON_APP_SLUG, PRIVATE_KEY_PATH, WEBHOOK_SECRET" in said
    for secret in (envfile.read(env_dir / ".env")["WEBHOOK_SECRET"], "BEGIN RSA"):
        assert secret not in said


def test_a_secret_the_environment_already_sets_is_said_to_win(
    github: EmulatorServer, redis_url: str, env_dir: Path
) -> None:
    """A webhook secret without an App is still setup mode (and deliveries are still verified)."""
    config = Settings(github_api_url=github.url, webhook_secrets=(b"an-older-secret",))
    with serve_app(create_app(config, redis_url, env_dir=env_dir, setup_token=SETUP_TOKEN)) as base:
        assert httpx.get(base + "/healthz", timeout=5).json()["setup_mode"] is True
        unsigned = httpx.post(
            base + WEBHOOK_PATH, content=b"{}", headers={"X-GitHub-Event": "ping"}, timeout=5
        )
        assert unsigned.status_code == 401  # verified, not 503: the secret is there
        _, back = register(base)
        done = httpx.get(back.headers["location"], timeout=30)
    assert done.status_code == 200
    assert "This environment already sets <code>WEBHOOK_SECRET</code>, which wins over" in done.text
    assert "APP_ID</code>" not in done.text.split("already sets", 1)[1].split("</p>", 1)[0]


def test_a_failed_exchange_may_be_tried_again(setup_base: str, github: EmulatorServer, env_dir: Path) -> None:
    _, back = register(setup_base)
    with AdminClient(github.url) as admin:
        admin.add_fault("/app-manifests/*/conversions", status=502)
    failed = httpx.get(back.headers["location"], timeout=30)
    assert failed.status_code == 502
    assert "GitHub answered 502" in failed.text
    assert list(env_dir.iterdir()) == []
    assert httpx.get(back.headers["location"], timeout=30).status_code == 200  # the same link, again
