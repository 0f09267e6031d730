"""Workers on hosts whose clocks differ agree on every time they compare: Redis's.

Real `baton worker` processes, one of them with its clock an hour or a minute ahead or behind
(Debian's ``faketime``, libfaketime preloaded: the process's wall clock only, its monotonic clock
is left alone, as on a host whose NTP is off; ``faketime_site`` works around a libfaketime bug).
What must hold whatever the clocks:

1. a worker whose clock runs fast ends no task another worker is running (leases, and RQ's
   registries of started jobs, are not read by its own clock), nor does any worker end a slow
   worker's task while that worker lives;
2. the task of a worker killed outright is still swept within ``LEASE_S`` and a tick or two;
3. a publication a worker could not make is due by Redis's clock, and another worker makes it;
4. a run counts in Redis's UTC day, and holds its concurrency slot by Redis's clock.

A worker whose clock is off cannot sign a JWT GitHub accepts (``iat`` at most 60 s ahead, ``exp``
in the future and at most 10 minutes ahead: githubkit's is 9 minutes out, so a minute fast is too
fast): such a worker works on the installation tokens other workers left in the shared cache
(``worker.github.tokens``), so the tests where one needs GitHub first run the same kind of task
once in this process, with the right clock.
"""

from __future__ import annotations

import glob
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from baton import queues, records
from emulator import world
from tests.worker.conftest import Stage, Workers
from worker import lifecycle, outbox, rqworker
from worker.runs import admit, budget

CONTROL = queues.CONTROL.name
#: A ``sitecustomize`` for the skewed processes: libfaketime 0.9.10 breaks Python 3.11's time.sleep.
SITE = Path(__file__).parent / "faketime_site"
#: The issue's bound for a dead worker's task: its lease, a sweep, and room for a loaded machine.
SWEPT_WITHIN_S = lifecycle.LEASE_S + 2 * rqworker.RENEW_EVERY_S + 10


def _libfaketime() -> str | None:
    if shutil.which("faketime") is None:
        return None
    found = sorted(
        glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1")
    )
    return found[0] if found else None


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose wall clock is ``offset`` ("+1h", "-61") off; "" for none."""
    if not offset:
        return {}
    lib = _libfaketime()
    if lib is None:
        pytest.skip("faketime is not installed (Debian: apt-get install faketime); it skews a worker's clock")
    return {"LD_PRELOAD": lib, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": str(SITE)}  # fmt: skip


def _redis_now(stage: Stage) -> float:
    seconds, micros = stage.rdb.time()
    return seconds + micros / 1_000_000


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")
        time.sleep(0.2)
    return time.monotonic() - started


def _prime_tokens(stage: Stage, agent: str) -> None:
    """Run one task like the test's in this process, so its narrowed installation tokens are cached."""
    result = stage.label(stage.issue("Warm the token cache"), agent, sender="maria")
    assert result["state"] in ("denied", "queued"), result


def _stuck_task(
    stage: Stage, workers: Workers, *, env: dict[str, str]
) -> tuple[str, subprocess.Popen[bytes]]:
    """A label whose control task runs on a worker of its own and waits on GitHub's answer (until the
    control task's GitHub deadline, ``baton.queues.CONTROL``)."""
    stage.admin.add_fault(f"/repos/{world.REPO}/collaborators/*/permission", kind="latency",
                          latency_ms=50_000, count=1)  # fmt: skip
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"]
    runner = workers.start("runner", env=env)
    task_id: str = delivery["guid"]
    _wait(
        lambda: lifecycle.current(stage.rdb, task_id) is lifecycle.State.RUNNING,
        30,
        "the task to run",
        workers,
    )
    return task_id, runner


def _long_run(stage: Stage, workers: Workers) -> str:
    """An agent run (the script agent, in the box) that sleeps for minutes, on a worker of its own."""
    number = stage.issue_with({"steps": [{"op": "sleep", "seconds": 600}]})
    [delivery] = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"]
    task_id = delivery["guid"]
    workers.start("runner")

    def running() -> bool:
        moves = lifecycle.history(stage.rdb, task_id)
        return [m["to"] for m in moves][-1:] == ["running"] and len(
            moves
        ) > 3  # the run's, after the admission's

    _wait(running, 60, "the agent run to start", workers)
    return task_id


def _plant_dead_task(stage: Stage) -> str:
    """A running task whose lease ran out long ago and which has no job: any worker's tick ends it,
    and the worker that did says so in its log."""
    task_id = f"planted-{uuid.uuid4().hex[:8]}"
    lifecycle.move(stage.rdb, task_id, lifecycle.State.QUEUED)
    lifecycle.move(stage.rdb, task_id, lifecycle.State.RUNNING)
    stage.rdb.zadd(lifecycle.LEASES, {task_id: 1.0})
    return task_id


def _swept_by(stage: Stage, workers: Workers, name: str, times: int, *, live: str) -> None:
    """Wait until worker ``name`` has ended ``times`` planted tasks (proof that it swept while ``live``
    ran), asserting after each that ``live`` still runs."""
    log = workers.tmp_path / f"worker-{name}.log"
    swept = 0
    deadline = time.monotonic() + 60
    while swept < times:
        assert time.monotonic() < deadline, f"worker {name} never swept {times} time(s)\n{workers.log()}"
        planted = _plant_dead_task(stage)
        _wait(lambda: lifecycle.current(stage.rdb, planted) is lifecycle.State.FAILED, 30,  # noqa: B023
              "a sweep to end a planted task", workers)  # fmt: skip
        swept += planted in log.read_text(errors="replace")
        assert lifecycle.current(stage.rdb, live) is lifecycle.State.RUNNING, workers.log()


