"""The setup flow in a real headless Chromium (Debian's `chromium`, driven by Playwright).

The browser does what a person does: opens the setup page, submits its form (to Baton, which sends
it on with a 307 to the emulator's stand-in for GitHub's "new App" page, which checks the manifest
against GitHub's rules), follows GitHub's redirect back, and reads what Baton says. Every page is
served under Baton's Content-Security-Policy, and a violation would show in the browser's console.

CI runs these (`.ci/run` installs `chromium` as root); they are skipped only on a machine where
Chromium is missing and cannot be installed (not root), as the box tests are without bubblewrap.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from baton import envfile
from emulator import EmulatorServer
from emulator.manifests import problems
from tests.bot.conftest import running_serve, setup_link

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
#: No sandbox (CI runs as root), and nothing that would reach outside this machine.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.geteuid() != 0,
    reason="chromium is not installed here (CI installs the Debian package as root: see .ci/run)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `apt-get install -y --no-install-recommends chromium`")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    problems_seen: list[str] = []

    def console(message: ConsoleMessage) -> None:
        # A refused page's 4xx is expected; anything else (a policy violation above all) is not.
        if message.type == "error" and not message.text.startswith("Failed to load resource: the server"):
            problems_seen.append(message.text)

    opened.on("console", console)
    yield opened
    context.close()
    assert problems_seen == []  # a Content-Security-Policy violation is reported here


def _github_posts(github: EmulatorServer) -> list[dict[str, object]]:
    return [r for r in github.emulator.requests.lines if str(r["path"]).endswith("/settings/apps/new")]


def test_a_person_registers_the_app_and_the_next_start_shows_it(  # noqa: PLR0917 - fixtures
    page: Page, setup_base: str, github: EmulatorServer, env_dir: Path, redis_url: str, tmp_path: Path
) -> None:
    page.goto(setup_link(setup_base))
    assert page.locator("h1").inner_text() == "Set up Baton"
    assert page.locator('form input[name="org"]').is_visible()
    with page.expect_navigation(url="**/setup/callback?**"):
        page.get_by_role("button", name="Register the GitHub App").click()
    assert page.locator("h1").inner_text() == "Baton is registered"
    # What reached the stand-in for GitHub's form: a manifest GitHub's rules accept.
    (posted,) = _github_posts(github)
    body = posted["body"]
    assert isinstance(body, dict)
    assert (posted["status"], problems(body["manifest"])) == (302, [])
    assert body["manifest"]["hook_attributes"]["url"] == setup_base + "/api/github/webhooks"
    assert body["state"]
    for name in (".env", envfile.APP_KEY_NAME, "baton-signing-key.pem"):
        assert stat.S_IMODE((env_dir / name).stat().st_mode) == 0o600
    values = envfile.read(env_dir / ".env")
    install = page.get_by_role("link", name=f"{github.url}/apps/baton/installations/new")
    assert install.get_attribute("href") == f"{github.url}/apps/baton/installations/new"
    assert values["WEBHOOK_SECRET"] not in page.content()

    with running_serve(
        env_dir, redis_url=redis_url, github_url=github.url, log=tmp_path / "serve.log"
    ) as base:
        page.goto(base + "/")
        assert page.locator("h1").inner_text() == "Baton"
        text = page.locator("body").inner_text()
        assert f"Baton, App id {values['APP_ID']}." in text
        assert "Not installed anywhere yet" in text


def test_a_callback_with_a_wrong_state_is_refused_and_writes_nothing(
    page: Page, setup_base: str, github: EmulatorServer, env_dir: Path
) -> None:
    page.goto(setup_link(setup_base))
    manifest = json.loads(page.locator('input[name="manifest"]').get_attribute("value") or "")
    # A link GitHub really made (a good code), but for a state this Baton never handed out, as a
    # link forged elsewhere would carry it. (Another name: GitHub's App names are unique.)
    forged = json.dumps({**manifest, "name": "Forged Baton"})
    made = httpx.post(f"{github.url}/settings/apps/new", data={"manifest": forged, "state": "forged"},
                      timeout=30)  # fmt: skip
    assert made.status_code == 302
    page.goto(made.headers["location"])
    assert page.locator("h1").inner_text() == "Refused"
    assert "Nothing was written" in page.locator("body").inner_text()
    assert list(env_dir.iterdir()) == []

    # The form itself, for an organisation: registered. Its link a second time: refused, nothing changed.
    page.goto(setup_link(setup_base))
    page.locator('input[name="org"]').fill("acme")
    with page.expect_navigation(url="**/setup/callback?**"):
        page.get_by_role("button", name="Register the GitHub App").click()
    assert page.locator("h1").inner_text() == "Baton is registered"
    app_id = int(envfile.read(env_dir / ".env")["APP_ID"])
    assert github.emulator.state.apps[app_id].owner == "acme"
    assert _github_posts(github)[-1]["path"] == "/organizations/acme/settings/apps/new"
    before = {p.name: p.read_bytes() for p in env_dir.iterdir()}
    page.goto(page.url)
    assert page.locator("h1").inner_text() == "Refused"
    assert {p.name: p.read_bytes() for p in env_dir.iterdir()} == before


def test_the_manifest_the_browser_posts_is_the_one_shown(
    page: Page, setup_base: str, github: EmulatorServer
) -> None:
    page.goto(setup_link(setup_base))
    shown = json.loads(page.locator('input[name="manifest"]').get_attribute("value") or "")
    with page.expect_navigation(url="**/setup/callback?**"):
        page.get_by_role("button", name="Register the GitHub App").click()
    (posted,) = _github_posts(github)
    body = posted["body"]
    assert isinstance(body, dict)
    assert body["manifest"] == shown
    assert sorted(body["fields"]) == ["manifest", "org", "state"]  # the form, replayed by the 307
