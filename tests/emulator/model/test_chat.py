"""The Chat Completions dialect over real HTTP: the stream and the body, turn counting, each client's
rendering (Qwen Code, OpenCode, mini-swe-agent, Aider), errors and faults. Request bodies are cut down
from ones the real CLIs sent."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from emulator.model.standin import ModelStandin

WS = "/ws"


def _fn(name: str, required: list[str], *optional: str) -> dict[str, Any]:
    properties = {p: {"type": "string"} for p in [*required, *optional]}
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": "x", "parameters": parameters}}


QWEN_TOOLS = [
    _fn("read_file", ["file_path"], "offset", "limit"),
    _fn("edit", ["file_path", "old_string", "new_string"], "replace_all"),
    _fn("write_file", ["file_path", "content"]),
    _fn("run_shell_command", ["command"], "is_background", "timeout", "description", "directory"),
    _fn("glob", ["pattern"], "path"),
]
OPENCODE_TOOLS = [
    _fn("bash", ["command", "description"], "timeout", "workdir"),
    _fn("edit", ["filePath", "oldString", "newString"], "replaceAll"),
    _fn("read", ["filePath"], "offset", "limit"),
    _fn("write", ["content", "filePath"]),
    _fn("webfetch", ["url"]),
]
MINI_TOOLS = [_fn("bash", ["command"])]
AIDER_WHOLE = (
    "Act as an expert software developer.\nTo suggest changes to a file you MUST return the entire content "
    "of the updated file.\nYou MUST use this *file listing* format:\n"
)
AIDER_DIFF = "Act as an expert software developer.\nEvery *SEARCH/REPLACE block* must use this format:\n"


def tool_turns(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(n):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}", "content": [{"type": "text", "text": "ok"}]}
        )
    return messages


def qwen_body(turns: int = 0) -> dict[str, Any]:
    """Qwen Code 0.15.10: its context as a user message, a canned assistant reply, then the prompt."""
    context = "This is the Qwen Code.\nI'm currently working in the directory: /qwen/repo\nHere is the folder"
    return {
        "model": "qwen-m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are Qwen Code, an interactive CLI agent."},
            {"role": "user", "content": [{"type": "text", "text": context}]},
            {"role": "assistant", "content": "Got it. Thanks for the context!"},
            {"role": "user", "content": [{"type": "text", "text": "Create hello.txt"}]},
            *tool_turns(turns),
        ],
        "tools": QWEN_TOOLS,
    }


def opencode_body(turns: int = 0) -> dict[str, Any]:
    system = "You are opencode.\n<env>\n  Working directory: /oc/repo\n  Is directory a git repo: yes\n</env>"
    return {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Create hello.txt"},
            *tool_turns(turns),
        ],
        "tools": OPENCODE_TOOLS,
        "tool_choice": "auto",
    }


def mini_body(turns: int = 0) -> dict[str, Any]:
    task = "Please solve this issue: Create hello.txt\nFinish: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`."
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
            {"role": "user", "content": task},
            *tool_turns(turns),
        ],
        "tools": MINI_TOOLS,
    }


def aider_body(prompt: str = AIDER_WHOLE, files: str = "") -> dict[str, Any]:
    """Aider 0.86.2: example exchanges and "Ok." acknowledgements before the real request."""
    chat_files = (
        f"I have *added these files to the chat*:\n\n{files}" if files else "I am not sharing any files."
    )
    return {
        "model": "m",
        "stream": True,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": prompt},
            {"role": "user", "content": "Change the greeting to be more casual"},
            {"role": "assistant", "content": "Ok, I will:\n\nshow_greeting.py\n```\nprint('Hey')\n```\n"},
            {"role": "user", "content": "I switched to a new code base."},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": chat_files},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": "Create hello.txt"},
        ],
    }


def post(server: ModelStandin, body: dict[str, Any], key: str | None = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.openai_base_url}/chat/completions", json=body, headers=headers, timeout=10)


def data_lines(text: str) -> list[Any]:
    """The ``data:`` payloads in order (``[DONE]`` kept as the string)."""
    lines = [b for b in text.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") and "\n" not in b for b in lines), lines
    return [b[6:] if b[6:] == "[DONE]" else json.loads(b[6:]) for b in lines]


def reply(response: httpx.Response) -> tuple[str, Any]:
    """("call", (name, arguments)) or ("text", content), from a stream put together or from a body."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        message = response.json()["choices"][0]["message"]
        if message.get("tool_calls"):
            (call,) = message["tool_calls"]
            return "call", (call["function"]["name"], json.loads(call["function"]["arguments"]))
        return "text", message["content"]
    chunks = [c for c in data_lines(response.text) if c != "[DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [t for d in deltas for t in d.get("tool_calls", [])]
    if calls:
        name = calls[0]["function"]["name"]
        return "call", (name, json.loads("".join(t["function"]["arguments"] for t in calls)))
    return "text", "".join(d.get("content") or "" for d in deltas)


def test_a_streamed_tool_call_in_chunks_then_usage_then_done() -> None:
    with ModelStandin([{"write": {"path": "hello.txt", "content": "hello\n" * 30}}]) as server:
        got = post(server, qwen_body())
    assert got.headers["content-type"].startswith("text/event-stream")
    lines = data_lines(got.text)
    assert lines[-1] == "[DONE]"
    chunks = lines[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert {c["model"] for c in chunks} == {"qwen-m"}
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant"
    (opening,) = first["tool_calls"]
    assert (opening["index"], opening["type"], opening["function"]) == (
        0,
        "function",
        {"name": "write_file", "arguments": ""},
    )
    assert opening["id"].startswith("call_")
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:-2]]
    assert len(pieces) > 1  # the arguments arrive in pieces
    assert all(p["index"] == 0 and "id" not in p for p in pieces)
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == {
        "file_path": "/qwen/repo/hello.txt",
        "content": "hello\n" * 30,
    }
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    usage = chunks[-1]
    assert usage["choices"] == []
    assert (
        usage["usage"]["total_tokens"]
        == usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
    )
    assert all(c["usage"] is None for c in chunks[:-1])


