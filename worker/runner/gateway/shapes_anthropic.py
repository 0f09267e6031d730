"""Anthropic Messages bodies the gateway passes on (``/v1/messages``, ``/v1/messages/count_tokens``).

Checked against what Claude Code 2.1.197 sends [observed: top-level ``model``, ``messages``,
``system``, ``tools`` (23 plain tools), ``metadata``, ``max_tokens``, ``thinking``,
``context_management``, ``output_config``, ``stream``; messages with ``role`` user,
assistant and a mid-conversation ``system``; blocks text, tool_use, tool_result with
``cache_control``] and Anthropic's API reference for the rest.

Refused: ``mcp_servers`` and ``container`` (the provider would connect to a remote MCP
server, or run code in a container), server tools (``web_search_*``, ``web_fetch_*``,
``code_execution_*``, ``tool_search_*``, ``mcp_toolset``) and the blocks they leave in
a conversation, Anthropic-defined client tools (``bash_*``, ``text_editor_*``,
``computer_*``, ``memory_*``: Baton passes plain client tools only), and image or
document sources given by ``url`` or by Files API ``file`` id.
"""

from __future__ import annotations

from worker.runner.gateway.refusals import Reason
from worker.runner.gateway.shapes import JSON, Walk, at, field, names

_S, _R, _U = Reason.SERVER_TOOL, Reason.REMOTE_SOURCE, Reason.UNKNOWN_SHAPE

_COMMON = names(
    "model messages system tools tool_choice thinking context_management output_config output_format "
    "cache_control speed"
)
MESSAGES_FIELDS = _COMMON | names(
    "max_tokens metadata stop_sequences stream temperature top_k top_p service_tier inference_geo"
)
COUNT_FIELDS = _COMMON
_BANNED = {
    "mcp_servers": (_S, "remote MCP servers the provider would connect to for the agent"),
    "container": (_S, "a container the provider would run code in for the agent"),
}
#: Server tools, and the blocks they leave in a conversation: run at the provider.
SERVER_PREFIXES = (
    ("web_search", _S, "a server tool: the provider would search the web for the agent"),
    ("web_fetch", _S, "a server tool: the provider would fetch URLs for the agent"),
    ("code_execution", _S, "a server tool: the provider would run code for the agent"),
    ("bash_code_execution", _S, "a server tool: the provider would run code for the agent"),
    ("text_editor_code_execution", _S, "a server tool: the provider would run code for the agent"),
    ("tool_search", _S, "a server tool run by the provider"),
    ("mcp_", _S, "a remote MCP server the provider would connect to"),
    ("server_tool_use", _S, "a server tool call run by the provider"),
    ("container_upload", _S, "a file for the provider's code-execution container"),
    ("advisor", _S, "a server tool: another model the provider runs for the agent"),
    ("tool_reference", _S, "a tool found by the provider's tool search"),
)
_DEFINED_CLIENT = tuple(
    (prefix, _U, "an Anthropic-defined tool; Baton passes plain client tools only")
    for prefix in ("bash_", "text_editor_", "computer_", "memory_")
)
_SOURCE_BANNED = {
    "url": (_R, "content the provider would fetch from a URL"),
    "file": (_R, "content the provider would take from its Files API storage"),
}
_TOOL_FIELDS = names(
    "type name description input_schema cache_control strict input_examples defer_loading "
    "eager_input_streaming allowed_callers"
)


def messages(walk: Walk, body: JSON) -> None:
    _Body(walk).check(body, MESSAGES_FIELDS)


def count_tokens(walk: Walk, body: JSON) -> None:
    _Body(walk).check(body, COUNT_FIELDS)


