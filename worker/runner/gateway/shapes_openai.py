"""OpenAI bodies the gateway passes on: Responses (``/v1/responses``) and Chat Completions.

Responses is checked against what Codex 0.171.0 sends [observed: ``model``, ``input``
(an ``additional_tools`` item carrying namespaces of ``function`` and ``custom`` tools,
``message`` items with ``input_text``, ``function_call``, ``function_call_output``),
``tool_choice``, ``parallel_tool_calls``, ``reasoning``, ``store: false``, ``include``
``["reasoning.encrypted_content"]``, ``prompt_cache_key``, ``text``, ``client_metadata``,
``stream``] and OpenAI's API reference for the rest. Chat Completions follows the API
reference; the OpenAI-compatible providers (Mistral, DeepSeek, Groq, OpenRouter) are
held to the same list, so their own extensions (OpenRouter's ``plugins`` with web
search, say) are refused until Baton knows them.

Refused: tools that run at the provider (``web_search*``, ``file_search``,
``code_interpreter``, ``mcp``, ``image_generation``, ``computer*``, hosted ``shell``),
the items they leave in a conversation, ``web_search_options``, stored state the
provider would read for the agent (``previous_response_id``, ``conversation``,
``prompt``, ``item_reference``, ``background``), and content given by URL or by
``file_id`` instead of by value (an ``image_url`` that is not a ``data:`` URL, an
``input_file`` with ``file_url`` or ``file_id``).
"""

from __future__ import annotations

from worker.runner.gateway.refusals import Reason
from worker.runner.gateway.shapes import JSON, Walk, at, field, names

_S, _R, _T = Reason.SERVER_TOOL, Reason.REMOTE_SOURCE, Reason.STORED_STATE

RESPONSES_FIELDS = names(
    "model input instructions tools tool_choice parallel_tool_calls reasoning store stream stream_options "
    "include prompt_cache_key prompt_cache_retention prompt_cache_options text client_metadata service_tier "
    "max_output_tokens max_tool_calls temperature top_p top_logprobs metadata truncation user "
    "safety_identifier context_management moderation"
)
_RESPONSES_BANNED = {
    "previous_response_id": (_T, "a stored response the provider would read for the agent"),
    "conversation": (_T, "a stored conversation the provider would read for the agent"),
    "prompt": (_T, "a stored prompt template the provider would fill in"),
    "background": (_T, "a response the provider would keep and run on its own"),
}
_SERVER_TOOLS = dict.fromkeys(
    names("file_search code_interpreter mcp image_generation programmatic_tool_calling tool_search"),
    (_S, "a tool the provider runs for the agent"),
)
_SERVER_PREFIXES = (
    ("web_search", _S, "a tool the provider runs for the agent (it would search the web)"),
    ("computer", _S, "a computer-use tool the provider drives"),
)
#: Items the provider's own tools leave in a conversation.
_SERVER_ITEMS = dict.fromkeys(
    names(
        "web_search_call file_search_call code_interpreter_call image_generation_call computer_call "
        "computer_call_output mcp_call mcp_list_tools mcp_approval_request mcp_approval_response program "
        "program_output tool_search_call tool_search_output"
    ),
    (_S, "the record of a tool the provider ran"),
) | {"item_reference": (_T, "a stored item the provider would read for the agent")}
_INCLUDE = frozenset({"reasoning.encrypted_content", "message.output_text.logprobs"})

CHAT_FIELDS = names(
    "model messages tools tool_choice parallel_tool_calls stream stream_options temperature top_p max_tokens "
    "max_completion_tokens n stop presence_penalty frequency_penalty seed user response_format "
    "reasoning_effort logit_bias logprobs top_logprobs metadata store service_tier modalities prediction "
    "verbosity prompt_cache_key safety_identifier functions function_call moderation prompt_cache_options "
    "prompt_cache_retention"
)
_CHAT_BANNED = {
    "web_search_options": (_S, "the provider would search the web for the agent"),
    "audio": (Reason.UNKNOWN_SHAPE, "audio output is not passed on"),
    "plugins": (_S, "the provider's plugins (web search among them) run for the agent"),
}
_DATA_URL = "data:"