def test_without_include_usage_there_is_no_usage_chunk() -> None:
    body = {**opencode_body(), "stream_options": None}
    with ModelStandin([{"text": "hi"}]) as server:
        chunks = data_lines(post(server, body).text)
    assert chunks[-1] == "[DONE]"
    assert all(c["choices"] for c in chunks[:-1])
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_non_streamed_request_gets_a_chat_completion() -> None:
    with ModelStandin([{"bash": "ls -la"}]) as server:
        got = post(server, mini_body())
    body = got.json()
    assert body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert (message["role"], message["content"]) == ("assistant", None)
    (call,) = message["tool_calls"]
    assert set(call) == {"id", "type", "function"}
    assert call["function"] == {"name": "bash", "arguments": '{"command":"ls -la"}'}
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_turns_skip_what_the_client_put_before_the_prompt() -> None:
    script = [{"read": "a"}, {"read": "b"}, {"text": "third"}]
    with ModelStandin(script, workspace=WS) as server:
        assert reply(post(server, qwen_body(0))) == ("call", ("read_file", {"file_path": "/ws/a"}))
        assert reply(post(server, qwen_body(1))) == ("call", ("read_file", {"file_path": "/ws/b"}))
        assert reply(post(server, qwen_body(2))) == ("text", "third")
        assert [r["turn"] for r in server.requests()] == [0, 1, 2]


def test_aider_examples_and_acknowledgements_are_not_turns() -> None:
    with ModelStandin([{"write": {"path": "a.txt", "content": "x\n"}}, {"text": "two"}]) as server:
        got = post(server, aider_body())
        assert server.requests()[0]["turn"] == 0
    assert reply(got) == ("text", "a.txt\n```\nx\n```\n")


