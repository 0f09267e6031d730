"""A task's life: its states, the moves allowed between them, and where it is recorded.

One table says which moves are legal; ``move`` applies one in a single Redis
transaction (the task's record, its history, the per-state registries), so a
worker that dies between two moves leaves the task in a state that is true.
Side effects (comments, check runs) happen after a move commits, never before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

import orjson
import redis

from bot.errors import BatonError
from bot.logs import timestamp


class State(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    REFUSED = "refused"  # the sender may not trigger Baton here
    DENIED = "denied"  # the trifecta gate said no; nothing was spawned
    ACCEPTED = "accepted"  # allowed; waiting for an agent runner
    PR_OPENED = "pr_opened"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({State.REFUSED, State.DENIED, State.ACCEPTED, State.PR_OPENED, State.DONE, State.FAILED,
                      State.CANCELLED})  # fmt: skip

MOVES: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.FAILED}),
    # A job that RQ retries after its worker died starts again from running.
    State.RUNNING: frozenset(TERMINAL | {State.RUNNING}),
    **{state: frozenset() for state in TERMINAL},
}

PREFIX = "baton:task:"
REGISTRY = "baton:tasks:"  # + state: a sorted set of task ids by time of arrival there
HISTORY_LIMIT = 100
RECORD_TTL_S = 30 * 24 * 3600


class IllegalMove(BatonError):
    """A move the table does not allow: a bug or a duplicate job, never applied."""


@dataclass(frozen=True, slots=True)
class Moved:
    task_id: str
    before: State | None
    after: State
    detail: str


def check(before: State | None, after: State) -> None:
    """Raise IllegalMove unless ``before -> after`` is in the table (None: a new task)."""
    if before is None:
        # FAILED: the worker died while picking the task up, before it could mark it running.
        if after not in (State.QUEUED, State.RUNNING, State.FAILED):
            raise IllegalMove("illegal-move", f"a new task starts queued or running (or failed), not {after}")
        return
    if after not in MOVES[before]:
        raise IllegalMove("illegal-move", f"a task cannot go from {before} to {after}")


def _state(raw: bytes | str | None) -> State | None:
    if not raw:
        return None
    return State(raw.decode() if isinstance(raw, bytes) else raw)


def current(client: redis.Redis, task_id: str) -> State | None:
    return _state(client.hget(PREFIX + task_id, "state"))


def move(client: redis.Redis, task_id: str, after: State, detail: str = "", **fields: str) -> Moved:
    """Apply one move atomically; concurrent movers retry on the fresh state."""
    key = PREFIX + task_id
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                before = _state(pipe.hget(key, "state"))
                check(before, after)
                now = time.time()
                event = orjson.dumps({"at": timestamp(now), "from": before, "to": after, "detail": detail})
                pipe.multi()
                record: dict[str | bytes, str | bytes] = {"state": after.value, "detail": detail}
                record["updated_at"] = timestamp(now)
                record.update(fields)
                pipe.hset(key, mapping=record)  # type: ignore[arg-type]
                pipe.expire(key, RECORD_TTL_S)
                pipe.rpush(key + ":history", event)
                pipe.ltrim(key + ":history", -HISTORY_LIMIT, -1)
                pipe.expire(key + ":history", RECORD_TTL_S)
                if before is not None:
                    pipe.zrem(REGISTRY + before.value, task_id)
                pipe.zadd(REGISTRY + after.value, {task_id: now})
                pipe.execute()
                return Moved(task_id, before, after, detail)
            except redis.WatchError:
                continue


def history(client: redis.Redis, task_id: str) -> list[dict[str, str]]:
    return [orjson.loads(e) for e in client.lrange(PREFIX + task_id + ":history", 0, -1)]
