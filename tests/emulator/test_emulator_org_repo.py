"""The org `.github` repository cases a policy loader meets, answered as GitHub answers them.

Which installation covers a repository, minting tokens for repositories outside
it, what an installation token may read, what it can list, and the three
``emulator.world.build(org_repo=...)`` worlds.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from emulator_world import INSTALLATION_PERMISSIONS, OWNER, REPO, World, app_jwt

from emulator import EmulatorServer
from emulator import world as sample
from emulator.admin.client import AdminClient

NOT_ACCESSIBLE = (
    "There is at least one repository that does not exist or is not accessible to the parent installation."
)


@pytest.fixture
def selected(world: World, admin: AdminClient) -> dict[str, Any]:
    """A second App, installed on ``acme`` with only ``widgets`` selected."""
    from emulator_world import keypair

    private, public = keypair("selected-app")
    app = admin.create_app(name="Selective", public_key_pem=public, permissions=INSTALLATION_PERMISSIONS)
    inst = admin.create_installation(
        app_id=app["id"], account=OWNER, permissions=INSTALLATION_PERMISSIONS, repositories=[REPO]
    )
    assert (inst["repository_selection"], inst["repositories"]) == ("selected", [f"{OWNER}/{REPO}"])
    return {"jwt": app_jwt(app["id"], private), "installation_id": inst["id"], "url": world.url}


def _mint(base: str, jwt: str, installation_id: int, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{base}/app/installations/{installation_id}/access_tokens",
        headers={"Authorization": f"Bearer {jwt}"},
        json=body or None,
    )


def test_repo_installation_honours_the_selection(selected: dict[str, Any]) -> None:
    auth = {"Authorization": f"Bearer {selected['jwt']}"}
    base = selected["url"]
    found = httpx.get(f"{base}/repos/{OWNER}/{REPO}/installation", headers=auth)
    assert found.status_code == 200
    assert (found.json()["id"], found.json()["repository_selection"]) == (
        selected["installation_id"],
        "selected",
    )
    for missing in (f"{OWNER}/secret-sauce", f"{OWNER}/no-such-repo", "other-org/elsewhere"):
        answer = httpx.get(f"{base}/repos/{missing}/installation", headers=auth)
        assert answer.status_code == 404
        assert answer.json()["message"] == "Not Found"
        assert answer.json()["documentation_url"].startswith("https://docs.github.com/rest")


def test_token_for_a_repository_outside_the_installation_is_422(selected: dict[str, Any]) -> None:
    for names in (["secret-sauce"], ["no-such-repo"], [REPO, "secret-sauce"]):
        refused = _mint(selected["url"], selected["jwt"], selected["installation_id"], repositories=names)
        assert refused.status_code == 422
        assert refused.json()["message"] == NOT_ACCESSIBLE
    granted = _mint(selected["url"], selected["jwt"], selected["installation_id"], repositories=[REPO])
    assert granted.status_code == 201


def test_token_reads_public_repositories_anywhere_but_not_private_ones(
    world: World, admin: AdminClient
) -> None:
    admin.create_repo("other-org", "open-source", files={"LICENSE": "MIT\n"})
    narrowed = world.token(repositories=["secret-sauce"])  # a private repo, narrowed to it alone
    with world.api(narrowed) as api:
        for public in (f"{OWNER}/{REPO}", "other-org/open-source"):  # outside the token / the installation
            assert api.get(f"/repos/{public}").status_code == 200
            assert api.get(f"/repos/{public}/branches/main").status_code == 200
        licence = api.get("/repos/other-org/open-source/contents/LICENSE").json()
        assert base64.b64decode(licence["content"]) == b"MIT\n"
        assert api.get(f"/repos/{OWNER}/secret-sauce/contents/x.txt").status_code == 200
        hidden = api.get("/repos/other-org/elsewhere/contents/y.txt")
        assert (hidden.status_code, hidden.json()["message"]) == (404, "Not Found")
        assert api.get("/repos/other-org/elsewhere/branches/main").status_code == 404
    with world.api(world.token(repositories=[REPO])) as api:
        assert api.get(f"/repos/{OWNER}/secret-sauce").status_code == 404  # private, outside the token


def test_installation_repositories_lists_what_the_token_reaches(world: World, admin: AdminClient) -> None:
    admin.create_repo(OWNER, "gadgets", files={"a.txt": "a\n"})
    with world.api(world.token()) as api:
        everything = api.get("/installation/repositories")
        assert everything.status_code == 200
        body = everything.json()
        assert (body["total_count"], body["repository_selection"]) == (3, "all")
        assert sorted(r["full_name"] for r in body["repositories"]) == [
            f"{OWNER}/gadgets",
            f"{OWNER}/secret-sauce",
            f"{OWNER}/{REPO}",
        ]
        first = api.get("/installation/repositories", params={"per_page": 2})
        assert (first.json()["total_count"], len(first.json()["repositories"])) == (3, 2)
        assert 'rel="next"' in first.headers["link"]
        assert "per_page=2&page=2" in first.headers["link"]
        second = api.get("/installation/repositories", params={"per_page": 2, "page": 2})
        names = {r["name"] for r in first.json()["repositories"] + second.json()["repositories"]}
        assert names == {"gadgets", "secret-sauce", REPO}
    with world.api(world.token(repositories=[REPO])) as api:
        narrowed = api.get("/installation/repositories").json()
    assert (narrowed["total_count"], narrowed["repository_selection"]) == (1, "selected")
    assert [r["full_name"] for r in narrowed["repositories"]] == [f"{OWNER}/{REPO}"]
    anonymous = httpx.get(f"{world.url}/installation/repositories")
    assert anonymous.status_code == 401
    as_app = httpx.get(
        f"{world.url}/installation/repositories", headers={"Authorization": f"Bearer {world.jwt()}"}
    )
    assert as_app.status_code == 403


# -- world.build(org_repo=...) ----------------------------------------------------------------------


def _built(server: EmulatorServer, admin: AdminClient, **options: Any) -> tuple[sample.World, dict[str, str]]:
    w = sample.build(admin, server.url, **options)
    return w, {"Authorization": f"Bearer {app_jwt(w.app_id, w.private_key)}"}


def test_world_default_is_a_public_org_repo_in_an_all_installation(
    github_emulator: EmulatorServer, admin: AdminClient
) -> None:
    w, auth = _built(github_emulator, admin)
    org = httpx.get(f"{w.api_url}/repos/{OWNER}/.github").json()
    assert org["private"] is False
    lookup = httpx.get(f"{w.api_url}/repos/{OWNER}/.github/installation", headers=auth)
    assert (lookup.status_code, lookup.json()["repository_selection"]) == (200, "all")
    token = _mint(w.api_url, auth["Authorization"][7:], w.installation_id, repositories=[".github"])
    assert token.status_code == 201
    raw = httpx.get(
        f"{w.api_url}/repos/{OWNER}/.github/contents/baton.yml",
        headers={"Authorization": f"token {token.json()['token']}", "Accept": "application/vnd.github.raw"},
    )
    assert raw.text == sample.ORG_POLICY


def test_world_without_an_org_repo(github_emulator: EmulatorServer, admin: AdminClient) -> None:
    w, auth = _built(github_emulator, admin, org_repo="absent")
    assert httpx.get(f"{w.api_url}/repos/{OWNER}/.github").status_code == 404
    assert httpx.get(f"{w.api_url}/repos/{OWNER}/.github/installation", headers=auth).status_code == 404
    refused = _mint(w.api_url, auth["Authorization"][7:], w.installation_id, repositories=[".github"])
    assert (refused.status_code, refused.json()["message"]) == (422, NOT_ACCESSIBLE)
    granted = _mint(w.api_url, auth["Authorization"][7:], w.installation_id, repositories=["widgets"])
    assert granted.status_code == 201


def test_world_with_a_private_org_repo_outside_the_installation(
    github_emulator: EmulatorServer, admin: AdminClient
) -> None:
    w, auth = _built(github_emulator, admin, org_repo="excluded")
    jwt = auth["Authorization"][7:]
    assert httpx.get(f"{w.api_url}/repos/{OWNER}/.github/installation", headers=auth).status_code == 404
    widgets = httpx.get(f"{w.api_url}/repos/{sample.REPO}/installation", headers=auth).json()
    assert (widgets["id"], widgets["repository_selection"]) == (w.installation_id, "selected")
    refused = _mint(w.api_url, jwt, w.installation_id, repositories=[".github"])
    assert (refused.status_code, refused.json()["message"]) == (422, NOT_ACCESSIBLE)
    token = _mint(w.api_url, jwt, w.installation_id).json()
    assert [r["full_name"] for r in token["repositories"]] == [sample.REPO]
    api = {"Authorization": f"token {token['token']}"}
    assert httpx.get(f"{w.api_url}/repos/{OWNER}/.github", headers=api).status_code == 404
    assert httpx.get(f"{w.api_url}/repos/{OWNER}/.github/contents/baton.yml", headers=api).status_code == 404
    # The policy is there: once the org adds the repository, the App reads it.
    admin.add_installation_repositories(w.installation_id, [".github"])
    raw = httpx.get(
        f"{w.api_url}/repos/{OWNER}/.github/contents/baton.yml",
        headers={**api, "Accept": "application/vnd.github.raw"},
    )
    assert raw.text == sample.ORG_POLICY


def test_world_refuses_an_unknown_org_repo_case(github_emulator: EmulatorServer, admin: AdminClient) -> None:
    with pytest.raises(ValueError, match="org_repo"):
        sample.build(admin, github_emulator.url, org_repo="hidden")