@pytest.mark.parametrize(
    ("body", "step", "name", "arguments"),
    [
        (qwen_body, {"write": {"path": "a.txt", "content": "x"}}, "write_file",
         {"file_path": "/qwen/repo/a.txt", "content": "x"}),
        (qwen_body, {"read": "a.txt"}, "read_file", {"file_path": "/qwen/repo/a.txt"}),
        (qwen_body, {"edit": {"path": "/abs/a", "old": "1", "new": "2"}}, "edit",
         {"file_path": "/abs/a", "old_string": "1", "new_string": "2"}),
        (qwen_body, {"bash": "ls"}, "run_shell_command", {"command": "ls"}),
        (opencode_body, {"write": {"path": "a.txt", "content": "x"}}, "write",
         {"filePath": "/oc/repo/a.txt", "content": "x"}),
        (opencode_body, {"read": "./a.txt"}, "read", {"filePath": "/oc/repo/a.txt"}),
        (opencode_body, {"edit": {"path": "a.txt", "old": "1", "new": "2"}}, "edit",
         {"filePath": "/oc/repo/a.txt", "oldString": "1", "newString": "2"}),
        (opencode_body, {"bash": "ls"}, "bash",
         {"command": "ls", "description": "Model stand-in: bash step 0."}),
        (mini_body, {"read": "my file"}, "bash", {"command": "cat 'my file'"}),
        (mini_body, {"text": "done"}, "bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}),
        (opencode_body, {"tool": {"name": "webfetch", "input": {"url": "u"}}}, "webfetch", {"url": "u"}),
    ],
)  # fmt: skip
def test_each_client_gets_its_own_tool(
    body: Any, step: dict[str, Any], name: str, arguments: dict[str, Any]
) -> None:
    with ModelStandin([step]) as server:
        assert reply(post(server, body())) == ("call", (name, arguments))


def test_a_bash_only_client_without_mini_swe_agents_marker_gets_plain_text() -> None:
    body = mini_body()
    body["messages"][1]["content"] = "Please fix it."
    with ModelStandin([{"text": "All done."}]) as server:
        assert reply(post(server, body)) == ("text", "All done.")


def test_aider_whole_format_edit_uses_the_file_it_was_shown() -> None:
    files = "greet.py\n```\nprint('Hello')\nprint('bye')\n```\n"
    step = {"edit": {"path": "greet.py", "old": "Hello", "new": "Hey"}}
    with ModelStandin([step]) as server:
        assert reply(post(server, aider_body(files=files))) == (
            "text",
            "greet.py\n```\nprint('Hey')\nprint('bye')\n```\n",
        )


def test_aider_whole_format_edit_of_a_file_it_was_not_shown_is_a_400_saying_how_to_fix_it() -> None:
    with ModelStandin([{"edit": {"path": "greet.py", "old": "Hello", "new": "Hey"}}]) as server:
        got = post(server, aider_body())
    assert got.status_code == 400
    message = got.json()["error"]["message"]
    assert "step 0 (edit)" in message
    assert "add the file to Aider's chat" in message


def test_aider_diff_format_gets_search_replace_blocks() -> None:
    with ModelStandin(
        [
            {"edit": {"path": "greet.py", "old": "Hello", "new": "Hey"}},
            {"write": {"path": "n.txt", "content": "new\n"}},
        ]
    ) as server:
        assert reply(post(server, aider_body(AIDER_DIFF))) == (
            "text",
            "greet.py\n```\n<<<<<<< SEARCH\nHello\n=======\nHey\n>>>>>>> REPLACE\n```\n",
        )
        body = aider_body(AIDER_DIFF)
        body["messages"] += [{"role": "assistant", "content": "edited"}]
        assert reply(post(server, body)) == (
            "text",
            "n.txt\n```\n<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\n```\n",
        )


def test_a_client_offering_none_of_the_tools_gets_a_400_naming_the_step_and_its_tools() -> None:
    body = {**opencode_body(), "tools": [_fn("lookup", ["q"])]}
    with ModelStandin([{"write": {"path": "/a", "content": "x"}}]) as server:
        got = post(server, body)
        assert server.requests()[0]["served"] == "bad_script"
    assert got.status_code == 400
    error = got.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "step 0 (write)" in error["message"]
    assert '["lookup"]' in error["message"]


def test_a_tool_request_with_no_tools_and_no_aider_prompt_is_a_400() -> None:
    title = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "system", "content": "You are a title generator."}],
    }
    with ModelStandin([{"bash": "ls"}]) as server:
        got = post(server, title)
    assert got.status_code == 400
    assert "offers no tools" in got.json()["error"]["message"]


