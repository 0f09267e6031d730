"""The server name in a TLS ClientHello, read from the bytes a client sent so far: no sockets, no clock.

The egress proxy checks that a CONNECT tunnel's TLS handshake is for the host the tunnel was
allowed for (a CDN serves many names behind one address: "domain fronting" asks an allowed
front for another site). Everything here is hostile input: a malformed, truncated or enormous
hello is an answer, never an exception, and the work per call is bounded (at most
``MAX_RECORDS`` record headers walked, at most ``MAX_BYTES`` looked at).

A ClientHello may arrive over several TCP reads and over several TLS records (RFC 8446 §5.1:
handshake messages may be fragmented across records; a post-quantum key share makes a hello
of ~1.8 KB). ``parse`` is called again with the longer buffer; ``NeedMore.total`` says how many
bytes the buffer must hold before another call can answer differently, so a client that
trickles one byte at a time does not cost a parse per byte.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: Most bytes the proxy reads looking for a complete ClientHello (records and all).
MAX_BYTES = 64 * 1024
#: Most TLS records a ClientHello may be split over (a 64 KiB hello needs 4 of the 16 KiB maximum).
MAX_RECORDS = 64
_HANDSHAKE = 22
_CLIENT_HELLO = 1
_RECORD_HEADER = 5
_MAX_FRAGMENT = 1 << 14  # RFC 8446 §5.1
_SERVER_NAME = 0  # extension type, RFC 6066 §3
_HOST_NAME = 0  # name type


class Problem(enum.StrEnum):
    """Why the bytes are not a ClientHello the proxy accepts."""

    NOT_TLS = "not-tls"  # the first record is not a TLS handshake record (plain HTTP, SSLv2, junk)
    NOT_CLIENT_HELLO = "not-client-hello"  # a handshake record, but another message
    MALFORMED = "malformed"  # lengths that do not add up, an interleaved record, too many records
    NO_SNI = "no-sni"  # a well-formed hello without a server name
    MANY_NAMES = "many-names"  # more than one server_name extension or host name
    TOO_LARGE = "too-large"  # the hello (or what it came in) passes MAX_BYTES


@dataclass(frozen=True)
class NeedMore:
    """Not decided yet: call again once the buffer holds at least ``total`` bytes."""

    total: int


@dataclass(frozen=True)
class Hello:
    """A well-formed ClientHello and its one host name, as sent (bytes: it may be anything)."""

    server_name: bytes


def parse(data: bytes) -> Hello | Problem | NeedMore:
    """Judge the first bytes of a tunnel: a ``Hello``, why not (``Problem``), or ``NeedMore``."""
    message = _reassemble(data)
    if not isinstance(message, bytes):
        return message
    return _client_hello(message)


def _reassemble(data: bytes) -> bytes | Problem | NeedMore:
    """The whole handshake message from the records at the start of ``data``."""
    if (len(data) > 0 and data[0] != _HANDSHAKE) or (len(data) > 1 and data[1] != 3):
        return Problem.NOT_TLS
    fragments: list[bytes] = []
    have = 0  # handshake bytes gathered
    want: int | None = None  # the message's full length once its 4-byte header is in
    at = 0
    for _ in range(MAX_RECORDS):
        if len(data) < at + _RECORD_HEADER:
            return _more(at + _RECORD_HEADER)
        kind, major, size = data[at], data[at + 1], int.from_bytes(data[at + 3 : at + 5], "big")
        if kind != _HANDSHAKE or major != 3 or data[at + 2] > 4 or not 0 < size <= _MAX_FRAGMENT:
            return Problem.MALFORMED  # RFC 8446 §5.1: no zero-length or interleaved fragments
        end = at + _RECORD_HEADER + size
        if end > MAX_BYTES:  # decided on what was announced, whether or not it all arrived yet
            return Problem.TOO_LARGE
        fragment = data[at + _RECORD_HEADER : end]
        if want is None and have + len(fragment) >= 4:  # the message's type and length, soon as seen
            head = (b"".join(fragments) + fragment)[:4]
            if head[0] != _CLIENT_HELLO:
                return Problem.NOT_CLIENT_HELLO
            want = 4 + int.from_bytes(head[1:4], "big")
            if want > MAX_BYTES:
                return Problem.TOO_LARGE
        if len(data) < end:  # until the message's header is in, that is the next thing to look at
            return NeedMore(end if want is not None else min(end, at + _RECORD_HEADER + 4 - have))
        fragments.append(fragment)
        have += size
        at = end
        if want is not None and have >= want:
            return b"".join(fragments)[:want]
    return Problem.MALFORMED


def _more(total: int) -> NeedMore | Problem:
    return Problem.TOO_LARGE if total > MAX_BYTES else NeedMore(total)


def printable(name: bytes) -> str:
    """A server name for a log line: printable ASCII kept, every other byte as ``\\xNN``."""
    return "".join(chr(b) if 0x20 < b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in name)


class _Reader:
    """Length-prefixed fields of one message; a short read is ``None``, never an exception."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes | None:
        if n < 0 or self.at + n > len(self.data):
            return None
        self.at += n
        return self.data[self.at - n : self.at]

    def vector(self, length_bytes: int) -> bytes | None:
        size = self.take(length_bytes)
        return None if size is None else self.take(int.from_bytes(size, "big"))

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def _client_hello(message: bytes) -> Hello | Problem:
    """RFC 8446 §4.1.2 (and RFC 5246 §7.4.1.2, where extensions may be absent)."""
    body = _Reader(message[4:])
    session = None
    if body.take(2 + 32) is not None:  # legacy_version, random
        session = body.vector(1)
    ciphers = body.vector(2) if session is not None and len(session) <= 32 else None
    compression = body.vector(1) if ciphers and len(ciphers) % 2 == 0 else None
    if not compression:
        return Problem.MALFORMED
    if body.left == 0:
        return Problem.NO_SNI  # a hello without extensions (TLS 1.2 and older)
    extensions = body.vector(2)
    if extensions is None or body.left:
        return Problem.MALFORMED
    seen: set[bytes] = set()
    names: list[bytes] = []
    fields = _Reader(extensions)
    while fields.left:
        kind = fields.take(2)
        value = fields.vector(2)
        if kind is None or value is None:
            return Problem.MALFORMED
        if kind in seen:  # RFC 8446 §4.2: never two of one type (two parsers could pick different ones)
            return Problem.MANY_NAMES if kind == b"\0\0" else Problem.MALFORMED
        seen.add(kind)
        if int.from_bytes(kind, "big") == _SERVER_NAME:
            found = _server_names(value)
            if isinstance(found, Problem):
                return found
            names += found
    if not names:
        return Problem.NO_SNI
    if len(names) > 1:
        return Problem.MANY_NAMES
    return Hello(names[0])


def _server_names(value: bytes) -> list[bytes] | Problem:
    """RFC 6066 §3: a non-empty list of (type, name); only ``host_name`` is defined, so any other
    type cannot even be skipped reliably, and is malformed."""
    outer = _Reader(value)
    listed = outer.vector(2)
    if not listed or outer.left:
        return Problem.MALFORMED
    entries = _Reader(listed)
    names = []
    while entries.left:
        kind = entries.take(1)
        name = entries.vector(2)
        if kind != bytes([_HOST_NAME]) or not name:
            return Problem.MALFORMED
        names.append(name)
    return names
