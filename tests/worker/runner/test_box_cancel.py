"""Cancelling a running box: ``stop`` ends it at once, SIGKILL follows a short grace, nothing is left."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.worker.runner.test_box import host_processes_with
from worker.runner import box
from worker.runner.box import BoxResult, BoxSpec
from worker.runner.probe import host

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)


def run_and_stop(spec: BoxSpec, after_s: float) -> tuple[BoxResult, float]:
    """``box.run(spec)`` with ``stop`` set from another thread ``after_s`` in; the result and its time."""
    stop = threading.Event()
    timer = threading.Timer(after_s, stop.set)
    started = time.monotonic()
    timer.start()
    try:
        done = box.run(spec, stop=stop)
    finally:
        timer.cancel()
    return done, time.monotonic() - started


def test_a_cancelled_agent_that_ignores_sigterm_is_killed_and_leaves_nothing(dirs: tuple[Path, Path]) -> None:
    marker = f"baton-cancel-{uuid.uuid4().hex}"
    canary = f"0.{uuid.uuid4().int % 10**9:09d}1"  # a sleep under 1 s whose argv is unique to this test
    script = f'trap "" TERM; (setsid sleep 4242{canary} &); echo up; while :; do sleep {canary}; done'
    spec = BoxSpec(argv=["/bin/sh", "-c", script, marker], workspace=dirs[0], home=dirs[1], timeout_s=600)
    done, took = run_and_stop(spec, 0.5)
    assert done.cancelled
    assert not done.timed_out
    assert (done.exit_code, done.signal) == (None, signal.SIGKILL)  # SIGTERM was ignored
    assert done.stdout == b"up\n"
    assert box.CANCEL_GRACE_S <= took < 5.5
    assert host_processes_with(marker.encode()) == []
    assert host_processes_with(canary.encode()) == []


def test_a_cancelled_agent_that_heeds_sigterm_stops_at_once(dirs: tuple[Path, Path]) -> None:
    spec = BoxSpec(argv=["sleep", "300"], workspace=dirs[0], home=dirs[1], timeout_s=600, grace_s=30)
    done, took = run_and_stop(spec, 0.5)
    assert done.cancelled
    assert (done.exit_code, done.signal, done.timed_out) == (None, signal.SIGTERM, False)
    assert took < 2


def test_the_grace_after_a_cancel_is_the_specs_if_shorter(dirs: tuple[Path, Path]) -> None:
    spec = BoxSpec(argv=["/bin/sh", "-c", 'trap "" TERM; while :; do sleep 1; done'], workspace=dirs[0],
                   home=dirs[1], grace_s=0.2)  # fmt: skip
    done, took = run_and_stop(spec, 0.3)
    assert done.cancelled
    assert done.signal == signal.SIGKILL
    assert took < 2


def test_a_stop_set_before_the_start_starts_nothing(dirs: tuple[Path, Path]) -> None:
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    done = box.run(BoxSpec(argv=["touch", "/workspace/ran"], workspace=dirs[0], home=dirs[1]), stop=stop)
    assert done.cancelled
    assert (done.exit_code, done.signal, done.timed_out, done.stdout, done.duration_s) == (
        None, None, False, b"", 0.0)  # fmt: skip
    assert not done.report.pid_namespace.in_force  # nothing was seen, so nothing is claimed
    assert not (dirs[0] / "ran").exists()
    assert time.monotonic() - started < 1


def test_a_stop_never_set_changes_nothing(dirs: tuple[Path, Path]) -> None:
    done = box.run(BoxSpec(argv=["/bin/sh", "-c", "echo hi; exit 3"], workspace=dirs[0], home=dirs[1]),
                   stop=threading.Event())  # fmt: skip
    assert (done.exit_code, done.signal, done.stdout) == (3, None, b"hi\n")
    assert (done.timed_out, done.cancelled) == (False, False)


def test_a_stop_during_the_timeout_grace_shortens_it_and_stays_a_timeout(dirs: tuple[Path, Path]) -> None:
    spec = BoxSpec(argv=["/bin/sh", "-c", 'trap "" TERM; while :; do sleep 1; done'], workspace=dirs[0],
                   home=dirs[1], timeout_s=0.3, grace_s=60)  # fmt: skip
    done, took = run_and_stop(spec, 1.0)
    assert (done.timed_out, done.cancelled, done.signal) == (True, False, signal.SIGKILL)
    assert took < 1.0 + box.CANCEL_GRACE_S + 1.5


@pytest.mark.parametrize("after_s", [0.0, 0.002, 0.01, 0.05])
def test_a_cancel_during_the_start_up_is_a_cancel_not_an_error(
    dirs: tuple[Path, Path], after_s: float
) -> None:
    marker = f"baton-cancel-{uuid.uuid4().hex}"
    spec = BoxSpec(argv=["/bin/sh", "-c", 'trap "" TERM; sleep 300', marker], workspace=dirs[0], home=dirs[1])
    done, took = run_and_stop(spec, after_s)
    assert done.cancelled
    assert not done.timed_out
    assert took < after_s + box.CANCEL_GRACE_S + 2
    assert host_processes_with(marker.encode()) == []
