"""One request from the box, judged: pass it on (and how), answer it here, or refuse it. Pure.

The order is the promise, and each step's refusal names what it found:

1. the target is a path on the gateway, and its query string parses;
2. every credential the request carries is this run's placeholder (a foreign key is the
   finding that matters most, so it is looked for before anything else);
3. ``HEAD``/``GET`` with no body is a connectivity probe (Claude Code sends one):
   answered here, never passed on;
4. the provider is one the agent's ``model_endpoints`` grant, and the operation is
   inference (``operations``);
5. there is a credential at all;
6. the headers: JSON only, no feature switch Baton does not know (``headers``);
7. the body is a JSON object of a shape Baton knows, with nothing in it that would
   make the provider fetch, search, execute or connect (``shapes_*``).

Then the body goes on as the check read it, written anew (so a key given twice cannot
mean one thing to Baton and another to the provider), with one change: a streamed Chat
Completion is asked to report its usage (``stream_options.include_usage``), because a
stream without it cannot be metered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

import orjson

from worker.runner.gateway import headers as _headers
from worker.runner.gateway import operations, shapes, shapes_anthropic, shapes_gemini, shapes_openai
from worker.runner.gateway.operations import CREDENTIAL_PARAMS, Operation
from worker.runner.gateway.providers import Protocol, Wire
from worker.runner.gateway.refusals import Reason, Refusal

Check = Callable[[shapes.Walk, shapes.JSON], None]
CHECKS: dict[tuple[Protocol, str], Check] = {
    (Protocol.ANTHROPIC, "messages"): shapes_anthropic.messages,
    (Protocol.ANTHROPIC, "count_tokens"): shapes_anthropic.count_tokens,
    (Protocol.OPENAI_RESPONSES, "responses"): shapes_openai.responses,
    (Protocol.OPENAI_CHAT, "chat.completions"): shapes_openai.chat_completions,
    (Protocol.GEMINI, "generateContent"): shapes_gemini.generate,
    (Protocol.GEMINI, "streamGenerateContent"): shapes_gemini.generate,
    (Protocol.GEMINI, "countTokens"): shapes_gemini.count_tokens,
}


@dataclass(frozen=True)
class Probe:
    """A ``HEAD``/``GET`` with no body: answered 404 by the gateway itself."""

    provider: str


@dataclass(frozen=True)
class Admitted:
    provider: str
    operation: Operation
    #: Headers to send on (lower-case), before the key and the provider's defaults are added.
    headers: tuple[tuple[str, str], ...]
    #: The body to send on: the agent's, or with usage reporting asked for (see the module docstring).
    body: bytes
    model: str
    stream: bool


def admit(
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    *,
    placeholder: str,
    granted: Mapping[str, Wire],
    server_tools: bool,
) -> Admitted | Probe | Refusal:
    split = operations.split_target(target)
    if split is None:
        return Refusal(Reason.BAD_REQUEST, "the request target is not a path on the gateway")
    try:
        pairs = parse_qsl(split[1], keep_blank_values=True, strict_parsing=True) if split[1] else []
    except ValueError:
        return Refusal(Reason.BAD_REQUEST, "the query string does not parse")
    found = _headers.credentials(headers, [(k, v) for k, v in pairs if k.lower() in CREDENTIAL_PARAMS])
    if found:
        refused = _headers.judge_credentials(found, placeholder)
        if refused is not None:
            return refused
    if method in ("HEAD", "GET") and not body:
        return Probe(split[0].lstrip("/").partition("/")[0])
    where = operations.route(method, split[0], pairs, granted)
    if isinstance(where, Refusal):
        return where
    if not found:
        return Refusal(
            Reason.MISSING_CREDENTIAL, "the request carries no key (not even the run's placeholder)"
        )
    passed = _headers.judge_headers(headers, server_tools=server_tools)
    if isinstance(passed, Refusal):
        return passed
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Refusal(Reason.UNKNOWN_SHAPE, "the body is not JSON")
    operation = where.operation
    check = CHECKS[(operation.protocol, operation.name)]
    refused = shapes.judge(check, parsed, server_tools=server_tools, provider=where.provider)
    if refused is not None:
        return refused
    model = operation.model or str(parsed.get("model"))
    stream = operation.streams or parsed.get("stream") is True
    if operation.protocol is Protocol.OPENAI_CHAT and stream:
        options = parsed.get("stream_options")
        parsed["stream_options"] = (
            {**options, "include_usage": True} if isinstance(options, dict) else {"include_usage": True}
        )
    # What goes on is what was checked, written anew: a body with a key twice (which the provider's
    # parser might read the other way) reaches it as the one object the check saw.
    return Admitted(where.provider, operation, passed.headers, orjson.dumps(parsed), model, stream)
