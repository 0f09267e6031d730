"""A task's record in Redis: its shape and lifetime, the names both sides use, and reading it back.

The web side writes a task's first state (``queued``) in the same script that
stores its job, so the record is true from the moment GitHub gets its 2xx; the
worker (``worker.lifecycle``) owns every move after that. Both use these names,
and only these; the key strings themselves are in ``baton.keys`` with every other.
"""

from __future__ import annotations

from baton import keys

# The names both sides use (what each key holds, and its TTL, are said in baton/keys.py).
TASK_PREFIX = keys.TASK_PREFIX
REGISTRY_PREFIX = keys.REGISTRY_PREFIX
COUNTERS_KEY = keys.COUNTERS_KEY
GITHUB_REQUESTS_KEY = keys.GITHUB_REQUESTS_KEY
BOX_PROBES_KEY = keys.BOX_PROBES_KEY
OUTBOX_KEY = keys.OUTBOX_KEY
RUN_LOCK_PREFIX = keys.RUN_LOCK_PREFIX
#: Appended to a record's key: its list of moves, newest last, at most HISTORY_LIMIT long.
HISTORY_SUFFIX = ":history"
HISTORY_LIMIT = 100
RECORD_TTL_S = 30 * 24 * 3600
#: The first state of every task, written by the enqueue script.
QUEUED = "queued"
#: The record's field saying when (by the Redis primary's clock) the task last became queued: the
#: enqueue script and every move back to queued write it. A task queued on a primary after that
#: primary took over can have run nowhere else, so it is never held back after a failover.
QUEUED_AT = "queued_at"


def text(raw: object) -> str:
    """A value read from Redis as text ("" for none): redis-py answers bytes unless asked not to,
    and a script's reply may be a number. The one place Baton decodes a Redis reply."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
