"""The OpenAI Responses API as Codex uses it (``POST /v1/responses``, SSE), for the model stand-in.

A turn streams like the real API: ``response.created``, ``response.in_progress``,
``response.output_item.added``, the argument or text deltas, ``response.output_item.done`` (the
item Codex acts on: a ``function_call`` with ``call_id``, ``name`` and ``arguments`` as a JSON
*string*, or a ``message`` with ``output_text`` content), then ``response.completed`` with
``usage`` (``input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``,
``output_tokens_details.reasoning_tokens``, ``total_tokens``); Codex fails a turn without it.
Shapes checked against codex-rs ``codex-api/src/sse/responses.rs`` and ``protocol/src/models.rs``.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from typing import Any

from emulator.model.script import HEREDOC, Answer, Bash, Edit, Read, Text, Tool, Write
from emulator.model.wire import (
    Context,
    Framing,
    NamedSSE,
    Rendered,
    Route,
    bearer,
    estimate_tokens,
    make_id,
    pieces,
)
from emulator.types import JSONObject

#: Output items the model produced: a run of them in ``input`` is one earlier assistant turn.
_ASSISTANT_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call"}


def _lines(text: str) -> list[str]:
    return text.removesuffix("\n").split("\n")


def apply_patch_command(body: str) -> str:
    """An ``exec_command`` ``cmd`` running ``apply_patch`` on one patch body (as observed to work)."""
    return f"apply_patch <<'{HEREDOC}'\n*** Begin Patch\n{body}*** End Patch\n{HEREDOC}\n"


def _command(answer: Write | Edit | Read | Bash) -> str:
    if isinstance(answer, Bash):
        return answer.command
    if isinstance(answer, Read):
        return f"cat {shlex.quote(answer.path)}"
    if isinstance(answer, Write):
        added = "".join(f"+{line}\n" for line in _lines(answer.content))
        return apply_patch_command(f"*** Add File: {answer.path}\n{added}")
    removed = "".join(f"-{line}\n" for line in _lines(answer.old))
    added = "".join(f"+{line}\n" for line in _lines(answer.new)) if answer.new else ""
    return apply_patch_command(f"*** Update File: {answer.path}\n@@\n{removed}{added}")


def error_fields(status: int) -> tuple[str, str | None]:
    if status == 401:
        return "invalid_request_error", "invalid_api_key"
    if status == 429:
        return "requests", "rate_limit_exceeded"
    if status >= 500:
        return "server_error", None
    return "invalid_request_error", None


def openai_error_body(status: int, message: str) -> JSONObject:
    """OpenAI's error shape, the same for the Responses and the Chat Completions APIs."""
    error_type, code = error_fields(status)
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


