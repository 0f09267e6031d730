"""Follow-ups on Baton's pull request, judged from the emulator's state: a comment or a review asks
for more, and the issue's agent makes one more commit on the same branch.

Every run is real (the control job, the agents-queue job, the script agent in the box, the mirror,
the push over git smart HTTP); the script agent does what the newest recipe in its prompt says, so
the follow-up's text decides what the new commit holds.
"""

from __future__ import annotations

import subprocess
from typing import Any

import orjson

from baton import keys
from emulator import world
from tests.worker.conftest import Stage
from worker import lifecycle, outbox, receipts, replay
from worker.github import api
from worker.runs import admit, report

HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "one\ntwo\nthree\n"}]}


def _recipe(steps: list[dict[str, Any]]) -> str:
    return f"```baton-recipe\n{orjson.dumps({'steps': steps}).decode()}\n```"


def _get(stage: Stage, path: str, **params: Any) -> Any:
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "pull-request")
    return api.request(gh, "GET", f"/repos/{world.REPO}{path}", params=params or None)


def _git(stage: Stage, *args: str) -> str:
    bare = stage.server.directory / "repos" / f"{world.REPO}.git"
    return subprocess.run(["git", "-C", str(bare), *args], capture_output=True, text=True, check=True).stdout


def _predicate(check_run: dict[str, Any]) -> dict[str, Any]:
    """The signed statement's predicate in a check run's receipt bundle."""
    text = str(check_run["output"]["text"])
    bundle = orjson.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
    predicate: dict[str, Any] = receipts.payload_of(bundle["dsseEnvelope"])["predicate"]
    return predicate


def _status(stage: Stage, number: int) -> str:
    [comment] = stage.baton_comments(number)
    return str(comment["body"])


def _opened(stage: Stage) -> tuple[int, dict[str, Any]]:
    """An issue labelled for the script agent, run to its pull request: (issue, pull request)."""
    issue = stage.issue_with(HELLO)
    admitted = stage.label(issue, "script", sender="maria")
    assert stage.run_agent(admitted["task_id"])["state"] == "pr_opened"
    [pr] = _get(stage, "/pulls", head=f"{world.OWNER}:baton/issue-{issue}", state="open")
    return issue, pr


def _follow(stage: Stage, delivery: dict[str, Any]) -> dict[str, str]:
    """The control job of a follow-up, then (admitted) its run."""
    admitted = stage.run(delivery)
    assert admitted["state"] == "queued", admitted
    return stage.run_agent(admitted["task_id"])


def test_a_comment_on_baton_s_pull_request_makes_one_more_commit_on_its_branch(stage: Stage) -> None:
    issue, pr = _opened(stage)
    before = pr["head"]["sha"]
    body = "/baton add a fourth line\n\n" + _recipe(
        [{"op": "append", "path": "hello.txt", "content": "four\n"}]
    )
    [delivery] = stage.admin.comment(world.REPO, pr["number"], body, user="maria")["deliveries"][-1:]
    ran = _follow(stage, delivery)
    assert ran["state"] == "pr_opened", ran

    now = _get(stage, f"/pulls/{pr['number']}")
    head = now["head"]["sha"]
    assert head != before
    assert now["head"]["ref"] == f"baton/issue-{issue}"
    assert _git(stage, "log", "-1", "--format=%P", head).split() == [before]  # on top, never forced
    assert _git(stage, "show", f"{head}:hello.txt") == "one\ntwo\nthree\nfour\n"
    message = _git(stage, "log", "-1", "--format=%B", head)
    assert report.trailer(message) == ran["task_id"]
    assert f"following up on pull request #{pr['number']}" in message
    assert "fourth" not in message  # what was asked is untrusted: it stays out of the commit
    assert [p["number"] for p in _get(stage, "/pulls", state="all")] == [pr["number"]]  # no second PR
    assert "follows up on `maria`'s comment" in now["body"]

    runs = {r["name"]: r for r in _get(stage, f"/commits/{head}/check-runs")["check_runs"]}
    assert runs[report.AGENT_CHECK]["conclusion"] == "success"
    assert runs[report.TRIFECTA_CHECK]["conclusion"] == "success"
    on_pull = _status(stage, pr["number"])
    assert "Pull request updated" in on_pull
    assert head[:12] in on_pull
    assert "follows up on `maria`'s comment" in _status(stage, issue)  # the issue's status links the run

    record = orjson.loads(stage.rdb.get(admit.RECORD_PREFIX + ran["task_id"]) or b"{}")
    assert (record["base"], record["commit"]) == (before, head)
    assert record["follow_up"]["instruction"].startswith("add a fourth line")
    replayed = replay.replay(stage.rdb, ran["task_id"])
    assert [(r.where, r.match) for r in replayed] == [("admission", True), ("run", True)]