class _Body:
    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self.blocks = {
            "text": self.text,
            "image": self.image,
            "document": self.document,
            "tool_use": self.tool_use,
            "tool_result": self.tool_result,
            "thinking": self.thinking,
            "redacted_thinking": self.redacted_thinking,
            "search_result": self.search_result,
            "compaction": self.compaction,
        }

    def check(self, body: JSON, allowed: frozenset[str]) -> None:
        walk = self.walk
        walk.obj(body, "", allowed, banned=_BANNED, required=("model", "messages"))
        walk.text(body["model"], "model")
        if "system" in body and not isinstance(body["system"], str):
            for i, block in enumerate(walk.items(body["system"], "system")):
                walk.typed(block, at("system", i), {"text": self.text})
        for i, message in enumerate(walk.items(body["messages"], "messages")):
            self.message(message, at("messages", i))
        for i, tool in enumerate(walk.items(body.get("tools", []), "tools")):
            walk.typed(
                tool,
                at("tools", i),
                {"custom": self.tool},
                default="custom",
                prefixes=(*SERVER_PREFIXES, *_DEFINED_CLIENT),
            )
        if "tool_choice" in body:
            kinds = dict.fromkeys(("auto", "any", "tool", "none"), self.tool_choice)
            walk.typed(body["tool_choice"], "tool_choice", kinds)
        if "thinking" in body:
            thinking = walk.obj(body["thinking"], "thinking", frozenset({"type", "budget_tokens", "display"}))
            walk.one_of(thinking.get("type"), "thinking.type", frozenset({"enabled", "disabled", "adaptive"}))
        if "context_management" in body:
            self.context_management(body["context_management"], "context_management")
        if "output_config" in body:
            allowed = frozenset({"effort", "format", "task_budget"})
            config = walk.obj(body["output_config"], "output_config", allowed)
            if "format" in config:
                self.output_format(config["format"], "output_config.format")
        if "output_format" in body:
            self.output_format(body["output_format"], "output_format")
        if "metadata" in body:
            walk.obj(body["metadata"], "metadata", frozenset({"user_id"}))
        for i, stop in enumerate(walk.items(body.get("stop_sequences", []), "stop_sequences")):
            walk.text(stop, at("stop_sequences", i))

    def message(self, value: object, where: str) -> None:
        message = self.walk.obj(value, where, frozenset({"role", "content"}), required=("role", "content"))
        # A mid-conversation "system" message is how Claude Code sends reminders [observed].
        self.walk.one_of(message["role"], field(where, "role"), frozenset({"user", "assistant", "system"}))
        content = message["content"]
        if isinstance(content, str):
            return
        for i, block in enumerate(self.walk.items(content, field(where, "content"))):
            self.walk.typed(block, at(field(where, "content"), i), self.blocks, prefixes=SERVER_PREFIXES)

    def tool(self, tool: JSON, where: str) -> None:
        self.walk.obj(tool, where, _TOOL_FIELDS, required=("name", "input_schema"))
        self.walk.text(tool["name"], field(where, "name"))
        self.walk.schema(tool["input_schema"], field(where, "input_schema"))
        if "allowed_callers" in tool:
            self.walk.callers(tool["allowed_callers"], field(where, "allowed_callers"))

    def tool_choice(self, choice: JSON, where: str) -> None:
        self.walk.obj(choice, where, frozenset({"type", "name", "disable_parallel_tool_use"}))

    def context_management(self, value: object, where: str) -> None:
        """Edits the provider makes to the context itself (clearing old thinking or tool results)."""
        config = self.walk.obj(value, where, frozenset({"edits"}))
        for i, edit in enumerate(self.walk.items(config.get("edits", []), field(where, "edits"))):
            kind = edit.get("type") if isinstance(edit, dict) else None
            if not (isinstance(kind, str) and kind.startswith(("clear_thinking_", "clear_tool_uses_"))):
                self.walk.one_of(kind, field(at(field(where, "edits"), i), "type"), frozenset())

    def output_format(self, value: object, where: str) -> None:
        found = self.walk.obj(value, where, frozenset({"type", "schema"}), required=("type",))
        self.walk.one_of(found["type"], field(where, "type"), frozenset({"json_schema"}))
        self.walk.schema(found.get("schema", {}), field(where, "schema"))

    # -- content blocks ---------------------------------------------------------------------------

    def text(self, block: JSON, where: str) -> None:
        allowed = frozenset({"type", "text", "cache_control", "citations"})
        self.walk.obj(block, where, allowed, required=("text",))
        self.walk.text(block["text"], field(where, "text"))

    def image(self, block: JSON, where: str) -> None:
        self.walk.obj(block, where, frozenset({"type", "source", "cache_control"}), required=("source",))
        self.walk.typed(
            block["source"], field(where, "source"), {"base64": self.inline}, banned=_SOURCE_BANNED
        )

    def document(self, block: JSON, where: str) -> None:
        allowed = frozenset({"type", "source", "title", "context", "citations", "cache_control"})
        self.walk.obj(block, where, allowed, required=("source",))
        kinds = {"base64": self.inline, "text": self.inline, "content": self.inline_content}
        self.walk.typed(block["source"], field(where, "source"), kinds, banned=_SOURCE_BANNED)

    def inline(self, source: JSON, where: str) -> None:
        self.walk.obj(source, where, frozenset({"type", "media_type", "data"}), required=("data",))
        self.walk.text(source["data"], field(where, "data"))

    def inline_content(self, source: JSON, where: str) -> None:
        self.walk.obj(source, where, frozenset({"type", "content"}), required=("content",))
        if isinstance(source["content"], str):
            return
        for i, block in enumerate(self.walk.items(source["content"], field(where, "content"))):
            self.walk.typed(block, at(field(where, "content"), i), {"text": self.text, "image": self.image})

    def tool_use(self, block: JSON, where: str) -> None:
        allowed = frozenset({"type", "id", "name", "input", "cache_control", "caller"})
        self.walk.obj(block, where, allowed, required=("id", "name"))
        caller = block.get("caller")
        if caller is not None and not (isinstance(caller, dict) and caller.get("type") == "direct"):
            self.walk.server(field(where, "caller"), "a call made from code the provider ran")

    def tool_result(self, block: JSON, where: str) -> None:
        allowed = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})
        self.walk.obj(block, where, allowed, required=("tool_use_id",))
        content = block.get("content", "")
        if isinstance(content, str):
            return
        kinds = {
            "text": self.text,
            "image": self.image,
            "document": self.document,
            "search_result": self.search_result,
        }
        for i, part in enumerate(self.walk.items(content, field(where, "content"))):
            self.walk.typed(part, at(field(where, "content"), i), kinds, prefixes=SERVER_PREFIXES)

    def thinking(self, block: JSON, where: str) -> None:
        self.walk.obj(block, where, frozenset({"type", "thinking", "signature"}))

    def compaction(self, block: JSON, where: str) -> None:
        """The provider's own summary of earlier turns (context management), sent back as it came."""
        self.walk.obj(block, where, frozenset({"type", "content", "encrypted_content", "cache_control"}))

    def redacted_thinking(self, block: JSON, where: str) -> None:
        self.walk.obj(block, where, frozenset({"type", "data"}))

    def search_result(self, block: JSON, where: str) -> None:
        """Search results the client supplies itself: its ``source`` is a label; nothing is fetched."""
        allowed = frozenset({"type", "source", "title", "content", "citations", "cache_control"})
        self.walk.obj(block, where, allowed, required=("content",))
        self.walk.text(block.get("source", ""), field(where, "source"))
        for i, part in enumerate(self.walk.items(block["content"], field(where, "content"))):
            self.walk.typed(part, at(field(where, "content"), i), {"text": self.text})
