"""HTTP/1.1 request heads as the box's two doors read them: strictly, on plain data.

Both the egress proxy and the model gateway take requests from the box, and every
byte from the box is hostile input. So a head is accepted only in the plain form
RFC 9112 describes, and anything a lenient parser would guess at (obsolete line
folding, a space before the colon, a body framed two ways) is refused rather
than interpreted: two parsers that disagree about where a request ends is how
requests are smuggled past a check.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: RFC 9110 ``token``: method and header names.
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: A request target: visible ASCII, no spaces.
TARGET = re.compile(r"[\x21-\x7e]+")
#: A field value: visible characters, spaces and tabs; obs-text allowed, control characters not.
FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: Headers that describe one hop, not the request: never passed on by either door. (The framing
#: headers are not among them: the proxy forwards a body as it was framed; the gateway reframes.)
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
     "te", "trailer", "upgrade", "host"}
)  # fmt: skip

#: Longest chunk-size or trailer line read in a chunked body.
MAX_CHUNK_LINE = 4096
#: A chunk-size line (RFC 9112 7.1): the size in hex, extensions of visible characters only.
CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(;[\t\x20-\x7e]*)?\r\n")
#: A trailer line of a chunked body: a plain header line.
TRAILER_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*\r\n")

Headers = tuple[tuple[str, str], ...]


def request_line(line: str) -> tuple[str, str, str] | None:
    """``METHOD TARGET VERSION`` with single spaces, HTTP/1.0 or 1.1; None if it is anything else."""
    parts = line.split(" ")
    if len(parts) != 3 or not TOKEN.fullmatch(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    if not TARGET.fullmatch(parts[1]):
        return None
    return parts[0], parts[1], parts[2]


def fields(lines: Sequence[str]) -> Headers | None:
    """Header lines as (name, value) pairs, values trimmed; None if any line is malformed."""
    found: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name) or not FIELD_VALUE.fullmatch(value):
            return None
        found.append((name, value.strip(" \t")))
    return tuple(found)


def framing(headers: Headers) -> tuple[int, bool] | None:
    """How the body is delimited: (Content-Length, chunked); None if ambiguous or malformed.

    Transfer-Encoding must be exactly ``chunked`` and never beside a Content-Length;
    several Content-Length values must agree and be plain digits.
    """
    lengths = {v.strip() for n, value in headers if n.lower() == "content-length" for v in value.split(",")}
    codings = [value.strip().lower() for n, value in headers if n.lower() == "transfer-encoding"]
    if codings:
        if lengths or codings != ["chunked"]:
            return None
        return 0, True
    if not lengths:
        return 0, False
    if len(lengths) != 1:
        return None
    (length,) = lengths
    if not (length.isascii() and length.isdigit() and len(length) <= 18):
        return None
    return int(length), False


def chunk_size(line: bytes) -> int | None:
    """The size a chunk-size line announces (the line with its CRLF); None if it is anything else."""
    match = CHUNK_LINE.fullmatch(line) if len(line) <= MAX_CHUNK_LINE else None
    return None if match is None else int(match.group(1), 16)


def is_trailer(line: bytes) -> bool:
    return len(line) <= MAX_CHUNK_LINE and TRAILER_LINE.fullmatch(line) is not None


def end_to_end(headers: Headers) -> Headers:
    """The headers without hop-by-hop ones, including any a ``Connection`` header names."""
    listed = {t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")}
    return tuple((n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in listed)


def wants_close(version: str, headers: Headers) -> bool:
    """Does the client end the connection after this request (HTTP/1.0, or ``Connection: close``)?"""
    tokens = {t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")}
    return "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
