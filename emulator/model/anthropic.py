"""The Anthropic Messages API as Claude Code uses it (``POST /v1/messages``), for the model stand-in.

Stream shape (see the shared AGENT-CLIS.md notes and Anthropic's streaming docs): ``message_start``,
``ping``, ``content_block_start`` (``tool_use`` with ``input: {}``, or ``text``), ``content_block_delta``
(``input_json_delta``/``text_delta``), ``content_block_stop``, ``message_delta`` (``stop_reason``,
``usage.output_tokens``), ``message_stop``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from emulator.model.clients import EDIT_TOOLS, READ_TOOLS, SHELL_TOOLS, WRITE_TOOLS, Call, Offer, render
from emulator.model.script import Answer, Bash, Edit, Read, Text, Tool, Write
from emulator.model.wire import (
    Context,
    Framing,
    NamedSSE,
    Rendered,
    RenderError,
    Route,
    estimate_tokens,
    make_id,
    pieces,
    workspace_path,
)
from emulator.types import JSONObject

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_WORKING_DIRECTORY = re.compile(r"^\s*Working directory:\s*(/[^\n]*?)\s*$", re.MULTILINE)


#: Claude Code's own tool names: a request offering them, or none of another client's file and shell
#: tools (``emulator.model.clients``), gets Claude's calls.
CLAUDE_TOOLS = ("Write", "Edit", "Read", "Bash")


def _offered(body: JSONObject) -> dict[str, JSONObject]:
    tools = body.get("tools")
    found: dict[str, JSONObject] = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            schema = tool.get("input_schema")
            found[tool["name"]] = schema if isinstance(schema, dict) else {}
    return found


def _tool_call(answer: Tool | Write | Edit | Read | Bash, ctx: Context) -> tuple[str, JSONObject]:
    """(tool name, input) for a tool answer; file paths become absolute under the workspace. Another
    client on the Messages API (OpenCode's Anthropic provider) gets its own tools' calls."""
    if isinstance(answer, Tool):
        return answer.name, answer.input
    offered = _offered(ctx.body)
    theirs = (*WRITE_TOOLS, *EDIT_TOOLS, *READ_TOOLS, *SHELL_TOOLS)
    if any(name in offered for name in theirs) and not any(name in offered for name in CLAUDE_TOOLS):
        reply = render(answer, Offer(offered), ctx.workspace)
        if isinstance(reply, Call):
            return reply.name, reply.args
        raise RenderError(f"step {answer.index}: the request's tools cannot carry it ({', '.join(offered)})")
    if isinstance(answer, Bash):
        return "Bash", {"command": answer.command}
    path = workspace_path(answer.path, ctx.workspace)
    if path is None:
        raise RenderError(
            f"step {answer.index}: relative path {answer.path!r} and no workspace "
            "(give the stand-in a workspace, or the script one)"
        )
    if isinstance(answer, Write):
        return "Write", {"file_path": path, "content": answer.content}
    if isinstance(answer, Edit):
        return "Edit", {"file_path": path, "old_string": answer.old, "new_string": answer.new}
    return "Read", {"file_path": path}


class Anthropic:
    name = "anthropic"
    bad_key_message = "invalid x-api-key"

    def route(self, path: str) -> Route | None:
        if path == "/v1/messages":
            return Route()
        return Route(count=True) if path == "/v1/messages/count_tokens" else None

    def streams(self, body: JSONObject, route: Route) -> bool:
        return body.get("stream") is True

    def model(self, body: JSONObject, route: Route) -> str:
        model = body.get("model")
        return model if isinstance(model, str) else "claude-standin"

    def framing(self, query: Mapping[str, str]) -> Framing:
        return NamedSSE()

    def count_body(self, tokens: int) -> JSONObject:
        return {"input_tokens": tokens}

    def key(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        return headers.get("x-api-key")

    def count_turns(self, body: JSONObject) -> int:
        """Assistant messages in the conversation (a run of them counts once; system ones are skipped)."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        turns = 0
        previous: Any = None
        for message in messages:
            role = message.get("role") if isinstance(message, dict) else None
            if role == "system":
                continue
            if role == "assistant" and previous != "assistant":
                turns += 1
            previous = role
        return turns

    def detect_workspace(self, body: JSONObject) -> str | None:
        """Claude Code names its working directory in the system prompt (``Working directory: /x``)."""
        system = body.get("system")
        blocks = system if isinstance(system, list) else [{"text": system}]
        for block in blocks:
            text = block.get("text") if isinstance(block, dict) else None
            if isinstance(text, str) and (found := _WORKING_DIRECTORY.search(text)):
                return found.group(1)
        return None

    def render(self, answer: Answer, ctx: Context) -> Rendered:
        message_id = make_id("msg_", "anthropic", ctx.turn, ctx.hit)
        if isinstance(answer, Text):
            block: JSONObject = {"type": "text", "text": answer.text}
            start: JSONObject = {"type": "text", "text": ""}
            payload = answer.text
            deltas = [{"type": "text_delta", "text": p} for p in self._cut(payload, ctx)]
            stop_reason = "end_turn"
        else:
            name, tool_input = _tool_call(answer, ctx)
            tool_id = make_id("toolu_", "anthropic", ctx.turn, ctx.hit)
            block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
            start = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
            payload = json.dumps(tool_input, separators=(",", ":"))
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in self._cut(payload, ctx)]
            stop_reason = "tool_use"
        output_tokens = estimate_tokens(len(payload))
        usage = self._usage(ctx.input_tokens, 1)
        head: list[tuple[str, JSONObject]] = [("message_start", self._message_start(message_id, ctx, usage))]
        if not ctx.minimal:
            head.append(("ping", {"type": "ping"}))
        events = [
            *head,
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            *(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
                for d in deltas
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": ctx.model,
            "content": [block],
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": self._usage(ctx.input_tokens, output_tokens),
        }
        return Rendered(events, len(head), message)

    def error_body(self, status: int, message: str) -> JSONObject:
        error_type = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
        return {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": f"req_{secrets.token_hex(12)}",
        }

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered:
        """An error inside a 200 stream, as Anthropic sends ``overloaded_error`` mid-stream."""
        message_id = make_id("msg_", "anthropic", ctx.turn, ctx.hit)
        start = self._message_start(message_id, ctx, self._usage(ctx.input_tokens, 1))
        body = self.error_body(status, message)
        error_event: JSONObject = {"type": "error", "error": body["error"]}
        return Rendered([("message_start", start), ("error", error_event)], 1, body)

    def _cut(self, payload: str, ctx: Context) -> list[str]:
        return [payload] if ctx.minimal else pieces(payload)

    def _usage(self, input_tokens: int, output_tokens: int) -> JSONObject:
        return {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _message_start(self, message_id: str, ctx: Context, usage: JSONObject) -> JSONObject:
        return {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": ctx.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        }
