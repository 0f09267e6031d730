"""The headers of a request from the box: its credentials, its feature switches, what is passed on.

**Credentials.** Every place a model API reads a key is a credential here:
``x-api-key``, ``authorization``, ``x-goog-api-key``, ``api-key`` (Azure's),
``proxy-authorization`` and a key in the query string, each as often as it appears.
Every one of them must be this run's placeholder; one that is not is someone
else's key (an attacker's own account, most likely) and a violation. None of them
is ever passed on: the gateway sends the real key itself.

**Feature switches.** ``anthropic-beta`` turns API features on. Each flag must be
one Baton knows: harmless ones pass (prompt caching, thinking, long context, context
management, effort…); flags for server-side tools pass only with the
``model_server_tools`` grant; flags for stored files or skills never; an unknown flag
is refused. ``openai-beta`` selects whole beta APIs (assistants, realtime): refused.

**Passed on.** Only what inference needs: ``content-type`` (JSON, nothing else),
``accept``, ``user-agent``, ``anthropic-version`` and the ``anthropic-beta`` flags that
passed. Everything else the agent sent (its session ids, its SDK's telemetry, cookies,
``openai-organization`` or ``x-goog-user-project``, which would choose another account
or project to bill) stays behind.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass

from worker.runner.gateway.refusals import Reason, Refusal, shown

Headers = Sequence[tuple[str, str]]
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key", "api-key", "proxy-authorization")
_FORWARDED = frozenset({"accept", "user-agent", "anthropic-version"})
_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")
_BETA = re.compile(r"(?P<family>[a-z0-9][a-z0-9-]*?)-(?:\d{4}-\d{2}-\d{2}|\d{8})")
#: ``anthropic-beta`` families that change only how the model answers or what it is told.
HARMLESS_BETAS = frozenset(
    {
        "claude-code",
        "context-1m",
        "interleaved-thinking",
        "thinking-token-count",
        "context-management",
        "prompt-caching",
        "prompt-caching-scope",
        "mid-conversation-system",
        "effort",
        "fine-grained-tool-streaming",
        "token-efficient-tools",
        "output-128k",
        "extended-cache-ttl",
        "structured-outputs",
        "redact-thinking",
        "token-counting",
    }
)
#: Families that switch on tools the provider runs for the agent.
SERVER_BETAS = frozenset(
    {"web-fetch", "web-search", "code-execution", "mcp-client", "computer-use", "tool-search", "advisor"}
)
#: Families for stored state: the provider's file storage, skills, containers. Never passed.
STORED_BETAS = frozenset({"files-api", "skills", "container", "message-batches", "oauth"})


@dataclass(frozen=True)
class Credential:
    where: str  # the header's name, or "query parameter NAME"
    value: str


def credentials(headers: Headers, query: Sequence[tuple[str, str]]) -> list[Credential]:
    """Every credential the request carries, in order; a Bearer token without its scheme."""
    found = []
    for name, value in headers:
        lower = name.lower()
        if lower in CREDENTIAL_HEADERS:
            scheme, _, token = value.partition(" ")
            bearer = lower in ("authorization", "proxy-authorization") and scheme.lower() == "bearer"
            found.append(Credential(lower, token.strip() if bearer else value))
    found += [Credential(f"query parameter {name}", value) for name, value in query]
    return found


def judge_credentials(found: Sequence[Credential], placeholder: str) -> Refusal | None:
    """None if every credential found is this run's placeholder (none at all is the caller's case)."""
    for credential in found:
        if not hmac.compare_digest(credential.value.encode(), placeholder.encode()):
            return Refusal(
                Reason.FOREIGN_CREDENTIAL,
                f"{credential.where} carries a key that is not this run's: someone else's account; refused "
                "and nothing was sent",
            )
    return None


@dataclass(frozen=True)
class Passed:
    """The headers to send on (lower-case names), before the gateway adds the key and its defaults."""

    headers: tuple[tuple[str, str], ...]


def judge_headers(headers: Headers, *, server_tools: bool) -> Passed | Refusal:
    kept: list[tuple[str, str]] = []
    betas: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "anthropic-beta":
            for flag in filter(None, (f.strip() for f in value.split(","))):
                refused = _beta(flag, server_tools=server_tools)
                if refused is not None:
                    return refused
                betas.append(flag)
            continue
        judged = _header(lower, value)
        if isinstance(judged, Refusal):
            return judged
        kept += judged
    if betas:
        kept.append(("anthropic-beta", ",".join(dict.fromkeys(betas))))
    return Passed(tuple(kept))


def _header(name: str, value: str) -> list[tuple[str, str]] | Refusal:
    """One header (its name lower-cased): what of it is passed on, or why the request is refused."""
    if name == "content-type":
        if value.partition(";")[0].strip().lower() != "application/json":
            return Refusal(Reason.UNKNOWN_SHAPE, f"content-type {shown(value)}: the gateway reads JSON only")
        return [("content-type", "application/json")]
    if name == "content-encoding" and value.strip().lower() != "identity":
        return Refusal(Reason.UNKNOWN_SHAPE, f"content-encoding {shown(value)}: send the body as it is")
    if name == "openai-beta":
        return Refusal(Reason.FEATURE_HEADER, f"openai-beta {shown(value)}: beta APIs are not passed on")
    if name == "anthropic-version" and not _VERSION.fullmatch(value):
        return Refusal(Reason.UNKNOWN_SHAPE, f"anthropic-version {shown(value)} is not a date")
    return [(name, value)] if name in _FORWARDED else []


def _beta(flag: str, *, server_tools: bool) -> Refusal | None:
    match = _BETA.fullmatch(flag)
    family = match.group("family") if match else None
    if family in HARMLESS_BETAS:
        return None
    if family in SERVER_BETAS:
        if server_tools:
            return None
        return Refusal(
            Reason.SERVER_TOOL,
            f"anthropic-beta {shown(flag)} turns on tools the provider runs "
            "for the agent; the policy grants no model_server_tools",
        )
    if family in STORED_BETAS:
        return Refusal(
            Reason.STORED_STATE,
            f"anthropic-beta {shown(flag)} turns on the provider's stored "
            "files, skills or containers; never passed on",
        )
    return Refusal(
        Reason.FEATURE_HEADER, f"anthropic-beta {shown(flag)} is a flag Baton does not know; refused"
    )