def searching_model(provider: str, model: str) -> str | None:
    """Models that search the web by themselves, whatever the request says: OpenRouter's ``:online``
    variants, Groq's ``compound`` systems, OpenAI's ``*-search-*`` models."""
    if provider == "openrouter" and model.endswith(":online"):
        return "an :online model searches the web for the agent"
    if provider == "groq" and "compound" in model:
        return "a compound system runs web search and code at the provider"
    if "-search-" in model or model.endswith("-search"):
        return "a search model searches the web for the agent"
    return None


def responses(walk: Walk, body: JSON) -> None:
    _Responses(walk).check(body)


def chat_completions(walk: Walk, body: JSON) -> None:
    _Chat(walk).check(body)


def _function_tool(walk: Walk, tool: JSON, where: str) -> None:
    allowed = frozenset(
        {
            "type",
            "name",
            "description",
            "parameters",
            "strict",
            "defer_loading",
            "output_schema",
            "allowed_callers",
        }
    )
    walk.obj(tool, where, allowed, required=("name",))
    walk.text(tool["name"], field(where, "name"))
    walk.schema(tool.get("parameters", {}), field(where, "parameters"))
    walk.schema(tool.get("output_schema", {}), field(where, "output_schema"))
    if "allowed_callers" in tool:
        walk.callers(tool["allowed_callers"], field(where, "allowed_callers"))


def _caller(walk: Walk, item: JSON, where: str) -> None:
    """A call or output an item says code the provider ran made (``program``): programmatic tool calling."""
    caller = item.get("caller")
    if caller is not None and not (isinstance(caller, dict) and caller.get("type") == "direct"):
        walk.server(field(where, "caller"), "a call made from code the provider ran")


