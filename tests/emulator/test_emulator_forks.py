"""Forks and pull requests from forks: the base's App gets them and fetches ``refs/pull/<n>/head``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World, app_jwt, authed, build_world, keypair, run_git
from githubkit.webhooks import parse_obj
from webhook_receiver import Receiver, assert_signed

from emulator import EmulatorServer
from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"
FORK = f"mallory/{REPO}"


def _git(
    *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_git(*args, cwd=cwd, check=check, env=env)


def _ls_remote(url: str, cwd: Path) -> dict[str, str]:
    out = _git("ls-remote", url, cwd=cwd).stdout
    return {ref: sha for sha, ref in (line.split("\t") for line in out.splitlines())}


def _fork_with_feature(admin: AdminClient) -> str:
    """mallory forks acme/widgets and commits to ``feature`` in the fork; the commit's sha."""
    admin.create_user("mallory")
    admin.fork(FULL, "mallory")
    return admin.commit(FORK, "feature", {"src/app.py": "print('pwned')\n"}, sender="mallory")


def _pull_events(receiver: Receiver, count: int) -> list[dict[str, Any]]:
    items = receiver.wait_for(count)
    return [i.body for i in items if i.headers["x-github-event"] == "pull_request"]


def test_fork_copies_the_parents_branches_and_names_parent_and_source(
    world: World, admin: AdminClient, tmp_path: Path
) -> None:
    extra = admin.commit(FULL, "extra", {"extra.txt": "x\n"})
    admin.create_user("mallory")
    forked = admin.fork(FULL, "mallory")
    assert (forked["full_name"], forked["head_sha"], forked["deliveries"]) == (FORK, world.head_sha, [])
    assert forked["repository"]["fork"] is True
    assert forked["repository"]["parent"]["full_name"] == FULL

    # The fork's git is a real copy: every branch of the parent, same commits.
    refs = _ls_remote(f"{world.url}/{FORK}.git", tmp_path)
    assert refs == {"HEAD": world.head_sha, "refs/heads/main": world.head_sha, "refs/heads/extra": extra}
    work = tmp_path / "clone"
    _git("clone", "--quiet", f"{world.url}/{FORK}.git", str(work), cwd=tmp_path)
    assert (work / "src" / "app.py").read_text() == "print('hello')\n"

    with httpx.Client(base_url=world.url, timeout=10) as anonymous:
        fork = anonymous.get(f"/repos/{FORK}").json()
        parent = anonymous.get(f"/repos/{FULL}").json()
    assert (fork["fork"], fork["private"], fork["owner"]["login"]) == (True, False, "mallory")
    assert fork["parent"]["full_name"] == fork["source"]["full_name"] == FULL
    assert fork["default_branch"] == "main"
    assert (parent["fork"], parent["forks_count"], parent["network_count"]) == (False, 1, 1)
    assert "parent" not in parent
    assert "source" not in parent

    # A fork of the fork: parent is the fork, source the root of the network.
    admin.create_user("eve")
    again = admin.fork(FORK, "eve", "gadgets")["repository"]
    assert again["full_name"] == "eve/gadgets"
    assert (again["parent"]["full_name"], again["source"]["full_name"]) == (FORK, FULL)

    # A private parent's fork is private: out of reach of the App, which is not installed on mallory.
    secret = admin.fork(f"{OWNER}/secret-sauce", "mallory")["repository"]
    assert (secret["private"], secret["visibility"]) == (True, "private")
    with world.api(world.token()) as api:
        assert api.get(f"/repos/{OWNER}/secret-sauce").json()["forks_count"] == 1
        assert api.get("/repos/mallory/secret-sauce").status_code == 404

    for owner, name, status in [("acme", None, 422), ("nobody-here", None, 422), ("mallory", None, 409)]:
        with pytest.raises(AdminCallFailed) as refused:
            admin.fork(FULL, owner, name)
        assert refused.value.status == status


def test_fork_sends_fork_to_the_parents_app(hooked: World, receiver: Receiver, admin: AdminClient) -> None:
    admin.update_app(hooked.app_id, events=["pull_request", "fork"])
    admin.create_user("mallory")
    answer = admin.fork(FULL, "mallory")
    assert [(d["event"], d["status_code"]) for d in answer["deliveries"]] == [("fork", 202)]
    [item] = receiver.wait_for(1)
    assert_signed(item, hooked.webhook_secret)
    body = item.body
    assert item.headers["x-github-event"] == "fork"
    assert (body["forkee"]["full_name"], body["forkee"]["fork"], body["forkee"]["public"]) == (
        FORK,
        True,
        True,
    )
    assert body["repository"]["full_name"] == FULL
    assert body["sender"]["login"] == "mallory"
    assert body["installation"]["id"] == hooked.installation_id
    parse_obj("fork", body)


