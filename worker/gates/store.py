"""The merge gate's Redis: one evaluation per key at a time, the verified results, approvals.

A key is (repository, head SHA, policy digest): a result is a claim about one commit under one
policy, so a second trigger for the same key reuses it instead of running the gates again.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis

from baton import keys, records
from worker import lifecycle, locks
from worker.gates.verdicts import Evaluation

# What each key holds, and for how long: baton/keys.py.
RESULT_PREFIX = keys.GATE_RESULT_PREFIX
LOCK_PREFIX = keys.GATE_LOCK_PREFIX
APPROVAL_PREFIX = keys.GATE_APPROVAL_PREFIX
RESULT_TTL_S = 30 * 24 * 3600
LOCK_MS = 2 * 3600 * 1000


def key(repo_id: int, head: str, digest: str) -> str:
    return f"{repo_id}:{head}:{digest}"


def lock(client: redis.Redis, key: str, task_id: str) -> str | None:
    """None if the key is now ours; else the task that holds it. A holder that has ended (its
    worker died mid-evaluation, and its check run was completed as failed) is taken over."""
    for _ in range(3):
        if locks.take(client, LOCK_PREFIX + key, task_id, LOCK_MS):
            return None
        holder = locks.holder(client, LOCK_PREFIX + key)
        if holder is None:
            continue
        if holder == task_id:
            return None
        if lifecycle.current(client, holder) not in (lifecycle.State.QUEUED, lifecycle.State.RUNNING):
            if locks.take_over(client, LOCK_PREFIX + key, holder, task_id, LOCK_MS):
                return None
            continue
        return holder
    return "?"


def unlock(client: redis.Redis, key: str, task_id: str) -> None:
    locks.release(client, LOCK_PREFIX + key, task_id)


def save(client: redis.Redis, key: str, result: Evaluation) -> dict[str, Any] | None:
    """Store the result; what Redis then holds, read back (``verdicts.agree`` compares the two)."""
    client.set(
        RESULT_PREFIX + key, orjson.dumps(result.to_data(), option=orjson.OPT_SORT_KEYS), ex=RESULT_TTL_S
    )
    return _raw(client, key)


def load(client: redis.Redis, key: str) -> Evaluation | None:
    """The result stored for the key, if one was."""
    raw = _raw(client, key)
    return None if raw is None else Evaluation.from_data(raw)


def _raw(client: redis.Redis, key: str) -> dict[str, Any] | None:
    raw = client.get(RESULT_PREFIX + key)
    return orjson.loads(raw) if raw else None


def approval(client: redis.Redis, repo_id: int, number: int, head: str) -> str | None:
    """Who approved running the command gates on this commit, if anyone did."""
    approved = client.get(f"{APPROVAL_PREFIX}{repo_id}:{number}:{head}")
    return None if approved is None else records.text(approved)


def approve(client: redis.Redis, repo_id: int, number: int, head: str, login: str) -> None:
    """A maintainer's click: the command gates may run on this one commit."""
    client.set(f"{APPROVAL_PREFIX}{repo_id}:{number}:{head}", login, ex=RESULT_TTL_S)