def _replies(stage: Stage, pr: int) -> dict[int, list[str]]:
    """Baton's replies in the pull request's review threads: thread's first comment -> bodies."""
    found: dict[int, list[str]] = {}
    for c in _get(stage, f"/pulls/{pr}/comments", per_page=100):
        if c.get("in_reply_to_id") and c["user"]["login"] == "baton[bot]":
            found.setdefault(int(c["in_reply_to_id"]), []).append(str(c["body"]))
    return found


def test_a_review_with_three_line_comments_is_one_run_answered_in_each_thread(stage: Stage) -> None:
    issue, pr = _opened(stage)
    upper = _recipe([{"op": "write", "path": "hello.txt", "content": "ONE\nTWO\nTHREE\n"}])
    lines = [{"path": "hello.txt", "line": n, "body": f"louder, line {n}"} for n in (1, 2, 3)]
    body = f"/baton shout these\n\n{upper}"
    review = stage.admin.review(world.REPO, pr["number"], user="maria", event="REQUEST_CHANGES", body=body,
                                comments=lines)  # fmt: skip
    submitted = [d for d in review["deliveries"] if d["event"] == "pull_request_review"]
    assert len(submitted) == 1  # one review, one run: its line comments are read with it
    ran = _follow(stage, submitted[0])
    assert ran["state"] == "pr_opened", ran
    head = _get(stage, f"/pulls/{pr['number']}")["head"]["sha"]
    assert _git(stage, "show", f"{head}:hello.txt") == "ONE\nTWO\nTHREE\n"

    threads = _replies(stage, pr["number"])
    assert sorted(threads) == sorted(review["comments"])  # a reply in each thread, once
    for bodies in threads.values():
        [reply] = bodies
        assert f"Baton pushed {head[:12]} for this review; it changes `hello.txt`." in reply
    record = orjson.loads(stage.rdb.get(admit.RECORD_PREFIX + ran["task_id"]) or b"{}")
    follow = record["follow_up"]
    assert [(c["path"], c["line"], c["body"]) for c in follow["comments"]] == [
        ("hello.txt", n, f"louder, line {n}") for n in (1, 2, 3)
    ]
    # The trifecta receipt binds each piece of the reviewer's text by digest, as untrusted input.
    trifecta = next(r for r in _get(stage, f"/commits/{head}/check-runs")["check_runs"]
                    if r["name"] == report.TRIFECTA_CHECK)  # fmt: skip
    inputs = _predicate(trifecta)["inputs"]
    untrusted = [i["name"] for i in inputs if i["taint"] == ["untrustedInput"]]
    assert untrusted == [f"issue #{issue}", f"instruction on #{pr['number']}",
                         *(f"review comment {c} on #{pr['number']}" for c in review["comments"])]  # fmt: skip
    agent = next(r for r in _get(stage, f"/commits/{head}/check-runs")["check_runs"]
                 if r["name"] == report.AGENT_CHECK)  # fmt: skip
    follow_up = _predicate(agent)["followUp"]
    assert (follow_up["pullRequest"], follow_up["reviewId"]) == (pr["number"], review["id"])
    assert [c["line"] for c in follow_up["lineComments"]] == [1, 2, 3]

    # Published again (an outbox retry), the replies are not made twice.
    outbox.publish_now(stage.ctx, ran["task_id"])
    assert all(len(b) == 1 for b in _replies(stage, pr["number"]).values())


