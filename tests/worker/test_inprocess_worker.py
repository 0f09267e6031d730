"""The short queues run their jobs in the worker's own process: one connection pool serves every
job, a long job keeps its lease, and a worker that may take an agent run still forks per job."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from baton import queues, records
from emulator import world
from tests.worker.conftest import Stage, Workers
from worker import clock, lifecycle, pool, rqworker
from worker.runner import box


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")


def test_only_a_worker_that_may_take_an_agent_run_forks_per_job() -> None:
    assert pool.worker_class([queues.CONTROL.name]) is rqworker.InProcessWorker
    assert pool.worker_class(pool.SHORT_QUEUES) is rqworker.InProcessWorker
    assert pool.worker_class([queues.AGENTS.name]) is rqworker.BatonWorker
    assert pool.worker_class([queues.CONTROL.name, queues.AGENTS.name]) is rqworker.BatonWorker


def test_a_long_job_in_process_keeps_its_lease(rdb: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing else renews the lease while the job holds the only thread RQ has: the renewer does."""
    monkeypatch.setattr(rqworker, "RENEW_EVERY_S", 0.2)
    task_id = "in-process-long-job"
    queue = Queue(queues.CONTROL.name, connection=rdb, serializer=JSONSerializer)
    queue.enqueue("time.sleep", 1.5, job_id=task_id)
    worker = rqworker.InProcessWorker([queue], connection=rdb, serializer=JSONSerializer, name="renewer",
                                      job_monitoring_interval=1, maintenance_interval=1)  # fmt: skip
    lifecycle.move(rdb, task_id, lifecycle.State.QUEUED)  # as its job would take it, under its name
    lifecycle.move(rdb, task_id, lifecycle.State.RUNNING, holder=lifecycle.holder_name("renewer", task_id))
    started = clock.now(rdb)
    rdb.zadd(lifecycle.LEASES, {task_id: started + 0.5})  # runs out mid-job unless renewed

    worker.work(burst=True, with_scheduler=False)

    lease = rdb.zscore(lifecycle.LEASES, task_id)
    assert lease is not None
    assert lease >= started + 0.5 + lifecycle.LEASE_S  # renewed after the first lease would have run out
    assert task_id not in lifecycle.expired_leases(rdb)


def test_one_control_worker_reuses_its_github_connection_across_tasks(stage: Stage, workers: Workers) -> None:
    """A forked job process took its connections with it; in-process, the next task's calls go out
    on a connection the previous task opened (no new TCP or TLS handshake)."""
    workers.start("a", queues=queues.CONTROL.name)

    def label_and_wait(title: str) -> list[dict[str, Any]]:
        number = stage.issue(title)
        before = len(stage.admin.requests())
        stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")
        _wait(lambda: stage.baton_comments(number), 30, f"the status comment on #{number}", workers)
        return [r for r in stage.admin.requests()[before:] if not r["path"].startswith("/_emulator")]

    first = label_and_wait("First")
    second = label_and_wait("Second")
    assert first
    assert second
    opened_by_first = {r["client_port"] for r in first}
    assert {r["client_port"] for r in second} <= opened_by_first, (first, second)


def test_a_starting_worker_records_what_its_box_enforces(rdb: redis.Redis) -> None:
    """The status page shows each worker host's probe: a worker says it when it starts."""
    queue = Queue(queues.CONTROL.name, connection=rdb, serializer=JSONSerializer)
    rqworker.InProcessWorker([queue], connection=rdb, serializer=JSONSerializer)
    recorded = orjson.loads(rdb.hget(records.BOX_PROBES_KEY, socket.gethostname()) or b"{}")
    probe = box.probe()
    assert recorded["network_cutoff"] is probe.network_cutoff
    assert recorded["problems"] == list(probe.problems)
