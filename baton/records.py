"""A task's record in Redis: its shape and lifetime, the names both sides use, and reading it back.

The web side writes a task's first state (``queued``) in the same script that
stores its job, so the record is true from the moment GitHub gets its 2xx; the
worker (``worker.lifecycle``) owns every move after that. Both use these names,
and only these; the key strings themselves are in ``baton.keys`` with every other.
"""

from __future__ import annotations

from baton import keys

#: The task's record: a hash with ``state``, ``detail``, ``updated_at`` and the fields moves add.
TASK_PREFIX = keys.TASK_PREFIX
#: + state name: a sorted set of task ids, scored by the time they reached that state.
REGISTRY_PREFIX = keys.REGISTRY_PREFIX
#: Appended to a record's key: its list of moves, newest last, at most HISTORY_LIMIT long.
HISTORY_SUFFIX = ":history"
HISTORY_LIMIT = 100
RECORD_TTL_S = 30 * 24 * 3600
#: The first state of every task, written by the enqueue script.
QUEUED = "queued"

#: Counters the worker keeps for `/metrics` (a hash: field -> count); `baton serve` renders them.
COUNTERS_KEY = keys.COUNTERS_KEY
#: GitHub calls the workers made: a hash "<task kind>:counted|free" -> count, where "free" is a
#: 304 to a conditional request (GitHub does not count it against the rate limit).
GITHUB_REQUESTS_KEY = keys.GITHUB_REQUESTS_KEY
#: What each worker machine's box can enforce (``worker.runner.probe``): host -> JSON with
#: ``network_cutoff``, ``problems`` and ``at`` (when that host's worker last started).
BOX_PROBES_KEY = keys.BOX_PROBES_KEY
#: Publications (status comments, check-run completions) not yet on GitHub: a sorted set of
#: task ids scored by the time of their next attempt. Its size is a gauge in `/metrics`.
OUTBOX_KEY = keys.OUTBOX_KEY
#: + repo id : issue number -> the id of the task whose agent run holds the issue (one run per issue).
RUN_LOCK_PREFIX = keys.RUN_LOCK_PREFIX


def text(raw: object) -> str:
    """A value read from Redis as text ("" for none): redis-py answers bytes unless asked not to,
    and a script's reply may be a number. The one place Baton decodes a Redis reply."""
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
