"""The worker's pull path: push a branch over git, open a pull, edit it on a retry, read its commits."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from emulator_world import GIT_ENV, OWNER, REPO, World, authed, run_git
from githubkit import GitHub, TokenAuthStrategy
from githubkit.webhooks import parse_obj
from webhook_receiver import Receiver, assert_signed

from emulator.admin.client import AdminClient

FULL = f"{OWNER}/{REPO}"
BRANCH = "baton/issue-1"
BOT = "baton-test[bot]"


def _git(*args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = run_git(*args, cwd=cwd, env=env, check=check)
    return (done.stdout if done.returncode == 0 else done.stderr).strip()


def _users(world: World) -> dict[str, int]:
    state = world.admin.get("/_emulator/state").json()
    return {u["login"]: u["id"] for u in state["users"]}


def _clone(world: World, token: str, work: Path) -> None:
    _git("clone", "--quiet", authed(f"{world.url}/{FULL}.git", token), str(work), cwd=work.parent)
    _git("checkout", "--quiet", "-b", BRANCH, cwd=work)


def _commit(work: Path, name: str, text: str, message: str, env: dict[str, str] | None = None) -> str:
    (work / name).write_text(text)
    _git("add", name, cwd=work)
    _git("commit", "--quiet", "-m", message, cwd=work, env=env)
    return _git("rev-parse", "HEAD", cwd=work)


def _open(api: httpx.Client, head: str = f"{OWNER}:{BRANCH}") -> httpx.Response:
    return api.post(
        f"/repos/{FULL}/pulls", json={"title": "Fix #1", "head": head, "base": "main", "body": "b"}
    )


def _pushed_pull(world: World, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A token, and a pull opened through the API from a branch pushed over git."""
    token = world.token()
    work = tmp_path / "w"
    _clone(world, token, work)
    _commit(work, "fix.txt", "fixed\n", "Fix the thing")
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    with world.api(token) as api:
        opened = _open(api)
    assert opened.status_code == 201, opened.text
    return token, opened.json()


def test_push_with_a_read_token_is_refused_and_a_write_token_sends_push(
    hooked: World, receiver: Receiver, admin: AdminClient, tmp_path: Path
) -> None:
    admin.update_app(hooked.app_id, events=["pull_request", "push"])
    work = tmp_path / "w"
    _clone(hooked, hooked.token(), work)
    first = _commit(work, "fix.txt", "one\n", "one")
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    push = receiver.wait_for(1)[0]
    assert (push.event, push.body["after"], push.body["sender"]["login"]) == (("push", None), first, BOT)
    receiver.items.clear()

    second = _commit(work, "fix.txt", "two\n", "two")
    reader = hooked.token(permissions={"contents": "read"})
    _git("remote", "set-url", "origin", authed(f"{hooked.url}/{FULL}.git", reader), cwd=work)
    refused = _git("push", "origin", BRANCH, cwd=work, check=False)
    assert f"Permission to {FULL}.git denied." in refused
    assert "403" in refused
    with hooked.api(hooked.token()) as api:
        assert api.get(f"/repos/{FULL}/branches/{BRANCH}").json()["commit"]["sha"] == first
    assert receiver.wait_for(1, timeout=0.5) == []

    writer = hooked.token(permissions={"contents": "write"})
    _git("remote", "set-url", "origin", authed(f"{hooked.url}/{FULL}.git", writer), cwd=work)
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    (moved,) = receiver.wait_for(1)
    assert moved.event == ("push", None)
    assert (moved.body["before"], moved.body["after"]) == (first, second)
    assert_signed(moved, hooked.webhook_secret)


