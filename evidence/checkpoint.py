"""Signed tree heads: the log's size and root at a moment, signed so clients can hold the log to them.

The signed bytes are a small text body in the spirit of C2SP checkpoints (origin, size, base64 root,
timestamp, one per line): unambiguous without a JSON canonicaliser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evidence.encoding import b64decode, b64encode, hexdecode
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, SigningKey
from evidence.merkle import EMPTY_ROOT, HASH_SIZE


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    timestamp: str

    def body(self) -> bytes:
        return f"{self.origin}\n{self.size}\n{b64encode(self.root)}\n{self.timestamp}\n".encode()

    def to_json(self) -> dict[str, object]:
        """The unsigned fields, as they appear in a signed checkpoint document."""
        return {
            "origin": self.origin,
            "treeSize": self.size,
            "rootHash": self.root.hex(),
            "timestamp": self.timestamp,
        }


def origin_for(installation: int) -> str:
    """One log per GitHub App installation; the origin says which, inside the signed body."""
    return f"baton/installation/{installation}"


def sign(cp: Checkpoint, key: SigningKey) -> dict[str, object]:
    _check(cp)
    return {**cp.to_json(), "keyid": key.keyid, "signature": b64encode(key.sign(cp.body()))}


def verify(doc: Mapping[str, object], keys: Mapping[str, PublicKey]) -> Checkpoint:
    """The checkpoint, once its signature by a trusted key verifies; else EvidenceError("bad-checkpoint")."""
    if not isinstance(doc, Mapping):
        raise EvidenceError("bad-checkpoint", "the checkpoint is not a JSON object")
    size = doc.get("treeSize")
    if not isinstance(size, int) or isinstance(size, bool):
        raise EvidenceError("bad-checkpoint", "checkpoint treeSize is missing or not an integer")
    origin, timestamp, keyid = (doc.get(name) for name in ("origin", "timestamp", "keyid"))
    if not isinstance(origin, str) or not isinstance(timestamp, str):
        raise EvidenceError("bad-checkpoint", "checkpoint origin or timestamp is missing or not a string")
    cp = Checkpoint(
        origin, size, hexdecode(doc.get("rootHash"), "checkpoint rootHash", "bad-checkpoint"), timestamp
    )
    _check(cp)
    if not isinstance(keyid, str) or not keyid:
        raise EvidenceError("bad-checkpoint", "checkpoint keyid is missing")
    key = keys.get(keyid)
    if key is None:
        raise EvidenceError(
            "bad-checkpoint",
            f"the checkpoint is signed by keyid {keyid}, which is not a trusted key "
            f"(trusted: {', '.join(sorted(keys)) or 'none'})",
        )
    try:
        signature = b64decode(doc.get("signature"), "checkpoint signature")
    except EvidenceError as exc:
        raise EvidenceError("bad-checkpoint", exc.message) from exc
    if not key.verify(signature, cp.body()):
        raise EvidenceError(
            "bad-checkpoint",
            f"the checkpoint signature by key {keyid} does not verify: "
            "its origin, size, root or timestamp was changed",
        )
    return cp


def _check(cp: Checkpoint) -> None:
    if not cp.origin or any("\n" in text for text in (cp.origin, cp.timestamp)):
        raise EvidenceError(
            "bad-checkpoint", "checkpoint origin must be non-empty, and origin and timestamp one line each"
        )
    if cp.size < 0:
        raise EvidenceError("bad-checkpoint", f"checkpoint treeSize {cp.size} is negative")
    if len(cp.root) != HASH_SIZE:
        raise EvidenceError("bad-checkpoint", f"checkpoint rootHash is {len(cp.root)} bytes, not {HASH_SIZE}")
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        raise EvidenceError("bad-checkpoint", "an empty tree's root must be SHA-256 of nothing (RFC 9162)")
