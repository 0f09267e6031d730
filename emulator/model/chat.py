"""OpenAI Chat Completions (``POST /v1/chat/completions``) as Qwen Code, OpenCode, Aider and mini-swe-agent
use it, for the model stand-in.

Shapes checked on 2026-12-02 against OpenAI's API reference as its OpenAPI spec states it (the
``ChatCompletionStreamOptions``, chunk and delta schemas, as generated into openai-struct and the
openai-ruby SDK docs, found with the docs search) and against what the four clients accepted
[observed]: a streamed answer is data-only SSE, each ``chat.completion.chunk`` with ``id`` and
``created`` (the same in every chunk), ``model``, ``choices[{index, delta, logprobs,
finish_reason}]``; the first delta carries ``role``; a tool call arrives as ``delta.tool_calls[{index,
id, type:"function", function{name, arguments}}]`` with ``arguments`` in string pieces after the
first; the last choice chunk has ``finish_reason`` (``tool_calls``/``stop``); with
``stream_options.include_usage`` every other chunk has ``usage: null`` and one more chunk with an
empty ``choices`` array carries the usage, before ``data: [DONE]``. Not streamed: a
``chat.completion`` with ``choices[0].message{role, content, tool_calls, refusal}`` and
``usage{prompt_tokens, completion_tokens, total_tokens}``. Errors are OpenAI's ``{"error": {message,
type, param, code}}``; an error inside a stream is a ``data: {"error": …}`` line (what the OpenAI
SDKs raise on), with no ``[DONE]`` after it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

from emulator.model.clients import Call, Offer, Say, render
from emulator.model.openai import openai_error_body
from emulator.model.script import Answer
from emulator.model.wire import (
    Context,
    DataSSE,
    Framing,
    Rendered,
    Route,
    bearer,
    estimate_tokens,
    make_id,
    pieces,
)
from emulator.types import JSONObject

#: Where the CLIs state their working directory [observed]: Qwen Code's first user message, OpenCode's
#: system prompt (``<env>`` block). Aider and mini-swe-agent state none (paths are relative to the cwd).
_WORKING_DIRECTORY = re.compile(
    r"(?:I'm currently working in the directory:|^\s*Working directory:)[ \t]*(/[^\n]*?)\s*$", re.MULTILINE
)


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def count_model_runs(roles: list[str | None], model_role: str) -> int:
    """Runs of ``model_role`` after the last plain user message (``None`` roles are tool results,
    which end a run but not the count).

    Counting from the last user prompt, not the start, skips what the CLIs put before it as if the
    model had said it [observed]: Qwen Code's "Got it. Thanks for the context!" and Aider's example
    exchanges and "Ok." acknowledgements.
    """
    last_user = max((i for i, role in enumerate(roles) if role == "user"), default=-1)
    turns = 0
    previous: str | None = None
    for role in roles[last_user + 1 :]:
        if role == model_role and previous != model_role:
            turns += 1
        previous = role
    return turns


class Chat:
    name = "openai-chat"
    bad_key_message = "Incorrect API key provided."

    def route(self, path: str) -> Route | None:
        return Route() if path == "/v1/chat/completions" else None

    def streams(self, body: JSONObject, route: Route) -> bool:
        return body.get("stream") is True

    def model(self, body: JSONObject, route: Route) -> str:
        model = body.get("model")
        return model if isinstance(model, str) else "gpt-standin"

    def framing(self, query: Mapping[str, str]) -> Framing:
        return DataSSE(done=b"data: [DONE]\n\n")

    def count_body(self, tokens: int) -> JSONObject:
        return {"input_tokens": tokens}

    def key(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        return bearer(headers)

    def count_turns(self, body: JSONObject) -> int:
        """Assistant runs after the last user message (``tool`` and ``system`` messages do not end a run)."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        roles: list[str | None] = []
        for message in messages:
            role = message.get("role") if isinstance(message, dict) else None
            if role in ("user", "assistant"):
                roles.append(role)
            elif role == "tool":
                roles.append(None)
        return count_model_runs(roles, "assistant")

    def detect_workspace(self, body: JSONObject) -> str | None:
        for message in _messages(body):
            if message.get("role") in ("system", "developer", "user"):
                found = _WORKING_DIRECTORY.search(message_text(message.get("content")))
                if found:
                    return found.group(1)
        return None

    def offer(self, body: JSONObject) -> Offer:
        tools: dict[str, JSONObject] = {}
        raw = body.get("tools")
        for tool in raw if isinstance(raw, list) else []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                parameters = function.get("parameters")
                tools[function["name"]] = parameters if isinstance(parameters, dict) else {}
        text = "\n".join(
            message_text(m.get("content")) for m in _messages(body) if m.get("role") in ("system", "user")
        )
        return Offer(tools, text)

    def render(self, answer: Answer, ctx: Context) -> Rendered:
        reply = render(answer, self.offer(ctx.body), ctx.workspace)
        chunk_id = make_id("chatcmpl-", "chat", ctx.turn, ctx.hit)
        created = int(time.time())
        usage_option = ctx.body.get("stream_options")
        with_usage = isinstance(usage_option, dict) and usage_option.get("include_usage") is True
        message: JSONObject = {"role": "assistant", "content": None, "refusal": None}
        if isinstance(reply, Say):
            message["content"] = reply.text
            payload, finish = reply.text, "stop"
            first: JSONObject = {"role": "assistant", "content": ""}
            deltas: list[JSONObject] = [{"content": p} for p in pieces(payload)]
            whole: JSONObject = {"role": "assistant", "content": payload}
        else:
            payload, finish = json.dumps(reply.args, separators=(",", ":")), "tool_calls"
            call = self._call(reply, make_id("call_", "chat", ctx.turn, ctx.hit), payload)
            message["tool_calls"] = [call]
            opening = {"index": 0, **call, "function": {"name": reply.name, "arguments": ""}}
            first = {"role": "assistant", "content": None, "tool_calls": [opening]}
            deltas = [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces(payload)]
            whole = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}]}
        usage = self._usage(ctx.input_tokens, estimate_tokens(len(payload)))

        def chunk(delta: JSONObject, finish_reason: str | None = None) -> tuple[str, JSONObject]:
            data = self._chunk(chunk_id, created, ctx.model, [self._choice(delta, finish_reason)])
            if with_usage:
                data["usage"] = None
            return "chunk", data

        if ctx.minimal:
            events = [chunk(whole, finish)]
            head = 0
        else:
            events = [chunk(first), *(chunk(d) for d in deltas), chunk({}, finish)]
            head = 1
        if with_usage:
            events.append(("chunk", {**self._chunk(chunk_id, created, ctx.model, []), "usage": usage}))
        body = {
            "id": chunk_id,
            "object": "chat.completion",
            "created": created,
            "model": ctx.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": usage,
            "system_fingerprint": None,
        }
        return Rendered(events, head, body)

    def error_body(self, status: int, message: str) -> JSONObject:
        return openai_error_body(status, message)

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered:
        """The first chunk, then ``data: {"error": …}`` and no ``[DONE]`` (the SDKs raise on it)."""
        chunk_id = make_id("chatcmpl-", "chat", ctx.turn, ctx.hit)
        opening = self._chunk(chunk_id, int(time.time()), ctx.model, [self._choice({"role": "assistant"})])
        body = self.error_body(status, message)
        return Rendered([("chunk", opening), ("error", body)], 1, body, complete=False)

    def _call(self, call: Call, call_id: str, arguments: str) -> JSONObject:
        return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": arguments}}

    def _choice(self, delta: JSONObject, finish_reason: str | None = None) -> JSONObject:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def _chunk(self, chunk_id: str, created: int, model: str, choices: list[JSONObject]) -> JSONObject:
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": choices,
        }

    def _usage(self, prompt: int, completion: int) -> JSONObject:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _messages(body: JSONObject) -> list[JSONObject]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
