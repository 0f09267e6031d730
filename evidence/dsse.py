"""DSSE v1 envelopes: sign bytes with a payload type, verify them back.

The signature covers the Pre-Authentication Encoding (PAE) of type and payload, never the JSON
envelope, so re-serialising an envelope cannot change what was signed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evidence.encoding import b64decode, b64encode
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, SigningKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """``DSSEv1 <len(type)> <type> <len(payload)> <payload>``, lengths in bytes, ASCII decimal."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sign(payload: bytes, key: SigningKey, payload_type: str = PAYLOAD_TYPE) -> dict[str, object]:
    """One-signature envelope; the keyid is always set (securesystemslib fails without one)."""
    signature = key.sign(pae(payload_type, payload))
    return {
        "payload": b64encode(payload),
        "payloadType": payload_type,
        "signatures": [{"keyid": key.keyid, "sig": b64encode(signature)}],
    }


def verify(envelope: Mapping[str, object], keys: Mapping[str, PublicKey]) -> bytes:
    """The payload, once a signature by a trusted key verifies; the caller checks ``payloadType``."""
    return verify_signer(envelope, keys)[0]


def verify_signer(envelope: Mapping[str, object], keys: Mapping[str, PublicKey]) -> tuple[bytes, str]:
    """Like ``verify``, and also which trusted keyid signed (the first that verifies).

    Signatures by keys we do not trust are skipped, not failed: an envelope may carry several.
    """
    payload_type, payload, signatures = _fields(envelope)
    message = pae(payload_type, payload)
    failed: list[str] = []
    for keyid, signature in signatures:
        key = keys.get(keyid)
        if key is None:
            continue
        if key.verify(signature, message):
            return payload, keyid
        failed.append(keyid)
    if failed:
        raise EvidenceError(
            "bad-signature",
            f"the signature by key {', '.join(failed)} does not verify: the payload, its type or the "
            "signature was changed after signing",
        )
    seen = ", ".join(keyid for keyid, _ in signatures)
    trusted = ", ".join(sorted(keys)) or "none"
    raise EvidenceError(
        "unknown-key",
        f"no signature is by a trusted key: the envelope is signed by keyid {seen}; "
        f"trusted keyids: {trusted} "
        "(pass the signer's public key, e.g. from /.well-known/baton/keys)",
    )


def _fields(envelope: object) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    if not isinstance(envelope, Mapping):
        raise EvidenceError("malformed-envelope", "the envelope is not a JSON object")
    payload_type = envelope.get("payloadType")
    if not isinstance(payload_type, str) or not payload_type:
        raise EvidenceError("malformed-envelope", "payloadType is missing or not a string")
    if "payload" not in envelope:
        raise EvidenceError("malformed-envelope", "payload is missing")
    payload = b64decode(envelope["payload"], "payload")
    raw = envelope.get("signatures")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not raw:
        raise EvidenceError("malformed-envelope", "signatures is missing, empty or not a list")
    signatures: list[tuple[str, bytes]] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise EvidenceError("malformed-envelope", f"signatures[{i}] is not an object")
        keyid = entry.get("keyid")
        if not isinstance(keyid, str) or not keyid:
            raise EvidenceError("malformed-envelope", f"signatures[{i}].keyid is missing or empty")
        signatures.append((keyid, b64decode(entry.get("sig"), f"signatures[{i}].sig")))
    return payload_type, payload, signatures