def test_pull_from_a_fork_is_sent_to_the_base_repositorys_app(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    head = _fork_with_feature(admin)
    assert receiver.items == []  # the App is not installed on the fork: the commit told it nothing
    opened = admin.open_pull(FULL, head="mallory:feature", user="mallory", title="Harmless change")
    [body] = _pull_events(receiver, 1)
    assert_signed(receiver.items[0], hooked.webhook_secret)
    assert (body["action"], body["number"]) == ("opened", opened["number"])
    pull = body["pull_request"]
    assert pull["head"]["repo"]["fork"] is True
    assert pull["head"]["repo"]["full_name"] == FORK
    assert (pull["head"]["label"], pull["head"]["ref"], pull["head"]["sha"]) == (
        "mallory:feature",
        "feature",
        head,
    )
    assert pull["head"]["user"]["login"] == "mallory"
    assert (pull["base"]["repo"]["full_name"], pull["base"]["repo"]["fork"]) == (FULL, False)
    assert pull["base"]["label"] == f"{OWNER}:main"
    assert pull["author_association"] == "FIRST_TIME_CONTRIBUTOR"
    assert (pull["commits"], pull["changed_files"]) == (1, 1)
    assert body["repository"]["full_name"] == FULL
    assert body["installation"]["id"] == hooked.installation_id
    parse_obj("pull_request", body)

    with hooked.api(hooked.token(repositories=[REPO])) as api:
        read = api.get(f"/repos/{FULL}/pulls/{opened['number']}").json()
        assert (read["head"]["sha"], read["head"]["repo"]["full_name"]) == (head, FORK)
        listed = api.get(f"/repos/{FULL}/pulls", params={"head": "mallory:feature"}).json()
        assert [p["number"] for p in listed] == [opened["number"]]
        assert api.get(f"/repos/{FULL}/pulls", params={"head": f"{OWNER}:feature"}).json() == []
        files = api.get(f"/repos/{FULL}/pulls/{opened['number']}/files").json()
        assert [(f["filename"], f["status"]) for f in files] == [("src/app.py", "modified")]
        commits = api.get(f"/repos/{FULL}/pulls/{opened['number']}/commits").json()
        assert [c["sha"] for c in commits] == [head]
        # The same head again is a duplicate; the App may open one from the fork itself.
        duplicate = api.post(
            f"/repos/{FULL}/pulls", json={"title": "t", "head": "mallory:feature", "base": "main"}
        )
        assert duplicate.status_code == 422
        assert (
            duplicate.json()["errors"][0]["message"] == "A pull request already exists for mallory:feature."
        )
        admin.commit(FORK, "second", {"b.txt": "b\n"})
        created = api.post(
            f"/repos/{FULL}/pulls", json={"title": "t", "head": "mallory:second", "base": "main"}
        )
        assert created.status_code == 201
        assert created.json()["head"]["repo"]["full_name"] == FORK


def test_refs_pull_head_is_fetchable_from_the_base_with_contents_read(
    world: World, admin: AdminClient, tmp_path: Path
) -> None:
    head = _fork_with_feature(admin)
    number = admin.open_pull(FULL, head="mallory:feature", user="mallory")["number"]
    same_repo = admin.commit(FULL, "local", {"l.txt": "l\n"})
    local = admin.open_pull(FULL, head="local", user="wes")["number"]

    reader = world.token(repositories=[REPO], permissions={"contents": "read"})
    url = authed(f"{world.url}/{FULL}.git", reader)
    refs = _ls_remote(url, tmp_path)
    assert refs[f"refs/pull/{number}/head"] == head
    assert refs[f"refs/pull/{local}/head"] == same_repo
    assert "refs/heads/feature" not in refs  # the fork's branch is only in the fork

    work = tmp_path / "checkout"
    _git("init", "--quiet", str(work), cwd=tmp_path)
    _git("fetch", "--quiet", url, f"refs/pull/{number}/head", cwd=work)
    assert _git("rev-parse", "FETCH_HEAD", cwd=work).stdout.strip() == head
    _git("checkout", "--quiet", "FETCH_HEAD", cwd=work)
    assert (work / "src" / "app.py").read_text() == "print('pwned')\n"

    # refs/pull is GitHub's: nobody pushes to it, not even with contents: write.
    writer = authed(f"{world.url}/{FULL}.git", world.token())
    refused = _git("push", writer, f"HEAD:refs/pull/{number}/head", cwd=work, check=False)
    assert refused.returncode != 0
    assert "hidden ref" in refused.stderr
    assert _ls_remote(url, tmp_path)[f"refs/pull/{number}/head"] == head


def test_a_push_to_the_fork_branch_sends_synchronize_and_moves_refs_pull(
    hooked: World, receiver: Receiver, admin: AdminClient, tmp_path: Path
) -> None:
    first = _fork_with_feature(admin)
    number = admin.open_pull(FULL, head="mallory:feature", user="mallory")["number"]
    _pull_events(receiver, 1)
    receiver.items.clear()
    base_url = authed(f"{hooked.url}/{FULL}.git", hooked.token(permissions={"contents": "read"}))

    # 1. A person's commit onto the fork's branch (the admin call).
    second = admin.commit(FORK, "feature", {"src/app.py": "print('more')\n"}, sender="mallory")
    [sync] = _pull_events(receiver, 1)
    assert (sync["action"], sync["number"], sync["before"], sync["after"]) == (
        "synchronize",
        number,
        first,
        second,
    )
    assert sync["pull_request"]["head"]["sha"] == second
    assert (sync["sender"]["login"], sync["repository"]["full_name"]) == ("mallory", FULL)
    assert _ls_remote(base_url, tmp_path)[f"refs/pull/{number}/head"] == second

    # 2. A git push to the fork, with a token of another App installed on mallory's account.
    private, public = keypair()
    other = admin.create_app(name="Mallory CI", public_key_pem=public, owner="mallory")
    inst = admin.create_installation(app_id=other["id"], account="mallory", permissions={"contents": "write"})
    minted = httpx.post(
        f"{hooked.url}/app/installations/{inst['id']}/access_tokens",
        headers={"Authorization": f"Bearer {app_jwt(other['id'], private)}"},
        timeout=10,
    ).json()["token"]
    receiver.items.clear()
    work = tmp_path / "fork"
    _git(
        "clone",
        "--quiet",
        "--branch",
        "feature",
        authed(f"{hooked.url}/{FORK}.git", minted),
        str(work),
        cwd=tmp_path,
    )
    (work / "src" / "app.py").write_text("print('pushed')\n")
    _git("commit", "--quiet", "-am", "pushed", cwd=work)
    _git("push", "--quiet", "origin", "feature", cwd=work)
    third = _git("rev-parse", "HEAD", cwd=work).stdout.strip()
    [pushed] = _pull_events(receiver, 1)
    assert (pushed["action"], pushed["before"], pushed["after"]) == ("synchronize", second, third)
    assert pushed["installation"]["id"] == hooked.installation_id
    assert _ls_remote(base_url, tmp_path)[f"refs/pull/{number}/head"] == third

    # 3. The admin push onto the pull commits into the fork.
    receiver.items.clear()
    fourth = admin.push_to_pull(FULL, number, {"c.txt": "c\n"}, sender="mallory")
    assert fourth["branch"] == "feature"
    assert _ls_remote(f"{hooked.url}/{FORK}.git", tmp_path)["refs/heads/feature"] == fourth["sha"]
    assert _ls_remote(base_url, tmp_path)[f"refs/pull/{number}/head"] == fourth["sha"]
    [last] = _pull_events(receiver, 1)
    assert (last["before"], last["after"]) == (third, fourth["sha"])


def test_check_runs_on_a_fork_head_live_in_the_base(hooked: World, admin: AdminClient) -> None:
    head = _fork_with_feature(admin)
    number = admin.open_pull(FULL, head="mallory:feature", user="mallory")["number"]
    with hooked.api(hooked.token()) as api:
        created = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "baton/merge-gate", "head_sha": head, "status": "in_progress"},
        )
        assert created.status_code == 201
        run = created.json()
        # As GitHub documents: a head in a fork is not detected, so no pull requests are listed.
        assert (run["head_sha"], run["pull_requests"]) == (head, [])
        listed = api.get(f"/repos/{FULL}/commits/{head}/check-runs").json()
        assert [r["id"] for r in listed["check_runs"]] == [run["id"]]
        assert api.get(f"/repos/{FULL}/commits/{head}").json()["sha"] == head
        done = api.patch(
            f"/repos/{FULL}/check-runs/{run['id']}",
            json={"conclusion": "success", "output": {"title": "ok", "summary": "ok"}},
        )
        assert done.json()["status"] == "completed"
        assert api.get(f"/repos/{FULL}/pulls/{number}").json()["head"]["sha"] == head