class _Responses:
    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self.tools = {
            "function": self.function,
            "custom": self.custom,
            "namespace": self.namespace,
            "local_shell": self.local_shell,
            "shell": self.shell,
            "apply_patch": self.apply_patch,
        }
        self.items = {
            "message": self.message,
            "function_call": self.call,
            "custom_tool_call": self.call,
            "function_call_output": self.output,
            "custom_tool_call_output": self.output,
            "reasoning": self.reasoning,
            "additional_tools": self.additional_tools,
            "compaction": self.compaction,
            "local_shell_call": self.local_shell_call,
            "local_shell_call_output": self.output,
            "shell_call": self.shell_call,
            "shell_call_output": self.output,
            "apply_patch_call": self.apply_patch_call,
            "apply_patch_call_output": self.output,
        }
        self.parts = {
            "input_text": self.text_part,
            "output_text": self.text_part,
            "refusal": self.refusal,
            "input_image": self.input_image,
            "input_file": self.input_file,
        }

    def check(self, body: JSON) -> None:
        walk = self.walk
        walk.obj(body, "", RESPONSES_FIELDS, banned=_RESPONSES_BANNED, required=("model",))
        walk.text(body["model"], "model")
        if "instructions" in body and body["instructions"] is not None:
            walk.text(body["instructions"], "instructions")
        given = body.get("input", [])
        if not isinstance(given, str):
            for i, item in enumerate(walk.items(given, "input")):
                walk.typed(item, at("input", i), self.items, banned=_SERVER_ITEMS, default="message")
        for i, tool in enumerate(walk.items(body.get("tools", []), "tools")):
            self.tool(tool, at("tools", i))
        if isinstance(body.get("tool_choice"), dict):
            kinds = dict.fromkeys(
                ("function", "custom", "allowed_tools", "apply_patch", "shell"), self.tool_choice
            )
            walk.typed(
                body["tool_choice"], "tool_choice", kinds, banned=_SERVER_TOOLS, prefixes=_SERVER_PREFIXES
            )
        elif "tool_choice" in body:
            walk.one_of(body["tool_choice"], "tool_choice", frozenset({"auto", "none", "required"}))
        for i, value in enumerate(walk.items(body.get("include") or [], "include")):
            walk.one_of(value, at("include", i), _INCLUDE)

    def tool(self, tool: object, where: str) -> None:
        self.walk.typed(tool, where, self.tools, banned=_SERVER_TOOLS, prefixes=_SERVER_PREFIXES)

    def function(self, tool: JSON, where: str) -> None:
        _function_tool(self.walk, tool, where)

    def custom(self, tool: JSON, where: str) -> None:
        allowed = frozenset({"type", "name", "description", "format", "defer_loading", "allowed_callers"})
        self.walk.obj(tool, where, allowed, required=("name",))
        if "allowed_callers" in tool:
            self.walk.callers(tool["allowed_callers"], field(where, "allowed_callers"))

    def shell(self, tool: JSON, where: str) -> None:
        """A shell the client runs (``environment`` local); in a container, the provider runs it."""
        self.walk.obj(tool, where, frozenset({"type", "environment", "allowed_callers"}))
        self.local_environment(tool.get("environment"), field(where, "environment"))
        if "allowed_callers" in tool:
            self.walk.callers(tool["allowed_callers"], field(where, "allowed_callers"))

    def local_environment(self, value: object, where: str) -> None:
        if value is None:
            return
        found = self.walk.obj(value, where, frozenset({"type", "skills"}))
        if found.get("type") != "local":
            self.walk.server(field(where, "type"), f"{found.get('type')!r}: a container the provider runs")

    def apply_patch(self, tool: JSON, where: str) -> None:
        """Patches the client applies (the model only writes them)."""
        self.walk.obj(tool, where, frozenset({"type", "allowed_callers"}))
        if "allowed_callers" in tool:
            self.walk.callers(tool["allowed_callers"], field(where, "allowed_callers"))

    def local_shell(self, tool: JSON, where: str) -> None:
        """A shell the client runs (the model only proposes the command)."""
        self.walk.obj(tool, where, frozenset({"type"}))

    def namespace(self, tool: JSON, where: str) -> None:
        """A named group of client tools [observed: Codex sends its tools so]."""
        self.walk.obj(tool, where, frozenset({"type", "name", "description", "tools"}), required=("tools",))
        for i, inner in enumerate(self.walk.items(tool["tools"], field(where, "tools"))):
            self.walk.typed(
                inner,
                at(field(where, "tools"), i),
                {"function": self.function, "custom": self.custom},
                banned=_SERVER_TOOLS,
                prefixes=_SERVER_PREFIXES,
            )

    def tool_choice(self, choice: JSON, where: str) -> None:
        self.walk.obj(choice, where, frozenset({"type", "name", "mode", "tools"}))
        for i, tool in enumerate(self.walk.items(choice.get("tools", []), field(where, "tools"))):
            self.walk.obj(tool, at(field(where, "tools"), i), frozenset({"type", "name"}))
            self.walk.one_of(
                tool.get("type"),
                field(at(field(where, "tools"), i), "type"),
                frozenset({"function", "custom"}),
            )

    # -- input items ----------------------------------------------------------------------------

    def message(self, item: JSON, where: str) -> None:
        self.walk.obj(
            item,
            where,
            frozenset({"type", "id", "role", "content", "status", "phase"}),
            required=("role", "content"),
        )
        self.walk.one_of(
            item["role"], field(where, "role"), frozenset({"user", "assistant", "system", "developer"})
        )
        self.content(item["content"], field(where, "content"))

    def content(self, value: object, where: str) -> None:
        if isinstance(value, str):
            return
        for i, part in enumerate(self.walk.items(value, where)):
            self.walk.typed(part, at(where, i), self.parts)

    def call(self, item: JSON, where: str) -> None:
        allowed = frozenset(
            {"type", "id", "call_id", "name", "arguments", "input", "status", "namespace", "caller"}
        )
        self.walk.obj(item, where, allowed, required=("call_id", "name"))
        _caller(self.walk, item, where)

    def shell_call(self, item: JSON, where: str) -> None:
        allowed = frozenset({"type", "id", "call_id", "action", "status", "environment", "caller"})
        self.walk.obj(item, where, allowed, required=("call_id",))
        self.local_environment(item.get("environment"), field(where, "environment"))
        _caller(self.walk, item, where)

    def apply_patch_call(self, item: JSON, where: str) -> None:
        allowed = frozenset({"type", "id", "call_id", "operation", "status", "caller"})
        self.walk.obj(item, where, allowed, required=("call_id",))
        _caller(self.walk, item, where)

    def local_shell_call(self, item: JSON, where: str) -> None:
        self.walk.obj(
            item, where, frozenset({"type", "id", "call_id", "action", "status"}), required=("call_id",)
        )

    def output(self, item: JSON, where: str) -> None:
        allowed = frozenset({"type", "id", "call_id", "output", "status", "caller", "max_output_length"})
        self.walk.obj(item, where, allowed, required=("call_id",))
        _caller(self.walk, item, where)
        output = item.get("output", "")
        if item.get("type") == "shell_call_output":
            self.walk.items(output, field(where, "output"))  # stdout and stderr the client captured
        else:
            self.content(output, field(where, "output"))

    def reasoning(self, item: JSON, where: str) -> None:
        allowed = frozenset({"type", "id", "summary", "content", "encrypted_content", "status"})
        self.walk.obj(item, where, allowed)
        for key in ("summary", "content"):
            for i, part in enumerate(self.walk.items(item.get(key) or [], field(where, key))):
                self.walk.obj(part, at(field(where, key), i), frozenset({"type", "text"}))
                self.walk.one_of(
                    part.get("type"),
                    field(at(field(where, key), i), "type"),
                    frozenset({"summary_text", "reasoning_text"}),
                )

    def additional_tools(self, item: JSON, where: str) -> None:
        """Tools declared inside the input [observed: Codex 0.171.0's "responses lite" shape]."""
        self.walk.obj(item, where, frozenset({"type", "id", "role", "tools"}), required=("tools",))
        for i, tool in enumerate(self.walk.items(item["tools"], field(where, "tools"))):
            self.tool(tool, at(field(where, "tools"), i))

    def compaction(self, item: JSON, where: str) -> None:
        """A summary of earlier turns the provider made and encrypted (Codex's remote compaction)."""
        self.walk.obj(item, where, frozenset({"type", "id", "encrypted_content", "summary"}))

    # -- content parts --------------------------------------------------------------------------

    def text_part(self, part: JSON, where: str) -> None:
        allowed = frozenset({"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"})
        self.walk.obj(part, where, allowed, required=("text",))

    def refusal(self, part: JSON, where: str) -> None:
        self.walk.obj(part, where, frozenset({"type", "refusal"}))

    def input_image(self, part: JSON, where: str) -> None:
        self.walk.obj(
            part,
            where,
            frozenset({"type", "image_url", "detail", "prompt_cache_breakpoint"}),
            banned={"file_id": (_R, "an image the provider would take from its file storage")},
        )
        url = part.get("image_url")
        if not (isinstance(url, str) and url.startswith(_DATA_URL)):
            self.walk.refuse(_R, field(where, "image_url"), "not a data: URL: the provider would fetch it")

    def input_file(self, part: JSON, where: str) -> None:
        banned = {
            "file_id": (_R, "a file the provider would take from its file storage"),
            "file_url": (_R, "a file the provider would fetch from a URL"),
        }
        self.walk.obj(
            part,
            where,
            frozenset({"type", "file_data", "filename", "detail"}),
            banned=banned,
            required=("file_data",),
        )


