"""The audit trail: every state change of every task, in an HMAC chain per installation.

Capture and sealing are apart (``evidence.audit``). The web side captures a task's
acceptance in the script that stores it (``bot.enqueue``); ``lifecycle.move`` captures
each later move inside its own transaction (the first move a worker makes records the
task's installation, ``INSTALLATION``, for the ones after). Steps that are not moves
(decided, spawned, exited, pushed, gate results, check run posted) are captured with
``note``. Workers seal what was captured into the chain after each task and on every
sweep, in batches, with a key derived from ``BATON_AUDIT_SECRET`` for that installation
alone.

Events never hold a secret or a payload body: task ids, states, digests, numbers and
the short reasons Baton writes itself.

Each worker process remembers the newest head it saw of each chain. Redis replicates
asynchronously, so a failover can lose entries a worker sealed on the old primary; the next
seal by a worker that remembers them names them in a gap entry (``evidence.audit``) rather than
giving their numbers to other events, and `baton audit verify` names the gap.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping

import redis
from redis.client import Pipeline

from baton import records
from baton.logs import timestamp
from evidence import audit as chain
from evidence.audit import AuditChain, derive_key

#: The task record's field naming its installation (0: a delivery that names none).
INSTALLATION = "installation"
MAX_DETAIL = 500
#: Pending events sealed per installation per pass; a sweep comes back for the rest.
SEAL_BATCH = 1000


def _detail(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _installation(raw: bytes | str | None) -> int:
    value = records.text(raw)
    return int(value) if value and value.isdigit() else 0


def moved(
    pipe: Pipeline,
    task_id: str,
    *,
    known: bytes | str | None,
    before: str | None,
    after: str,
    detail: str,
    fields: Mapping[str, str],
    at: str,
) -> None:
    """Capture one state move inside ``lifecycle.move``'s MULTI (no reads)."""
    installation = _installation(known or fields.get(INSTALLATION))
    event = {"at": at, "task": task_id, "event": "state", "from": before and str(before),
             "to": str(after), "detail": _detail(detail)}  # fmt: skip
    chain.record(pipe, installation, event)


def note(client: redis.Redis, installation: int | None, task_id: str, event: str, **detail: object) -> None:
    """Capture a step that is not a state move (a decision, a spawn, a push, a check run)."""
    with client.pipeline(transaction=True) as pipe:
        found = {"at": timestamp(time.time()), "task": task_id, "event": event, **detail}
        chain.record(pipe, installation or 0, found)
        pipe.execute()


#: Per Redis client (its connection pool), installation -> the newest (seq, mac) seen of its chain
#: through it: what a failover may lose. Tied to the client so that another deployment (or another
#: test's Redis) never inherits it.
_seen: weakref.WeakKeyDictionary[object, dict[int, tuple[int, bytes]]] = weakref.WeakKeyDictionary()


def seal(client: redis.Redis, secret: bytes | None) -> int:
    """Seal what every installation captured; returns how many events were sealed. Without a
    secret nothing is sealed (the events wait, captured, for a worker that has one)."""
    if secret is None:
        return 0
    sealed = 0
    seen = _seen.setdefault(client.connection_pool, {})
    for installation in chain.installations(client):
        found = AuditChain(client, installation, derive_key(secret, installation))
        known = seen.get(installation)
        with client.pipeline(transaction=False) as pipe:
            pipe.llen(found.pending_key)
            pipe.lindex(found.chain_key, -1)
            waiting, last = pipe.execute()
        tip = found.tip_of(last)
        if waiting or (known is not None and (tip is None or tip[0] < known[0])):
            sealed += found.seal(SEAL_BATCH, known=known)
            tip = found.head()
        if tip is not None and (known is None or tip[0] > known[0]):
            seen[installation] = tip
    return sealed
