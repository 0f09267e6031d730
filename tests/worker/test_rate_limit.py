"""GitHub's rate limit, spent sparingly: at steady state an accepted label costs two counted calls
(the sender's permission, which must be fresh, and the status comment), judged from what the
emulator saw. Repository facts and policy files are read with conditional requests, whose 304s
GitHub does not count."""

from __future__ import annotations

import os
from typing import Any

import httpx

from baton import records
from emulator import world
from tests.worker.conftest import Stage
from worker.github import transport

ADMIN = "/_emulator"


def _api_calls(stage: Stage, since: int) -> list[dict[str, Any]]:
    return [r for r in stage.admin.requests()[since:] if not r["path"].startswith(ADMIN)]


def test_a_steady_state_label_spends_two_rate_limited_calls(stage: Stage) -> None:
    first = stage.issue("Warm the caches")
    assert stage.label(first, "claude-code", sender="maria")["state"] == "queued"

    number = stage.issue("Fix the spinner")
    before = len(stage.admin.requests())
    assert stage.label(number, "claude-code", sender="maria")["state"] == "queued"
    calls = _api_calls(stage, before)
    counted = [f"{c['method']} {c['path']}" for c in calls if c["status"] != 304]
    assert sorted(counted) == sorted([
        f"GET /repos/{world.REPO}/collaborators/maria/permission",
        f"POST /repos/{world.REPO}/issues/{number}/comments",
    ]), calls  # fmt: skip
    free = [c for c in calls if c["status"] == 304]
    assert free  # the repository and its branch, read again, and unchanged
    assert all(c["method"] == "GET" for c in free)
    assert len(stage.baton_comments(number)) == 1


def test_a_changed_branch_is_seen_at_once(stage: Stage) -> None:
    """A 304 is as fresh as a 200: a push to the default branch is read on the next task."""
    stage.label(stage.issue("One"), "claude-code", sender="maria")
    head = stage.admin.commit(world.REPO, "main", {"NOTES.md": "moved\n"})
    before = len(stage.admin.requests())
    stage.label(stage.issue("Two"), "claude-code", sender="maria")
    branch = [c for c in _api_calls(stage, before) if c["path"] == f"/repos/{world.REPO}/branches/main"]
    assert [c["status"] for c in branch] == [200]  # the ETag no longer matched: a fresh answer
    kept = stage.rdb.hget(f"baton:etag:/repos/{world.REPO}/branches/main", "body") or b""
    assert head.encode() in kept  # and it is what is kept for the next conditional read


def test_github_calls_are_counted_per_task_kind_for_metrics(stage: Stage) -> None:
    stage.label(stage.issue("Count me"), "claude-code", sender="maria")
    counts = {k.decode(): int(v) for k, v in stage.rdb.hgetall(records.GITHUB_REQUESTS_KEY).items()}
    assert counts.get("agent_run:counted", 0) >= 2
    assert set(counts) <= {f"{kind}:{c}" for kind in ("agent_run", "other") for c in ("counted", "free")}


def test_the_connection_pool_is_never_shared_with_a_forked_child() -> None:
    shared = transport.SharedTransport()
    reader, writer = os.pipe()
    mine = shared._current()
    pid = os.fork()
    if pid == 0:  # the child: a pool of its own
        os.close(reader)
        os.write(writer, b"1" if shared._current() is not mine else b"0")
        os._exit(0)
    os.close(writer)
    assert os.read(reader, 1) == b"1"
    os.waitpid(pid, 0)
    assert shared._current() is mine  # and the parent keeps its own
    shared.close()  # a short-lived client closing it leaves the pool open
    assert isinstance(shared._current(), httpx.HTTPTransport)
    assert shared._current() is mine