def test_a_head_in_an_unrelated_repository_is_refused(
    world: World, admin: AdminClient, tmp_path: Path
) -> None:
    admin.create_user("mallory")
    admin.create_repo("mallory", REPO, files={"README.md": "# not a fork\n"})
    admin.commit(FORK, "feature", {"x.txt": "x\n"})
    invalid = [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
    with pytest.raises(AdminCallFailed) as refused:
        admin.open_pull(FULL, head="mallory:feature", user="mallory")
    assert (refused.value.status, refused.value.body["errors"]) == (422, invalid)
    with world.api(world.token()) as api:
        for head in ("mallory:feature", "other-org:main", "ghost:feature"):
            answer = api.post(f"/repos/{FULL}/pulls", json={"title": "t", "head": head, "base": "main"})
            assert answer.status_code == 422
            assert answer.json()["errors"] == invalid
        # A fork with no new commits: GitHub's "No commits between" and no refs/pull left behind.
        admin.create_user("eve")
        admin.fork(FULL, "eve")
        empty = api.post(f"/repos/{FULL}/pulls", json={"title": "t", "head": "eve:main", "base": "main"})
        assert empty.status_code == 422
        assert empty.json()["errors"][0]["message"] == "No commits between main and eve:main"
        assert api.get(f"/repos/{FULL}/pulls").json() == []
    refs = _ls_remote(f"{world.url}/{FULL}.git", tmp_path)
    assert not [r for r in refs if r.startswith("refs/pull/")]


def test_author_association_of_pull_authors(world: World, admin: AdminClient, tmp_path: Path) -> None:
    mallory_id = admin.create_user("mallory")["id"]
    admin.fork(FULL, "mallory")
    admin.commit(FORK, "one", {"one.txt": "1\n"})
    admin.commit(FULL, "mine", {"m.txt": "m\n"})
    first = admin.open_pull(FULL, head="mallory:one", user="mallory")["number"]
    member = admin.open_pull(FULL, head="mine", user="wes")["number"]
    with world.api(world.token()) as api:
        assert (
            api.get(f"/repos/{FULL}/pulls/{first}").json()["author_association"] == "FIRST_TIME_CONTRIBUTOR"
        )
        assert api.get(f"/repos/{FULL}/pulls/{member}").json()["author_association"] == "MEMBER"
    # Once a commit of mallory's (her noreply address) is on the default branch she is a CONTRIBUTOR.
    work = tmp_path / "w"
    token = world.token()
    _git("clone", "--quiet", authed(f"{world.url}/{FULL}.git", token), str(work), cwd=tmp_path)
    (work / "fix.txt").write_text("fix\n")
    _git("add", "fix.txt", cwd=work)
    email = f"{mallory_id}+mallory@users.noreply.github.com"
    _git(
        "commit",
        "--quiet",
        "-m",
        "fix",
        cwd=work,
        env={"GIT_AUTHOR_NAME": "mallory", "GIT_AUTHOR_EMAIL": email},
    )
    _git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    with world.api(token) as api:
        assert api.get(f"/repos/{FULL}/pulls/{first}").json()["author_association"] == "CONTRIBUTOR"


def test_state_written_before_forks_still_loads(tmp_path: Path) -> None:
    """A state.json without ``parent`` (repositories) and ``head_repo`` (pulls), and git without refs/pull."""
    directory = tmp_path / "gh"
    with EmulatorServer(directory) as first:
        world = build_world(first)
        world.post(f"/repos/{FULL}/commits", {"branch": "old", "files": {"o.txt": "o\n"}})
        world.post(f"/repos/{FULL}/pulls", {"title": "old", "user": "wes", "head": "old"})
        token = world.token()
        world.admin.close()
    state_file = directory / "state.json"
    data = json.loads(state_file.read_text())
    for repo in data["repos"]:
        del repo["parent"]
    for pull in data["pulls"]:
        del pull["head_repo"]
    state_file.write_text(json.dumps(data))
    bare = directory / "repos" / OWNER / f"{REPO}.git"
    _git("--git-dir", str(bare), "update-ref", "-d", "refs/pull/1/head", cwd=tmp_path)
    _git("--git-dir", str(bare), "config", "--unset", "receive.hideRefs", cwd=tmp_path)
    with (
        EmulatorServer(directory) as second,
        httpx.Client(base_url=second.url, headers={"Authorization": f"token {token}"}) as api,
    ):
        repo = api.get(f"/repos/{FULL}").json()
        assert (repo["fork"], repo["forks_count"]) == (False, 0)
        pull = api.get(f"/repos/{FULL}/pulls/1").json()
        assert (pull["head"]["repo"]["full_name"], pull["head"]["label"]) == (FULL, f"{OWNER}:old")
        # Reading an open pull restores its refs/pull/<n>/head.
        refs = _ls_remote(authed(f"{second.url}/{FULL}.git", token), tmp_path)
        assert refs["refs/pull/1/head"] == pull["head"]["sha"] == refs["refs/heads/old"]
