"""The Gemini API (``/v1beta/models/{model}:generateContent`` and friends) as Gemini CLI uses it, for the
model stand-in.

The model is in the path, not the body, and so is stream-ness: ``:generateContent`` answers one JSON
``GenerateContentResponse``; ``:streamGenerateContent`` answers data-only SSE (``?alt=sse``, what
Gemini CLI 0.61.0 asks for [observed]), each event a whole ``GenerateContentResponse``, or without
``alt=sse`` a JSON array of them; ``:countTokens`` answers ``{"totalTokens": N}``. A response is
``candidates[{content{role:"model", parts}, finishReason:"STOP", index:0}]``, ``usageMetadata
{promptTokenCount, candidatesTokenCount, totalTokenCount}``, ``modelVersion``, ``responseId``; a
tool call is a part ``{"functionCall": {"name", "args"}}`` and its result comes back as a
``functionResponse`` part in a ``user`` content. The key is ``x-goog-api-key`` or ``?key=`` (or a
Bearer token, Gemini CLI's ``GEMINI_API_KEY_AUTH_MECHANISM=bearer``); errors are Google's
``{"error": {code, message, status}}``. (Google answers a bad key 400 ``INVALID_ARGUMENT``; the
stand-in answers every dialect's bad key 401, here ``UNAUTHENTICATED``.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from emulator.model.chat import count_model_runs
from emulator.model.clients import Offer, Say, render
from emulator.model.script import Answer
from emulator.model.wire import (
    Context,
    DataSSE,
    Framing,
    JSONArrayStream,
    Rendered,
    Route,
    bearer,
    estimate_tokens,
    make_id,
    pieces,
)
from emulator.types import JSONObject

_PATH = re.compile(
    r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$"
)
#: Where Gemini CLI states its working directory [observed, 0.61.0]: the first user content's
#: ``<session_context>`` lists ``- **Workspace Directories:**`` then ``  - /abs``; older versions and
#: Qwen Code say ``I'm currently working in the directory: /abs``.
_WORKING_DIRECTORY = re.compile(
    r"(?:\*\*Workspace Directories:\*\*\s*\n\s*-\s*|I'm currently working in the directory:[ \t]*)"
    r"(/[^\n]*?)\s*$",
    re.MULTILINE,
)
#: google.rpc status names for HTTP codes, as the Gemini API's error bodies spell them.
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _parts_text(content: Any) -> str:
    """The text parts of a ``Content`` (or a plain string, as some SDKs send ``systemInstruction``)."""
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return ""
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _is_tool_result(content: JSONObject) -> bool:
    parts = content.get("parts")
    return (
        isinstance(parts, list)
        and bool(parts)
        and all(isinstance(p, dict) and "functionResponse" in p for p in parts)
    )


class Gemini:
    name = "gemini"
    bad_key_message = "API key not valid. Please pass a valid API key."

    def route(self, path: str) -> Route | None:
        found = _PATH.match(path)
        if found is None:
            return None
        model, method = found.groups()
        if method == "countTokens":
            return Route(count=True, model=model)
        return Route(model=model, stream=method == "streamGenerateContent")

    def streams(self, body: JSONObject, route: Route) -> bool:
        return route.stream is True

    def model(self, body: JSONObject, route: Route) -> str:
        return route.model or "gemini-standin"

    def framing(self, query: Mapping[str, str]) -> Framing:
        if query.get("alt") == "sse":
            return DataSSE(eol=b"\r\n\r\n")
        return JSONArrayStream()

    def count_body(self, tokens: int) -> JSONObject:
        return {"totalTokens": tokens}

    def key(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        return headers.get("x-goog-api-key") or query.get("key") or bearer(headers)

    def count_turns(self, body: JSONObject) -> int:
        """``model`` runs after the last ``user`` content that is not only ``functionResponse`` parts."""
        roles: list[str | None] = []
        for content in _contents(body):
            role = content.get("role", "user")
            if role == "user":
                roles.append(None if _is_tool_result(content) else "user")
            elif role == "model":
                roles.append("model")
        return count_model_runs(roles, "model")

    def detect_workspace(self, body: JSONObject) -> str | None:
        for text in (_parts_text(body.get("systemInstruction")), *(_parts_text(c) for c in _contents(body))):
            found = _WORKING_DIRECTORY.search(text)
            if found:
                return found.group(1)
        return None

    def offer(self, body: JSONObject) -> Offer:
        tools: dict[str, JSONObject] = {}
        raw = body.get("tools")
        for tool in raw if isinstance(raw, list) else []:
            declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
            for declaration in declarations if isinstance(declarations, list) else []:
                if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                    schema = declaration.get("parametersJsonSchema") or declaration.get("parameters")
                    tools[declaration["name"]] = schema if isinstance(schema, dict) else {}
        texts = [_parts_text(body.get("systemInstruction"))]
        texts += [_parts_text(c) for c in _contents(body) if c.get("role", "user") == "user"]
        return Offer(tools, "\n".join(texts))

    def render(self, answer: Answer, ctx: Context) -> Rendered:
        reply = render(answer, self.offer(ctx.body), ctx.workspace)
        response_id = make_id("", "gemini", ctx.turn, ctx.hit)
        if isinstance(reply, Say):
            payload = reply.text
            parts: list[JSONObject] = [{"text": payload}]
            streamed = [[{"text": p}] for p in ([payload] if ctx.minimal else pieces(payload))]
        else:
            payload = json.dumps(reply.args, separators=(",", ":"))
            parts = [{"functionCall": {"name": reply.name, "args": reply.args}}]
            streamed = [parts]
        usage = self._usage(ctx.input_tokens, estimate_tokens(len(payload)))
        events = []
        for i, chunk in enumerate(streamed):
            last = i == len(streamed) - 1
            events.append(("response", self._response(ctx, response_id, chunk, last, usage)))
        return Rendered(events, 0, self._response(ctx, response_id, parts, True, usage))

    def error_body(self, status: int, message: str) -> JSONObject:
        fallback = "INVALID_ARGUMENT" if status < 500 else "INTERNAL"
        return {"error": {"code": status, "message": message, "status": STATUSES.get(status, fallback)}}

    def stream_error(self, status: int, message: str, ctx: Context) -> Rendered:
        """An ``{"error": …}`` element inside a 200 stream, as Google sends when a stream fails."""
        body = self.error_body(status, message)
        return Rendered([("error", body)], 0, body, complete=False)

    def _response(
        self, ctx: Context, response_id: str, parts: list[JSONObject], last: bool, usage: JSONObject
    ) -> JSONObject:
        candidate: JSONObject = {"content": {"role": "model", "parts": parts}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        response: JSONObject = {"candidates": [candidate]}
        if last:
            response["usageMetadata"] = usage
        response.update(modelVersion=ctx.model, responseId=response_id)
        return response

    def _usage(self, prompt: int, candidates: int) -> JSONObject:
        return {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates,
        }


def _contents(body: JSONObject) -> list[JSONObject]:
    contents = body.get("contents")
    return [c for c in contents if isinstance(c, dict)] if isinstance(contents, list) else []
