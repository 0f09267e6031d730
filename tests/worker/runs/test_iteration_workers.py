"""Follow-ups under real `baton worker` processes: a `/baton` comment and an `@baton` mention on
Baton's pull request, each one more commit that the merge gate then judges as usual."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from baton import queues
from emulator import world
from tests.worker.conftest import Stage, Workers
from worker import lifecycle
from worker.gates import evaluate as gates
from worker.lifecycle import State

EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")


def _recipe(path: str, content: str) -> str:
    steps = {"steps": [{"op": "append", "path": path, "content": content}]}
    return f"```baton-recipe\n{orjson.dumps(steps).decode()}\n```"


def _gate_on(stage: Stage, sha: str) -> dict[str, Any] | None:
    runs = [r for r in stage.admin.check_runs() if r["head_sha"] == sha and r["name"] == gates.CHECK]
    return runs[-1] if runs and runs[-1]["status"] == "completed" else None


def test_comments_and_mentions_on_baton_s_pull_request_each_add_a_judged_commit(
    stage: Stage, workers: Workers
) -> None:
    workers.start("a", queues=EVERY_QUEUE)
    number = stage.issue_with({"steps": [{"op": "write", "path": "notes.md", "content": "a\n"}]})
    label = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1]["guid"]
    _wait(lambda: lifecycle.current(stage.rdb, label) is State.PR_OPENED, 90, "the pull request", workers)
    [pr] = [p for p in stage.admin.call("GET", "/state")["pulls"] if p["head_ref"] == f"baton/issue-{number}"]

    heads = [str(lifecycle.field(stage.rdb, label, "head_sha"))]
    for asked, text in (("/baton add b", "b\n"), ("@baton add c", "c\n")):
        body = f"{asked}\n\n{_recipe('notes.md', text)}"
        task = stage.admin.comment(world.REPO, pr["number"], body, user="wes")["deliveries"][-1]["guid"]
        _wait(lambda t=task: lifecycle.current(stage.rdb, t) in lifecycle.TERMINAL, 90, asked, workers)
        assert lifecycle.current(stage.rdb, task) is State.PR_OPENED, workers.log()
        heads.append(str(lifecycle.field(stage.rdb, task, "head_sha")))
        gate = _wait(lambda h=heads[-1]: _gate_on(stage, h), 90, f"the merge gate on {asked}", workers)
        assert gate["conclusion"] == "success", gate["output"]["summary"]
    assert len(set(heads)) == 3
    comments = stage.baton_comments(pr["number"])
    assert len(comments) == 1  # the pull request's one status comment, updated in place
    assert "follows up on `wes`'s comment" in comments[0]["body"]
