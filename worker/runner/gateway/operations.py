"""Which requests are inference: the closed list of operations, per wire protocol.

A request's target in the box is ``/<provider>/<the provider's own path>[?query]``.
Only these pass, and only as POST:

==================  ==========================================================
protocol            operations (path after the provider's name)
==================  ==========================================================
anthropic-messages  ``/v1/messages``, ``/v1/messages/count_tokens``
openai-responses    ``/v1/responses``
openai-chat         ``/v1/chat/completions``
gemini              ``/v1beta/models/M:generateContent``, ``…:streamGenerateContent``,
                    ``…:countTokens`` (and the same under ``/v1/``)
==================  ==========================================================

Everything else a provider offers is refused by not being here: files and
uploads, batches, assistants, threads, vector stores, containers, skills,
fine-tuning, model and admin endpoints, stored responses, cached contents.
A path is matched exactly: no percent-encoding, no dot segments, no doubled
slash, so no second reading of it can name another endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from worker.runner.gateway.providers import Protocol, Wire
from worker.runner.gateway.refusals import Reason, Refusal, shown

#: Query parameters that carry a key (Gemini's ``key`` above all): judged as credentials, never sent on.
CREDENTIAL_PARAMS = frozenset({"key", "api_key", "apikey", "api-key", "access_token"})
_PATH = re.compile(r"/[A-Za-z0-9._:/-]*")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_GEMINI = re.compile(r"/(v1beta|v1)/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)")


@dataclass(frozen=True)
class Operation:
    protocol: Protocol
    name: str
    #: The path sent to the provider, under its API root.
    path: str
    #: Query parameters passed on (never a credential).
    query: tuple[tuple[str, str], ...] = ()
    #: The model when the path names it (Gemini); else it is in the body.
    model: str | None = None
    #: Token counting costs nothing and answers no question: not metered.
    metered: bool = True
    #: The answer is a stream because of the operation itself (Gemini's streamGenerateContent).
    streams: bool = False


@dataclass(frozen=True)
class Target:
    provider: str
    operation: Operation


#: (protocol, path) -> operation name and whether it is metered; allowed non-credential query values.
_FIXED: dict[tuple[Protocol, str], tuple[str, bool]] = {
    (Protocol.ANTHROPIC, "/v1/messages"): ("messages", True),
    (Protocol.ANTHROPIC, "/v1/messages/count_tokens"): ("count_tokens", False),
    (Protocol.OPENAI_RESPONSES, "/v1/responses"): ("responses", True),
    (Protocol.OPENAI_CHAT, "/v1/chat/completions"): ("chat.completions", True),
}
_QUERY: dict[Protocol, dict[str, frozenset[str]]] = {
    # Claude Code asks for the beta surface this way [observed: ?beta=true on every call].
    Protocol.ANTHROPIC: {"beta": frozenset({"true"})},
    # Server-sent events instead of a JSON array, for streamGenerateContent.
    Protocol.GEMINI: {"alt": frozenset({"sse"})},
}


def split_target(target: str) -> tuple[str, str] | None:
    """(path, query) of an origin-form target; None for any other form (absolute, ``*``, a fragment)."""
    if not target.startswith("/") or "#" in target:
        return None
    path, _, query = target.partition("?")
    return path, query


def route(
    method: str, path: str, query: Sequence[tuple[str, str]], granted: Mapping[str, Wire]
) -> Target | Refusal:
    """The operation a request asks for, or why it is not one the gateway passes on.

    ``path`` and ``query`` (its parameters, parsed): the target, split by ``split_target``.
    ``granted``: the providers this run's agent may reach (its ``model_endpoints``).
    """
    if not _PATH.fullmatch(path) or "//" in path or "/./" in path or "/../" in path or path.endswith("/.."):
        return Refusal(Reason.NOT_INFERENCE, f"{shown(path)} is not a path the gateway knows")
    provider, _, rest = path[1:].partition("/")
    wire = granted.get(provider)
    if wire is None:
        return Refusal(
            Reason.PROVIDER_NOT_GRANTED,
            f"{shown(provider)} is not a model provider this agent may use (its model_endpoints grant: "
            f"{', '.join(sorted(granted)) or 'none'})",
        )
    found = _operation(wire, "/" + rest)
    if found is None:
        return Refusal(
            Reason.NOT_INFERENCE,
            f"{method} {shown('/' + rest)} is not an inference call of {provider} (only "
            f"{_listing(wire)} are passed on; files, batches and every other endpoint are refused)",
        )
    if method != "POST":
        return Refusal(Reason.NOT_INFERENCE, f"{method} {shown('/' + rest)}: only POST is passed on")
    allowed = _QUERY.get(found.protocol, {})
    kept: list[tuple[str, str]] = []
    for name, value in query:
        if name.lower() in CREDENTIAL_PARAMS:
            continue  # judged as a credential, never sent on
        if value not in allowed.get(name, frozenset()):
            return Refusal(
                Reason.UNKNOWN_SHAPE,
                f"query parameter {shown(name)}={shown(value, 30)} is not one Baton knows",
            )
        kept.append((name, value))
    operation = Operation(
        found.protocol, found.name, found.path, tuple(kept), found.model, found.metered, found.streams
    )
    return Target(provider, operation)


def _operation(wire: Wire, path: str) -> Operation | None:
    for protocol in wire.protocols:
        fixed = _FIXED.get((protocol, path))
        if fixed is not None:
            return Operation(protocol, fixed[0], path, metered=fixed[1])
        if protocol is Protocol.GEMINI and (match := _GEMINI.fullmatch(path)):
            model, method = match.group(2), match.group(3)
            if not _MODEL.fullmatch(model):
                return None
            return Operation(
                protocol,
                method,
                path,
                model=model,
                metered=method != "countTokens",
                streams=method == "streamGenerateContent",
            )
    return None


def _listing(wire: Wire) -> str:
    paths = [path for (protocol, path) in _FIXED if protocol in wire.protocols]
    if Protocol.GEMINI in wire.protocols:
        paths.append("/v1beta/models/MODEL:generateContent|streamGenerateContent|countTokens")
    return ", ".join(f"POST {p}" for p in paths)
