"""What the gateway lets through, decided on plain data: paths, credentials, headers and bodies.

Each class of refusal the model-gateway issue names has its case here (the same classes are
then checked over real sockets in test_gateway_server.py): a foreign key, every forbidden
endpoint, every body and header shape that would make the provider fetch, search, execute or
connect, and a shape Baton does not know. Every accepted case is one a real CLI sends.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.runner.gateway import admit
from worker.runner.gateway.admit import Admitted, Probe
from worker.runner.gateway.providers import WIRES
from worker.runner.gateway.refusals import Reason, Refusal

PLACEHOLDER = "baton-placeholder-test"
GRANTED = {name: WIRES[name] for name in ("anthropic", "openai", "gemini", "openrouter", "groq")}
CLAUDE_BETAS = (
    "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14,"
    "thinking-token-count-2026-05-13,context-management-2025-06-27,prompt-caching-scope-2026-01-05,"
    "mid-conversation-system-2026-04-07,effort-2025-11-24"
)


def headers(**extra: str) -> list[tuple[str, str]]:
    base = {"content-type": "application/json", "x-api-key": PLACEHOLDER}
    base.update({k.replace("_", "-"): v for k, v in extra.items()})
    return [(k, v) for k, v in base.items() if v != "-"]


def judge(
    target: str,
    body: dict[str, Any] | bytes,
    *,
    method: str = "POST",
    given: list[tuple[str, str]] | None = None,
    server_tools: bool = False,
) -> Admitted | Probe | Refusal:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return admit.admit(
        method,
        target,
        given if given is not None else headers(),
        raw,
        placeholder=PLACEHOLDER,
        granted=GRANTED,
        server_tools=server_tools,
    )


def refused(found: object, reason: Reason) -> Refusal:
    assert isinstance(found, Refusal), found
    assert found.reason == reason, found
    return found


def claude_body(**extra: Any) -> dict[str, Any]:
    """The shape Claude Code 2.1.197 sends [observed], small."""
    body: dict[str, Any] = {
        "model": "claude-opus-4-8",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Write hello.txt"}]},
            {"role": "system", "content": "a reminder"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Write",
                        "input": {"file_path": "/workspace/hello.txt", "content": "hi"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "ok",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [
            {
                "name": "Write",
                "description": "Write a file",
                "input_schema": {
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {"file_path": {"type": "string"}},
                },
            }
        ],
        "metadata": {"user_id": '{"session_id": "x"}'},
        "max_tokens": 64000,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": True,
    }
    body.update(extra)
    return body


def codex_body(**extra: Any) -> dict[str, Any]:
    """The shape Codex 0.171.0 sends [observed], small."""
    body: dict[str, Any] = {
        "model": "gpt-6.2-sol",
        "stream": True,
        "input": [
            {
                "type": "additional_tools",
                "id": "at_1",
                "role": "developer",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "functions",
                        "description": "",
                        "tools": [
                            {
                                "type": "custom",
                                "name": "exec",
                                "description": "Run code",
                                "format": {"type": "text"},
                            },
                            {
                                "type": "function",
                                "name": "wait",
                                "description": "Wait",
                                "strict": False,
                                "parameters": {"type": "object", "properties": {}},
                            },
                        ],
                    }
                ],
            },
            {
                "type": "message",
                "id": "m1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "x"}],
            },
            {
                "type": "message",
                "id": "m2",
                "role": "user",
                "content": [{"type": "input_text", "text": "Do it"}],
            },
            {
                "type": "function_call",
                "status": "completed",
                "id": "fc_1",
                "name": "exec_command",
                "arguments": "{}",
                "call_id": "call_1",
            },
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "done"},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "context": "all_turns"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "text": {"verbosity": "low"},
        "client_metadata": {"session_id": "s"},
    }
    body.update(extra)
    return body


def chat_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-5.4-mini",
        "stream": False,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}],
    }
    body.update(extra)
    return body


def gemini_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "write_file", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "write_file", "response": {}}}]},
        ],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "tools": [
            {"functionDeclarations": [{"name": "write_file", "parametersJsonSchema": {"type": "object"}}]}
        ],
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
    }
    body.update(extra)
    return body


# -- what real CLIs send passes ------------------------------------------------------------------


def test_claude_codes_request_passes_with_its_own_headers() -> None:
    given = headers(
        anthropic_beta=CLAUDE_BETAS,
        anthropic_version="2023-06-01",
        user_agent="claude-cli/2.1.197",
        x_stainless_os="Linux",
        x_claude_code_session_id="s",
    )
    found = judge("/anthropic/v1/messages?beta=true", claude_body(), given=given)
    assert isinstance(found, Admitted), found
    assert (found.provider, found.operation.name, found.model, found.stream) == (
        "anthropic",
        "messages",
        "claude-opus-4-8",
        True,
    )
    assert found.operation.query == (("beta", "true"),)
    sent = dict(found.headers)
    # The key and the agent's own identifiers stay behind; only what inference needs goes on.
    assert set(sent) == {"content-type", "anthropic-beta", "anthropic-version", "user-agent"}
    assert sent["anthropic-beta"] == CLAUDE_BETAS


def test_codexs_request_passes() -> None:
    given = [
        ("content-type", "application/json"),
        ("authorization", f"Bearer {PLACEHOLDER}"),
        ("originator", "codex_exec"),
        ("x-codex-turn-metadata", "{}"),
    ]
    found = judge("/openai/v1/responses", codex_body(), given=given)
    assert isinstance(found, Admitted), found
    assert (found.provider, found.operation.name) == ("openai", "responses")
    assert "originator" not in dict(found.headers)


@pytest.mark.parametrize(
    ("target", "body", "operation"),
    [
        ("/openai/v1/chat/completions", chat_body(), "chat.completions"),
        (
            "/openrouter/v1/chat/completions",
            chat_body(model="anthropic/claude-sonnet-4.5"),
            "chat.completions",
        ),
        ("/gemini/v1beta/models/gemini-2.5-pro:generateContent", gemini_body(), "generateContent"),
        (
            "/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            gemini_body(),
            "streamGenerateContent",
        ),
        (
            "/gemini/v1beta/models/gemini-2.5-pro:countTokens",
            {"contents": [{"parts": [{"text": "x"}]}]},
            "countTokens",
        ),
        ("/anthropic/v1/messages/count_tokens", {"model": "claude-opus-4-8", "messages": []}, "count_tokens"),
    ],
)
def test_each_inference_operation_passes(target: str, body: dict[str, Any], operation: str) -> None:
    found = judge(target, body)
    assert isinstance(found, Admitted), found
    assert found.operation.name == operation
    assert found.operation.metered is ("count" not in operation.lower())


def test_gemini_accepts_snake_case_too() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "AA=="}}]}
        ],
        "system_instruction": {"parts": [{"text": "x"}]},
    }
    assert isinstance(judge("/gemini/v1beta/models/gemini-2.5-flash:generateContent", body), Admitted)


def test_a_connectivity_probe_is_answered_not_passed_on() -> None:
    found = judge("/anthropic", b"", method="HEAD", given=[])
    assert found == Probe("anthropic")


def test_a_streamed_chat_completion_is_asked_for_its_usage() -> None:
    found = judge(
        "/openai/v1/chat/completions", chat_body(stream=True, stream_options={"include_obfuscation": False})
    )
    assert isinstance(found, Admitted)
    sent = json.loads(found.body)
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_the_body_sent_on_is_the_one_that_was_checked() -> None:
    """JSON with a key twice: checked and sent as one object, so the provider cannot read the other."""
    raw = (
        b'{"model": "claude-opus-4-8", "tools": [{"type": "web_search_20250305", "name": "web_search"}],'
        b' "tools": [], "messages": [], "max_tokens": 1}'
    )
    found = judge("/anthropic/v1/messages", raw)
    assert isinstance(found, Admitted), found
    assert json.loads(found.body)["tools"] == []
    assert b"web_search" not in found.body


# -- who is asking ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        [("x-api-key", "sk-ant-attackers-own-key")],
        [("authorization", "Bearer sk-attacker")],
        [("x-goog-api-key", "AIza-attacker")],
        [("api-key", "azure-attacker")],
        [("proxy-authorization", "Basic YTpi")],
        # The placeholder as well does not make a second key acceptable.
        [("x-api-key", PLACEHOLDER), ("authorization", "Bearer sk-attacker")],
        [("x-api-key", PLACEHOLDER), ("x-api-key", "sk-attacker")],
        [("authorization", f"Basic {PLACEHOLDER}")],
    ],
)
def test_any_other_key_is_refused_as_a_violation(given: list[tuple[str, str]]) -> None:
    found = refused(
        judge("/anthropic/v1/messages", claude_body(), given=[("content-type", "application/json"), *given]),
        Reason.FOREIGN_CREDENTIAL,
    )
    assert found.violation
    assert found.status == 403
    assert "sk-" not in found.detail
    assert "attacker" not in found.detail


def test_a_key_in_the_query_string_is_a_credential_too() -> None:
    refused(
        judge("/gemini/v1beta/models/gemini-2.5-pro:generateContent?key=AIza-attacker", gemini_body()),
        Reason.FOREIGN_CREDENTIAL,
    )
    found = judge(
        f"/gemini/v1beta/models/gemini-2.5-pro:generateContent?key={PLACEHOLDER}",
        gemini_body(),
        given=[("content-type", "application/json")],
    )
    assert isinstance(found, Admitted)
    assert found.operation.query == ()  # never passed on


def test_a_foreign_key_is_found_even_on_a_path_that_is_refused_anyway() -> None:
    refused(
        judge("/anthropic/v1/files", b"x", given=[("x-api-key", "sk-attacker")]), Reason.FOREIGN_CREDENTIAL
    )
    refused(
        judge("/nowhere", b"", method="GET", given=[("x-api-key", "sk-attacker")]), Reason.FOREIGN_CREDENTIAL
    )


def test_no_key_at_all_is_refused() -> None:
    found = refused(
        judge("/anthropic/v1/messages", claude_body(), given=[("content-type", "application/json")]),
        Reason.MISSING_CREDENTIAL,
    )
    assert found.status == 401
    assert found.violation


# -- only inference --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/anthropic/v1/files",
        "/anthropic/v1/messages/batches",
        "/anthropic/v1/skills",
        "/anthropic/v1/models",
        "/anthropic/v1/organizations/api_keys",
        "/openai/v1/files",
        "/openai/v1/uploads",
        "/openai/v1/batches",
        "/openai/v1/assistants",
        "/openai/v1/threads",
        "/openai/v1/vector_stores",
        "/openai/v1/containers",
        "/openai/v1/fine_tuning/jobs",
        "/openai/v1/responses/resp_123",
        "/openai/v1/responses/compact",
        "/openai/v1/realtime/sessions",
        "/gemini/upload/v1beta/files",
        "/gemini/v1beta/files",
        "/gemini/v1beta/cachedContents",
        "/gemini/v1beta/models/gemini-2.5-pro:batchGenerateContent",
        "/gemini/v1beta/tunedModels/x:generateContent",
        "/anthropic/v1/messages/../files",
        "/anthropic/v1//messages",
        "/anthropic/v1/messages%2F..%2Ffiles",
        "/anthropic/",
    ],
)
def test_every_endpoint_that_is_not_inference_is_refused(target: str) -> None:
    found = refused(judge(target, b'{"x": 1}'), Reason.NOT_INFERENCE)
    assert found.violation
    assert found.status == 403


def test_a_provider_the_agent_was_not_granted_is_refused() -> None:
    granted_none = admit.admit(
        "POST",
        "/mistral/v1/chat/completions",
        headers(),
        json.dumps(chat_body()).encode(),
        placeholder=PLACEHOLDER,
        granted={},
        server_tools=False,
    )
    found = refused(granted_none, Reason.PROVIDER_NOT_GRANTED)
    assert "grant: none" in found.detail


def test_only_post_is_passed_on() -> None:
    refused(judge("/anthropic/v1/messages", b'{"a": 1}', method="PUT"), Reason.NOT_INFERENCE)


def test_an_unknown_query_parameter_is_refused() -> None:
    refused(judge("/anthropic/v1/messages?beta=true&callback=x", claude_body()), Reason.UNKNOWN_SHAPE)
    refused(judge("/anthropic/v1/messages?beta=false", claude_body()), Reason.UNKNOWN_SHAPE)


def test_a_query_string_that_does_not_parse_is_refused() -> None:
    found = refused(judge("/anthropic/v1/messages?beta", claude_body()), Reason.BAD_REQUEST)
    assert "query string" in found.detail


# -- the provider may not reach the network for the agent ------------------------------------------


ANTHROPIC = "/anthropic/v1/messages"
RESPONSES = "/openai/v1/responses"
CHAT = "/openai/v1/chat/completions"
GEMINI = "/gemini/v1beta/models/gemini-2.5-pro:generateContent"
_IMAGE_URL = {"type": "image", "source": {"type": "url", "url": "https://attacker.example/x.png"}}


@pytest.mark.parametrize(
    ("target", "body", "reason"),
    [
        # Anthropic server tools, by versioned type (new versions are refused by prefix).
        (
            ANTHROPIC,
            claude_body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            Reason.SERVER_TOOL,
        ),
        (
            ANTHROPIC,
            claude_body(tools=[{"type": "web_fetch_20260318", "name": "web_fetch"}]),
            Reason.SERVER_TOOL,
        ),
        (
            ANTHROPIC,
            claude_body(tools=[{"type": "code_execution_20250825", "name": "code_execution"}]),
            Reason.SERVER_TOOL,
        ),
        (ANTHROPIC, claude_body(tools=[{"type": "mcp_toolset", "mcp_server_name": "x"}]), Reason.SERVER_TOOL),
        (
            ANTHROPIC,
            claude_body(mcp_servers=[{"type": "url", "url": "https://attacker.example/mcp", "name": "x"}]),
            Reason.SERVER_TOOL,
        ),
        (ANTHROPIC, claude_body(container="cntr_1"), Reason.SERVER_TOOL),
        (
            ANTHROPIC,
            claude_body(
                tools=[{"name": "f", "input_schema": {}, "allowed_callers": ["code_execution_20250825"]}]
            ),
            Reason.SERVER_TOOL,
        ),
        # Content the provider would fetch or take from storage.
        (ANTHROPIC, claude_body(messages=[{"role": "user", "content": [_IMAGE_URL]}]), Reason.REMOTE_SOURCE),
        (
            ANTHROPIC,
            claude_body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "file", "file_id": "file_1"}}],
                    }
                ]
            ),
            Reason.REMOTE_SOURCE,
        ),
        (
            ANTHROPIC,
            claude_body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "content": [_IMAGE_URL]}],
                    }
                ]
            ),
            Reason.REMOTE_SOURCE,
        ),
        (
            ANTHROPIC,
            claude_body(tools=[{"name": "f", "input_schema": {"$ref": "https://attacker.example/s.json"}}]),
            Reason.REMOTE_SOURCE,
        ),
        # A server tool's record sent back: refused as the tool is.
        (
            ANTHROPIC,
            claude_body(
                messages=[
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "server_tool_use",
                                "id": "s",
                                "name": "web_fetch",
                                "input": {"url": "https://x"},
                            }
                        ],
                    }
                ]
            ),
            Reason.SERVER_TOOL,
        ),
        # OpenAI Responses.
        (RESPONSES, codex_body(tools=[{"type": "web_search"}]), Reason.SERVER_TOOL),
        (RESPONSES, codex_body(tools=[{"type": "web_search_preview_2025_03_11"}]), Reason.SERVER_TOOL),
        (
            RESPONSES,
            codex_body(tools=[{"type": "mcp", "server_label": "x", "server_url": "https://a.example"}]),
            Reason.SERVER_TOOL,
        ),
        (
            RESPONSES,
            codex_body(tools=[{"type": "code_interpreter", "container": {"type": "auto"}}]),
            Reason.SERVER_TOOL,
        ),
        (
            RESPONSES,
            codex_body(tools=[{"type": "file_search", "vector_store_ids": ["vs_1"]}]),
            Reason.SERVER_TOOL,
        ),
        (
            RESPONSES,
            codex_body(tools=[{"type": "shell", "environment": {"type": "container_auto"}}]),
            Reason.SERVER_TOOL,
        ),
        (
            RESPONSES,
            codex_body(tools=[{"type": "computer_use_preview", "display_width": 1}]),
            Reason.SERVER_TOOL,
        ),
        (
            RESPONSES,
            codex_body(input=[{"type": "additional_tools", "tools": [{"type": "web_search"}]}]),
            Reason.SERVER_TOOL,
        ),
        (RESPONSES, codex_body(previous_response_id="resp_1"), Reason.STORED_STATE),
        (RESPONSES, codex_body(conversation="conv_1"), Reason.STORED_STATE),
        (RESPONSES, codex_body(background=True), Reason.STORED_STATE),
        (RESPONSES, codex_body(input=[{"type": "item_reference", "id": "msg_1"}]), Reason.STORED_STATE),
        (
            RESPONSES,
            codex_body(
                input=[
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "https://attacker.example/x.png"}],
                    }
                ]
            ),
            Reason.REMOTE_SOURCE,
        ),
        (
            RESPONSES,
            codex_body(
                input=[
                    {
                        "role": "user",
                        "content": [{"type": "input_file", "file_url": "https://attacker.example/x.pdf"}],
                    }
                ]
            ),
            Reason.REMOTE_SOURCE,
        ),
        (
            RESPONSES,
            codex_body(input=[{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]),
            Reason.REMOTE_SOURCE,
        ),
        # Chat Completions and its providers' own switches.
        (CHAT, chat_body(web_search_options={}), Reason.SERVER_TOOL),
        (
            CHAT,
            chat_body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://attacker.example/x.png"}}
                        ],
                    }
                ]
            ),
            Reason.REMOTE_SOURCE,
        ),
        (CHAT, chat_body(model="gpt-4o-search-preview"), Reason.SERVER_TOOL),
        ("/openrouter/v1/chat/completions", chat_body(model="openai/gpt-5:online"), Reason.SERVER_TOOL),
        ("/openrouter/v1/chat/completions", chat_body(plugins=[{"id": "web"}]), Reason.SERVER_TOOL),
        ("/groq/v1/chat/completions", chat_body(model="groq/compound"), Reason.SERVER_TOOL),
        # Gemini, in both spellings.
        (GEMINI, gemini_body(tools=[{"googleSearch": {}}]), Reason.SERVER_TOOL),
        (GEMINI, gemini_body(tools=[{"google_search": {}}]), Reason.SERVER_TOOL),
        (GEMINI, gemini_body(tools=[{"urlContext": {}}]), Reason.SERVER_TOOL),
        (GEMINI, gemini_body(tools=[{"codeExecution": {}}]), Reason.SERVER_TOOL),
        (GEMINI, gemini_body(tools=[{"mcpServers": [{"name": "x"}]}]), Reason.SERVER_TOOL),
        (
            GEMINI,
            gemini_body(contents=[{"parts": [{"fileData": {"fileUri": "https://attacker.example/x"}}]}]),
            Reason.REMOTE_SOURCE,
        ),
        (
            GEMINI,
            gemini_body(contents=[{"parts": [{"file_data": {"file_uri": "https://attacker.example/x"}}]}]),
            Reason.REMOTE_SOURCE,
        ),
        (GEMINI, gemini_body(cachedContent="cachedContents/1"), Reason.STORED_STATE),
    ],
)
def test_shapes_that_make_the_provider_act_for_the_agent_are_refused(
    target: str, body: dict[str, Any], reason: Reason
) -> None:
    found = refused(judge(target, body), reason)
    assert found.violation
    assert found.status == 403


@pytest.mark.parametrize(
    ("target", "body"),
    [
        (ANTHROPIC, claude_body(tools=[{"type": "web_search_20990101", "name": "web_search"}])),
        (RESPONSES, codex_body(tools=[{"type": "mcp", "server_url": "https://a.example"}])),
        (GEMINI, gemini_body(tools=[{"googleSearch": {}}])),
    ],
)
def test_the_model_server_tools_grant_lets_server_tools_through(target: str, body: dict[str, Any]) -> None:
    assert isinstance(judge(target, body, server_tools=True), Admitted)


def test_the_grant_never_opens_stored_files_or_urls() -> None:
    body = claude_body(messages=[{"role": "user", "content": [_IMAGE_URL]}])
    refused(judge(ANTHROPIC, body, server_tools=True), Reason.REMOTE_SOURCE)
    refused(judge(RESPONSES, codex_body(previous_response_id="r"), server_tools=True), Reason.STORED_STATE)


@pytest.mark.parametrize(
    ("target", "body"),
    [
        (ANTHROPIC, claude_body(tools=[{"type": "advanced_thing_20991231", "name": "x"}])),
        (ANTHROPIC, claude_body(tools=[{"type": "bash_20250124", "name": "bash"}])),
        (ANTHROPIC, claude_body(messages=[{"role": "user", "content": [{"type": "brand_new_block"}]}])),
        (ANTHROPIC, claude_body(a_new_top_level_field=True)),
        (
            ANTHROPIC,
            claude_body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "data": "AA==", "extra": "x"}}
                        ],
                    }
                ]
            ),
        ),
        (RESPONSES, codex_body(tools=[{"type": "tool_from_the_future"}])),
        (RESPONSES, codex_body(include=["web_search_call.results"])),
        (CHAT, chat_body(tools=[{"type": "retrieval"}])),
        (GEMINI, gemini_body(tools=[{"someNewTool": {}}])),
        (GEMINI, gemini_body(contents=[{"parts": [{"newPartKind": {}}]}])),
        (ANTHROPIC, b"not json at all"),
        (ANTHROPIC, b"[1, 2]"),
    ],
)
def test_a_shape_baton_does_not_know_is_refused(target: str, body: dict[str, Any] | bytes) -> None:
    found = refused(judge(target, body), Reason.UNKNOWN_SHAPE)
    assert found.violation


def test_a_refusal_names_where_it_found_the_problem() -> None:
    found = refused(
        judge(ANTHROPIC, claude_body(messages=[{"role": "user", "content": ["x", _IMAGE_URL]}])),
        Reason.UNKNOWN_SHAPE,
    )
    assert found.detail.startswith("messages[0].content[0]")
    found = refused(
        judge(ANTHROPIC, claude_body(messages=[{"role": "user", "content": [_IMAGE_URL]}])),
        Reason.REMOTE_SOURCE,
    )
    assert found.detail.startswith("messages[0].content[0].source.type: 'url'")


# -- feature switches in headers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("beta", "reason"),
    [
        ("files-api-2025-04-14", Reason.STORED_STATE),
        ("skills-2025-10-02", Reason.STORED_STATE),
        ("mcp-client-2025-11-20", Reason.SERVER_TOOL),
        ("web-fetch-2025-09-10", Reason.SERVER_TOOL),
        ("code-execution-2025-08-25", Reason.SERVER_TOOL),
        ("something-new-2099-01-01", Reason.FEATURE_HEADER),
        ("not a flag", Reason.FEATURE_HEADER),
    ],
)
def test_beta_flags_that_switch_on_provider_actions_are_refused(beta: str, reason: Reason) -> None:
    given = headers(anthropic_beta=f"claude-code-20250219, {beta}")
    refused(judge(ANTHROPIC, claude_body(), given=given), reason)


def test_a_server_tool_beta_passes_with_the_grant_and_a_stored_one_never() -> None:
    assert isinstance(
        judge(
            ANTHROPIC, claude_body(), given=headers(anthropic_beta="web-fetch-2025-09-10"), server_tools=True
        ),
        Admitted,
    )
    refused(
        judge(
            ANTHROPIC, claude_body(), given=headers(anthropic_beta="files-api-2025-04-14"), server_tools=True
        ),
        Reason.STORED_STATE,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("openai-beta", "assistants=v2"),
        ("content-type", "multipart/form-data; boundary=x"),
        ("content-encoding", "gzip"),
        ("anthropic-version", "latest"),
    ],
)
def test_headers_baton_does_not_pass_are_refused(name: str, value: str) -> None:
    found = judge(ANTHROPIC, claude_body(), given=[*headers(content_type="-"), (name, value)])
    assert isinstance(found, Refusal), found
    assert found.violation


def test_headers_that_would_pick_another_account_are_left_behind() -> None:
    given = headers(
        openai_organization="org-attacker",
        openai_project="proj",
        x_goog_user_project="p",
        cookie="a=b",
        forwarded="for=1.2.3.4",
    )
    found = judge(ANTHROPIC, claude_body(), given=given)
    assert isinstance(found, Admitted)
    assert set(dict(found.headers)) == {"content-type"}
