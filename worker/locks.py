"""Leased Redis locks: a key set to its holder's token, which only that holder may change.

A lock whose holder died lapses with its lease (``PX``), and by then another may hold it, so
every change after taking it compares the token first, in Redis (one Lua script), not in
Python between a GET and a DEL, where the lease could lapse and be taken in between. The status
comment (``worker.publish``), the merge gate (``worker.gates``) and the redelivery pass
(``worker.redeliver``) lock with these.
"""

from __future__ import annotations

import redis

from baton import records

_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end
return 0
"""


def take(client: redis.Redis, key: str, token: str, lease_ms: int) -> bool:
    """True if the lock was free and is now ``token``'s for ``lease_ms``."""
    return bool(client.set(key, token, nx=True, px=lease_ms))


def holder(client: redis.Redis, key: str) -> str | None:
    """Whose token the lock holds now; None when it is free."""
    raw = client.get(key)
    return None if raw is None else records.text(raw)


def release(client: redis.Redis, key: str, token: str) -> bool:
    """Free the lock if ``token`` still holds it; False (and nothing changed) if it lapsed or was taken."""
    return bool(client.register_script(_RELEASE)(keys=[key], args=[token]))


def renew(client: redis.Redis, key: str, token: str, lease_ms: int) -> bool:
    """Start a fresh lease of ``lease_ms`` if ``token`` still holds the lock; False if it does not."""
    return bool(client.register_script(_RENEW)(keys=[key], args=[token, lease_ms]))


def take_over(client: redis.Redis, key: str, old: str, new: str, lease_ms: int) -> bool:
    """Hand the lock from ``old`` (a holder known to have ended) to ``new``; False if ``old`` no
    longer holds it (someone else took over first)."""
    return bool(client.register_script(_TAKE_OVER)(keys=[key], args=[old, new, lease_ms]))
