"""The admin API and its Python client: set-up mistakes are refused with a reason."""

from __future__ import annotations

import httpx
import pytest
from emulator_world import OWNER, REPO, World, keypair

from emulator import EmulatorServer
from emulator.admin.client import AdminCallFailed, AdminClient


def test_client_drives_a_scenario_end_to_end(world: World) -> None:
    with AdminClient(world.url) as admin:
        issue = admin.create_issue(f"{OWNER}/{REPO}", title="Add X", user="rita", labels=["bug"])
        admin.label(f"{OWNER}/{REPO}", issue["number"], ["agent:claude-code"], sender="maria")
        admin.comment(f"{OWNER}/{REPO}", issue["number"], "/baton retry", user="wes")
        sha = admin.commit(f"{OWNER}/{REPO}", "feature", {"src/app.py": "print('bye')\n", "README.md": None})
        pull = admin.open_pull(f"{OWNER}/{REPO}", head="feature", user="wes", title="Bye")
        assert len(sha) == 40
        assert pull["number"] == issue["number"] + 1  # issues and pulls share numbers
        comments = admin.comments()
        assert [(c["issue_number"], c["body"], c["user"]["login"]) for c in comments] == [
            (1, "/baton retry", "wes")
        ]
        assert admin.check_runs() == []
    with world.api(world.token()) as api:
        labels = [lb["name"] for lb in api.get(f"/repos/{OWNER}/{REPO}/issues/1").json()["labels"]]
        assert labels == ["bug", "agent:claude-code"]
        files = api.get(f"/repos/{OWNER}/{REPO}/pulls/2/files").json()
        assert sorted((f["filename"], f["status"]) for f in files) == [
            ("README.md", "removed"),
            ("src/app.py", "modified"),
        ]


def test_role_none_removes_and_private_repo_reports_none(world: World) -> None:
    with AdminClient(world.url) as admin:
        admin.set_role(f"{OWNER}/secret-sauce", "wes", "write")
        admin.set_role(f"{OWNER}/secret-sauce", "wes", "none")
    with world.api(world.token()) as api:
        answer = api.get(f"/repos/{OWNER}/secret-sauce/collaborators/wes/permission").json()
    assert (answer["permission"], answer["role_name"]) == ("none", "none")


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/repos", {"owner": OWNER, "name": REPO}, 409),
        ("POST", "/repos", {"owner": OWNER, "name": "../escape"}, 422),
        ("POST", "/repos", {"owner": OWNER, "name": "x", "files": {"../x": "y"}}, 422),
        ("POST", "/installations", {"app_id": 1, "account": OWNER}, 422),
        ("PUT", f"/repos/{OWNER}/{REPO}/collaborators/wes", {"role": "owner"}, 422),
        ("POST", f"/repos/{OWNER}/{REPO}/issues/99/labels", {"labels": ["x"], "sender": "wes"}, 404),
        ("POST", f"/repos/{OWNER}/{REPO}/commits", {"branch": "--force", "files": {"a": "b"}}, 422),
        ("PATCH", "/settings", {"token_ttl_seconds": 0}, 422),
    ],
)
def test_bad_admin_calls_are_refused(
    world: World, method: str, path: str, body: dict[str, object], status: int
) -> None:
    with AdminClient(world.url) as admin, pytest.raises(AdminCallFailed) as exc:
        admin.call(method, path, body)
    assert exc.value.status == status
    assert isinstance(exc.value.body["message"], str)


def test_open_pull_without_commits_reports_githubs_error(world: World) -> None:
    with AdminClient(world.url) as admin, pytest.raises(AdminCallFailed) as exc:
        admin.open_pull(f"{OWNER}/{REPO}", head="main", user="wes")
    assert exc.value.status == 422
    assert exc.value.body["errors"][0]["message"] == "No commits between main and main"


def test_app_with_bad_key_is_refused(github_emulator: EmulatorServer) -> None:
    response = httpx.post(
        f"{github_emulator.url}/_emulator/apps", json={"name": "x", "public_key_pem": "not a key"}
    )
    assert response.status_code == 422
    good = httpx.post(
        f"{github_emulator.url}/_emulator/apps", json={"name": "Good App", "public_key_pem": keypair()[1]}
    )
    assert good.status_code == 201
    assert good.json()["slug"] == "good-app"
    assert good.json()["bot_login"] == "good-app[bot]"


def test_installation_suspend_and_delete_affect_tokens(world: World) -> None:
    token = world.token()
    with AdminClient(world.url) as admin, world.api(token) as api:
        admin.call("POST", f"/installations/{world.installation_id}/suspend", {})
        suspended = api.get(f"/repos/{OWNER}/{REPO}")
        assert suspended.status_code == 403
        assert suspended.json()["message"] == "This installation has been suspended"
        refused = httpx.post(
            f"{world.url}/app/installations/{world.installation_id}/access_tokens",
            headers={"Authorization": f"Bearer {world.jwt()}"},
        )
        assert refused.status_code == 403
        admin.call("POST", f"/installations/{world.installation_id}/unsuspend", {})
        assert api.get(f"/repos/{OWNER}/{REPO}").status_code == 200
        admin.call("POST", f"/installations/{world.installation_id}/deleted", {})
        revoked = api.get(f"/repos/{OWNER}/{REPO}")
        assert revoked.status_code == 401
        assert revoked.json()["message"] == "Bad credentials"
        gone = httpx.get(
            f"{world.url}/app/installations/{world.installation_id}",
            headers={"Authorization": f"Bearer {world.jwt()}"},
        )
        assert gone.status_code == 404


def test_contents_raw_media_type(world: World) -> None:
    with world.api(world.token()) as api:
        raw = api.get(
            f"/repos/{OWNER}/{REPO}/contents/.github/baton.yml",
            headers={"Accept": "application/vnd.github.raw+json"},
        )
    assert raw.status_code == 200
    assert raw.content == b"agents:\n  claude-code: {}\n"
