"""People change what exists (close, reopen, unlabel, ready a draft, push, re-run, uninstall, delete)
and the App receives the signed webhook GitHub sends for each change."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from emulator_world import GIT_ENV, OWNER, REPO, World, authed
from githubkit.webhooks import parse_obj
from webhook_receiver import Received, Receiver, assert_signed

from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"


def _one(receiver: Receiver, world: World) -> Received:
    """The single delivery the last action produced: signed, and parsed by githubkit's models."""
    (item,) = receiver.wait_for(1)
    receiver.items.clear()
    assert_signed(item, world.webhook_secret)
    event, action = item.event
    assert getattr(parse_obj(event, item.body), "action", None) == action
    return item


def _events(admin: AdminClient, world: World, *names: str) -> None:
    admin.update_app(world.app_id, events=["issues", "issue_comment", "pull_request", "check_run", *names])


def test_close_and_reopen_an_issue(hooked: World, receiver: Receiver, admin: AdminClient) -> None:
    number = admin.create_issue(FULL, title="Spinner stutters", user="rita")["number"]
    receiver.wait_for(1)
    receiver.items.clear()

    closed = admin.close_issue(FULL, number, sender="maria", state_reason="not_planned")
    assert [d["status_code"] for d in closed["deliveries"]] == [202]  # delivered before the answer
    item = _one(receiver, hooked)
    assert item.event == ("issues", "closed")
    assert item.body["sender"]["login"] == "maria"
    issue = item.body["issue"]
    assert (issue["state"], issue["state_reason"]) == ("closed", "not_planned")
    assert issue["closed_at"] is not None
    with hooked.api(hooked.token()) as api:
        assert api.get(f"/repos/{FULL}/issues/{number}").json()["state"] == "closed"

    admin.reopen_issue(FULL, number, sender="wes")
    item = _one(receiver, hooked)
    assert item.event == ("issues", "reopened")
    assert item.body["sender"]["login"] == "wes"
    issue = item.body["issue"]
    assert (issue["state"], issue["state_reason"], issue["closed_at"]) == ("open", "reopened", None)

    with pytest.raises(AdminCallFailed) as exc:
        admin.reopen_issue(FULL, number, sender="wes")
    assert exc.value.status == 422  # a person cannot reopen an open issue