def test_open_a_pull_by_owner_and_branch_then_find_it(
    hooked: World, receiver: Receiver, tmp_path: Path
) -> None:
    token = hooked.token(permissions={"contents": "write", "pull_requests": "write"})
    work = tmp_path / "w"
    _clone(hooked, token, work)
    head = _commit(work, "fix.txt", "fixed\n", "Fix the thing")
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    with hooked.api(token) as api:
        opened = _open(api)
        assert opened.status_code == 201
        pull = opened.json()
        assert (pull["head"]["ref"], pull["head"]["sha"], pull["head"]["label"]) == (
            BRANCH,
            head,
            f"{OWNER}:{BRANCH}",
        )
        assert pull["user"]["login"] == BOT
        again = _open(api, head=BRANCH)  # the bare branch names the same head
        assert again.status_code == 422
        assert again.json()["errors"] == [
            {
                "resource": "PullRequest",
                "code": "custom",
                "message": f"A pull request already exists for {OWNER}:{BRANCH}.",
            }
        ]
        gone = _open(api, head=f"{OWNER}:baton/issue-404")
        assert gone.status_code == 422
        assert gone.json()["errors"] == [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
        both = api.post(
            f"/repos/{FULL}/pulls", json={"title": "t", "head": "baton/issue-404", "base": "nope"}
        )
        assert [e["field"] for e in both.json()["errors"]] == ["base", "head"]  # GitHub's order
        found = api.get(f"/repos/{FULL}/pulls", params={"head": f"{OWNER}:{BRANCH}", "state": "open"})
        assert [p["number"] for p in found.json()] == [pull["number"]]
        elsewhere = api.get(f"/repos/{FULL}/pulls", params={"head": f"other-org:{BRANCH}", "state": "all"})
        assert elsewhere.json() == []
    (item,) = [i for i in receiver.wait_for(1) if i.event == ("pull_request", "opened")]
    assert item.body["sender"]["login"] == BOT
    assert item.body["sender"]["type"] == "Bot"
    assert item.body["pull_request"]["number"] == pull["number"]
    assert_signed(item, hooked.webhook_secret)


def test_edit_title_and_body_sends_edited_with_only_what_changed(
    hooked: World, receiver: Receiver, tmp_path: Path
) -> None:
    token, pull = _pushed_pull(hooked, tmp_path)
    receiver.wait_for(1)
    receiver.items.clear()
    url = f"/repos/{FULL}/pulls/{pull['number']}"
    with hooked.api(token) as api:
        edited = api.patch(url, json={"title": "Fix #1 (retry)", "body": "second try"})
        assert edited.status_code == 200
        assert (edited.json()["title"], edited.json()["body"]) == ("Fix #1 (retry)", "second try")
        (item,) = receiver.wait_for(1)
        receiver.items.clear()
        assert item.event == ("pull_request", "edited")
        assert item.body["changes"] == {"title": {"from": "Fix #1"}, "body": {"from": "b"}}
        assert item.body["pull_request"]["title"] == "Fix #1 (retry)"
        assert item.body["sender"]["login"] == BOT
        assert parse_obj("pull_request", item.body).action == "edited"  # type: ignore[union-attr]

        same = api.patch(url, json={"title": "Fix #1 (retry)", "body": "second try"})
        assert same.status_code == 200
        assert receiver.wait_for(1, timeout=0.5) == []  # nothing changed, nothing sent

        cleared = api.patch(url, json={"body": "", "title": None})
        assert (cleared.json()["body"], cleared.json()["title"]) == (None, "Fix #1 (retry)")
        (item,) = receiver.wait_for(1)
        assert item.body["changes"] == {"body": {"from": "second try"}}
        receiver.items.clear()
        refilled = api.patch(url, json={"body": "third"})
        assert refilled.status_code == 200
        (item,) = receiver.wait_for(1)
        assert item.body["changes"] == {"body": {"from": ""}}  # a null body reads as ""
        assert api.get(url).json()["body"] == "third"


def test_bad_edits_are_refused_and_change_nothing(world: World, tmp_path: Path) -> None:
    token, pull = _pushed_pull(world, tmp_path)
    url = f"/repos/{FULL}/pulls/{pull['number']}"
    docs = "https://docs.github.com/rest/pulls/pulls#update-a-pull-request"
    with world.api(token) as api:
        empty = api.patch(url, json={"title": "", "body": "never"})
        assert empty.status_code == 422
        assert empty.json() == {
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "missing_field", "field": "title"}],
            "documentation_url": docs,
            "status": "422",
        }
        base = api.patch(url, json={"base": "no-such-branch", "title": "never"})
        assert base.status_code == 422
        assert base.json()["errors"] == [
            {
                "resource": "PullRequest",
                "code": "invalid",
                "field": "base",
                "message": "Proposed base branch 'no-such-branch' was not found",
            }
        ]
        typed = api.patch(url, json={"title": 7})
        assert typed.status_code == 422
        assert typed.json()["message"] == "Invalid request.\n\nFor 'properties/title', 7 is not a string."
        flag = api.patch(url, json={"maintainer_can_modify": "yes"})
        assert flag.status_code == 422
        assert api.patch(url, json={"state": "merged"}).status_code == 200  # GitHub ignores it
        missing = api.patch(f"/repos/{FULL}/pulls/999", json={"title": "x"})
        assert missing.status_code == 404
        assert missing.json()["documentation_url"] == docs
        after = api.get(url).json()
        assert (after["title"], after["body"], after["state"], after["base"]["ref"]) == (
            "Fix #1",
            "b",
            "open",
            "main",
        )
        assert api.patch(url, json={"maintainer_can_modify": True}).json()["maintainer_can_modify"] is True
    reader = world.token(permissions={"pull_requests": "read", "contents": "read"})
    with world.api(reader) as api:
        denied = api.patch(url, json={"title": "x"})
        assert denied.status_code == 403
        assert denied.json()["message"] == "Resource not accessible by integration"
        assert api.get(url).json()["title"] == "Fix #1"


