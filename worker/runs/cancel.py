"""Stopping a run from anywhere: a per-issue key that the run's supervisor polls.

A cancel (`/baton cancel`, removing the agent label, closing the issue) may be handled
by one worker while the run is on another. The cancel writes the time GitHub sent it
(its task's ``received_at``); every run of that issue that was asked for *earlier*
stops, whether it is still queued or already running, and a later request is not
affected. The run's supervisor polls the key every second (``worker.runs.execute``).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import redis

from baton import keys
from worker.messages import inert

PREFIX = keys.CANCEL_PREFIX  # + repo id : issue number -> {"received_at", "task_id", "by", "how"}
TTL_S = 7 * 24 * 3600

_NEWER = """
local old = redis.call('GET', KEYS[1])
if old and cjson.decode(old)['received_at'] >= cjson.decode(ARGV[1])['received_at'] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Cancel:
    received_at: str
    task_id: str
    by: str
    how: str  # "command", "unlabeled", "closed"

    def reason(self) -> str:
        what = {
            "command": "`/baton cancel`",
            "unlabeled": "removing the agent label",
            "closed": "closing the issue",
        }.get(self.how, "a cancel")
        return f"{inert(self.by)} cancelled it ({what})"


def key(repo_id: int, number: int) -> str:
    return f"{PREFIX}{repo_id}:{number}"


def request(client: redis.Redis, repo_id: int, number: int, cancel: Cancel) -> None:
    """Record ``cancel`` unless a newer one is already recorded."""
    data = orjson.dumps(vars(cancel))
    client.register_script(_NEWER)(keys=[key(repo_id, number)], args=[data, TTL_S])


def applies_to(
    client: redis.Redis, repo_id: int, numbers: tuple[int | None, ...], received_at: str
) -> Cancel | None:
    """The first cancel that stops a run asked for at ``received_at`` under any of ``numbers`` (an
    iteration's: its issue, and the pull request it works on)."""
    for number in numbers:
        found = applies(client, repo_id, number, received_at) if number is not None else None
        if found is not None:
            return found
    return None


def applies(client: redis.Redis, repo_id: int, number: int, received_at: str) -> Cancel | None:
    """The cancel that stops a run asked for at ``received_at``, if there is one."""
    raw = client.get(key(repo_id, number))
    if raw is None:
        return None
    try:
        found = Cancel(**orjson.loads(raw))
    except (orjson.JSONDecodeError, TypeError):
        return None
    return found if found.received_at > received_at else None
