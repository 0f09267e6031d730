"""GitHub's rules a client notices: API versions, who may re-run a check, pagination links,
label-list validation, custom properties and always-distinct webhook bodies."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from emulator_world import INSTALLATION_PERMISSIONS, OWNER, REPO, World, app_jwt, keypair
from webhook_receiver import Receiver

from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"


@pytest.mark.parametrize("version", [None, "2022-11-28", "2026-03-10"])
def test_supported_api_versions_are_answered(world: World, version: str | None) -> None:
    headers = {"X-GitHub-Api-Version": version} if version else {}
    response = httpx.get(f"{world.url}/repos/{FULL}", headers=headers)
    assert response.status_code == 200
    assert response.headers["x-github-api-version-selected"] == (version or "2022-11-28")


@pytest.mark.parametrize("version", ["2021-01-01", "v3", "2026-03-11"])
def test_unsupported_api_version_is_400(world: World, version: str) -> None:
    with world.api(world.token()) as api:
        response = api.get(f"/repos/{FULL}", headers={"X-GitHub-Api-Version": version})
    assert response.status_code == 400
    body = response.json()
    assert body["message"] == (
        f'The version you specified in the "X-GitHub-Api-Version" request header, "{version}", is not a '
        'supported version. The following versions are currently supported: "2026-03-10" (most recent), '
        '"2022-11-28".'
    )
    assert body["documentation_url"].startswith("https://docs.github.com/")


def test_only_the_creating_app_may_rerequest_a_check_run(world: World, admin: AdminClient) -> None:
    with world.api(world.token()) as api:
        run = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "gate", "head_sha": world.head_sha, "conclusion": "failure"},
        ).json()
        assert api.post(f"/repos/{FULL}/check-runs/{run['id']}/rerequest").status_code == 201
    private, public = keypair("second-app")
    other = admin.create_app(name="Other App", public_key_pem=public, permissions=INSTALLATION_PERMISSIONS)
    inst = admin.create_installation(app_id=other["id"], account=OWNER, permissions=INSTALLATION_PERMISSIONS)
    token = httpx.post(
        f"{world.url}/app/installations/{inst['id']}/access_tokens",
        headers={"Authorization": f"Bearer {app_jwt(other['id'], private)}"},
    ).json()["token"]
    with world.api(token) as other_api:
        refused = other_api.post(f"/repos/{FULL}/check-runs/{run['id']}/rerequest")
    assert refused.status_code == 403
    assert refused.json()["message"].startswith(f"Invalid app_id `{other['id']}`")


def _link(response: httpx.Response, rel: str) -> str:
    for part in response.headers["link"].split(", "):
        url, _, kind = part.partition("; ")
        if kind == f'rel="{rel}"':
            return url.strip("<>")
    raise AssertionError(f"no {rel} link in {response.headers['link']}")


def test_pagination_links_keep_the_callers_query(world: World) -> None:
    with world.api(world.token()) as api:
        for name in ("a", "b", "c"):
            api.post(f"/repos/{FULL}/check-runs", json={"name": name, "head_sha": world.head_sha})
        api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "d", "head_sha": world.head_sha, "conclusion": "success"},
        )
        first = api.get(f"/repos/{FULL}/commits/main/check-runs", params={"status": "queued", "per_page": 1})
        assert first.json()["total_count"] == 3
        following = _link(first, "next")
        query = parse_qs(urlsplit(following).query)
        assert query == {"status": ["queued"], "per_page": ["1"], "page": ["2"]}
        assert following.startswith(f"{world.url}/repos/{FULL}/commits/main/check-runs?")
        second = api.get(following)
        assert [r["status"] for r in second.json()["check_runs"]] == ["queued"]
        last = parse_qs(urlsplit(_link(second, "last")).query)
        assert last == {"status": ["queued"], "per_page": ["1"], "page": ["3"]}
        assert parse_qs(urlsplit(_link(second, "prev")).query)["status"] == ["queued"]


def test_adding_an_empty_label_list_is_422_but_setting_one_clears(world: World, admin: AdminClient) -> None:
    world.post(f"/repos/{FULL}/issues", {"title": "t", "user": "maria", "labels": ["bug"]})
    with world.api(world.token()) as api:
        empty = api.post(f"/repos/{FULL}/issues/1/labels", json={"labels": []})
        assert empty.status_code == 422
        assert empty.json()["message"] == (
            'Invalid request.\n\nNo subschema in "anyOf" matched.\n'
            "For 'anyOf/0', {\"labels\"=>[]} is not an array.\n"
            "For 'anyOf/1', {\"labels\"=>[]} is not an array.\n"
            "1 item required; only 0 were supplied."
        )
        assert [lb["name"] for lb in api.get(f"/repos/{FULL}/issues/1/labels").json()] == ["bug"]
        cleared = api.put(f"/repos/{FULL}/issues/1/labels", json={"labels": []})
        assert (cleared.status_code, cleared.json()) == (200, [])
    with pytest.raises(AdminCallFailed) as exc:  # nor can a person add no labels
        admin.label(FULL, 1, [], sender="maria")
    assert exc.value.status == 422


def test_webhook_repositories_carry_custom_properties(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    admin.create_repo(OWNER, "gadgets", files={"a.txt": "a\n"}, custom_properties={"team": "core"})
    admin.create_issue(FULL, title="t", user="rita")
    admin.create_issue(f"{OWNER}/gadgets", title="t", user="rita")
    plain, tagged = receiver.wait_for(2)
    assert plain.body["repository"]["custom_properties"] == {}
    assert tagged.body["repository"]["custom_properties"] == {"team": "core"}
    with hooked.api(hooked.token()) as api:
        assert api.get(f"/repos/{OWNER}/gadgets").json()["custom_properties"] == {"team": "core"}


def test_deliveries_about_one_issue_never_share_a_body(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    """Label, unlabel, label again within a second: three different bodies, three updated_at values."""
    number = admin.create_issue(FULL, title="t", user="rita")["number"]
    admin.label(FULL, number, ["agent:claude-code"], sender="maria")
    admin.unlabel(FULL, number, "agent:claude-code", sender="maria")
    admin.label(FULL, number, ["agent:claude-code"], sender="maria")
    admin.comment(FULL, number, "/baton retry", user="maria")
    items = receiver.wait_for(5)
    assert [i.event for i in items] == [
        ("issues", "opened"),
        ("issues", "labeled"),
        ("issues", "unlabeled"),
        ("issues", "labeled"),
        ("issue_comment", "created"),
    ]
    stamps = [i.body["issue"]["updated_at"] for i in items]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == len(stamps)
    assert len({hashlib.sha256(i.raw).hexdigest() for i in items}) == len(items)
    first_label, relabel = items[1].body, items[3].body
    assert {k: v for k, v in first_label.items() if k != "issue"} == {
        k: v for k, v in relabel.items() if k != "issue"
    }  # the same change twice: only the issue's updated_at tells them apart