def test_change_the_base_sends_edited_with_the_old_ref_and_sha(
    hooked: World, receiver: Receiver, admin: AdminClient, tmp_path: Path
) -> None:
    token, pull = _pushed_pull(hooked, tmp_path)
    release = admin.commit(FULL, "release", {"CHANGELOG.md": "1.0\n"}, base="main")
    receiver.wait_for(1)
    receiver.items.clear()
    with hooked.api(token) as api:
        moved = api.patch(f"/repos/{FULL}/pulls/{pull['number']}", json={"base": "release"})
        assert moved.status_code == 200
        assert (moved.json()["base"]["ref"], moved.json()["base"]["sha"]) == ("release", release)
    (item,) = receiver.wait_for(1)
    assert item.event == ("pull_request", "edited")
    assert item.body["changes"] == {"base": {"ref": {"from": "main"}, "sha": {"from": pull["base"]["sha"]}}}
    assert item.body["pull_request"]["base"]["ref"] == "release"


def test_close_and_reopen_through_the_api(hooked: World, receiver: Receiver, tmp_path: Path) -> None:
    token, pull = _pushed_pull(hooked, tmp_path)
    receiver.wait_for(1)
    receiver.items.clear()
    url = f"/repos/{FULL}/pulls/{pull['number']}"
    with hooked.api(token) as api:
        closed = api.patch(url, json={"state": "closed"})
        assert (closed.json()["state"], closed.json()["merged"]) == ("closed", False)
        assert closed.json()["closed_at"] is not None
        (item,) = receiver.wait_for(1)
        receiver.items.clear()
        assert (item.event, item.body["sender"]["login"]) == (("pull_request", "closed"), BOT)
        assert api.get(f"/repos/{FULL}/pulls", params={"head": f"{OWNER}:{BRANCH}"}).json() == []

        reopened = api.patch(url, json={"state": "open", "title": "Fix #1, again"})
        assert (reopened.json()["state"], reopened.json()["closed_at"]) == ("open", None)
        items = receiver.wait_for(2)
        assert [i.event for i in items] == [("pull_request", "edited"), ("pull_request", "reopened")]
        receiver.items.clear()

        api.patch(url, json={"state": "closed"})
        receiver.wait_for(1)
        work = tmp_path / "w"
        _git("push", "--quiet", "origin", "--delete", BRANCH, cwd=work)
        refused = api.patch(url, json={"state": "open", "title": "never"})
        assert refused.status_code == 422
        assert refused.json()["errors"] == [
            {
                "resource": "PullRequest",
                "code": "custom",
                "field": "state",
                "message": f"state cannot be changed. The {BRANCH} branch has been deleted.",
            }
        ]
        assert (api.get(url).json()["state"], api.get(url).json()["title"]) == ("closed", "Fix #1, again")


