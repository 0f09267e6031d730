"""Deliveries GitHub gave up on are found and redelivered: a drill with real workers.

Redis refuses writes (as during a failover), five labels get 503s, Redis
comes back; `baton worker` processes find the five failed deliveries through GitHub's API
(the emulator's), ask for each once, and the labels become tasks with their status comments,
exactly once. A delivery that keeps failing is given up after three attempts.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from baton import queues, records
from baton.redis_server import free_port
from emulator import world
from tests.worker.conftest import Stage, Workers
from worker import redeliver
from worker.context import Context

INTERVAL_S = "1"


def _wait(predicate: Callable[[], Any], timeout: float, what: str, pool: Workers | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{pool.log() if pool else ''}")


def _redelivery_requests(stage: Stage) -> list[dict[str, Any]]:
    return [r for r in stage.admin.requests()
            if r["method"] == "POST" and r["path"].startswith("/app/hook/deliveries/")]  # fmt: skip


def _counter(rdb: redis.Redis, name: str) -> int:
    return int(rdb.hget(records.COUNTERS_KEY, name) or 0)


def test_labels_lost_while_redis_refused_writes_are_recovered_exactly_once(
    stage: Stage, rdb: redis.Redis, workers: Workers
) -> None:
    numbers = [stage.issue(title=f"Fix widget {i}") for i in range(5)]
    # Redis refuses every write (as a primary does that lost its replicas, or one being replaced);
    # refused at once, unlike a pause, after which a write that timed out may still land.
    rdb.config_set("min-replicas-to-write", 1)
    try:
        sent = [stage.admin.label(world.REPO, n, ["agent:script"], sender="maria")["deliveries"][-1]
                for n in numbers]  # fmt: skip
    finally:
        rdb.config_set("min-replicas-to-write", 0)
    assert [d["status_code"] for d in sent] == [503] * 5, sent
    guids = [d["guid"] for d in sent]
    assert not any(rdb.exists(queues.DEDUPE_PREFIX + g) for g in guids)  # nothing stored: they are lost

    quick = {"BATON_REDELIVERY_INTERVAL": INTERVAL_S}
    workers.start("a", queues=queues.CONTROL.name, env=quick)
    workers.start("b", queues=queues.CONTROL.name, env=quick)  # two workers run the loop; one pass at a time
    _wait(lambda: all(stage.baton_comments(n) for n in numbers), 60, "five status comments", workers)
    asked = _redelivery_requests(stage)
    assert len(asked) == 5, asked  # each failed delivery asked for once, by one of the two workers
    assert all(rdb.exists(queues.DEDUPE_PREFIX + g) for g in guids)
    for n in numbers:
        assert len(stage.baton_comments(n)) == 1

    time.sleep(3 * float(INTERVAL_S) + 1)  # later passes: nothing left to ask for
    assert len(_redelivery_requests(stage)) == 5
    _wait(lambda: _counter(rdb, "redelivery_recovered") == 5, 10, "five recoveries counted", workers)
    assert _counter(rdb, "redelivery_requested") == 5
    last = redeliver.last_pass(rdb)
    assert last is not None
    assert last["requested"] == []


def test_a_delivery_that_keeps_failing_is_given_up_after_three_attempts(
    stage: Stage, rdb: redis.Redis
) -> None:
    closed = free_port()  # nothing listens there: every attempt fails to connect
    number = stage.issue()  # delivered; only the label below fails
    stage.admin.update_app(stage.world.app_id, webhook_url=f"http://127.0.0.1:{closed}/api/github/webhooks")
    [delivery] = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"]
    assert not 200 <= (delivery["status_code"] or 0) < 300
    ctx = _ctx(stage)
    now = time.time()
    passes = []
    for i in range(4):
        passes.append(redeliver.run_pass(ctx, 1.0, now=now + i))
        _wait(lambda i=i: len(_attempts(stage, delivery["guid"])) >= min(i + 2, 3), 10, "the redelivery")
    assert [len(p.requested) for p in passes] == [1, 1, 0, 0]
    assert [p.given_up for p in passes] == [[], [], [delivery["guid"]], []]  # given up once
    assert len(_attempts(stage, delivery["guid"])) == 3
    assert _counter(rdb, "redelivery_given_up") == 1


def _attempts(stage: Stage, guid: str) -> list[dict[str, Any]]:
    """The attempts of ``guid`` that have been sent (a redelivery is recorded before it goes out,
    and GitHub lists an attempt only once it has an outcome)."""
    return [d for d in stage.admin.deliveries() if d["guid"] == guid and (d["status_code"] or d["error"])]


def _ctx(stage: Stage, interval_s: float = 1.0) -> Context:
    return dataclasses.replace(stage.ctx, redelivery_interval_s=interval_s)


def test_two_processes_due_at_once_make_one_pass(stage: Stage, rdb: redis.Redis) -> None:
    ctx = _ctx(stage, interval_s=300.0)  # long enough that no busy machine makes it due again
    results: list[Any] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.append(redeliver.maybe_run(ctx))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sum(r is not None for r in results) == 1
    assert redeliver.maybe_run(ctx) is None  # not due again before the interval


def test_a_pass_longer_than_its_lock_keeps_it_and_a_dead_passs_lock_lapses(
    stage: Stage, rdb: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies mid-pass (or loses Redis) must not silence redelivery for long: the lock's
    lease is short and renewed while the pass runs. Found by the Redis-restart drill, where a worker
    killed mid-pass held the lock for 10 minutes and a delivery sent during the outage waited."""
    monkeypatch.setattr(redeliver, "LOCK_MS", 300)
    monkeypatch.setattr(redeliver, "RENEW_S", 0.05)
    held: list[bool] = []

    def slow_pass(ctx: Context, interval_s: float, *, include_4xx: bool = False, now: float) -> Any:
        for _ in range(10):  # 1 s, three lock leases
            time.sleep(0.1)
            held.append(rdb.exists(redeliver.LOCK_KEY) == 1)
        return "passed"

    monkeypatch.setattr(redeliver, "run_pass", slow_pass)
    assert redeliver.maybe_run(_ctx(stage)) == "passed"
    assert held == [True] * 10
    assert rdb.exists(redeliver.LOCK_KEY) == 0  # released at the end

    rdb.set(redeliver.LOCK_KEY, "a-dead-worker", px=redeliver.LOCK_MS)  # what a killed pass leaves
    rdb.hdel(redeliver.STATE_KEY, "next_at")
    assert redeliver.maybe_run(_ctx(stage)) is None
    _wait(lambda: rdb.exists(redeliver.LOCK_KEY) == 0, 5, "the dead pass's lock to lapse")
    assert redeliver.maybe_run(_ctx(stage)) == "passed"
