"""Token usage read from a provider's answer as it passes, streamed or not.

The answer is passed to the agent chunk by chunk (its first byte never waits for
its last); a :class:`Meter` sees the same chunks. A streamed answer (server-sent
events) is parsed event by event; a JSON answer is kept, up to a bound, and read at
its end. Where each protocol puts its figures:

==================  ============================================================
anthropic-messages  ``usage`` (JSON); ``message_start.message.usage``, then
                    ``message_delta.usage`` (cumulative) in a stream
openai-responses    ``usage`` (JSON); ``response.completed`` (or ``.incomplete``,
                    ``.failed``) ``.response.usage`` in a stream
openai-chat         ``usage`` (JSON); the last chunk's ``usage`` in a stream (the
                    gateway asked for it: ``stream_options.include_usage``)
gemini              ``usageMetadata`` (JSON, each element of a JSON-array stream,
                    each event of an SSE stream; the last one holds the totals)
==================  ============================================================

Figures are normalised to four: input tokens not read from a cache, output tokens
(reasoning included: it is billed as output), cache reads and cache writes. An
answer that ends without figures (the agent hung up, the stream broke) is
*estimated* from its bytes, four to a token, and says so: the spend cap is never
fed a zero for tokens that were spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from worker.runner.gateway.providers import Protocol

#: The most of a JSON answer kept to read its usage; a longer one is estimated.
MAX_JSON_BYTES = 64 * 1024 * 1024
#: The longest single event a stream may have before the meter stops reading it (the agent still
#: gets every byte); long events are tool arguments, and usage events are short.
MAX_EVENT_BYTES = 4 * 1024 * 1024
#: Bytes per token for an estimate: the usual figure for English text and code.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: The provider's own figures (False: estimated from bytes).
    reported: bool = True

    def to_data(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reported": self.reported,
        }


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _get(obj: object, *path: str) -> object:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _anthropic(obj: object) -> dict[str, int | None]:
    usage = _get(obj, "message", "usage") if _get(obj, "type") == "message_start" else _get(obj, "usage")
    if not isinstance(usage, dict):
        return {}
    return {
        "input_tokens": _int(usage.get("input_tokens")),  # Anthropic's excludes what the cache held
        "output_tokens": _int(usage.get("output_tokens")),
        "cache_read_tokens": _int(usage.get("cache_read_input_tokens")),
        "cache_write_tokens": _int(usage.get("cache_creation_input_tokens")),
    }


def _openai(usage: object, prompt: str, completion: str) -> dict[str, int | None]:
    """OpenAI's figures (Responses and Chat name them apart): the prompt count includes the tokens the
    cache read and those it wrote, so both are taken out of it."""
    if not isinstance(usage, dict):
        return {}
    total = _int(usage.get(prompt))
    details = usage.get(f"{prompt}_details")
    cached, written = _int(_get(details, "cached_tokens")), _int(_get(details, "cache_write_tokens"))
    return {
        "input_tokens": None if total is None else max(0, total - (cached or 0) - (written or 0)),
        "output_tokens": _int(usage.get(completion)),  # reasoning included: it is billed as output
        "cache_read_tokens": cached,
        "cache_write_tokens": written,
    }


def _gemini(obj: object) -> dict[str, int | None]:
    usage = _get(obj, "usageMetadata")
    if not isinstance(usage, dict):
        return {}
    prompt, cached = _int(usage.get("promptTokenCount")), _int(usage.get("cachedContentTokenCount"))
    tool = _int(usage.get("toolUsePromptTokenCount")) or 0
    out = [_int(usage.get(k)) for k in ("candidatesTokenCount", "thoughtsTokenCount")]
    return {
        "input_tokens": None if prompt is None else max(0, prompt - (cached or 0)) + tool,
        "output_tokens": None if out == [None, None] else sum(v or 0 for v in out),
        "cache_read_tokens": cached,
    }


def figures(protocol: Protocol, obj: object) -> dict[str, int]:
    """The usage figures one JSON object (an answer, or one event of a stream) carries, normalised;
    empty when it carries none."""
    if protocol is Protocol.ANTHROPIC:
        found = _anthropic(obj)
    elif protocol is Protocol.OPENAI_RESPONSES:
        response = _get(obj, "response")
        found = _openai(_get(response, "usage") if isinstance(response, dict) else _get(obj, "usage"),
                        "input_tokens", "output_tokens")  # fmt: skip
    elif protocol is Protocol.OPENAI_CHAT:
        found = _openai(_get(obj, "usage"), "prompt_tokens", "completion_tokens")
    else:
        found = _gemini(obj)
    return {k: v for k, v in found.items() if v is not None}


class Meter:
    """Reads one answer's usage from the chunks passed to the agent (see the module docstring)."""

    def __init__(self, protocol: Protocol, *, event_stream: bool, request_bytes: int) -> None:
        self.protocol = protocol
        self.event_stream = event_stream
        self.request_bytes = request_bytes
        self.response_bytes = 0
        self._seen: dict[str, int] = {}
        self._buffer = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        self.response_bytes += len(chunk)
        if self._overflow:
            return
        self._buffer += chunk
        if not self.event_stream:
            if len(self._buffer) > MAX_JSON_BYTES:
                self._overflow, self._buffer = True, bytearray()
            return
        if b"\r" in self._buffer:
            self._buffer = bytearray(self._buffer.replace(b"\r\n", b"\n"))
        while (end := self._buffer.find(b"\n\n")) >= 0:
            self._event(bytes(self._buffer[:end]))
            del self._buffer[: end + 2]
        if len(self._buffer) > MAX_EVENT_BYTES:
            self._buffer.clear()  # a huge event carries arguments, not usage: skip to its end unread

    def _event(self, raw: bytes) -> None:
        data = b"\n".join(line[5:].lstrip(b" ") for line in raw.split(b"\n") if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            return
        self._merge(data)

    def _merge(self, data: bytes) -> None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        for item in obj if isinstance(obj, list) else [obj]:
            self._seen.update(figures(self.protocol, item))

    def finish(self) -> Usage:
        """The answer is over (or cut off): the figures it reported, or an estimate from its bytes."""
        if not self.event_stream and not self._overflow and self._buffer:
            self._merge(bytes(self._buffer))
        elif self.event_stream and self._buffer.strip():
            self._event(bytes(self._buffer))  # a last event with no blank line after it
        self._buffer.clear()
        if "output_tokens" in self._seen or "input_tokens" in self._seen:
            return Usage(
                self._seen.get("input_tokens", 0),
                self._seen.get("output_tokens", 0),
                self._seen.get("cache_read_tokens", 0),
                self._seen.get("cache_write_tokens", 0),
            )
        return Usage(
            self.request_bytes // BYTES_PER_TOKEN, self.response_bytes // BYTES_PER_TOKEN, reported=False
        )
