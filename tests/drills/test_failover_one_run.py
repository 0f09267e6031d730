"""Drill: a Redis failover that loses a task's last writes runs the task once, never twice at once.

Real processes: a Redis primary with one replica and three Sentinels (``tests.redis_topology``),
`baton worker` processes reaching Redis through the Sentinels (``redis+sentinel://``), Baton's
endpoint, the GitHub emulator. The replica stops receiving the primary's writes just before a
worker takes the task (its password to the primary is made wrong, and its link dropped), so the
worker's dequeue, its move to ``running`` and its lease live only on the primary; the primary is
then killed, and Sentinel promotes the replica, where the task is ``queued`` again with its job
back in the queue. The worker that took it is still running it: GitHub holds its call (until the
control task's GitHub deadline ends it, ``baton.queues.CONTROL``).

What must hold: that job finds at its next lease renewal that the task is not its own on the new
primary and stops (a job process exits, an in-process job is interrupted once its call returns),
publishing nothing (not even the failure its deadline would make of it); the task is started again
only once a whole lease has passed since the new primary was seen, after the first job found its
lease lost; it ends once, with one status comment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from baton import queues, records, redis_client
from emulator import world
from tests.conftest import EvidenceKeys
from tests.drills.procs import children
from tests.redis_topology import Security, Topology, topology
from tests.worker.conftest import Stage, Workers, make_stage
from worker import clock, lifecycle

PASSWORD = "drill-secret"
FORKING = f"{queues.CONTROL.name},{queues.AGENTS.name}"
IN_PROCESS = queues.CONTROL.name
#: Every worker follows the failover for this long before it would give up and exit.
WORKER_ENV = {"BATON_REDIS_FAILOVER_WAIT": "60"}


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Topology]:
    with topology(tmp_path / "redis", replicas=1, sentinels=3, security=Security(password=PASSWORD)) as found:
        yield found


@pytest.fixture
def failover_stage(tmp_path: Path, nodes: Topology) -> Iterator[Stage]:
    """The endpoint stores deliveries on the first primary (it has no part in the drill after that);
    the test's own client, as the workers, follows the failover through the Sentinels."""
    rdb = redis_client.connect(nodes.url, timeout=5.0, failover_wait=60.0)
    first = f"redis://:{PASSWORD}@127.0.0.1:{nodes.data[0].port}/0"
    try:
        yield from make_stage(tmp_path, first, rdb)
    finally:
        rdb.close()


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")
        time.sleep(0.1)


def _state(client: redis.Redis, task_id: str) -> str | None:
    found = client.hget(records.TASK_PREFIX + task_id, "state")
    return None if found is None else records.text(found)


def _cut_replication(nodes: Topology) -> None:
    """From now on the replica gets none of the primary's writes (and Sentinel may still promote it)."""
    primary, replica = nodes.data[0], nodes.data[1]
    with replica.client() as r, primary.client() as p:
        r.config_set("masterauth", "not-the-password")
        p.client_kill_filter(_type="replica")
        deadline = time.monotonic() + 10
        while r.info("replication").get("master_link_status") != "down":
            assert time.monotonic() < deadline, "the replica kept its link to the primary"
            time.sleep(0.05)


def _stamp(at: str) -> float:
    """A history entry's ``at`` (``baton.logs.timestamp``: RFC 3339, UTC) as seconds since the epoch."""
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("served", [FORKING, IN_PROCESS])
def test_a_task_whose_lease_died_with_the_primary_runs_once(
    failover_stage: Stage, nodes: Topology, tmp_path: Path, evidence_keys: EvidenceKeys, *, served: str
) -> None:
    stage = failover_stage
    workers = Workers(stage, nodes.url, tmp_path, evidence_keys)
    primary, replica = nodes.data[0], nodes.data[1]
    try:
        lifecycle.expired_leases(stage.rdb)  # a sweep, as any worker makes: the primary's identity is kept
        number = stage.issue()
        stage.admin.add_fault(f"/repos/{world.REPO}/collaborators/*/permission", kind="latency",
                              latency_ms=50_000, count=1)  # fmt: skip
        [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
        assert delivery["status_code"] == 202, delivery
        task_id = delivery["guid"]
        with replica.client() as r:  # and, written before it, the primary's identity
            _wait(lambda: _state(r, task_id) == "queued", 10, "the replica to hold the task", workers)
        _cut_replication(nodes)

        first = workers.start("first", queues=served, env=WORKER_ENV)
        _wait(lambda: _state(stage.rdb, task_id) == "running", 30, "the first worker to run it", workers)
        horses = {c.pid for c in children(first.pid)}
        with replica.client() as r:
            assert _state(r, task_id) == "queued"  # the replica never heard of the run

        primary.kill()  # no goodbye: the dequeue, the move and the lease die with it
        promoted = nodes.wait_failover(primary)
        assert promoted is replica  # the first job's call to GitHub still waits; the next run's will not
        workers.start("second", queues=served, env=WORKER_ENV)

        # The first job stops within a renewal or two of reaching the new primary, having done nothing more.
        if served == FORKING:  # its job process exits
            gone = lambda: not horses & {c.pid for c in children(first.pid)}  # noqa: E731
            _wait(gone, 45, "the first job process to exit", workers)
        else:  # interrupted once its call to GitHub returns (at its deadline: the emulator holds it 50 s)
            _wait(
                lambda: "job stopped on its lost lease" in workers.log(), 90, "the first job to stop", workers
            )
        stopped = time.time()
        _wait(
            lambda: _state(stage.rdb, task_id) == "denied", 90, "the task to end on the new primary", workers
        )
        _wait(lambda: stage.baton_comments(number), 30, "the status comment", workers)

        moves = lifecycle.history(stage.rdb, task_id)
        assert [m["to"] for m in moves] == ["queued", "running", "denied"], moves  # the new primary's story
        started = _stamp(moves[1]["at"])
        if served == FORKING:  # (in-process, the first job's call outlives the lease: it stops after)
            assert started >= stopped - 0.5, "the second run started while the first still ran"
        assert "not this job's any more" in workers.log()  # it found out by its renewal, not its deadline
        with promoted.client() as r:
            since = float(records.text(r.hget(clock.PRIMARY_KEY, "since")))
        assert started >= since + lifecycle.LEASE_S - 1, "the task started again before a lease had passed"
        [comment] = stage.baton_comments(number)  # only one run told GitHub anything: the second
        assert "capability gate denied" in comment["body"]
        assert first.poll() is None  # the worker lives on; only its job stopped
    finally:
        for proc in workers.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
