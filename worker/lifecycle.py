"""A task's life: its states, the moves allowed between them, and where it is recorded.

One table says which moves are legal; ``move`` applies one in a single Redis
transaction (the task's record, its history, the per-state registries, its
lease, its outbox entry), so a worker that dies between two moves leaves the
task in a state that is true. Side effects (comments, check runs) happen after
a move commits, never before: a terminal move stores what is to be published
and queues it in the outbox in the same transaction, and ``worker.outbox``
puts it on GitHub afterwards, retrying until it is there. A transaction that moves more than one
task, or a task and the budgets it frees (``worker.runs.line``), reads each record with ``watch``
and queues each move with ``write``: the same checks against the same table, the same writes.

The web side writes the first state (``queued``) in its enqueue script
(``baton.records`` names the keys both sides use); every later write to a task's
record goes through this module.

Every move is also captured for the installation's audit chain, in the same
transaction (``worker.audit``): a state change and its audit event exist together
or not at all (the web side captures the acceptance in its enqueue script).

Times are Redis's (``worker.clock``): a lease written by one worker is read by every other, whose
clocks differ. A job's moves name the job (``holder``): a job may end or hand off only a task that
is still its own, so a job whose task was swept, or whose lease lived on a Redis primary that died
before replicating it (and whose task another worker now runs), publishes nothing over the task's
real outcome; its lease renewal tells it to stop (``renew_lease``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import orjson
import redis
from redis.client import Pipeline
from rq import get_current_job

from baton import keys, records
from baton.errors import BatonError
from baton.logs import timestamp
from baton.tasks import Outcome
from worker import audit, clock

log = logging.getLogger("baton.lifecycle")


class State(StrEnum):
    QUEUED = records.QUEUED  # the first state, which the web process writes in its enqueue script
    RUNNING = "running"
    REFUSED = "refused"  # the sender may not trigger Baton here
    DENIED = "denied"  # the trifecta gate said no; nothing was spawned
    PR_OPENED = "pr_opened"
    DONE = "done"
    FAILED = "failed"
    TIMED_OUT = "timed-out"  # its job ran past the queue's timeout and was stopped
    CANCELLED = "cancelled"


TERMINAL = frozenset({State.REFUSED, State.DENIED, State.PR_OPENED, State.DONE, State.FAILED,
                      State.TIMED_OUT, State.CANCELLED})  # fmt: skip

MOVES: dict[State, frozenset[State]] = {
    # FAILED / TIMED_OUT: the job died before it could mark the task running. QUEUED again, REFUSED:
    # an agent run waiting in its repository's line (``worker.runs.line``) whose turn came, and
    # whose run job goes on the agents queue then, or which a daily budget refuses then.
    State.QUEUED: frozenset(
        {State.RUNNING, State.QUEUED, State.REFUSED, State.CANCELLED, State.FAILED, State.TIMED_OUT}
    ),
    # QUEUED again: an admitted agent run handed to the agents queue, or a lost run retried once.
    State.RUNNING: TERMINAL | {State.QUEUED},
    **{state: frozenset() for state in TERMINAL},
}

#: The state an agent run's task ends in, per outcome of the run (``baton.tasks.Outcome``).
OUTCOME_STATE: dict[Outcome, State] = {
    Outcome.DONE: State.PR_OPENED,
    Outcome.NO_CHANGES: State.DONE,
    Outcome.DENIED: State.DENIED,
    Outcome.VIOLATIONS: State.FAILED,
    Outcome.FAILED: State.FAILED,
    Outcome.TIMED_OUT: State.TIMED_OUT,
    Outcome.AGENT_MISSING: State.FAILED,
    Outcome.OVER_BUDGET: State.FAILED,
    Outcome.CANCELLED: State.CANCELLED,
    Outcome.CONFLICT: State.FAILED,
    Outcome.OVER_LIMIT: State.FAILED,
    Outcome.REVIEW_BLOCKED: State.FAILED,
}

#: States no longer written, read as the state they meant. "accepted" (allowed, no run started:
#: Baton before agent runs) ended a task like "done". Records expire RECORD_TTL_S (30 days) after
#: their last write, so this can go once every worker has run without writing it for 30 days:
#: after 2027-01-01.
_RETIRED = {"accepted": State.DONE}


def state_of(outcome: Outcome) -> State:
    return OUTCOME_STATE[outcome]


PREFIX = records.TASK_PREFIX
REGISTRY = records.REGISTRY_PREFIX  # + state: a sorted set of task ids by time of arrival there
HISTORY_LIMIT = records.HISTORY_LIMIT
RECORD_TTL_S = records.RECORD_TTL_S
#: Running tasks by the time their lease runs out (a sorted set). The worker that runs a task
#: renews its lease; a task whose lease ran out lost its worker, and any worker ends it.
LEASES = keys.LEASES_KEY
LEASE_S = 30.0
#: How often a lease's holder renews it: six chances per lease.
RENEW_S = 5.0
#: The record's field naming the job that made the last move (``holder``; "" for none: a sweeper,
#: a cancel, a failure path). While the task is ``running`` it is the job that holds its lease.
HOLDER = "lease_holder"


class Lease(StrEnum):
    """What a lease renewal found."""

    HELD = "held"  # renewed: the task is running under this job
    RELEASED = "released"  # this job moved the task on itself (it ended, or was handed off)
    LOST = "lost"  # the task is not this job's any more: swept, or its lease lived on a lost primary


def holder_name(worker_name: str, job_id: str) -> str:
    """The name a job takes its task's lease under: its worker's (unique per process) and the job's."""
    return f"{worker_name}/{job_id}"


