"""What both dialects of the model stand-in share: a rendered answer, SSE framing, ids, token counts."""

from __future__ import annotations

import hashlib
import json
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


@dataclass
class Rendered:
    """One answer: SSE events (``head`` of them open the stream) and the non-streaming body."""

    events: list[tuple[str, JSONObject]]
    head: int
    message: JSONObject
    extra: dict[str, Any] = field(default_factory=dict)


class RenderError(Exception):
    """An answer the script asks for that cannot be given (e.g. a relative path and no workspace)."""


class Dialect(Protocol):
    """One provider's API: how to read a request and how to answer it."""

    name: str

    def count_turns(self, body: JSONObject) -> int: ...

    def key(self, headers: dict[str, str]) -> str | None: ...

    def render(self, answer: Answer, ctx: Context) -> Rendered: ...

    def error_body(self, status: int, message: str) -> JSONObject: ...

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered: ...

    def default_model(self) -> str: ...

    def detect_workspace(self, body: JSONObject) -> str | None: ...


def sse(event: str, data: JSONObject) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


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
