"""The manifest flow's GitHub side: the stand-in web form, GitHub's manifest rules, the code exchange."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest

from emulator import EmulatorServer
from emulator.admin.client import AdminClient
from emulator.manifests import CODE_TTL_SECONDS, problems


def manifest(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "Octoapp",
        "url": "https://example.com",
        "hook_attributes": {"url": "http://127.0.0.1:9/hooks"},
        "redirect_url": "http://127.0.0.1:9/back?from=github",
        "callback_urls": ["https://example.com/callback"],
        "public": False,
        "default_permissions": {"issues": "write", "checks": "write", "metadata": "read"},
        "default_events": ["issues", "issue_comment", "check_suite", "check_run", "label"],
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def post_form(server: EmulatorServer, body: dict[str, Any], path: str = "/settings/apps/new",
              state: str | None = "s1", query: dict[str, str] | None = None) -> httpx.Response:  # fmt: skip
    data = {"manifest": json.dumps(body), **({"state": state} if state else {})}
    return httpx.post(server.url + path, data=data, params=query or {}, timeout=30)


def code_of(response: httpx.Response) -> str:
    assert response.status_code == 302, response.text
    return parse_qs(urlsplit(response.headers["location"]).query)["code"][0]


def convert(server: EmulatorServer, code: str) -> httpx.Response:
    return httpx.post(f"{server.url}/app-manifests/{code}/conversions", timeout=10)


def test_a_valid_manifest_passes() -> None:
    assert problems(manifest()) == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"url": None}, "url is required"),
        ({"url": "javascript:alert(1)"}, "url is required"),
        ({"name": "x" * 35}, "name is too long (maximum is 34 characters)"),
        ({"name": None}, "name is missing"),
        ({"hook_attributes": {"active": True}}, "hook_attributes.url is required"),
        ({"hook_attributes": {"url": "https://e.com", "active": "yes"}}, "hook_attributes.active must be"),
        ({"redirect_url": None}, "redirect_url is missing"),
        ({"callback_urls": [f"https://e.com/{i}" for i in range(11)]}, "callback_urls: at most 10"),
        ({"public": "false"}, "public must be true or false"),
        ({"default_permissions": {"issues": "own"}}, "'own' is not an access level"),
        ({"default_permissions": {"metadata": "write"}}, "default_permissions.metadata"),
        ({"default_permissions": {"everything": "write"}}, "unknown permission 'everything'"),
        ({"default_events": ["pull_request"]}, "'pull_request' needs one of the permissions pull_requests"),
        ({"default_events": ["teleport"]}, "unknown event 'teleport'"),
    ],
)
def test_manifests_breaking_githubs_rules_are_named(changes: dict[str, Any], problem: str) -> None:
    found = problems(manifest(**changes))
    assert any(problem in p for p in found), found


def test_the_form_creates_the_app_and_its_key_works(github_emulator: EmulatorServer) -> None:
    back = post_form(github_emulator, manifest())
    location = urlsplit(back.headers["location"])
    assert (location.netloc, location.path) == ("127.0.0.1:9", "/back")
    query = parse_qs(location.query)
    assert query["from"] == ["github"]  # the redirect_url's own query is kept
    assert query["state"] == ["s1"]
    converted = convert(github_emulator, query["code"][0])
    assert converted.status_code == 201
    app = converted.json()
    assert (app["name"], app["slug"], app["owner"]["login"]) == ("Octoapp", "octoapp", "octocat")
    assert app["permissions"] == {"issues": "write", "checks": "write", "metadata": "read"}
    assert app["events"] == manifest()["default_events"]
    assert app["pem"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert app["webhook_secret"]
    assert app["client_id"]
    assert app["client_secret"]
    assert app["html_url"] == f"{github_emulator.url}/apps/octoapp"
    now = int(time.time())
    token = jwt.encode(
        {"iat": now - 60, "exp": now + 500, "iss": str(app["id"])}, app["pem"], algorithm="RS256"
    )
    me = httpx.get(f"{github_emulator.url}/app", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert (me.status_code, me.json()["name"]) == (200, "Octoapp")
    stored = github_emulator.emulator.state.apps[app["id"]]
    assert stored.webhook_url == "http://127.0.0.1:9/hooks"  # on this machine: kept
    assert stored.webhook_secret == app["webhook_secret"]


def test_a_code_is_good_once_and_for_an_hour(github_emulator: EmulatorServer) -> None:
    code = code_of(post_form(github_emulator, manifest()))
    assert convert(github_emulator, code).status_code == 201
    again = convert(github_emulator, code)
    assert again.status_code == 404
    assert again.json()["message"] == "Not Found"
    assert convert(github_emulator, "0" * 40).status_code == 404
    late = code_of(post_form(github_emulator, manifest(name="Late app")))
    github_emulator.emulator.state.manifest_codes[late].created_at -= CODE_TTL_SECONDS + 1
    assert convert(github_emulator, late).status_code == 404


def test_a_bad_manifest_gets_422_and_creates_nothing(github_emulator: EmulatorServer) -> None:
    before = set(github_emulator.emulator.state.apps)
    bad = post_form(github_emulator, manifest(url=None, default_events=["push"]))
    assert bad.status_code == 422
    assert "url is required" in bad.text
    assert "needs one of the permissions contents" in bad.text
    not_json = httpx.post(github_emulator.url + "/settings/apps/new", data={"manifest": "{"}, timeout=10)
    assert not_json.status_code == 422
    assert set(github_emulator.emulator.state.apps) == before
    assert code_of(post_form(github_emulator, manifest()))
    taken = post_form(github_emulator, manifest(name="OCTOAPP"))
    assert taken.status_code == 422
    assert "Name is already in use" in taken.text


def test_an_organisation_owns_its_app_and_the_state_may_be_in_the_query(
    github_emulator: EmulatorServer,
) -> None:
    back = post_form(github_emulator, manifest(), path="/organizations/acme/settings/apps/new", state=None,
                     query={"state": "in-query"})  # fmt: skip
    assert parse_qs(urlsplit(back.headers["location"]).query)["state"] == ["in-query"]
    app = convert(github_emulator, code_of(back)).json()
    assert app["owner"]["login"] == "acme"
    assert app["owner"]["type"] == "Organization"
    with AdminClient(github_emulator.url) as admin:
        admin.create_user("solo", type="User")
    person = post_form(github_emulator, manifest(name="Other"), path="/organizations/solo/settings/apps/new")
    assert person.status_code == 404
    logged = [r for r in github_emulator.emulator.requests.lines if r["path"].endswith("/settings/apps/new")]
    assert [r["status"] for r in logged] == [302, 404]
    assert logged[0]["body"]["manifest"]["name"] == "Octoapp"
