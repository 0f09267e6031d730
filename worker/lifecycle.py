"""A task's life: its states, the moves allowed between them, and where it is recorded.

One table says which moves are legal; ``move`` applies one in a single Redis
transaction (the task's record, its history, the per-state registries, its
lease, its outbox entry), so a worker that dies between two moves leaves the
task in a state that is true. Side effects (comments, check runs) happen after
a move commits, never before: a terminal move stores what is to be published
and queues it in the outbox in the same transaction, and ``worker.outbox``
puts it on GitHub afterwards, retrying until it is there.

The web side writes the first state (``queued``) in its enqueue script
(``baton.records`` names the keys both sides use); every later write to a task's
record goes through this module.

Every move is also captured for the installation's audit chain, in the same
transaction (``worker.audit``): a state change and its audit event exist together
or not at all (the web side captures the acceptance in its enqueue script).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import orjson
import redis
from redis.client import Pipeline

from baton import keys, records
from baton.errors import BatonError
from baton.logs import timestamp
from baton.tasks import Outcome
from worker import audit


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
    # FAILED / TIMED_OUT: the job died before it could mark the task running.
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.FAILED, State.TIMED_OUT}),
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


def field(client: redis.Redis, task_id: str, name: str) -> str | None:
    raw = client.hget(PREFIX + task_id, name)
    return None if raw is None else records.text(raw)


def move(
    client: redis.Redis,
    task_id: str,
    after: State,
    detail: str = "",
    *,
    publication: bytes | None = None,
    also: Callable[[Pipeline], object] | None = None,
    **fields: str,
) -> Moved:
    """Apply one move atomically; concurrent movers retry on the fresh state.

    Moving to ``running`` takes out the task's lease; any other move drops it. A terminal
    move with ``publication`` stores it and queues it in the outbox. ``also`` adds commands
    to the same transaction (a hand-off enqueues the task's next job there, so the move and
    the job exist together or not at all).
    """
    key = PREFIX + task_id
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                raw_state, known = pipe.hmget(key, ["state", audit.INSTALLATION])
                before = _state(raw_state)
                check(before, after)
                now = time.time()
                event = orjson.dumps({"at": timestamp(now), "from": before, "to": after, "detail": detail})
                pipe.multi()
                audit.moved(pipe, task_id, known=known, before=before, after=after, detail=detail,
                            fields=fields, at=timestamp(now))  # fmt: skip
                record: dict[str | bytes, str | bytes] = {"state": after.value, "detail": detail}
                record["updated_at"] = timestamp(now)
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
                if also is not None:
                    also(pipe)
                pipe.execute()
                return Moved(task_id, before, after, detail)
            except redis.WatchError:
                continue


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


def renew_lease(client: redis.Redis, task_id: str) -> bool:
    """Push a running task's lease out again; False if it has none (it ended, or was reaped)."""
    return bool(client.zadd(LEASES, {task_id: time.time() + LEASE_S}, xx=True, ch=True))


def expired_leases(client: redis.Redis, now: float | None = None, limit: int = 100) -> list[str]:
    found = client.zrangebyscore(LEASES, "-inf", now if now is not None else time.time(), start=0, num=limit)
    return [records.text(t) for t in found]


_CLAIM_EXPIRED = """
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""


def claim_expired(client: redis.Redis, task_id: str, now: float | None = None) -> bool:
    """Take an expired lease away (atomically), so exactly one sweeper ends that task."""
    script = client.register_script(_CLAIM_EXPIRED)
    return bool(script(keys=[LEASES], args=[task_id, time.time() if now is None else now]))


def history(client: redis.Redis, task_id: str) -> list[dict[str, str]]:
    return [orjson.loads(e) for e in client.lrange(PREFIX + task_id + records.HISTORY_SUFFIX, 0, -1)]
