"""What the model stand-in's dialects share: how a request is routed, a rendered answer, stream framing,
ids, token counts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulator.model.script import Answer
from emulator.types import JSONObject

#: Deltas are cut to this many characters, as a real stream arrives in pieces.
DELTA_CHARS = 64


@dataclass(frozen=True)
class Context:
    """What a rendering needs to know about the request it answers."""

    turn: int
    hit: int
    model: str
    input_tokens: int
    workspace: str | None
    minimal: bool
    #: The request body, for what only one dialect reads (offered tools, ``stream_options``).
    body: JSONObject = field(default_factory=dict)


@dataclass
class Rendered:
    """One answer: SSE events (``head`` of them open the stream) and the non-streaming body."""

    events: list[tuple[str, JSONObject]]
    head: int
    message: JSONObject
    extra: dict[str, Any] = field(default_factory=dict)
    #: False for a stream cut by an error: the framing's end (``data: [DONE]``, ``]``) is not sent.
    complete: bool = True


@dataclass(frozen=True)
class Route:
    """What a request's path says: a token count or a turn, the model and stream-ness if it names them."""

    count: bool = False
    model: str | None = None
    stream: bool | None = None  # None: the body's ``"stream": true`` decides


class Framing(Protocol):
    """How a stream's events go on the wire and how the stream ends."""

    @property
    def content_type(self) -> str: ...

    def event(self, index: int, name: str, data: JSONObject) -> bytes: ...

    def end(self, sent: int) -> bytes: ...


class NamedSSE:
    """``event: NAME`` plus ``data: JSON`` per event (Anthropic, OpenAI Responses); nothing at the end."""

    content_type = "text/event-stream; charset=utf-8"

    def event(self, index: int, name: str, data: JSONObject) -> bytes:
        return sse(name, data)

    def end(self, sent: int) -> bytes:
        return b""


@dataclass(frozen=True)
class DataSSE:
    """Data-only SSE lines (Chat Completions, Gemini ``alt=sse``), then ``done`` (``data: [DONE]``) if any."""

    done: bytes = b""
    eol: bytes = b"\n\n"  # Google's servers end each event with CRLF CRLF
    content_type: str = "text/event-stream; charset=utf-8"

    def event(self, index: int, name: str, data: JSONObject) -> bytes:
        return b"data: " + _compact(data) + self.eol

    def end(self, sent: int) -> bytes:
        return self.done


class JSONArrayStream:
    """One JSON array streamed element by element (Gemini ``streamGenerateContent`` without ``alt=sse``)."""

    content_type = "application/json; charset=UTF-8"

    def event(self, index: int, name: str, data: JSONObject) -> bytes:
        return (b"[" if index == 0 else b",\r\n") + _compact(data)

    def end(self, sent: int) -> bytes:
        return b"]" if sent else b"[]"


class RenderError(Exception):
    """An answer the script asks for that cannot be given (e.g. a relative path and no workspace)."""


class Dialect(Protocol):
    """One provider's API: which paths are its, how to read a request and how to answer it."""

    name: str
    #: The 401 message for a missing or wrong key, in the provider's words.
    bad_key_message: str

    def route(self, path: str) -> Route | None: ...

    def streams(self, body: JSONObject, route: Route) -> bool: ...

    def model(self, body: JSONObject, route: Route) -> str: ...

    def framing(self, query: Mapping[str, str]) -> Framing: ...

    def count_body(self, tokens: int) -> JSONObject: ...

    def count_turns(self, body: JSONObject) -> int: ...

    def key(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None: ...

    def render(self, answer: Answer, ctx: Context) -> Rendered: ...

    def error_body(self, status: int, message: str) -> JSONObject: ...

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered: ...

    def detect_workspace(self, body: JSONObject) -> str | None: ...


def sse(event: str, data: JSONObject) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _compact(data: JSONObject) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer T`` header, or None."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def key_fingerprint(key: str) -> str:
    """How a record names a key: ``sha256(key)`` in hex (for a Bearer token, of the token alone)."""
    return hashlib.sha256(key.encode()).hexdigest()


def make_id(prefix: str, *parts: object, length: int = 24) -> str:
    """A stable id (the same request position always gets the same id): tests can predict them."""
    digest = hashlib.sha256(":".join(str(p) for p in (prefix, *parts)).encode()).hexdigest()
    return f"{prefix}{digest[:length]}"


def estimate_tokens(length: int) -> int:
    """Tokens for ``length`` characters or bytes: about four per token, at least one (enough for costs)."""
    return max(1, length // 4)


def pieces(text: str, size: int = DELTA_CHARS) -> list[str]:
    """``text`` cut into deltas (one empty piece for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def workspace_path(path: str, workspace: str | None) -> str | None:
    """An absolute path for ``path``, or None when it is relative and there is no workspace."""
    if path.startswith("/"):
        return path
    if workspace is None:
        return None
    relative = path.removeprefix("./")
    return workspace.rstrip("/") + "/" + relative
