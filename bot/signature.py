"""Webhook signatures: `X-Hub-Signature-256` only, constant-time, every secret.

There is deliberately no SHA-1 path: a request that carries only
`X-Hub-Signature` is unsigned as far as Baton is concerned.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

PREFIX = "sha256="


def sign(secret: bytes, body: bytes) -> str:
    return PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secrets: Iterable[bytes], body: bytes, header: str | None) -> bool:
    """True if ``header`` is a valid signature of ``body`` under any secret.

    Every secret is tried even after a match, so timing does not reveal which
    secret (old or new, during a rotation) signed the request. Each digest is made
    in one call (`hmac.digest`, OpenSSL's one-shot HMAC, no HMAC object per secret).
    """
    if header is None or not header.startswith(PREFIX) or len(header) != len(PREFIX) + 64:
        return False
    given = header[len(PREFIX) :].encode("ascii", "replace")
    ok = False
    for secret in secrets:
        ok |= hmac.compare_digest(hmac.digest(secret, body, "sha256").hex().encode(), given)
    return ok
