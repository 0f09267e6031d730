"""Where `baton serve` publishes the evidence, and the key a receipt's link carries.

The log's shape is public: its checkpoints, leaf hashes and proofs name nothing, so anyone can hold
Baton to an append-only history. A receipt's content is not: it names a repository, its commits, the
policy and what the agent reached, and an installation's repositories may be private. So a receipt is
served only to a link that carries its key (the link its check run gives, seen by those who can see
the check run) or to the operator's ``BATON_METRICS_TOKEN``. The key is an HMAC of the installation
and the index under the audit secret, cut to 128 bits: nothing is stored, and nobody without the
secret can make one. Standard library only, like the rest of the offline verifier.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "/.well-known/baton"
KEYS_PATH = f"{PREFIX}/keys"
#: The query parameter of a receipt's link that carries its key.
KEY_PARAM = "k"
_LABEL = "baton-receipt-link"


def log_path(installation: int | str) -> str:
    return f"{PREFIX}/log/{installation}"


def receipt_key(secret: bytes, installation: int, index: int) -> str:
    message = f"{_LABEL}:{installation}:{index}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]


def receipt_url(public_url: str, secret: bytes, installation: int, index: int) -> str:
    """The receipt's link as its check run gives it: the bundle, with a proof, for whoever holds it."""
    key = receipt_key(secret, installation, index)
    return f"{public_url}{log_path(installation)}/receipts/{index}?{KEY_PARAM}={key}"


def key_matches(secret: bytes | None, installation: int, index: int, given: str | None) -> bool:
    """Is ``given`` the key of this receipt's link? (Constant time; never without a secret.)"""
    if secret is None or not given:
        return False
    return hmac.compare_digest(given.encode(), receipt_key(secret, installation, index).encode())
