"""The publishing outbox: what a finished task must say on GitHub, until GitHub has it.

A terminal move stores the task's ``Publication`` and queues its id here in the
same transaction (``worker.lifecycle.move``). The worker that finished the
task tries at once; if GitHub fails (5xx, rate limit, a frozen connection),
the entry waits with exponential back-off, or as long as GitHub's
``Retry-After`` asks, and any idle worker tries again (``drain``). After
``GIVE_UP_S`` it stops: the task's record says so, the log says so at error
level, and ``baton_worker_events_total{event="publish_gave_up"}`` counts it.

An attempt first claims its entry (moves its due time past the attempt's
longest duration), so two workers never publish the same task at once.

Due times are by Redis's clock (``worker.clock``): one worker writes them, any other reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from baton import records
from baton.errors import BatonError
from baton.logs import timestamp
from worker import clock, lifecycle
from worker.context import Context
from worker.github import deadline
from worker.publish import Busy, Publication, publisher

log = logging.getLogger("baton.outbox")

#: Give up after this long (GitHub incidents last hours, not days).
GIVE_UP_S = 6 * 3600.0
BASE_DELAY_S = 2.0
MAX_DELAY_S = 300.0
#: A claimed entry is due again after this, in case its claimer died mid-attempt. Two attempts
#: overlapping is harmless (completing a check run is idempotent; the comment has its lock).
CLAIM_S = 60.0
BUSY_DELAY_S = 1.0

#: KEYS: the outbox. ARGV: task id, now (empty: Redis's), CLAIM_S. Returns the time of the claim
#: (the attempt's "now", so it needs no reading of its own), or 0 if the entry is not due.
_CLAIM = (
    clock.LUA_NOW
    + """
local now = now_or(ARGV[2])
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return string.format('%.6f', now)
"""
)

Perform = Callable[[Publication], str]


def claim(client: redis.Redis, task_id: str, now: float | None = None) -> float | None:
    """Claim a due entry for one attempt; returns the time of the claim (Redis's unless ``now`` is
    given), or None if it is not due (or another worker holds it)."""
    script = client.register_script(_CLAIM)
    found = script(keys=[records.OUTBOX_KEY], args=[task_id, clock.arg(now), CLAIM_S])
    return float(found) if found else None


def attempt(client: redis.Redis, task_id: str, perform: Perform, *, now: float | None = None) -> str | None:
    """Try ``task_id``'s publication once, if it is due. Returns what was published, or None."""
    claimed = claim(client, task_id, now)
    if claimed is None:
        return None
    now = claimed
    raw = lifecycle.field(client, task_id, "publication")
    if raw is None:  # the record expired or was never written: nothing left to say
        client.zrem(records.OUTBOX_KEY, task_id)
        return None
    try:
        done = perform(Publication.from_json(raw))
    except Busy:
        client.zadd(records.OUTBOX_KEY, {task_id: now + BUSY_DELAY_S})
        return None
    except Exception as exc:
        _failed(client, task_id, exc, now)
        return None
    lifecycle.annotate(client, task_id, published=done, published_at=timestamp(now))
    client.zrem(records.OUTBOX_KEY, task_id)
    return done


def _failed(client: redis.Redis, task_id: str, exc: Exception, now: float) -> None:
    attempts = int(lifecycle.field(client, task_id, "publish_attempts") or 0) + 1
    first = float(lifecycle.field(client, task_id, "publish_first_failure") or now)
    code = exc.code if isinstance(exc, BatonError) else type(exc).__name__
    detail = exc.message if isinstance(exc, BatonError) else str(exc)
    fields = {"publish_attempts": str(attempts), "publish_first_failure": repr(first),
              "publish_error": f"{code}: {detail}"[:500]}  # fmt: skip
    if now - first >= GIVE_UP_S:
        lifecycle.annotate(client, task_id, **fields, published=f"gave up after {attempts} attempts: {code}")
        client.zrem(records.OUTBOX_KEY, task_id)
        client.hincrby(records.COUNTERS_KEY, "publish_gave_up", 1)
        log.error("publishing gave up", extra={"task": task_id, "attempts": attempts, "error": detail})
        return
    lifecycle.annotate(client, task_id, **fields)
    client.zadd(records.OUTBOX_KEY, {task_id: now + next_delay(attempts, exc)})
    client.hincrby(records.COUNTERS_KEY, "publish_retry", 1)
    log.warning(
        "publishing failed; will retry", extra={"task": task_id, "attempts": attempts, "error": detail}
    )


def next_delay(attempts: int, exc: Exception) -> float:
    """Exponential back-off, or GitHub's own ``Retry-After`` when it gave one (whichever is longer)."""
    backoff = min(MAX_DELAY_S, BASE_DELAY_S * 2.0 ** (attempts - 1))
    asked: object = getattr(exc, "retry_after", None)
    if isinstance(asked, int | float):
        return float(max(backoff, asked))
    return backoff


def due(client: redis.Redis, now: float | None = None, limit: int = 50) -> list[str]:
    """Entries due by ``now`` (Redis's unless given), the longest due first."""
    found = client.zrangebyscore(
        records.OUTBOX_KEY, "-inf", clock.now(client) if now is None else now, start=0, num=limit
    )
    return [records.text(t) for t in found]


def drain(
    client: redis.Redis, perform: Perform, *, limit: int = 50, stop: Callable[[], bool] = lambda: False
) -> int:
    """Attempt every due publication (at most ``limit``, until ``stop()``); returns how many got through."""
    published = 0
    for task_id in due(client, limit=limit):
        if stop():
            break
        published += attempt(client, task_id, perform) is not None
    return published


def publish_now(ctx: Context, task_id: str) -> str:
    """One attempt at once; if GitHub fails, the outbox keeps it and an idle worker retries."""
    if ctx.github is None:
        return "not published: the worker has no App credentials"
    if deadline.spent():  # the work's time for GitHub is gone: an idle worker tries, on its own time
        return "kept in the outbox for an idle worker: no time left for GitHub"
    done = attempt(ctx.redis, task_id, publisher(ctx.github, ctx.redis, ctx.app_id, ctx.replication))
    return done if done is not None else "not published yet: kept in the outbox for another attempt"
