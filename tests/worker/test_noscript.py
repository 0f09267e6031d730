"""Every Lua script a worker runs survives a Redis that lost its script cache.

A new primary after a failover has an empty script cache, and so has a restarted server. Baton's
scripts are run three ways, and each must load its script again on ``NOSCRIPT``:

1. on their own (``client.register_script(...)(keys, args)``: redis-py sends ``EVALSHA``, and on
   ``NOSCRIPT`` loads the script and sends it again): every worker module's scripts, each below;
2. inside a transaction's watch phase (``lifecycle.move`` reads the record, Redis's time and the
   primary's identity with a script after its ``WATCH``, on another connection of the pool, so the
   transaction's own connection never has a script to load at ``EXEC``): the first case below;
3. the web side's pipelined ``EVALSHA`` of the enqueue script (``bot.enqueue`` loads it again and
   resends what ``NOSCRIPT`` refused): ``tests/bot/test_webhook_endpoint.py``.

No worker script runs inside a buffered MULTI pipeline (where a flush between redis-py's
``SCRIPT EXISTS`` and the ``EXEC`` would fail only that command): none is written that way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from baton import queues, records
from worker import clock, lifecycle, locks, outbox, requeue, rqworker
from worker.lifecycle import State
from worker.runs import budget, cancel

SCOPE = budget.Scope("repo:1", "acme/widgets", None, None, 2)


def _move(rdb: redis.Redis) -> None:
    lifecycle.move(rdb, "t1", State.QUEUED)
    rdb.script_flush()
    lifecycle.move(rdb, "t1", State.RUNNING)
    assert lifecycle.current(rdb, "t1") is State.RUNNING


def _leases(rdb: redis.Redis) -> None:
    lifecycle.move(rdb, "t1", State.QUEUED)
    lifecycle.move(rdb, "t1", State.RUNNING, holder="w/t1")
    rdb.script_flush()
    assert lifecycle.renew_lease(rdb, "t1", "w/t1") is lifecycle.Lease.HELD
    rdb.script_flush()
    later = (rdb.zscore(lifecycle.LEASES, "t1") or 0) + 1
    assert lifecycle.expired_leases(rdb, now=later) == ["t1"]
    rdb.script_flush()
    assert lifecycle.claim_expired(rdb, "t1", now=later)
    rdb.script_flush()
    assert lifecycle.annotate(rdb, "t1", published="nothing to publish")


def _outbox(rdb: redis.Redis) -> None:
    rdb.zadd(records.OUTBOX_KEY, {"t1": 1.0})
    rdb.script_flush()
    assert outbox.claim(rdb, "t1") is not None


def _requeue(rdb: redis.Redis) -> None:
    queue = Queue(queues.CONTROL.name, connection=rdb, serializer=JSONSerializer)
    rdb.script_flush()
    assert requeue.silent_jobs(rdb, queue.name) == []
    rdb.script_flush()
    requeue.clean_registries(queue, [], clock.now(rdb))
    lifecycle.move(rdb, "t1", State.QUEUED)
    rdb.script_flush()
    assert (
        requeue.lost_jobs(rdb, now=clock.now(rdb) + lifecycle.LEASE_S + 1) == []
    )  # no job: nothing to put back


def _budget(rdb: redis.Redis) -> None:
    now = datetime.now(UTC)
    assert budget.reserve(rdb, [SCOPE], task_id="t1", now=now, lease_s=60.0).allowed
    rdb.script_flush()
    assert budget.renew(rdb, [SCOPE], task_id="t1", lease_s=60.0)
    rdb.script_flush()
    budget.release(rdb, [SCOPE], task_id="t1", day=budget.day(now), agent_seconds=1.0)
    assert rdb.zscore(budget.active_key(SCOPE), "t1") is None


def _locks(rdb: redis.Redis) -> None:
    assert locks.take(rdb, "lock", "a", 10_000)
    rdb.script_flush()
    assert locks.renew(rdb, "lock", "a", 10_000)
    rdb.script_flush()
    assert locks.take_over(rdb, "lock", "a", "b", 10_000)
    rdb.script_flush()
    assert locks.release(rdb, "lock", "b")


def _duties(rdb: redis.Redis) -> None:
    rdb.script_flush()
    assert rqworker.claim(rdb, rqworker.DUTIES, by="host-a:1").won == frozenset(rqworker.DUTIES)


def _cancel(rdb: redis.Redis) -> None:
    rdb.script_flush()
    cancel.request(rdb, 1, 7, cancel.Cancel("2026-12-01T10:00:00Z", "t1", "maria", "unlabeled"))
    assert cancel.applies(rdb, 1, 7, "2026-12-01T09:00:00Z") is not None


@pytest.mark.parametrize("case", [_move, _leases, _outbox, _requeue, _budget, _locks, _duties, _cancel])
def test_a_script_runs_on_a_redis_that_lost_its_script_cache(
    rdb: redis.Redis, case: Callable[[redis.Redis], None]
) -> None:
    case(rdb)
