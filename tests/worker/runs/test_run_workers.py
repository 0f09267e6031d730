"""Runs under real `baton worker` processes: SIGKILL mid-run, SIGKILL right after the push, two
workers racing for one issue. Judged from the emulator's state and the processes left alive."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator import world
from tests.worker.conftest import Stage, Workers
from tests.worker.runs.test_runs_on_github import HELLO, _branch, _lock, _pulls, _status
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