class OpenAI:
    name = "openai"
    bad_key_message = "Incorrect API key provided."

    def route(self, path: str) -> Route | None:
        return Route() if path == "/v1/responses" else None

    def streams(self, body: JSONObject, route: Route) -> bool:
        return body.get("stream") is True

    def model(self, body: JSONObject, route: Route) -> str:
        model = body.get("model")
        return model if isinstance(model, str) else "gpt-standin"

    def framing(self, query: Mapping[str, str]) -> Framing:
        return NamedSSE()

    def count_body(self, tokens: int) -> JSONObject:
        return {"object": "response.input_tokens", "input_tokens": tokens}

    def key(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        return bearer(headers)

    def count_turns(self, body: JSONObject) -> int:
        """Runs of model-made items (calls, assistant messages) in ``input``."""
        items = body.get("input")
        if not isinstance(items, list):
            return 0
        turns = 0
        in_run = False
        for item in items:
            if not isinstance(item, dict):
                in_run = False
                continue
            kind = item.get("type", "message")
            mine = kind in _ASSISTANT_ITEMS or (kind == "message" and item.get("role") == "assistant")
            if mine and not in_run:
                turns += 1
            in_run = mine
        return turns

    def detect_workspace(self, body: JSONObject) -> str | None:
        return None  # apply_patch paths are relative to Codex's working directory

    def render(self, answer: Answer, ctx: Context) -> Rendered:
        seq = _Sequence()
        if isinstance(answer, Text):
            item_id = make_id("msg_", "openai", ctx.turn, ctx.hit, length=32)
            item: JSONObject = {
                "id": item_id,
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
            opened = {**item, "status": "in_progress", "content": []}
            payload = answer.text
        else:
            if isinstance(answer, Tool):
                name, arguments = answer.name, json.dumps(answer.input, separators=(",", ":"))
            else:
                name, arguments = "exec_command", json.dumps({"cmd": _command(answer)})
            item_id = make_id("fc_", "openai", ctx.turn, ctx.hit, length=32)
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "completed",
                "arguments": arguments,
                "call_id": make_id("call_", "openai", ctx.turn, ctx.hit),
                "name": name,
            }
            opened = {**item, "status": "in_progress", "arguments": ""}
            payload = arguments
        output_tokens = estimate_tokens(len(payload))
        response = self._response(ctx, "in_progress", [], None)
        head: list[tuple[str, JSONObject]] = []
        if not ctx.minimal:
            head = [seq.event("response.created", response=response)]
            head.append(seq.event("response.in_progress", response=response))
            head.append(seq.event("response.output_item.added", output_index=0, item=opened))
            if isinstance(answer, Text):
                head.extend(self._text_events(seq, item_id, payload))
            else:
                head.extend(self._argument_events(seq, item_id, payload))
        usage = self._usage(ctx.input_tokens, output_tokens)
        done = self._response(ctx, "completed", [item], usage)
        events = [
            *head,
            seq.event("response.output_item.done", output_index=0, item=item),
            seq.event("response.completed", response=done),
        ]
        return Rendered(events, 0 if ctx.minimal else 2, done)

    def error_body(self, status: int, message: str) -> JSONObject:
        return openai_error_body(status, message)

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered:
        """``response.failed`` inside a 200 stream (Codex retries it unless the code says otherwise)."""
        seq = _Sequence()
        _, code = error_fields(status)
        failed = self._response(ctx, "failed", [], None)
        failed["error"] = {"code": code or "server_error", "message": message}
        events = [
            seq.event("response.created", response=self._response(ctx, "in_progress", [], None)),
            seq.event("response.failed", response=failed),
        ]
        return Rendered(events, 1, self.error_body(status, message))

    def _text_events(self, seq: _Sequence, item_id: str, text: str) -> list[tuple[str, JSONObject]]:
        where: dict[str, Any] = {"item_id": item_id, "output_index": 0, "content_index": 0}
        part: JSONObject = {"type": "output_text", "text": "", "annotations": []}
        return [
            seq.event("response.content_part.added", **where, part=part),
            *(seq.event("response.output_text.delta", **where, delta=p, logprobs=[]) for p in pieces(text)),
            seq.event("response.output_text.done", **where, text=text, logprobs=[]),
            seq.event("response.content_part.done", **where, part={**part, "text": text}),
        ]

    def _argument_events(self, seq: _Sequence, item_id: str, arguments: str) -> list[tuple[str, JSONObject]]:
        where: dict[str, Any] = {"item_id": item_id, "output_index": 0}
        return [
            *(
                seq.event("response.function_call_arguments.delta", **where, delta=p)
                for p in pieces(arguments)
            ),
            seq.event("response.function_call_arguments.done", **where, arguments=arguments),
        ]

    def _usage(self, input_tokens: int, output_tokens: int) -> JSONObject:
        return {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }

    def _response(
        self, ctx: Context, status: str, output: list[JSONObject], usage: JSONObject | None
    ) -> JSONObject:
        return {
            "id": make_id("resp_", "openai", ctx.turn, ctx.hit, length=32),
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "error": None,
            "incomplete_details": None,
            "model": ctx.model,
            "output": output,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }


class _Sequence:
    """Numbers a stream's events (``sequence_number``) in order."""

    def __init__(self) -> None:
        self.next = 0

    def event(self, kind: str, **fields: Any) -> tuple[str, JSONObject]:
        data: JSONObject = {"type": kind, "sequence_number": self.next, **fields}
        self.next += 1
        return kind, data
