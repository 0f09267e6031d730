"""The workers' periodic duties run once per interval across the deployment, claimed in Redis.

Holders here are spelled out (``host-a:1``...), as workers on other hosts would claim; the real
processes on separate network namespaces are in ``tests/test_hosts.py``.
"""

from __future__ import annotations

import time

import redis

from baton import keys, records
from emulator import world
from tests.worker.conftest import Stage
from worker import lifecycle, rqworker
from worker.context import Context
from worker.rqworker import AUDIT, DUTIES, LINE, OUTBOX, REDELIVERY, SWEEP, Duty, claim, tick

#: A duty with a short interval, so a test can watch its claim lapse.
QUICK = Duty("test-quick", 0.3, idle_only=False)


def _count(rdb: redis.Redis, duty: Duty) -> int:
    return int(rdb.hget(records.COUNTERS_KEY, duty.counter) or 0)


def test_each_duty_goes_to_one_claimer_per_interval_and_is_counted_once(rdb: redis.Redis) -> None:
    first = claim(rdb, DUTIES, by="host-a:1")
    assert first.won == frozenset(DUTIES)
    for other in ("host-a:2", "host-b:1", "host-c:1"):  # the rest of the deployment, same interval
        assert claim(rdb, DUTIES, by=other).won == frozenset()
    assert {d.name: _count(rdb, d) for d in DUTIES} == dict.fromkeys((d.name for d in DUTIES), 1)
    assert rdb.get(keys.DUTY_PREFIX + "sweep") == b"host-a:1"  # who holds it, for an operator


def test_the_claim_lapses_by_redis_s_clock_and_the_next_asker_takes_it(rdb: redis.Redis) -> None:
    assert claim(rdb, [QUICK], by="host-a:1").won == {QUICK}
    ttl = rdb.pttl(QUICK.key)
    assert 0 < ttl <= 300  # Redis times the interval (PX), not the worker's clock
    assert claim(rdb, [QUICK], by="host-b:1").won == frozenset()
    deadline = time.monotonic() + 5
    while rdb.exists(QUICK.key) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert claim(rdb, [QUICK], by="host-b:1").won == {QUICK}
    assert _count(rdb, QUICK) == 2


def test_the_claim_also_says_whether_a_lease_ran_out(rdb: redis.Redis) -> None:
    claim(rdb, DUTIES, by="host-a:1")
    assert not claim(rdb, DUTIES, by="host-b:1").expired
    rdb.zadd(lifecycle.LEASES, {"running-task": time.time() + 30})
    assert not claim(rdb, DUTIES, by="host-b:1").expired
    rdb.zadd(lifecycle.LEASES, {"dead-workers-task": time.time() - 1})
    assert claim(rdb, DUTIES, by="host-b:1").expired


def test_a_busy_worker_is_offered_only_what_touches_redis_alone(rdb: redis.Redis) -> None:
    ticked = tick(Context(rdb, None, None), idle=False)
    assert ticked.won == {SWEEP, AUDIT, LINE}
    assert not rdb.exists(OUTBOX.key)
    assert not rdb.exists(REDELIVERY.key)
    assert tick(Context(rdb, None, None), idle=True).won == {OUTBOX, REDELIVERY}


def test_a_lease_that_ran_out_is_ended_by_a_worker_that_did_not_win_the_sweep(stage: Stage) -> None:
    """The sweep's holder may have looked just before the lease ran out: any worker's next tick ends
    it, so a dead worker's task is terminal within the lease plus one tick, whoever holds the sweep."""
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task = stage.task(delivery)
    lifecycle.move(stage.rdb, task.id, lifecycle.State.RUNNING, "admission started")
    claim(stage.rdb, DUTIES, by="another-host:1")  # the sweep is another worker's this interval
    stage.rdb.zadd(lifecycle.LEASES, {task.id: time.time() - 1})  # its worker stopped renewing it

    ticked = tick(stage.ctx, idle=True)
    assert ticked.won == frozenset()
    assert ticked.expired
    assert lifecycle.current(stage.rdb, task.id) is lifecycle.State.FAILED
    assert "lease ran out" in (lifecycle.field(stage.rdb, task.id, "detail") or "")
    assert _count(stage.rdb, SWEEP) == 1  # not a sweep: only the one claimed


def test_an_outbox_backlog_frees_the_claim_so_other_idle_workers_drain_alongside(stage: Stage) -> None:
    now = time.time()
    stage.rdb.zadd(records.OUTBOX_KEY, {f"gone-{i}": now - 1 for i in range(rqworker.OUTBOX_BATCH)})
    assert OUTBOX in tick(stage.ctx, idle=True).won
    assert stage.rdb.zcard(records.OUTBOX_KEY) == 0  # drained (records long gone: nothing to say)
    assert claim(stage.rdb, [OUTBOX], by="host-b:1").won == {OUTBOX}  # freed: a full batch was due

    stage.rdb.delete(OUTBOX.key)
    stage.rdb.zadd(records.OUTBOX_KEY, {f"gone-{i}": now - 1 for i in range(rqworker.OUTBOX_BATCH - 1)})
    assert OUTBOX in tick(stage.ctx, idle=True).won
    assert claim(stage.rdb, [OUTBOX], by="host-b:1").won == frozenset()  # no backlog: kept
