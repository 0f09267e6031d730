"""The Gemini dialect over real HTTP: model and stream-ness from the path, SSE and JSON-array streams,
countTokens, turn counting with functionResponse parts, Gemini CLI's tools, keys, errors and faults.
Request bodies are cut down from ones Gemini CLI 0.61.0 sent."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from emulator.model.standin import ModelStandin, key_fingerprint

MODEL = "gemini-2.5-pro"


def _decl(
    name: str, required: list[str], *optional: str, key: str = "parametersJsonSchema"
) -> dict[str, Any]:
    properties = {p: {"type": "string"} for p in [*required, *optional]}
    return {
        "name": name,
        "description": "x",
        key: {"type": "object", "properties": properties, "required": required},
    }


TOOLS = [
    {
        "functionDeclarations": [
            _decl("read_file", ["file_path"], "start_line", "end_line"),
            _decl("replace", ["file_path", "instruction", "old_string", "new_string"], "allow_multiple"),
            _decl("write_file", ["file_path", "content"]),
            _decl("run_shell_command", ["command"], "description", "dir_path", "is_background"),
            _decl("glob", ["pattern"]),
        ]
    }
]
CONTEXT = (
    "<session_context>\nThis is the Gemini CLI.\n"
    "The project's temporary directory is: /home/.gemini/tmp/repo\n"
    "- **Workspace Directories:**\n  - /gem/repo\n- **Directory Structure:**\n</session_context>"
)


def gemini_body(turns: int = 0, tools: list[dict[str, Any]] = TOOLS) -> dict[str, Any]:
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": CONTEXT}, {"text": "Create hello.txt"}]}
    ]
    for i in range(turns):
        call = {"id": f"c{i}", "name": "read_file", "args": {"file_path": "/x"}}
        contents.append({"role": "model", "parts": [{"functionCall": call, "thoughtSignature": "s"}]})
        result = {"id": f"c{i}", "name": "read_file", "response": {"output": "ok"}}
        contents.append({"role": "user", "parts": [{"functionResponse": result}]})
    return {
        "contents": contents,
        "systemInstruction": {"parts": [{"text": "You are a non-interactive CLI agent."}]},
        "tools": tools,
        "generationConfig": {"temperature": 1},
    }


def post(
    server: ModelStandin,
    body: dict[str, Any],
    method: str = "streamGenerateContent",
    query: str = "?alt=sse",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    url = f"{server.url}/v1beta/models/{MODEL}:{method}{query}"
    return httpx.post(
        url, json=body, headers={"x-goog-api-key": "k"} if headers is None else headers, timeout=10
    )


def sse_responses(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\r\n\r\n") if e]
    assert all(e.startswith("data: ") and "\n" not in e for e in events), events
    return [json.loads(e[6:]) for e in events]


def parts(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for r in responses for p in r["candidates"][0]["content"]["parts"]]


def test_a_streamed_tool_call_is_one_sse_event_with_the_model_from_the_path() -> None:
    with ModelStandin([{"write": {"path": "hello.txt", "content": "hello\n"}}]) as server:
        (response,) = sse_responses(post(server, gemini_body()))
    (candidate,) = response["candidates"]
    assert candidate == {
        "content": {
            "role": "model",
            "parts": [
                {
                    "functionCall": {
                        "name": "write_file",
                        "args": {"file_path": "/gem/repo/hello.txt", "content": "hello\n"},
                    }
                }
            ],
        },
        "index": 0,
        "finishReason": "STOP",
    }
    usage = response["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert usage["promptTokenCount"] > 0
    assert response["modelVersion"] == MODEL


def test_streamed_text_arrives_in_pieces_and_only_the_last_has_finish_reason_and_usage() -> None:
    with ModelStandin([{"text": "word " * 40}]) as server:
        responses = sse_responses(post(server, gemini_body()))
    assert len(responses) > 1
    assert "".join(p["text"] for p in parts(responses)) == "word " * 40
    assert [("finishReason" in r["candidates"][0], "usageMetadata" in r) for r in responses] == [
        (False, False)
    ] * (len(responses) - 1) + [(True, True)]
    assert len({r["responseId"] for r in responses}) == 1


def test_stream_without_alt_sse_is_one_json_array() -> None:
    with ModelStandin([{"text": "word " * 40}]) as server:
        got = post(server, gemini_body(), query="")
    assert got.headers["content-type"].startswith("application/json")
    responses = got.json()
    assert isinstance(responses, list)
    assert len(responses) > 1
    assert "".join(p["text"] for p in parts(responses)) == "word " * 40


def test_generate_content_answers_one_response() -> None:
    with ModelStandin([{"bash": "ls"}]) as server:
        got = post(server, gemini_body(), method="generateContent", query="")
    assert got.headers["content-type"] == "application/json"
    response = got.json()
    assert parts([response]) == [{"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]
    assert response["candidates"][0]["finishReason"] == "STOP"


def test_count_tokens_needs_no_step() -> None:
    with ModelStandin([{"text": "only"}]) as server:
        counted = post(server, gemini_body(), method="countTokens", query="")
        assert counted.json()["totalTokens"] > 0
        assert parts(sse_responses(post(server, gemini_body()))) == [{"text": "only"}]
        assert [r["served"] for r in server.requests()] == ["count", "answer"]


def test_turns_are_model_contents_and_function_responses_do_not_restart_the_count() -> None:
    with ModelStandin([{"read": "a"}, {"read": "b"}, {"text": "third"}]) as server:
        assert parts(sse_responses(post(server, gemini_body(1)))) == [
            {"functionCall": {"name": "read_file", "args": {"file_path": "/gem/repo/b"}}}
        ]
        assert parts(sse_responses(post(server, gemini_body(2)))) == [{"text": "third"}]
        assert [r["turn"] for r in server.requests()] == [1, 2]


def test_edit_fills_the_instruction_gemini_cli_requires() -> None:
    with ModelStandin([{"edit": {"path": "a.py", "old": "x = 1", "new": "x = 2"}}]) as server:
        (part,) = parts(sse_responses(post(server, gemini_body())))
    assert part["functionCall"] == {
        "name": "replace",
        "args": {
            "file_path": "/gem/repo/a.py",
            "old_string": "x = 1",
            "new_string": "x = 2",
            "instruction": "Model stand-in: edit step 0.",
        },
    }


@pytest.mark.parametrize("key", ["parametersJsonSchema", "parameters"])
def test_the_path_argument_is_the_one_the_offered_schema_names(key: str) -> None:
    tools = [{"functionDeclarations": [_decl("read_file", ["absolute_path"], key=key)]}]
    with ModelStandin([{"read": "a.txt"}]) as server:
        (part,) = parts(sse_responses(post(server, gemini_body(tools=tools))))
    assert part["functionCall"]["args"] == {"absolute_path": "/gem/repo/a.txt"}


def test_tools_gemini_cli_does_not_offer_are_a_400_in_googles_shape() -> None:
    tools = [{"functionDeclarations": [_decl("glob", ["pattern"])]}]
    with ModelStandin([{"write": {"path": "a", "content": "x"}}]) as server:
        got = post(server, gemini_body(tools=tools))
    assert got.status_code == 400
    error = got.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert "step 0 (write)" in error["message"]
    assert '["glob"]' in error["message"]


def test_key_from_the_header_or_the_query_and_the_query_key_is_not_recorded() -> None:
    with ModelStandin([{"text": "hi"}], api_key="k") as server:
        assert post(server, gemini_body(), headers={}).status_code == 401
        wrong = post(server, gemini_body(), headers={"x-goog-api-key": "nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["status"] == "UNAUTHENTICATED"
        assert post(server, gemini_body(), query="?alt=sse&key=k", headers={}).status_code == 200
        assert post(server, gemini_body()).status_code == 200
        records = server.requests()
    assert records[2]["query"] == {"alt": "sse"}
    assert records[2]["auth"] == {"?key": key_fingerprint("k")}
    assert records[3]["auth"] == {"x-goog-api-key": key_fingerprint("k")}
    assert "x-goog-api-key" not in records[3]["headers"]
    assert [r["dialect"] for r in records] == ["gemini"] * 4


@pytest.mark.parametrize(
    ("status", "name"),
    [(429, "RESOURCE_EXHAUSTED"), (503, "UNAVAILABLE"), (500, "INTERNAL"), (400, "INVALID_ARGUMENT")],
)
def test_errors_carry_googles_status_names(status: int, name: str) -> None:
    with ModelStandin([{"error": {"status": status, "message": "nope"}}]) as server:
        got = post(server, gemini_body())
    assert got.status_code == status
    assert got.json() == {"error": {"code": status, "message": "nope", "status": name}}


def test_error_inside_the_stream_then_recovery() -> None:
    with ModelStandin([{"error": {"status": 503, "in_stream": True}}, {"text": "back"}]) as server:
        assert sse_responses(post(server, gemini_body())) == [
            {"error": {"code": 503, "message": "Service Unavailable", "status": "UNAVAILABLE"}}
        ]
        assert parts(post(server, gemini_body(), query="").json()) == [{"text": "back"}]


def test_an_in_stream_error_in_a_json_array_leaves_the_array_open() -> None:
    with ModelStandin([{"error": {"status": 503, "in_stream": True}}]) as server:
        got = post(server, gemini_body(), query="")
    assert got.status_code == 200
    assert got.text.startswith('[{"error":')
    assert not got.text.endswith("]")


def test_drop_before_any_byte_then_answer() -> None:
    with ModelStandin([{"drop": {}}, {"text": "back"}]) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            post(server, gemini_body())
        assert parts(sse_responses(post(server, gemini_body()))) == [{"text": "back"}]


def test_stall_then_answer() -> None:
    with ModelStandin([{"stall": {"seconds": 0.1, "then": "answer"}}, {"text": "late"}]) as server:
        assert parts(sse_responses(post(server, gemini_body()))) == [{"text": "late"}]
        assert [r["served"] for r in server.requests()] == ["stall"]


def test_other_model_methods_are_404() -> None:
    with ModelStandin([{"text": "x"}]) as server:
        got = httpx.post(f"{server.url}/v1beta/models/{MODEL}:embedContent", json={}, timeout=5)
    assert got.status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"contents": "x", "tools": "y", "systemInstruction": 3},
        {"contents": [1, None, {"role": 5, "parts": "x"}, {"parts": [1, {"text": 2}]}]},
        {
            "contents": [],
            "tools": [1, {"functionDeclarations": [1, {"name": 2}, {"name": "write_file", "parameters": 7}]}],
        },
        {
            "contents": [{"role": "user", "parts": [{"functionResponse": None}]}],
            "systemInstruction": "- **Workspace Directories:**\n  - /w",
        },
    ],
)
def test_junk_bodies_get_an_answer_or_a_400_never_a_dropped_connection(body: dict[str, Any]) -> None:
    with ModelStandin([{"write": {"path": "a", "content": "x"}}]) as server:
        got = post(server, body)
    assert got.status_code in (200, 400), got.text