def holder() -> str | None:
    """The running RQ job's ``holder_name``; None outside a job (a test, ``baton run``). Only in the
    job's main thread: RQ keeps the current job per thread."""
    job = get_current_job()
    if job is None or not job.worker_name:
        return None
    return holder_name(job.worker_name, job.id)


class IllegalMove(BatonError):
    """A move the table does not allow: a bug or a duplicate job, never applied."""


@dataclass(frozen=True, slots=True)
class Moved:
    task_id: str
    before: State | None
    after: State
    detail: str


def check(before: State | None, after: State) -> None:
    """Raise IllegalMove unless ``before -> after`` is in the table (None: no record)."""
    if before is None:
        # A record can only be missing if Redis lost it; the failure paths still end the task.
        if after not in (State.QUEUED, State.FAILED, State.TIMED_OUT):
            raise IllegalMove("illegal-move", f"a task with no record cannot become {after}")
        return
    if after not in MOVES[before]:
        raise IllegalMove("illegal-move", f"a task cannot go from {before} to {after}")


def _state(raw: bytes | str | None) -> State | None:
    if not raw:
        return None
    text = records.text(raw)
    return _RETIRED.get(text) or State(text)


def current(client: redis.Redis, task_id: str) -> State | None:
    return _state(client.hget(PREFIX + task_id, "state"))


def state_named(raw: bytes | str | None) -> State | None:
    """The state a record's ``state`` field names, as read in a pipeline (None: no record)."""
    return _state(raw)


def field(client: redis.Redis, task_id: str, name: str) -> str | None:
    raw = client.hget(PREFIX + task_id, name)
    return None if raw is None else records.text(raw)


@dataclass(frozen=True, slots=True)
class Seen:
    """A task's record as a transaction's watch phase read it (``watch``): what a move from it needs."""

    task_id: str
    state: State | None
    installation: bytes | str | None
    holder: str
    now: float  # Redis's: every stamp of the move
    hold: float = 0.0  # taking a lease: until when a new primary holds it back


def watch(pipe: Pipeline, task_id: str, *, taking: bool = False) -> Seen:
    """WATCH a task's record and read it, with Redis's time, in a transaction's watch phase
    (``taking``: the move takes a lease, so also until when a new primary holds leases back)."""
    key = PREFIX + task_id
    pipe.watch(key)  # type: ignore[no-untyped-call]
    raw_state, known, held_by, raw_now, raw_hold = clock.evalsha(
        pipe,
        pipe.register_script(_READ),
        [key, clock.PRIMARY_KEY],
        [audit.INSTALLATION, "1" if taking else "", LEASE_S, records.QUEUED_AT],
    )
    return Seen(task_id, _state(raw_state), known, records.text(held_by) if held_by else "",
                float(raw_now), float(raw_hold))  # fmt: skip


def allowed(seen: Seen, after: State, *, holder: str | None = None, expect: State | None = None) -> None:
    """Raise IllegalMove unless the table allows ``seen``'s state -> ``after``, from ``expect`` if
    given, and (``holder``) the task is still that job's."""
    check(seen.state, after)
    if expect is not None and seen.state is not expect:
        raise IllegalMove("illegal-move", f"task {seen.task_id} is {seen.state}, not {expect}")
    if holder is not None and after is not State.RUNNING and (seen.state is not State.RUNNING
                                                             or seen.holder != holder):  # fmt: skip
        raise IllegalMove("illegal-move", f"task {seen.task_id} is no longer this job's (it holds no lease)")