@pytest.mark.parametrize("sweeper", ["+1h", "+61"])
def test_a_fast_worker_ends_no_other_workers_running_task(
    stage: Stage, workers: Workers, sweeper: str
) -> None:
    task_id = _long_run(stage, workers)
    watcher = workers.start("sweeper", queues=CONTROL, env=skewed(sweeper))
    _swept_by(stage, workers, "sweeper", 2, live=task_id)
    assert watcher.poll() is None
    lease = stage.rdb.zscore(lifecycle.LEASES, task_id)
    assert lease is not None
    assert lease > _redis_now(stage), "the running task's lease is by Redis's clock, renewed"
    assert lifecycle.field(stage.rdb, task_id, admit.ATTEMPT) == "1"  # never retried as lost


@pytest.mark.parametrize(("runner", "sweeper"), [("-61", ""), ("+61", ""), ("", "-1h")])
def test_a_killed_workers_task_is_swept_in_time_whatever_the_clocks(
    stage: Stage, workers: Workers, runner: str, sweeper: str
) -> None:
    """A slow worker's task lives as long as it does (no other worker ends it early), and is swept
    within a lease and a tick of its death; so is a fast one's, and so is any when a slow worker sweeps."""
    _prime_tokens(stage, "researcher")  # even a minute fast, a worker's JWT expires too late for GitHub
    task_id, proc = _stuck_task(stage, workers, env=skewed(runner))
    workers.start("sweeper", queues=CONTROL, env=skewed(sweeper))
    _swept_by(stage, workers, "sweeper", 1, live=task_id)
    proc.kill()  # SIGKILL: its job process dies with it, and nobody renews the lease again
    proc.wait(timeout=10)
    took = _wait(lambda: lifecycle.current(stage.rdb, task_id) is lifecycle.State.FAILED, 120,
                 "the dead worker's task to be swept", workers)  # fmt: skip
    assert took < SWEPT_WITHIN_S, f"swept {took:.1f}s after its worker died"
    assert "lease ran out" in (lifecycle.field(stage.rdb, task_id, "detail") or "")


@pytest.mark.parametrize("skew", ["+119", "-1h"])
def test_a_publication_a_skewed_worker_could_not_make_is_due_by_redis(
    stage: Stage, workers: Workers, skew: str
) -> None:
    """Two minutes fast, or an hour slow (each works on tokens the cache holds: see above)."""
    _prime_tokens(stage, "researcher")
    stage.admin.add_fault(f"/repos/{world.REPO}/issues/*/comments", method="POST", kind="status", status=500,
                          count=1000)  # fmt: skip
    number = stage.issue()
    proc = workers.start("skewed", queues=CONTROL, env=skewed(skew))
    before = _redis_now(stage)
    retries = int(stage.rdb.hget(records.COUNTERS_KEY, "publish_retry") or 0)
    task_id = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"][-1][
        "guid"
    ]
    _wait(lambda: int(stage.rdb.hget(records.COUNTERS_KEY, "publish_retry") or 0) > retries, 60,
          "a failed publication, its next attempt due", workers)  # fmt: skip
    proc.send_signal(signal.SIGSTOP)  # frozen before it tries again: what it wrote is what it left
    attempts = int(lifecycle.field(stage.rdb, task_id, "publish_attempts") or 0)
    due = stage.rdb.zscore(records.OUTBOX_KEY, task_id)
    now = _redis_now(stage)
    proc.kill()
    proc.wait(timeout=10)
    assert due is not None
    # Its next attempt is due by Redis's clock (or, had it claimed one meanwhile, that claim lapses so).
    latest = now + max(outbox.next_delay(attempts, RuntimeError()), outbox.CLAIM_S) + 1
    assert before < due <= latest, (due - now, attempts)
    stage.admin.clear_faults()
    workers.start("fair", queues=CONTROL)
    _wait(lambda: stage.rdb.zscore(records.OUTBOX_KEY, task_id) is None, 60, "another worker to publish it",
          workers)  # fmt: skip
    assert (lifecycle.field(stage.rdb, task_id, "published") or "").startswith("status comment")
    assert stage.baton_comments(number)


@pytest.mark.parametrize("skew", ["-1d", "+61"])
def test_a_skewed_worker_counts_a_run_in_redis_day_and_holds_its_slot_by_redis(
    stage: Stage, workers: Workers, skew: str
) -> None:
    _prime_tokens(stage, "claude-code")
    number = stage.issue()
    workers.start("skewed", queues=CONTROL, env=skewed(skew))
    delivery = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1]
    task_id = delivery["guid"]
    _wait(lambda: lifecycle.field(stage.rdb, task_id, admit.JOB), 60, "the run to be admitted", workers)
    now = _redis_now(stage)
    repo_scope, _ = admit.scopes(stage.task(delivery), None)
    today = budget.day(datetime.fromtimestamp(now, UTC))
    assert stage.rdb.hget(budget.budget_key(repo_scope, today), f"task:{task_id}") is not None, (
        f"the run is not counted in Redis's day {today}: "
        f"{sorted(k.decode() for k in stage.rdb.scan_iter(budget.BUDGET_PREFIX + '*'))}"
    )
    slot = stage.rdb.zscore(budget.active_key(repo_scope), task_id)
    assert slot is not None
    assert abs(slot - (now + admit.QUEUED_LOCK_S)) < 30, slot - now  # taken a few seconds ago
