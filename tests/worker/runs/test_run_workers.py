"""Runs under real `baton worker` processes: SIGKILL mid-run, SIGKILL right after the push, two
workers racing for one issue, runs waiting in line for a free run slot. Judged from the emulator's
state and the processes left alive."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from baton import keys, queues, records
from emulator import world
from tests.worker.conftest import Stage, Workers
from tests.worker.runs.test_runs_on_github import HELLO, _branch, _get, _lock, _pulls, _status
from worker import lifecycle
from worker.runner import run as runner
from worker.runs import admit, report

SLOW = {"steps": [{"op": "sleep", "seconds": 3}, *HELLO["steps"]]}


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every live process: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(") ", 1)[-1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[0] != "Z":
            found[int(entry.name)] = (int(stat[1]), cmdline)
    return found


def _descendants(pid: int) -> dict[int, bytes]:
    table = _processes()
    found: dict[int, bytes] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, cmdline) in table.items():
            if ppid == parent and child not in found:
                found[child] = cmdline
                frontier.append(child)
    return found


def _agent_running(worker: subprocess.Popen[bytes]) -> dict[int, bytes]:
    """The worker's process tree once the agent runs in its box (else empty): the script agent's
    argv names its prompt file at the box's HOME, a path only the box has."""
    tree = _descendants(worker.pid)
    return tree if any(runner.PROMPT_IN_BOX.encode() in cmd for cmd in tree.values()) else {}


def _label(stage: Stage, recipe: dict[str, Any]) -> tuple[int, str]:
    number = stage.issue_with(recipe)
    guid = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1]["guid"]
    return number, str(guid)


def test_a_worker_killed_mid_run_leaves_no_agent_and_the_run_is_retried_once(
    stage: Stage, workers: Workers
) -> None:
    first = workers.start("a")
    number, task_id = _label(stage, SLOW)
    _wait(lambda: _agent_running(first), 60, "the agent to start in its box", workers)
    tree = _agent_running(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    _wait(
        lambda: not set(tree) & set(_processes()),
        5,
        "the job process and the box to die with the worker",
        workers,
    )

    workers.start("b")
    took = _wait(
        lambda: lifecycle.current(stage.rdb, task_id) in lifecycle.TERMINAL, 90, "the retry", workers
    )
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.PR_OPENED, workers.log()
    assert lifecycle.field(stage.rdb, task_id, admit.ATTEMPT) == "2"
    assert took < 75  # the lease (30 s), one sweep, and a second run
    [pr] = _pulls(stage, number)
    assert f"Fixes #{number}" in pr["body"]
    assert "Pull request opened" in _status(stage, number)
    assert _lock(stage, number) is None


def test_a_worker_killed_right_after_its_push_makes_no_second_pull_request(
    stage: Stage, workers: Workers
) -> None:
    # GitHub is slow to open the PR: the worker is killed between its push and the PR.
    stage.admin.add_fault(
        f"/repos/{world.REPO}/pulls", method="POST", kind="latency", latency_ms=5_000, count=1
    )
    first = workers.start("a")
    number, task_id = _label(stage, HELLO)
    _wait(lambda: _branch(stage, number), 60, "the push", workers)
    pushed = _branch(stage, number)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)

    workers.start("b")
    _wait(lambda: lifecycle.current(stage.rdb, task_id) in lifecycle.TERMINAL, 90, "the retry", workers)
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.PR_OPENED, workers.log()
    [pr] = _pulls(stage, number)  # exactly one, whichever request made it
    assert pr["head"]["sha"] == pushed  # the retry did not run the agent again: it found its own push
    assert lifecycle.field(stage.rdb, task_id, admit.ATTEMPT) == "2"
    runs = stage.requests("POST", "/check-runs")
    assert len([r for r in runs if (r.get("body") or {}).get("name") == report.AGENT_CHECK]) == 1


def test_two_workers_never_run_one_issue_at_once(stage: Stage, workers: Workers) -> None:
    workers.start("a")
    workers.start("b")
    number = stage.issue_with(SLOW)
    # Both requests reach Baton at once: the label, and a maintainer's comment right after it.
    ids = [
        stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1]["guid"],
        stage.admin.comment(world.REPO, number, "/baton run script", user="ada")["deliveries"][-1]["guid"],
    ]
    _wait(
        lambda: all(lifecycle.current(stage.rdb, i) in lifecycle.TERMINAL for i in ids), 90, "both", workers
    )
    states = sorted(str(lifecycle.current(stage.rdb, i)) for i in ids)
    assert states.count("pr_opened") == 1, states
    assert "refused" in states
    assert len(_pulls(stage, number)) == 1


# -- the line: runs over max_concurrent_runs wait their turn -------------------------------------------