def write(
    pipe: Pipeline,
    seen: Seen,
    after: State,
    detail: str = "",
    *,
    publication: bytes | None = None,
    holder: str | None = None,
    **fields: str,
) -> Moved:
    """Queue one move from ``seen`` in a transaction's MULTI (``allowed`` first: it raises before
    anything is queued). ``move`` is one such transaction; a caller that moves several tasks at once,
    or a task and what goes with it, makes its own (``worker.runs.line``)."""
    allowed(seen, after, holder=holder)
    task_id, before, now = seen.task_id, seen.state, seen.now
    key = PREFIX + task_id
    # Redis's time for every stamp of the move: the registries' scores and the lease are
    # compared across workers; the shown ones (history, updated_at, audit) just agree with them.
    event = orjson.dumps({"at": timestamp(now), "from": before, "to": after, "detail": detail})
    audit.moved(pipe, task_id, known=seen.installation, before=before, after=after, detail=detail,
                fields=fields, at=timestamp(now))  # fmt: skip
    record: dict[str | bytes, str | bytes] = {"state": after.value, "detail": detail}
    record["updated_at"] = timestamp(now)
    record[HOLDER] = holder or ""
    if after is State.QUEUED:
        record[records.QUEUED_AT] = f"{now:.6f}"
    record.update(fields)
    if publication is not None:
        record["publication"] = publication
    pipe.hset(key, mapping=record)  # type: ignore[arg-type]
    pipe.expire(key, RECORD_TTL_S)
    pipe.rpush(key + records.HISTORY_SUFFIX, event)
    pipe.ltrim(key + records.HISTORY_SUFFIX, -HISTORY_LIMIT, -1)
    pipe.expire(key + records.HISTORY_SUFFIX, RECORD_TTL_S)
    if before is not None:
        pipe.zrem(REGISTRY + before.value, task_id)
    pipe.zadd(REGISTRY + after.value, {task_id: now})
    if after is State.RUNNING:
        pipe.zadd(LEASES, {task_id: now + LEASE_S})
    else:
        pipe.zrem(LEASES, task_id)
        if publication is not None and after in TERMINAL:
            pipe.zadd(records.OUTBOX_KEY, {task_id: now})
    return Moved(task_id, before, after, detail)


def move(
    client: redis.Redis,
    task_id: str,
    after: State,
    detail: str = "",
    *,
    publication: bytes | None = None,
    also: Callable[[Pipeline], object] | None = None,
    holder: str | None = None,
    **fields: str,
) -> Moved:
    """Apply one move atomically; concurrent movers retry on the fresh state.

    Moving to ``running`` takes out the task's lease; any other move drops it. A terminal
    move with ``publication`` stores it and queues it in the outbox. ``also`` adds commands
    to the same transaction (a hand-off enqueues the task's next job there, so the move and
    the job exist together or not at all). ``holder`` names the job moving its own task
    (``holder()``): its move from ``running`` applies only while the task is still that job's
    (else IllegalMove); None moves any task (sweepers, cancels, failure paths). Moving to
    ``running`` on a primary new within ``LEASE_S`` first waits until it is not (``worker.clock``),
    so a job still running this task on a lease the old primary held has the time to stop.
    """
    taking = after is State.RUNNING
    with client.pipeline() as pipe:
        while True:
            try:
                seen = watch(pipe, task_id, taking=taking)
                allowed(seen, after, holder=holder)
                if taking and seen.hold > seen.now:
                    pipe.unwatch()
                    _wait_for_new_primary(task_id, seen.hold - seen.now)
                    continue
                pipe.multi()
                moved = write(pipe, seen, after, detail, publication=publication, holder=holder, **fields)
                if also is not None:
                    also(pipe)
                pipe.execute()
                return moved
            except redis.WatchError:
                continue