def test_close_without_waiting_answers_before_delivering(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    number = admin.create_issue(FULL, title="x", user="rita")["number"]
    receiver.wait_for(1)
    receiver.items.clear()
    answer = admin.call("POST", f"/repos/{FULL}/issues/{number}/close", {"sender": "maria", "wait": False})
    assert [d["status_code"] for d in answer["deliveries"]] == [None]
    (item,) = receiver.wait_for(1)
    assert item.headers["x-github-delivery"] == answer["deliveries"][0]["guid"]


def test_person_removes_a_label(hooked: World, receiver: Receiver, admin: AdminClient) -> None:
    number = admin.create_issue(FULL, title="x", user="rita", labels=["agent:claude-code", "bug"])["number"]
    receiver.wait_for(3)
    receiver.items.clear()
    answer = admin.unlabel(FULL, number, "agent:claude-code", sender="tia")
    assert answer["labels"] == ["bug"]
    item = _one(receiver, hooked)
    assert item.event == ("issues", "unlabeled")
    assert item.body["label"]["name"] == "agent:claude-code"
    assert item.body["label"]["id"] > 0
    assert item.body["sender"]["login"] == "tia"
    assert [lb["name"] for lb in item.body["issue"]["labels"]] == ["bug"]
    with pytest.raises(AdminCallFailed) as exc:
        admin.unlabel(FULL, number, "agent:claude-code", sender="tia")
    assert exc.value.status == 404
    assert exc.value.body["message"] == "Label does not exist"


def test_draft_pull_ready_for_review_then_closed_and_reopened(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    admin.commit(FULL, "agent/3", {"src/app.py": "print('hi')\n"})
    number = admin.open_pull(FULL, head="agent/3", user="wes", draft=True)["number"]
    opened = _one(receiver, hooked)
    assert opened.event == ("pull_request", "opened")
    assert opened.body["pull_request"]["draft"] is True

    admin.ready_for_review(FULL, number, sender="wes")
    ready = _one(receiver, hooked)
    assert ready.event == ("pull_request", "ready_for_review")
    assert ready.body["pull_request"]["draft"] is False
    assert ready.body["sender"]["login"] == "wes"
    with pytest.raises(AdminCallFailed):
        admin.ready_for_review(FULL, number, sender="wes")  # not a draft any more

    admin.close_pull(FULL, number, sender="maria")
    closed = _one(receiver, hooked)
    assert closed.event == ("pull_request", "closed")
    assert (closed.body["pull_request"]["state"], closed.body["pull_request"]["merged"]) == ("closed", False)
    assert closed.body["pull_request"]["closed_at"] is not None
    with hooked.api(hooked.token()) as api:
        assert api.get(f"/repos/{FULL}/pulls/{number}").json()["state"] == "closed"

    admin.reopen_pull(FULL, number, sender="maria")
    reopened = _one(receiver, hooked)
    assert reopened.event == ("pull_request", "reopened")
    assert reopened.body["pull_request"]["state"] == "open"
    assert reopened.body["pull_request"]["closed_at"] is None


def test_reopen_refused_while_another_pull_is_open_on_the_branch(admin: AdminClient, world: World) -> None:
    admin.commit(FULL, "agent/4", {"a.txt": "a\n"})
    first = admin.open_pull(FULL, head="agent/4", user="wes")["number"]
    admin.close_pull(FULL, first, sender="wes")
    admin.open_pull(FULL, head="agent/4", user="wes")
    with pytest.raises(AdminCallFailed) as exc:
        admin.reopen_pull(FULL, first, sender="wes")
    assert exc.value.status == 422
    assert exc.value.body["errors"][0]["message"] == f"A pull request already exists for {OWNER}:agent/4."
    with pytest.raises(AdminCallFailed) as not_pull:
        admin.close_pull(FULL, 99, sender="wes")
    assert not_pull.value.status == 404


def test_push_to_a_pull_moves_its_head_and_sends_push_then_synchronize(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    _events(admin, hooked, "push")
    admin.commit(FULL, "agent/5", {"src/app.py": "print('one')\n"})
    number = admin.open_pull(FULL, head="agent/5", user="wes")["number"]
    receiver.wait_for(1)
    receiver.items.clear()
    before = admin.call("GET", "/state")  # unchanged by reading
    assert before["pulls"]

    pushed = admin.push_to_pull(FULL, number, {"src/app.py": "print('two')\n"}, sender="wes", message="two")
    assert [(d["event"], d["action"]) for d in pushed["deliveries"]] == [
        ("push", None),
        ("pull_request", "synchronize"),
    ]
    push, sync = receiver.wait_for(2)
    for item in (push, sync):
        assert_signed(item, hooked.webhook_secret)
        assert parse_obj(item.headers["x-github-event"], item.body)
        assert item.body["sender"]["login"] == "wes"
    assert push.body["ref"] == "refs/heads/agent/5"
    assert (push.body["before"], push.body["after"]) == (pushed["before"], pushed["sha"])
    assert (push.body["created"], push.body["deleted"], push.body["forced"]) == (False, False, False)
    assert [(c["id"], c["message"], c["modified"]) for c in push.body["commits"]] == [
        (pushed["sha"], "two", ["src/app.py"])
    ]
    assert push.body["head_commit"]["id"] == pushed["sha"]
    assert push.body["pusher"]["name"] == "wes"
    assert (sync.body["before"], sync.body["after"]) == (pushed["before"], pushed["sha"])
    assert sync.body["pull_request"]["head"]["sha"] == pushed["sha"]
    with hooked.api(hooked.token()) as api:
        assert api.get(f"/repos/{FULL}/pulls/{number}").json()["head"]["sha"] == pushed["sha"]
        raw = api.get(
            f"/repos/{FULL}/contents/src/app.py",
            params={"ref": "agent/5"},
            headers={"Accept": "application/vnd.github.raw+json"},
        )
        assert raw.content == b"print('two')\n"


def test_git_push_lists_the_pushed_commits(
    hooked: World, receiver: Receiver, admin: AdminClient, tmp_path: Path
) -> None:
    _events(admin, hooked, "push")
    token = hooked.token()
    work = tmp_path / "w"

    def git(*args: str) -> str:
        cwd = work if work.exists() else tmp_path
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout.strip()

    git("clone", "--quiet", authed(f"{hooked.url}/{FULL}.git", token), str(work))
    git("checkout", "--quiet", "-b", "agent/6")
    (work / "new.txt").write_text("new\n")
    git("add", "new.txt")
    git("commit", "--quiet", "-m", "add new")
    git("push", "--quiet", "origin", "agent/6")
    item = _one(receiver, hooked)
    assert item.event == ("push", None)
    assert item.body["created"] is True
    assert item.body["sender"]["login"] == "baton-test[bot]"
    assert [(c["message"], c["added"]) for c in item.body["commits"]] == [("add new", ["new.txt"])]
    assert item.body["head_commit"]["id"] == git("rev-parse", "HEAD")


def test_check_suite_rerequest_sends_the_whole_suite(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    _events(admin, hooked, "check_suite")
    with hooked.api(hooked.token()) as api:
        run = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "gate", "head_sha": hooked.head_sha, "conclusion": "neutral"},
        ).json()
    assert set(run["check_suite"]) == {"id"}  # the REST answer names the suite only
    receiver.wait_for(2)  # check_run.created and .completed
    receiver.items.clear()
    admin.rerequest_check_suite(run["check_suite"]["id"], sender="maria")
    item = _one(receiver, hooked)
    assert item.event == ("check_suite", "rerequested")
    assert item.body["sender"]["login"] == "maria"
    suite = item.body["check_suite"]
    assert suite["id"] == run["check_suite"]["id"]
    assert (suite["head_sha"], suite["after"], suite["head_branch"]) == (
        hooked.head_sha,
        hooked.head_sha,
        "main",
    )
    assert (suite["status"], suite["conclusion"]) == ("completed", "neutral")
    assert suite["before"] == "0" * 40  # the repository's first commit
    assert suite["app"]["id"] == hooked.app_id
    assert suite["head_commit"]["id"] == hooked.head_sha
    assert suite["latest_check_runs_count"] == 1
    assert suite["url"].endswith(f"/repos/{FULL}/check-suites/{suite['id']}")
    for key in ("node_id", "pull_requests", "created_at", "updated_at"):
        assert key in suite
    with pytest.raises(AdminCallFailed) as exc:
        admin.rerequest_check_suite(424242, sender="maria")
    assert exc.value.status == 404


def test_check_run_webhooks_carry_the_full_check_suite(hooked: World, receiver: Receiver) -> None:
    hooked.post(f"/repos/{FULL}/commits", {"branch": "agent/7", "files": {"a.txt": "a\n"}})
    with hooked.api(hooked.token()) as api:
        pull = api.post(f"/repos/{FULL}/pulls", json={"title": "t", "head": "agent/7", "base": "main"}).json()
        receiver.wait_for(1)
        receiver.items.clear()
        run = api.post(
            f"/repos/{FULL}/check-runs", json={"name": "gate", "head_sha": pull["head"]["sha"]}
        ).json()
        api.patch(f"/repos/{FULL}/check-runs/{run['id']}", json={"conclusion": "success"})
    created, completed = receiver.wait_for(2)
    fields = {"id", "node_id", "head_branch", "head_sha", "status", "conclusion", "url", "before", "after",
              "pull_requests", "app", "created_at", "updated_at"}  # fmt: skip
    for item in (created, completed):
        assert_signed(item, hooked.webhook_secret)
        suite = item.body["check_run"]["check_suite"]
        assert set(suite) == fields
        assert suite["id"] == run["check_suite"]["id"]
        assert (suite["head_branch"], suite["head_sha"]) == ("agent/7", pull["head"]["sha"])
        assert suite["before"] == pull["base"]["sha"]
        assert [p["number"] for p in suite["pull_requests"]] == [pull["number"]]
        assert suite["app"]["id"] == hooked.app_id
        assert parse_obj("check_run", item.body)
    before, after = (i.body["check_run"]["check_suite"] for i in (created, completed))
    assert (before["status"], before["conclusion"]) == ("queued", None)
    assert (after["status"], after["conclusion"]) == ("completed", "success")


def test_installation_repositories_removed_then_added(
    hooked: World, receiver: Receiver, admin: AdminClient
) -> None:
    token = hooked.token()
    removed = admin.remove_installation_repositories(hooked.installation_id, ["secret-sauce"], sender="ada")
    assert removed["repository_selection"] == "selected"  # "all" minus one is a selection
    item = _one(receiver, hooked)
    assert item.event == ("installation_repositories", "removed")
    body = item.body
    assert body["repository_selection"] == "selected"
    assert [r["full_name"] for r in body["repositories_removed"]] == [f"{OWNER}/secret-sauce"]
    assert body["repositories_added"] == []
    assert body["installation"]["id"] == hooked.installation_id
    assert body["sender"]["login"] == "ada"
    with hooked.api(token) as api:
        assert api.get(f"/repos/{OWNER}/secret-sauce").status_code == 404
        assert api.get(f"/repos/{FULL}").status_code == 200
    app_auth = {"Authorization": f"Bearer {hooked.jwt()}"}
    lookup = httpx.get(f"{hooked.url}/repos/{OWNER}/secret-sauce/installation", headers=app_auth)
    assert lookup.status_code == 404

    admin.add_installation_repositories(hooked.installation_id, [f"{OWNER}/secret-sauce"], sender="ada")
    item = _one(receiver, hooked)
    assert item.event == ("installation_repositories", "added")
    assert [r["name"] for r in item.body["repositories_added"]] == ["secret-sauce"]
    assert item.body["repositories_removed"] == []
    with hooked.api(token) as api:
        assert api.get(f"/repos/{OWNER}/secret-sauce").status_code == 200
    for bad in (["no-such-repo"], ["other-org/elsewhere"], ["secret-sauce"]):  # the last: already there
        with pytest.raises(AdminCallFailed) as exc:
            admin.add_installation_repositories(hooked.installation_id, bad)
        assert exc.value.status == 422


def test_delete_a_repository(hooked: World, receiver: Receiver, admin: AdminClient, tmp_path: Path) -> None:
    _events(admin, hooked, "repository")
    token = hooked.token()
    answer = admin.delete_repo(f"{OWNER}/secret-sauce", sender="ada")
    assert answer["deleted"] == f"{OWNER}/secret-sauce"
    item = _one(receiver, hooked)
    assert item.event == ("repository", "deleted")
    assert item.body["repository"]["full_name"] == f"{OWNER}/secret-sauce"
    assert item.body["sender"]["login"] == "ada"
    with hooked.api(token) as api:
        for path in ("", "/contents/x.txt", "/branches/main"):
            gone = api.get(f"/repos/{OWNER}/secret-sauce{path}")
            assert gone.status_code == 404
            assert gone.json()["message"] == "Not Found"
    app_auth = {"Authorization": f"Bearer {hooked.jwt()}"}
    assert (
        httpx.get(f"{hooked.url}/repos/{OWNER}/secret-sauce/installation", headers=app_auth).status_code
        == 404
    )
    clone = subprocess.run(
        ["git", "ls-remote", authed(f"{hooked.url}/{OWNER}/secret-sauce.git", token)],
        env=GIT_ENV, capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert clone.returncode != 0
    again = admin.create_repo(OWNER, "secret-sauce", files={"y.txt": "y\n"}, private=True)
    assert again["head_sha"]
    with pytest.raises(AdminCallFailed) as exc:
        admin.delete_repo(f"{OWNER}/never-was")
    assert exc.value.status == 404
