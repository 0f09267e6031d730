"""Reading a request body as the gateway does: an allow-list walk that stops at the first surprise.

Each protocol's module (``shapes_anthropic``, ``shapes_openai``, ``shapes_gemini``)
describes the bodies Baton passes on with the helpers here. Three kinds of
refusal come out of them, each naming the JSON path it is about:

- ``server-tool``: a tool the provider would run for the agent (web search or
  fetch, code execution, remote MCP, computer use), or a field that turns one on;
- ``remote-source``: content the provider would fetch (a URL) or take from its
  own storage by id (a Files API file), instead of bytes in the request;
- ``unknown-shape``: any field, type or value the walk does not know. New API
  features arrive as new fields and new ``type`` strings: until Baton knows what
  one does, it is refused, never passed on in hope.

``server_tools`` (the policy granted ``model_server_tools``) lets the first kind
through; the other two never pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from worker.runner.gateway.refusals import Reason, Refusal, shown

#: Bounds on what a walk will look at; a body past them is refused, not half-read.
MAX_ITEMS = 100_000
MAX_DEPTH = 64
JSON = dict[str, Any]


class Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal


class Walk:
    """One body's walk: the grant it is judged under, and the helpers every protocol uses."""

    def __init__(self, *, server_tools: bool, provider: str = "") -> None:
        self.server_tools = server_tools
        self.provider = provider

    def refuse(self, reason: Reason, where: str, text: str) -> NoReturn:
        raise Refused(Refusal(reason, f"{where}: {text}" if where else text))

    def obj(
        self,
        value: object,
        where: str,
        allowed: frozenset[str],
        *,
        banned: Mapping[str, tuple[Reason, str]] | None = None,
        required: Sequence[str] = (),
    ) -> JSON:
        """``value`` as an object with only ``allowed`` keys; a ``banned`` key is refused with its
        reason (a server-tool one passes when the grant allows it)."""
        if not isinstance(value, dict):
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"expected an object, got {_kind(value)}")
        for key in value:
            if key in allowed:
                continue
            if banned is not None and key in banned:
                reason, why = banned[key]
                if reason is Reason.SERVER_TOOL and self.server_tools:
                    continue
                self.refuse(reason, field(where, key), why)
            self.refuse(Reason.UNKNOWN_SHAPE, field(where, key), "not a field Baton knows; refused")
        for key in required:
            if key not in value:
                self.refuse(Reason.UNKNOWN_SHAPE, where, f"{key!r} is missing")
        return value

    def items(self, value: object, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"expected a list, got {_kind(value)}")
        if len(value) > MAX_ITEMS:
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"more than {MAX_ITEMS} items")
        return value

    def text(self, value: object, where: str) -> str:
        if not isinstance(value, str):
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"expected a string, got {_kind(value)}")
        return value

    def one_of(self, value: object, where: str, allowed: frozenset[str]) -> str:
        if not isinstance(value, str) or value not in allowed:
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"{shown(value)} is not a value Baton knows")
        return value

    def typed(
        self,
        value: object,
        where: str,
        kinds: Mapping[str, Callable[[JSON, str], None]],
        *,
        banned: Mapping[str, tuple[Reason, str]] | None = None,
        prefixes: Sequence[tuple[str, Reason, str]] = (),
        default: str | None = None,
    ) -> None:
        """An object told apart by its ``type``: checked by ``kinds[type]``. A banned type (exactly,
        or by one of ``prefixes``, as versioned types like ``web_search_20250305`` need) is
        refused with its reason; any other type is unknown."""
        if not isinstance(value, dict):
            self.refuse(Reason.UNKNOWN_SHAPE, where, f"expected an object, got {_kind(value)}")
        kind = value.get("type", default)
        check = kinds.get(kind) if isinstance(kind, str) else None
        if check is not None:
            check(value, where)
            return
        why: tuple[Reason, str] | None = (banned or {}).get(kind) if isinstance(kind, str) else None
        if why is None and isinstance(kind, str):
            why = next(((r, t) for prefix, r, t in prefixes if kind.startswith(prefix)), None)
        if why is not None:
            if why[0] is Reason.SERVER_TOOL and self.server_tools:
                return
            self.refuse(why[0], field(where, "type"), f"{shown(kind)}: {why[1]}")
        self.refuse(Reason.UNKNOWN_SHAPE, field(where, "type"), f"{shown(kind)} is not a type Baton knows")

    def server(self, where: str, text: str) -> None:
        """A server tool found outside a ``type`` (a field, a caller, a model name): refused, unless
        the policy granted ``model_server_tools``."""
        if not self.server_tools:
            self.refuse(Reason.SERVER_TOOL, where, text)

    def callers(self, value: object, where: str) -> None:
        """``allowed_callers``: anything but ``direct`` lets the provider call the tool from code it runs
        (programmatic tool calling)."""
        for i, caller in enumerate(self.items(value, where)):
            if caller != "direct":
                self.server(
                    at(where, i), f"{shown(caller)}: the provider would call this tool from code it runs"
                )

    def schema(self, value: object, where: str) -> None:
        """A tool's JSON Schema is the agent's own business, except a ``$ref`` that leaves the schema:
        that would be a URL for the provider to fetch."""
        stack: list[tuple[object, int]] = [(value, 0)]
        seen = 0
        while stack:
            node, depth = stack.pop()
            seen += 1
            if seen > MAX_ITEMS or depth > MAX_DEPTH:
                self.refuse(Reason.UNKNOWN_SHAPE, where, "the schema is too large or too deep")
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and not ref.startswith("#"):
                    self.refuse(Reason.REMOTE_SOURCE, where, f"$ref {shown(ref)} points outside the schema")
                stack.extend((child, depth + 1) for child in node.values())
            elif isinstance(node, list):
                stack.extend((child, depth + 1) for child in node)


def names(words: str) -> frozenset[str]:
    """An allow-list written as words: ``names("model messages tools")``."""
    return frozenset(words.split())


def field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def at(where: str, index: int) -> str:
    return f"{where}[{index}]"


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def judge(
    check: Callable[[Walk, JSON], None], body: object, *, server_tools: bool, provider: str = ""
) -> Refusal | None:
    """Run one protocol's check on a parsed body: None if it may be passed on."""
    walk = Walk(server_tools=server_tools, provider=provider)
    if not isinstance(body, dict):
        return Refusal(Reason.UNKNOWN_SHAPE, "the body is not a JSON object")
    try:
        check(walk, body)
    except Refused as exc:
        return exc.refusal
    return None
