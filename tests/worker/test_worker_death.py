"""A dead worker is noticed in seconds: real `baton worker` processes, real signals.

A job process killed by SIGKILL (the OOM killer's way) ends its task at once,
through the same failure path as any failure; a worker killed outright takes
its job process with it, and another worker ends the task once its lease runs
out. Either way the issue says so, well within a minute. A worker of the short
queues alone runs its jobs in its own process: killed, it is noticed the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from baton import queues
from emulator import world
from tests.conftest import EvidenceKeys
from tests.worker.conftest import Stage
from worker import lifecycle

#: The issue's target: terminal and visible on GitHub within this long of a worker's death.
TARGET_S = 60.0


#: A worker that may take agent runs forks a job process per job; one of the short queues alone does not.
FORKING = f"{queues.CONTROL.name},{queues.AGENTS.name}"
IN_PROCESS = queues.CONTROL.name


def _worker(
    stage: Stage, redis_url: str, log: Path, keys: EvidenceKeys, *, served: str = FORKING
) -> subprocess.Popen[bytes]:
    env = {
        **keys.env(),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "REDIS_URL": redis_url,
        "APP_ID": str(stage.world.app_id),
        "PRIVATE_KEY": stage.world.private_key,
        "GITHUB_API_URL": stage.server.url,
        "LOG_LEVEL": "WARNING",
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "baton", "worker", "--queues", served],
            env=env, stdout=out, stderr=out,
        )  # fmt: skip


@pytest.fixture
def workers(stage: Stage, redis_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _wait(predicate: object, timeout: float, what: str) -> float:
    """Poll ``predicate`` (bounded); returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def _start_stuck_run(
    stage: Stage,
    redis_url: str,
    tmp_path: Path,
    workers: list[subprocess.Popen[bytes]],
    keys: EvidenceKeys,
    *,
    served: str = FORKING,
) -> tuple[int, str]:
    """A labelled issue whose run is in flight: GitHub takes 50 s to answer the permission call."""
    stage.admin.add_fault(f"/repos/{world.REPO}/collaborators/*/permission", kind="latency",
                          latency_ms=50_000, count=5)  # fmt: skip
    number = stage.issue()
    task_id = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1][
        "guid"
    ]
    workers.append(_worker(stage, redis_url, tmp_path / "worker-1.log", keys, served=served))
    _wait(lambda: lifecycle.current(stage.rdb, task_id) == lifecycle.State.RUNNING, 30, "the run to start")
    return number, task_id


def _says_failed(stage: Stage, number: int) -> bool:
    return any(
        "Failed" in c["body"] and "stopped before it finished" in c["body"]
        for c in stage.baton_comments(number)
    )


def test_a_killed_job_process_ends_its_task_at_once(
    stage: Stage,
    redis_url: str,
    tmp_path: Path,
    workers: list[subprocess.Popen[bytes]],
    evidence_keys: EvidenceKeys,
) -> None:
    number, task_id = _start_stuck_run(stage, redis_url, tmp_path, workers, evidence_keys)
    [horse] = _children(workers[0].pid)
    os.kill(horse, signal.SIGKILL)
    took = _wait(lambda: _says_failed(stage, number), TARGET_S, "the issue to say the run failed")
    assert took < 15  # not a lease expiry: the worker saw its job process die
    assert lifecycle.current(stage.rdb, task_id) == lifecycle.State.FAILED
    assert "worker-lost" in (lifecycle.field(stage.rdb, task_id, "detail") or "")
    assert workers[0].poll() is None  # the worker lives on


@pytest.mark.parametrize("served", [FORKING, IN_PROCESS])
def test_a_killed_worker_is_noticed_by_another_within_a_minute(
    stage: Stage,
    redis_url: str,
    tmp_path: Path,
    workers: list[subprocess.Popen[bytes]],
    evidence_keys: EvidenceKeys,
    *,
    served: str,
) -> None:
    number, task_id = _start_stuck_run(stage, redis_url, tmp_path, workers, evidence_keys, served=served)
    horses = _children(workers[0].pid)
    assert len(horses) == (1 if served == FORKING else 0)
    workers[0].kill()  # SIGKILL: no cleanup at all
    workers[0].wait(timeout=10)
    killed = time.monotonic()
    _wait(lambda: not any(_alive(h) for h in horses), 10, "the job process to die with its worker")
    workers.append(_worker(stage, redis_url, tmp_path / "worker-2.log", evidence_keys, served=served))
    _wait(lambda: _says_failed(stage, number), TARGET_S, "the issue to say the run failed")
    assert time.monotonic() - killed < TARGET_S
    assert lifecycle.current(stage.rdb, task_id) == lifecycle.State.FAILED
    assert "lease ran out" in (lifecycle.field(stage.rdb, task_id, "detail") or "")


def test_a_stop_request_is_honoured_even_if_a_sweep_swallowed_it(redis_url: str) -> None:
    """RQ raises StopRequested from its SIGTERM handler wherever an idle worker happens to be; a sweep
    (which records every failure and goes on) must not make the worker forget it was asked to stop."""
    from rq import Queue
    from rq.exceptions import StopRequested
    from rq.serializers import JSONSerializer
    from rq.worker import WorkerStatus

    from worker.rqworker import BatonWorker

    conn = redis.Redis.from_url(redis_url)
    worker = BatonWorker([Queue(queues.CONTROL.name, connection=conn, serializer=JSONSerializer)],
                         connection=conn, serializer=JSONSerializer)  # fmt: skip
    worker.set_state(WorkerStatus.IDLE)
    with pytest.raises(StopRequested):
        worker._shutdown()  # what RQ's signal handler does when the worker is idle
    with pytest.raises(StopRequested):  # the sweep that was interrupted (and caught it) stops the loop
        worker._tick(idle=True)
    conn.close()