def test_a_required_argument_the_standin_cannot_fill_is_a_400_naming_it() -> None:
    body = {**opencode_body(), "tools": [_fn("bash", ["command", "risk_level"])]}
    with ModelStandin([{"bash": "ls"}]) as server:
        got = post(server, body)
    assert got.status_code == 400
    assert "['risk_level']" in got.json()["error"]["message"]


def test_a_relative_path_with_no_workspace_anywhere_is_a_400() -> None:
    body = opencode_body()
    body["messages"][0]["content"] = "You are opencode."
    with ModelStandin([{"write": {"path": "a.txt", "content": "x"}}]) as server:
        got = post(server, body)
    assert got.status_code == 400
    assert "relative" in got.json()["error"]["message"]


def test_minimal_stream_is_one_chunk_then_done() -> None:
    with ModelStandin({"stream": "minimal", "steps": [{"bash": "ls"}]}) as server:
        lines = data_lines(post(server, {**qwen_body(), "stream_options": {}}).text)
    assert len(lines) == 2
    assert lines[1] == "[DONE]"
    choice = lines[0]["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["delta"]["tool_calls"][0]["function"] == {
        "name": "run_shell_command",
        "arguments": '{"command":"ls"}',
    }


def test_key_is_a_bearer_token() -> None:
    with ModelStandin([{"text": "hi"}], api_key="k") as server:
        wrong = post(server, qwen_body(), key="nope")
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        assert post(server, qwen_body(), key=None).status_code == 401
        assert post(server, qwen_body(), key="k").status_code == 200
        assert [r["dialect"] for r in server.requests()] == ["openai-chat"] * 3


def test_error_then_recovery_and_error_inside_the_stream() -> None:
    script = [
        {"error": {"status": 429, "headers": {"retry-after": "0"}}},
        {"error": {"status": 500, "in_stream": True}},
        {"text": "back"},
    ]
    with ModelStandin(script) as server:
        limited = post(server, qwen_body())
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "0")
        assert limited.json()["error"]["type"] == "requests"
        failed = post(server, qwen_body())
        assert failed.status_code == 200
        lines = data_lines(failed.text)
        assert "[DONE]" not in lines
        assert lines[-1] == {
            "error": {"message": "Internal Server Error", "type": "server_error", "param": None, "code": None}
        }
        assert reply(post(server, qwen_body())) == ("text", "back")


def test_drop_after_headers_sends_the_first_chunk_only() -> None:
    with ModelStandin([{"drop": {"after_headers": True}}, {"text": "back"}]) as server:
        received: list[str] = []
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream(
                "POST", f"{server.openai_base_url}/chat/completions", json=qwen_body(), timeout=5
            ) as got,
        ):
            received.extend(got.iter_text())
        (first,) = data_lines("".join(received))
        assert first["choices"][0]["delta"]["role"] == "assistant"


def test_stall_after_headers_then_answer_finishes_with_done() -> None:
    script = [{"stall": {"seconds": 0.3, "then": "answer", "after_headers": True}}, {"text": "slow"}]
    with ModelStandin(script) as server:
        started = time.monotonic()
        got = post(server, qwen_body())
        assert time.monotonic() - started >= 0.25
    assert reply(got) == ("text", "slow")
    assert data_lines(got.text)[-1] == "[DONE]"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": "x", "tools": "y", "stream": "yes"},
        {
            "messages": [1, None, {"role": 5}, {"role": "user", "content": [1, {"text": 2}]}],
            "tools": [1, {"function": 3}],
        },
        {
            "messages": [{"role": "tool"}],
            "tools": [{"function": {"name": "write", "parameters": {"required": "x"}}}],
        },
        {
            "messages": [{"role": "system", "content": "Working directory: /w"}],
            "stream_options": "x",
            "stream": True,
        },
    ],
)
def test_junk_bodies_get_an_answer_or_a_400_never_a_dropped_connection(body: dict[str, Any]) -> None:
    with ModelStandin([{"write": {"path": "a", "content": "x"}}]) as server:
        got = post(server, body)
    assert got.status_code in (200, 400), got.text