def _said(stage: Stage, number: int) -> list[str]:
    """Every body Baton wrote to the issue's status comment, in order, as GitHub received them."""
    [comment] = stage.baton_comments(number)
    wrote = []
    for r in stage.admin.requests():
        made = r["method"] == "POST" and r["path"].endswith(f"/issues/{number}/comments")
        edited = r["method"] == "PATCH" and r["path"].endswith(f"/issues/comments/{comment['id']}")
        if (made or edited) and r["status"] < 300:
            wrote.append(str(r["body"]["body"]))
    return wrote


def _headlines(bodies: list[str]) -> list[str]:
    """Each body's headline, with its place in the line when it waits."""
    found = []
    for body in bodies:
        headline = next(line for line in body.splitlines() if line.startswith("### Baton: "))[11:]
        place = re.search(r"waiting: (\d+ ahead)", body)
        found.append(f"{headline}: {place.group(1)}" if place else headline)
    return [h for i, h in enumerate(found) if i == 0 or found[i - 1] != h]  # an edit that said the same


def _labelled(stage: Stage, n: int) -> list[tuple[int, str]]:
    found = []
    for i in range(n):
        number = stage.issue_with(HELLO, title=f"Say hello {i}")
        guid = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1][
            "guid"
        ]
        found.append((number, str(guid)))
    return found


def _waiting(stage: Stage, task_ids: list[str]) -> bool:
    repo_id = _get(stage, "")["id"]
    return [records.text(m) for m in stage.rdb.zrange(keys.line(repo_id), 0, -1)] == task_ids


def test_three_labels_with_one_run_slot_run_one_after_another(
    one_slot: Stage, one_slot_workers: Workers
) -> None:
    stage, workers = one_slot, one_slot_workers
    workers.start("control", queues=queues.CONTROL.name)  # admissions now, the runs once all are in
    (first, a), (second, b), (third, c) = _labelled(stage, 3)
    _wait(lambda: _waiting(stage, [b, c]), 60, "the second and third to wait in line", workers)
    _wait(lambda: "2 ahead" in _status(stage, third), 30, "the third's place on its issue", workers)
    workers.start("agents", queues=queues.AGENTS.name)
    ids = [a, b, c]
    _wait(
        lambda: all(lifecycle.current(stage.rdb, t) in lifecycle.TERMINAL for t in ids), 180, "all", workers
    )
    assert [str(lifecycle.current(stage.rdb, t)) for t in ids] == ["pr_opened"] * 3, workers.log()
    for number in (first, second, third):
        assert len(_pulls(stage, number)) == 1
        assert _lock(stage, number) is None
    running, pr = "⚙️ Working on it", "📬 Pull request opened"
    assert _headlines(_said(stage, first)) == ["⏳ Queued", running, pr]
    waits = "⏳ Waiting for a free run slot"
    assert _headlines(_said(stage, second)) == [f"{waits}: 1 ahead", "⏳ Queued", running, pr]
    assert _headlines(_said(stage, third)) == [
        f"{waits}: 2 ahead",
        f"{waits}: 1 ahead",
        "⏳ Queued",
        running,
        pr,
    ]
    # One after another: each started after the one before had ended.
    spans = [_span(stage, t) for t in ids]
    assert spans[0][1] <= spans[1][0], spans
    assert spans[1][1] <= spans[2][0], spans


def _span(stage: Stage, task_id: str) -> tuple[str, str]:
    """When the run went to running, and when it ended (Redis's time, as its history has it)."""
    moves = lifecycle.history(stage.rdb, task_id)
    began = [m["at"] for m in moves if m["to"] == "running"][-1]
    return began, moves[-1]["at"]


def test_a_waiting_run_cancelled_says_who_and_the_next_still_runs(
    one_slot: Stage, one_slot_workers: Workers
) -> None:
    stage, workers = one_slot, one_slot_workers
    workers.start("control", queues=queues.CONTROL.name)
    (_, a), (second, b), (third, c) = _labelled(stage, 3)
    _wait(lambda: _waiting(stage, [b, c]), 60, "two runs waiting", workers)
    stage.admin.comment(world.REPO, second, "/baton cancel", user="maria")
    _wait(lambda: lifecycle.current(stage.rdb, b) is lifecycle.State.CANCELLED, 60, "the cancel", workers)
    _wait(lambda: "1 ahead" in _status(stage, third), 30, "the third to move up", workers)
    status = _status(stage, second)
    assert "Cancelled" in status
    assert "`maria` cancelled it (`/baton cancel`)" in status
    assert _lock(stage, second) is None
    workers.start("agents", queues=queues.AGENTS.name)
    _wait(lambda: lifecycle.current(stage.rdb, c) in lifecycle.TERMINAL, 180, "the third run", workers)
    assert lifecycle.current(stage.rdb, a) is lifecycle.State.PR_OPENED, workers.log()
    assert lifecycle.current(stage.rdb, c) is lifecycle.State.PR_OPENED, workers.log()
    assert _pulls(stage, second) == []
    assert len(_pulls(stage, third)) == 1