#: KEYS: the record, ``clock.PRIMARY_KEY``. ARGV: the installation field; "1" when taking a lease;
#: LEASE_S; the queued-at field. Returns the record's state, installation and holder, Redis's now,
#: and (taking a lease) until when a new primary holds leases back: only for a task queued before
#: the primary took over (one queued since can have run on no other primary).
_READ = (
    clock.LUA_NOW
    + clock.LUA_PRIMARY
    + """
local found = redis.call('HMGET', KEYS[1], 'state', ARGV[1], 'lease_holder', ARGV[4])
local now = redis_now()
local hold = 0
if ARGV[2] == '1' then
  local since = primary_since(KEYS[2], now)
  local queued = tonumber(found[4] or '') or 0
  if since > 0 and queued <= since then hold = since + tonumber(ARGV[3]) end
end
return {found[1], found[2], found[3], string.format('%.6f', now), string.format('%.6f', hold)}
"""
)


def _wait_for_new_primary(task_id: str, seconds: float) -> None:
    log.warning(
        "Redis's primary changed less than a lease ago: the task starts once a job that may still run "
        "it on the old primary's lease has had the time to stop",
        extra={"task": task_id, "wait_s": round(seconds, 1)},
    )
    time.sleep(min(seconds, LEASE_S))


def annotate(client: redis.Redis, task_id: str, **fields: str) -> bool:
    """Add facts to an existing record (a comment id, a check run id, how publishing went).

    Never creates a record: a fact about a task Redis has forgotten is dropped (False).
    """
    script = client.register_script(_ANNOTATE)
    args: list[str] = []
    for name, value in fields.items():
        args += [name, value]
    return bool(script(keys=[PREFIX + task_id], args=args))


_ANNOTATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""


def renew_lease(
    client: redis.Redis, task_id: str, holder: str | None = None, *, now: float | None = None
) -> Lease:
    """Push a running task's lease out again, if the task is still ``holder``'s (None: a job with
    no name, as a test runs it). ``Lease.LOST`` means the job must stop and publish nothing: the task
    was swept, or another job took it (its lease lived on a primary that died unreplicated)."""
    found = client.register_script(_RENEW)(
        keys=[PREFIX + task_id, LEASES], args=[task_id, holder or "", LEASE_S, clock.arg(now)]
    )
    return {1: Lease.HELD, 2: Lease.RELEASED}.get(int(found), Lease.LOST)


#: KEYS: the record, LEASES. ARGV: task id, holder, LEASE_S, now (empty: Redis's).
#: Returns 1 (renewed), 2 (the holder moved it on itself), 0 (lost).
_RENEW = (
    clock.LUA_NOW
    + """
local found = redis.call('HMGET', KEYS[1], 'state', 'lease_holder')
if (found[2] or '') ~= ARGV[2] then return 0 end
if found[1] ~= 'running' then return 2 end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], 'XX', now_or(ARGV[4]) + tonumber(ARGV[3]), ARGV[1])
return 1
"""
)


def expired_leases(client: redis.Redis, now: float | None = None, limit: int = 100) -> list[str]:
    """Tasks whose lease ran out by Redis's clock; none while the primary is new (a lease the
    old primary renewed last gets one whole ``LEASE_S`` to be renewed on this one)."""
    found = client.register_script(_EXPIRED)(
        keys=[LEASES, clock.PRIMARY_KEY], args=[clock.arg(now), LEASE_S, limit]
    )
    return [records.text(t) for t in found]


_EXPIRED = (
    clock.LUA_NOW
    + clock.LUA_PRIMARY
    + """
local now = now_or(ARGV[1])
if primary_since(KEYS[2], redis_now()) + tonumber(ARGV[2]) > now then return {} end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.6f', now), 'LIMIT', 0, tonumber(ARGV[3]))
"""
)

_CLAIM_EXPIRED = (
    clock.LUA_NOW
    + clock.LUA_PRIMARY
    + """
local now = now_or(ARGV[2])
if primary_since(KEYS[2], redis_now()) + tonumber(ARGV[3]) > now then return 0 end
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) > now then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""
)


def claim_expired(client: redis.Redis, task_id: str, now: float | None = None) -> bool:
    """Take an expired lease away (atomically), so exactly one sweeper ends that task."""
    script = client.register_script(_CLAIM_EXPIRED)
    return bool(script(keys=[LEASES, clock.PRIMARY_KEY], args=[task_id, clock.arg(now), LEASE_S]))


def history(client: redis.Redis, task_id: str) -> list[dict[str, str]]:
    return [orjson.loads(e) for e in client.lrange(PREFIX + task_id + records.HISTORY_SUFFIX, 0, -1)]