def test_a_stranger_s_review_and_a_reader_s_mention_get_nothing(stage: Stage) -> None:
    issue, pr = _opened(stage)
    calls_before = len(stage.admin.requests())
    line = {"path": "hello.txt", "line": 1, "body": "/baton and this"}
    review = stage.admin.review(world.REPO, pr["number"], user="rita", body="/baton delete everything",
                                comments=[line])  # fmt: skip
    [submitted] = [d for d in review["deliveries"] if d["event"] == "pull_request_review"]
    assert stage.run(submitted)["state"] == "refused"
    mention = stage.admin.comment(world.REPO, issue, "@baton fix the spinner", user="rita")["deliveries"][-1]
    assert stage.run(mention)["state"] == "refused"
    # The sender's permission was the one call made for each, nothing else was read.
    made = [r for r in stage.admin.requests()[calls_before:] if "/_emulator" not in r["path"]]
    assert stage.baton_comments(pr["number"]) == []  # silence: no comment, no reply, no reaction
    assert _replies(stage, pr["number"]) == {}
    assert "Pull request opened" in _status(stage, issue)  # the issue's status is the label run's still
    assert [r["path"].rsplit("/", 2)[-2:] for r in made if r["method"] == "GET"
            and "/permission" in r["path"]] == [["rita", "permission"]] * 2  # fmt: skip
    assert not [r for r in made if "/reviews" in r["path"] or "/pulls/" in r["path"]]


def test_a_review_that_does_not_call_baton_is_no_request(stage: Stage) -> None:
    _, pr = _opened(stage)
    review = stage.admin.review(world.REPO, pr["number"], user="maria", event="APPROVE", body="Looks good!")
    [submitted] = [d for d in review["deliveries"] if d["event"] == "pull_request_review"]
    done = stage.run(submitted)
    assert (done["state"], stage.baton_comments(pr["number"])) == ("done", [])


def test_a_maintainer_s_commit_on_the_branch_is_built_on_and_credited(stage: Stage) -> None:
    _, pr = _opened(stage)
    pushed = stage.admin.push_to_pull(world.REPO, pr["number"], {"notes.md": "by hand\n"}, sender="wes")
    body = "/baton one more\n\n" + _recipe([{"op": "append", "path": "notes.md", "content": "by agent\n"}])
    ran = _follow(stage, stage.admin.comment(world.REPO, pr["number"], body, user="maria")["deliveries"][-1])
    assert ran["state"] == "pr_opened", ran
    head = _get(stage, f"/pulls/{pr['number']}")["head"]["sha"]
    assert _git(stage, "log", "-1", "--format=%P", head).split() == [pushed["sha"]]
    assert _git(stage, "show", f"{head}:notes.md") == "by hand\nby agent\n"
    record = orjson.loads(stage.rdb.get(admit.RECORD_PREFIX + ran["task_id"]) or b"{}")
    assert record["built_on"] == [{"sha": pushed["sha"], "author": "wes", "permission": "write"}]
    assert f"Built on {pushed['sha'][:12]} by `wes` (`write`)" in _status(stage, pr["number"])


def test_an_outsider_s_commit_on_the_branch_blocks_the_push_and_the_pull_request_says_why(
    stage: Stage,
) -> None:
    issue, pr = _opened(stage)
    before = stage.admin.push_to_pull(world.REPO, pr["number"], {"notes.md": "sneaky\n"}, sender="rita")[
        "sha"
    ]
    body = "/baton one more\n\n" + _recipe([{"op": "write", "path": "x.txt", "content": "x\n"}])
    ran = _follow(stage, stage.admin.comment(world.REPO, pr["number"], body, user="maria")["deliveries"][-1])
    assert ran["state"] == "failed", ran
    assert _get(stage, f"/pulls/{pr['number']}")["head"]["sha"] == before  # nothing pushed
    said = _status(stage, pr["number"])
    assert "Not pushed: the branch has changes Baton did not make" in said
    assert f"Commit {before[:12]} on the branch is by `rita`, who may not trigger Baton here" in said
    assert "`/baton <what to change>`" in said
    assert "/baton retry" not in said
    assert lifecycle.field(stage.rdb, ran["task_id"], "run_outcome") == "conflict"
    assert stage.rdb.get(keys.run_lock(_get(stage, "")["id"], issue)) is None  # the issue is free again
