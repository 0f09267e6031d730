"""Byte-exact encodings shared by signers and verifiers.

Signatures and log hashes cover bytes, so every producer must serialise the same value to the same
bytes: one canonical JSON form, one base64 form on output, and a tolerant but strict base64 reader.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import UTC, datetime

from evidence.errors import EvidenceError

_FROM_URLSAFE = str.maketrans("-_", "+/")
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
#: The 6-bit value of each base64 character (others map to 0; a2b_base64 rejects them anyway).
_SIXBITS = bytes(_ALPHABET.index(c) if c in _ALPHABET else 0 for c in range(256))
#: Bits of the last character that encode nothing, by unpadded length mod 4: they must be zero.
_SPARE = {2: 0x0F, 3: 0x03}
_HEX = re.compile(r"[0-9a-f]*")


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8, no NaN: the same value always gives the same bytes."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def b64encode(data: bytes) -> str:
    """Standard alphabet, padded: what cosign and securesystemslib decode."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: object, what: str) -> bytes:
    """Decode standard or URL-safe base64, padded or not (DSSE allows both), and nothing else.

    Strict: stray characters, mixed alphabets, wrong padding and non-zero spare bits are refused, so
    one byte string has exactly one accepted spelling per alphabet.
    """
    if not isinstance(text, str) or not text.isascii():
        raise EvidenceError("malformed-envelope", f"{what} is not base64")
    body = text.rstrip("=")
    padding = len(text) - len(body)
    if padding > 2 or (padding and len(text) % 4) or len(body) % 4 == 1:
        raise EvidenceError("malformed-envelope", f"{what} is not base64 (wrong length or padding)")
    if "-" in body or "_" in body:
        if "+" in body or "/" in body:
            raise EvidenceError("malformed-envelope", f"{what} is not base64 (mixes two alphabets)")
        body = body.translate(_FROM_URLSAFE)
    standard = body.encode("ascii")
    if len(standard) % 4 and _SIXBITS[standard[-1]] & _SPARE[len(standard) % 4]:
        raise EvidenceError("malformed-envelope", f"{what} is not base64 (non-zero trailing bits)")
    try:
        data = binascii.a2b_base64(standard + b"=" * (-len(standard) % 4), strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise EvidenceError("malformed-envelope", f"{what} is not base64") from exc
    return data


def hexdecode(text: object, what: str, code: str, size: int | None = None) -> bytes:
    """Decode lowercase hex (how hashes travel in JSON); ``size`` is the expected byte length."""
    if not isinstance(text, str) or not text or len(text) % 2 or not _HEX.fullmatch(text):
        raise EvidenceError(code, f"{what} is not lowercase hex")
    data = bytes.fromhex(text)
    if size is not None and len(data) != size:
        raise EvidenceError(code, f"{what} is {len(data)} bytes, expected {size}")
    return data


def rfc3339(ts: float) -> str:
    """UTC with milliseconds and a ``Z``, e.g. ``2026-11-30T19:36:28.123Z`` (in-toto's timestamp form)."""
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