def test_pull_commits_are_oldest_first_with_full_messages_and_linked_accounts(
    world: World, tmp_path: Path
) -> None:
    ids = _users(world)
    token = world.token()
    work = tmp_path / "w"
    _clone(world, token, work)
    as_bot = {
        "GIT_AUTHOR_NAME": BOT,
        "GIT_AUTHOR_EMAIL": f"{ids[BOT]}+{BOT}@users.noreply.github.com",
        "GIT_COMMITTER_NAME": "wes",
        "GIT_COMMITTER_EMAIL": "wes@users.noreply.github.com",
    }
    message = "Fix the thing\n\nLonger text.\n\nCo-authored-by: Wes <wes@users.noreply.github.com>"
    first = _commit(work, "a.txt", "a\n", message, env=as_bot)
    wrong_id = {"GIT_AUTHOR_EMAIL": f"{ids['wes'] + 1}+wes@users.noreply.github.com"}
    second = _commit(work, "b.txt", "b\n", "second", env=wrong_id)
    third = _commit(work, "c.txt", "c\n", "third")
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    with world.api(token) as api:
        number = _open(api).json()["number"]
        listed = api.get(f"/repos/{FULL}/pulls/{number}/commits").json()
        assert [c["sha"] for c in listed] == [first, second, third]
        one = listed[0]
        assert one["commit"]["message"] == message
        assert one["commit"]["author"]["email"] == as_bot["GIT_AUTHOR_EMAIL"]
        assert one["commit"]["committer"]["name"] == "wes"
        assert (one["author"]["login"], one["author"]["type"]) == (BOT, "Bot")
        assert one["committer"]["login"] == "wes"
        assert one["commit"]["verification"]["reason"] == "unsigned"
        assert one["parents"][0]["sha"] == world.head_sha
        assert one["url"].endswith(f"/repos/{FULL}/commits/{first}")
        assert listed[1]["author"] is None  # a noreply id that is not the account's
        assert listed[2]["author"] is None  # t@localhost belongs to nobody
        paged = api.get(f"/repos/{FULL}/pulls/{number}/commits", params={"per_page": 2, "page": 2})
        assert [c["sha"] for c in paged.json()] == [third]
        assert 'rel="first"' in paged.headers["link"]
        assert api.get(f"/repos/{FULL}/pulls/999/commits").status_code == 404
    gh = GitHub(TokenAuthStrategy(token), base_url=world.url)
    parsed = gh.rest.pulls.list_commits(OWNER, REPO, number).parsed_data
    assert [c.sha for c in parsed] == [first, second, third]
    assert parsed[0].author is not None


def test_a_pull_lists_at_most_250_commits(world: World, tmp_path: Path) -> None:
    token = world.token()
    work = tmp_path / "w"
    _clone(world, token, work)
    stream = [f"reset refs/heads/{BRANCH}", f"from {world.head_sha}"]
    for n in range(260):
        text = f"{n}\n"
        stream += [
            f"commit refs/heads/{BRANCH}",
            f"committer t <t@localhost> {1_700_000_000 + n} +0000",
            f"data {len(f'c{n}')}",
            f"c{n}",
            "M 100644 inline n.txt",
            f"data {len(text)}",
            text.rstrip("\n"),
        ]
    subprocess.run(
        ["git", "fast-import", "--quiet"],
        cwd=work,
        env=GIT_ENV,
        input="\n".join(stream) + "\n",
        text=True,
        check=True,
        timeout=60,
    )
    _git("push", "--quiet", "--force", "origin", BRANCH, cwd=work)
    with world.api(token) as api:
        number = _open(api).json()["number"]
        pages = [
            api.get(f"/repos/{FULL}/pulls/{number}/commits", params={"per_page": 100, "page": page})
            for page in (1, 2, 3)
        ]
        messages = [c["commit"]["message"] for page in pages for c in page.json()]
        assert messages == [f"c{n}" for n in range(250)]
        assert pages[0].headers["link"].endswith('page=3>; rel="last"')
        assert api.get(f"/repos/{FULL}/pulls/{number}").json()["commits"] == 260


@pytest.mark.parametrize("ref", ["sha", BRANCH, f"heads/{BRANCH}"])
def test_get_one_commit_by_sha_or_branch(world: World, tmp_path: Path, ref: str) -> None:
    token = world.token(permissions={"contents": "read", "pull_requests": "write"})
    writer = world.token()
    work = tmp_path / "w"
    _clone(world, writer, work)
    (work / "README.md").unlink()
    _git("rm", "--quiet", "README.md", cwd=work)
    sha = _commit(work, "new.txt", "one\ntwo\n", "Add new, drop README\n\nCo-authored-by: X <x@example.com>")
    _git("push", "--quiet", "origin", BRANCH, cwd=work)
    with world.api(token) as api:
        got = api.get(f"/repos/{FULL}/commits/{sha if ref == 'sha' else ref}")
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["sha"] == sha
        assert body["commit"]["message"].endswith("Co-authored-by: X <x@example.com>")
        assert body["stats"] == {"total": 3, "additions": 2, "deletions": 1}
        assert sorted((f["filename"], f["status"]) for f in body["files"]) == [
            ("README.md", "removed"),
            ("new.txt", "added"),
        ]
        # The check-runs list under the same prefix still answers as before.
        runs = api.get(f"/repos/{FULL}/commits/{sha}/check-runs")
        assert (runs.status_code, runs.json()["total_count"]) == (200, 0)
        unknown = api.get(f"/repos/{FULL}/commits/no-such-ref")
        assert unknown.status_code == 422
        assert unknown.json()["message"] == "No commit found for SHA: no-such-ref"