class _Chat:
    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self.parts = {
            "text": self.text,
            "image_url": self.image_url,
            "input_audio": self.input_audio,
            "file": self.file,
            "refusal": self.refusal,
        }

    def check(self, body: JSON) -> None:
        walk = self.walk
        walk.obj(body, "", CHAT_FIELDS, banned=_CHAT_BANNED, required=("model", "messages"))
        model = walk.text(body["model"], "model")
        if (why := searching_model(walk.provider, model)) is not None:
            walk.server("model", f"{model!r}: {why}")
        for i, message in enumerate(walk.items(body["messages"], "messages")):
            self.message(message, at("messages", i))
        for i, tool in enumerate(walk.items(body.get("tools", []), "tools")):
            walk.typed(
                tool,
                at("tools", i),
                {"function": self.tool, "custom": self.custom},
                prefixes=_SERVER_PREFIXES,
                banned=_SERVER_TOOLS,
            )
        for i, function in enumerate(walk.items(body.get("functions", []), "functions")):
            _function_tool(walk, function, at("functions", i))
        if isinstance(body.get("tool_choice"), dict):
            kinds = dict.fromkeys(("function", "custom", "allowed_tools"), self.tool_choice)
            walk.typed(body["tool_choice"], "tool_choice", kinds)
        elif "tool_choice" in body:
            walk.one_of(body["tool_choice"], "tool_choice", frozenset({"auto", "none", "required"}))
        if "modalities" in body:
            for i, value in enumerate(walk.items(body["modalities"], "modalities")):
                walk.one_of(value, at("modalities", i), frozenset({"text"}))
        if "stream_options" in body:
            walk.obj(
                body["stream_options"], "stream_options", frozenset({"include_usage", "include_obfuscation"})
            )

    def message(self, value: object, where: str) -> None:
        allowed = frozenset(
            {
                "role",
                "content",
                "name",
                "tool_calls",
                "tool_call_id",
                "refusal",
                "reasoning_content",
                "cache_control",
            }
        )
        message = self.walk.obj(
            value,
            where,
            allowed,
            required=("role",),
            banned={"audio": (Reason.UNKNOWN_SHAPE, "audio is not passed on")},
        )
        roles = frozenset({"system", "developer", "user", "assistant", "tool"})
        self.walk.one_of(message["role"], field(where, "role"), roles)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            for i, part in enumerate(self.walk.items(content, field(where, "content"))):
                self.walk.typed(part, at(field(where, "content"), i), self.parts)
        for i, call in enumerate(
            self.walk.items(message.get("tool_calls") or [], field(where, "tool_calls"))
        ):
            spot = at(field(where, "tool_calls"), i)
            self.walk.obj(call, spot, frozenset({"id", "type", "function", "custom", "index"}))
            kind = self.walk.one_of(
                call.get("type", "function"), field(spot, "type"), frozenset({"function", "custom"})
            )
            fields = frozenset({"name", "arguments"} if kind == "function" else {"name", "input"})
            self.walk.obj(call.get(kind, {}), field(spot, kind), fields)

    def tool(self, tool: JSON, where: str) -> None:
        self.walk.obj(tool, where, frozenset({"type", "function", "cache_control"}), required=("function",))
        _function_tool(self.walk, tool["function"], field(where, "function"))

    def custom(self, tool: JSON, where: str) -> None:
        self.walk.obj(tool, where, frozenset({"type", "custom"}), required=("custom",))
        self.walk.obj(
            tool["custom"],
            field(where, "custom"),
            frozenset({"name", "description", "format"}),
            required=("name",),
        )

    def tool_choice(self, choice: JSON, where: str) -> None:
        self.walk.obj(choice, where, frozenset({"type", "function", "custom", "allowed_tools"}))

    def text(self, part: JSON, where: str) -> None:
        allowed = frozenset({"type", "text", "cache_control", "prompt_cache_breakpoint"})
        self.walk.obj(part, where, allowed, required=("text",))

    def refusal(self, part: JSON, where: str) -> None:
        self.walk.obj(part, where, frozenset({"type", "refusal"}))

    def image_url(self, part: JSON, where: str) -> None:
        self.walk.obj(part, where, frozenset({"type", "image_url", "cache_control"}), required=("image_url",))
        image = self.walk.obj(part["image_url"], field(where, "image_url"), frozenset({"url", "detail"}))
        url = image.get("url")
        if not (isinstance(url, str) and url.startswith(_DATA_URL)):
            self.walk.refuse(
                _R, field(where, "image_url.url"), "not a data: URL: the provider would fetch it"
            )

    def input_audio(self, part: JSON, where: str) -> None:
        self.walk.obj(part, where, frozenset({"type", "input_audio"}), required=("input_audio",))
        self.walk.obj(part["input_audio"], field(where, "input_audio"), frozenset({"data", "format"}))

    def file(self, part: JSON, where: str) -> None:
        self.walk.obj(part, where, frozenset({"type", "file"}), required=("file",))
        banned = {"file_id": (_R, "a file the provider would take from its file storage")}
        self.walk.obj(
            part["file"],
            field(where, "file"),
            frozenset({"file_data", "filename"}),
            banned=banned,
            required=("file_data",),
        )
