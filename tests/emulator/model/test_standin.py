"""The model stand-in over real HTTP on loopback: both dialects, every step kind, recording, keys, bounds."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from emulator.model.command import register
from emulator.model.script import ScriptError, parse_script
from emulator.model.standin import RECORD_NAME, ModelStandin, key_fingerprint

ROOT = Path(__file__).resolve().parents[3]
WS = "/workspace"
Event = tuple[str, dict[str, Any]]


# -- helpers -------------------------------------------------------------------------------------


def parse_sse(text: str) -> list[Event]:
    events: list[Event] = []
    for block in text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        name = next((line[7:] for line in lines if line.startswith("event: ")), None)
        data = next((line[6:] for line in lines if line.startswith("data: ")), None)
        if name is not None and data is not None:
            payload = json.loads(data)
            assert payload["type"] == name
            events.append((name, payload))
    return events


def claude_body(assistant_turns: int = 0, *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    """A request shaped like Claude Code's: many tools, a system prompt, a mid-conversation system message."""
    tools = [{"name": f"Tool{i}", "description": "x", "input_schema": {"type": "object"}} for i in range(25)]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the issue"}]}
    ]
    for i in range(assistant_turns):
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read"}]}
        )
        messages.append({"role": "system", "content": "reminder"})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}"}]})
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": stream,
        "system": [
            {"type": "text", "text": "You are Claude Code.\n<env>\nWorking directory: /detected/dir\n</env>"}
        ],
        "messages": messages,
        "tools": tools,
        "metadata": {"user_id": "u"},
        "thinking": {"type": "disabled"},
    }
    return {**body, **extra}


def codex_body(assistant_turns: int = 0, *, stream: bool = True) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the issue"}]},
    ]
    for i in range(assistant_turns):
        items.append({"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": f"c{i}"})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "ok"})
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": items,
        "tools": [{"type": "function", "name": "exec_command", "parameters": {}}],
        "stream": stream,
        "store": False,
    }


def claude(server: ModelStandin, body: dict[str, Any], key: str | None = "k", **kw: Any) -> httpx.Response:
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"} if key else {}
    return httpx.post(f"{server.url}/v1/messages?beta=true", json=body, headers=headers, timeout=10, **kw)


def codex(server: ModelStandin, body: dict[str, Any], key: str | None = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.openai_base_url}/responses", json=body, headers=headers, timeout=10)


def tool_use(events: list[Event]) -> tuple[str, dict[str, Any]]:
    """(name, input) of the one tool_use block, its input put together from the deltas."""
    start = next(e for n, e in events if n == "content_block_start")["content_block"]
    assert start["type"] == "tool_use"
    assert start["input"] == {}
    assert start["id"].startswith("toolu_")
    partial = "".join(
        e["delta"]["partial_json"] for n, e in events if n == "content_block_delta"
    )  # fmt: skip
    return start["name"], json.loads(partial)


def output_item(events: list[Event]) -> dict[str, Any]:
    done = [e["item"] for n, e in events if n == "response.output_item.done"]
    assert len(done) == 1
    assert events[-1][0] == "response.completed"
    return done[0]


def stop_reason(events: list[Event]) -> str:
    delta = next(e for n, e in events if n == "message_delta")
    assert delta["usage"]["output_tokens"] >= 1
    reason: str = delta["delta"]["stop_reason"]
    return reason


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[ModelStandin]:
    script = {
        "workspace": WS,
        "steps": [
            {"write": {"path": "hello.txt", "content": "hello\nworld\n"}},
            {"text": "Created hello.txt."},
        ],
    }
    with ModelStandin(script, record_dir=tmp_path, api_key="k") as server:
        yield server


# -- Anthropic -----------------------------------------------------------------------------------


def test_head_and_get_of_the_root_are_404_at_once(standin: ModelStandin) -> None:
    started = time.monotonic()
    assert httpx.head(standin.url + "/", timeout=5).status_code == 404
    got = httpx.get(standin.url + "/", timeout=5)
    assert got.status_code == 404
    assert got.json()["error"]["type"] == "not_found_error"
    assert time.monotonic() - started < 2
    assert [(r["method"], r["path"], r["served"]) for r in standin.requests()] == [
        ("HEAD", "/", "not_found"),
        ("GET", "/", "not_found"),
    ]


def test_claude_write_then_text_by_counting_assistant_turns(standin: ModelStandin) -> None:
    first = claude(standin, claude_body(0))
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(first.text)
    assert [n for n, _ in events][:3] == ["message_start", "ping", "content_block_start"]
    assert [n for n, _ in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["model"] == "claude-sonnet-4-5"
    assert start["role"] == "assistant"
    assert start["usage"]["input_tokens"] > 400  # about a token per four bytes of the request
    assert tool_use(events) == ("Write", {"file_path": f"{WS}/hello.txt", "content": "hello\nworld\n"})
    assert stop_reason(events) == "tool_use"

    second = parse_sse(claude(standin, claude_body(1)).text)
    block = next(e for n, e in second if n == "content_block_start")["content_block"]
    assert block == {"type": "text", "text": ""}
    text = "".join(e["delta"]["text"] for n, e in second if n == "content_block_delta")
    assert text == "Created hello.txt."
    assert stop_reason(second) == "end_turn"

    # A repeated request for the same turn gets the same answer (a retry after a lost response).
    assert tool_use(parse_sse(claude(standin, claude_body(0)).text))[0] == "Write"


def test_claude_counts_a_run_of_assistant_messages_once() -> None:
    body = claude_body(0)
    body["messages"] += [
        {"role": "assistant", "content": "thinking"},
        {"role": "system", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
    ]
    with ModelStandin([{"bash": "ls"}, {"text": "one turn in"}]) as server:
        events = parse_sse(claude(server, body).text)
    assert (
        "".join(e["delta"].get("text", "") for n, e in events if n == "content_block_delta") == "one turn in"
    )


@pytest.mark.parametrize(
    ("step", "name", "tool_input"),
    [
        ({"tool": {"name": "Glob", "input": {"pattern": "*.py"}}}, "Glob", {"pattern": "*.py"}),
        ({"read": "src/a.py"}, "Read", {"file_path": f"{WS}/src/a.py"}),
        ({"read": "/abs/a.py"}, "Read", {"file_path": "/abs/a.py"}),
        (
            {"edit": {"path": "./a.py", "old": "x = 1", "new": "x = 2"}},
            "Edit",
            {"file_path": f"{WS}/a.py", "old_string": "x = 1", "new_string": "x = 2"},
        ),
        ({"bash": "pytest -q"}, "Bash", {"command": "pytest -q"}),
    ],
)
def test_claude_tool_steps(step: dict[str, Any], name: str, tool_input: dict[str, Any]) -> None:
    with ModelStandin([step], workspace=WS) as server:
        events = parse_sse(claude(server, claude_body()).text)
    assert tool_use(events) == (name, tool_input)


def test_another_client_on_the_messages_api_gets_its_own_tools_calls() -> None:
    """OpenCode's Anthropic provider offers ``write{filePath, content}``, not Claude Code's ``Write``."""
    write = {"name": "write", "input_schema": {"type": "object", "required": ["filePath", "content"],
                                               "properties": {"filePath": {}, "content": {}}}}  # fmt: skip
    with ModelStandin([{"write": {"path": "a.txt", "content": "x"}}], workspace=WS) as server:
        events = parse_sse(claude(server, {**claude_body(), "tools": [write]}).text)
    assert tool_use(events) == ("write", {"filePath": f"{WS}/a.txt", "content": "x"})


def test_claude_non_streaming_request_gets_a_message(standin: ModelStandin) -> None:
    got = claude(standin, claude_body(0, stream=False))
    assert got.headers["content-type"] == "application/json"
    message = got.json()
    assert message["type"] == "message"
    assert message["stop_reason"] == "tool_use"
    (block,) = message["content"]
    assert block["type"] == "tool_use"
    assert block["name"] == "Write"
    assert block["input"]["file_path"] == f"{WS}/hello.txt"
    assert message["usage"]["output_tokens"] > 1


def test_claude_workspace_comes_from_its_system_prompt_when_not_given() -> None:
    with ModelStandin([{"write": {"path": "a.txt", "content": "x"}}]) as server:
        events = parse_sse(claude(server, claude_body()).text)
    assert tool_use(events)[1]["file_path"] == "/detected/dir/a.txt"


def test_a_relative_path_with_no_workspace_is_a_400_naming_the_step() -> None:
    body = claude_body()
    body["system"] = "no directory here"
    with ModelStandin([{"read": "a.txt"}]) as server:
        got = claude(server, body)
        assert got.status_code == 400
        assert "step 0" in got.json()["error"]["message"]
        assert server.requests()[-1]["served"] == "bad_script"


# -- OpenAI --------------------------------------------------------------------------------------


def test_codex_write_then_message_by_counting_assistant_turns(standin: ModelStandin) -> None:
    first = codex(standin, codex_body(0))
    assert first.status_code == 200
    events = parse_sse(first.text)
    names = [n for n, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-2:] == ["response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    item = output_item(events)
    assert item["type"] == "function_call"
    assert item["name"] == "exec_command"
    assert item["call_id"].startswith("call_")
    assert item["status"] == "completed"
    assert isinstance(item["arguments"], str)
    assert json.loads(item["arguments"]) == {
        "cmd": "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: hello.txt\n+hello\n+world\n"
        "*** End Patch\nEOF\n"
    }
    deltas = "".join(e["delta"] for n, e in events if n == "response.function_call_arguments.delta")
    assert deltas == item["arguments"]
    completed = events[-1][1]["response"]
    assert completed["id"].startswith("resp_")
    assert completed["status"] == "completed"
    usage = completed["usage"]
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}

    second = parse_sse(codex(standin, codex_body(1)).text)
    message = output_item(second)
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "Created hello.txt.", "annotations": []}]
    text = "".join(e["delta"] for n, e in second if n == "response.output_text.delta")
    assert text == "Created hello.txt."


@pytest.mark.parametrize(
    ("step", "name", "arguments"),
    [
        ({"tool": {"name": "exec_command", "input": {"cmd": "ls"}}}, "exec_command", {"cmd": "ls"}),
        ({"bash": "pytest -q"}, "exec_command", {"cmd": "pytest -q"}),
        ({"read": "my file.txt"}, "exec_command", {"cmd": "cat 'my file.txt'"}),
        (
            {"edit": {"path": "a.py", "old": "x = 1\n", "new": "x = 2\ny = 3"}},
            "exec_command",
            {
                "cmd": "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n@@\n"
                "-x = 1\n+x = 2\n+y = 3\n*** End Patch\nEOF\n"
            },
        ),
    ],
)
def test_codex_tool_steps(step: dict[str, Any], name: str, arguments: dict[str, Any]) -> None:
    with ModelStandin([step]) as server:
        item = output_item(parse_sse(codex(server, codex_body()).text))
    assert (item["name"], json.loads(item["arguments"])) == (name, arguments)


def test_codex_counts_assistant_messages_and_calls_in_input() -> None:
    body = codex_body(0)
    body["input"] += [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
    ]
    with ModelStandin([{"text": "a"}, {"text": "b"}, {"text": "third"}]) as server:
        item = output_item(parse_sse(codex(server, body).text))
    assert item["content"][0]["text"] == "third"


def test_codex_non_streaming_request_gets_a_response_object(standin: ModelStandin) -> None:
    response = codex(standin, codex_body(1, stream=False)).json()
    assert response["object"] == "response"
    assert response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "Created hello.txt."


def test_minimal_stream_mode_sends_only_the_events_the_clis_need() -> None:
    script = {"stream": "minimal", "workspace": WS, "steps": [{"bash": "true"}]}
    with ModelStandin(script) as server:
        anthropic = [n for n, _ in parse_sse(claude(server, claude_body()).text)]
        openai = [n for n, _ in parse_sse(codex(server, codex_body()).text)]
    assert anthropic == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert openai == ["response.output_item.done", "response.completed"]


# -- keys and the record -------------------------------------------------------------------------


def test_wrong_or_missing_key_is_401_in_each_providers_shape(standin: ModelStandin) -> None:
    wrong = claude(standin, claude_body(), key="nope")
    assert wrong.status_code == 401
    assert wrong.json()["type"] == "error"
    assert wrong.json()["error"]["type"] == "authentication_error"
    assert claude(standin, claude_body(), key=None).status_code == 401
    bearer_for_anthropic = httpx.post(
        f"{standin.url}/v1/messages", json=claude_body(), headers={"authorization": "Bearer k"}, timeout=5
    )
    assert bearer_for_anthropic.status_code == 401

    bad = codex(standin, codex_body(), key="nope")
    assert bad.status_code == 401
    assert bad.json()["error"]["code"] == "invalid_api_key"
    assert "nope" not in bad.text
    # A refused request consumes no step: the right key still gets turn 0's answer.
    assert tool_use(parse_sse(claude(standin, claude_body()).text))[0] == "Write"


def test_every_request_is_recorded_with_key_fingerprints_not_keys(
    standin: ModelStandin, tmp_path: Path
) -> None:
    claude(standin, claude_body(), key="k")
    codex(standin, codex_body(), key="wrong-key")
    httpx.post(f"{standin.url}/v1/embeddings", json={}, timeout=5)
    records = standin.requests()
    assert [(r["method"], r["path"], r["dialect"], r["served"], r["status"]) for r in records] == [
        ("POST", "/v1/messages", "anthropic", "answer", 200),
        ("POST", "/v1/responses", "openai", "unauthorized", 401),
        ("POST", "/v1/embeddings", None, "not_found", 404),
    ]
    assert records[0]["auth"] == {"x-api-key": key_fingerprint("k")}
    assert records[0]["query"] == {"beta": "true"}
    assert records[0]["headers"]["anthropic-version"] == "2023-06-01"
    assert "x-api-key" not in records[0]["headers"]
    assert records[0]["body"]["model"] == "claude-sonnet-4-5"
    assert len(records[0]["body"]["tools"]) == 25
    assert (records[0]["turn"], records[0]["hit"], records[0]["step"]) == (0, 0, 0)
    assert records[1]["auth"] == {"authorization": key_fingerprint("wrong-key")}
    assert "authorization" not in records[1]["headers"]
    log = (tmp_path / RECORD_NAME).read_text()
    assert [json.loads(line) for line in log.splitlines()] == records
    assert "wrong-key" not in log


def test_no_key_configured_accepts_any_key() -> None:
    with ModelStandin([{"text": "hi"}]) as server:
        assert claude(server, claude_body(), key="anything").status_code == 200
        assert codex(server, codex_body(), key=None).status_code == 200


# -- faults --------------------------------------------------------------------------------------


def test_error_twice_then_recovery_in_both_dialects() -> None:
    script = {
        "workspace": WS,
        "steps": [{"error": {"status": 500, "times": 2, "headers": {"retry-after": "0"}}}, {"bash": "ls"}],
    }
    with ModelStandin(script) as server:
        first = claude(server, claude_body())
        assert first.status_code == 500
        assert first.headers["retry-after"] == "0"
        assert first.json()["error"] == {"type": "api_error", "message": "Internal Server Error"}
        second = codex(server, codex_body())
        assert second.status_code == 500
        assert second.json()["error"]["type"] == "server_error"
        assert tool_use(parse_sse(claude(server, claude_body()).text)) == ("Bash", {"command": "ls"})
        assert output_item(parse_sse(codex(server, codex_body()).text))["name"] == "exec_command"
        assert [r["served"] for r in server.requests()] == ["error", "error", "answer", "answer"]


def test_error_always_and_custom_body() -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    with ModelStandin(
        [{"error": {"status": 400, "body": body, "times": "always"}}, {"text": "never"}]
    ) as server:
        for _ in range(3):
            got = claude(server, claude_body())
            assert (got.status_code, got.json()) == (400, body)


def test_error_in_stream() -> None:
    script = [{"error": {"status": 529, "in_stream": True, "times": 2}}, {"text": "ok"}]
    with ModelStandin(script) as server:
        anthropic = parse_sse(claude(server, claude_body()).text)
        assert [n for n, _ in anthropic] == ["message_start", "error"]
        assert anthropic[1][1]["error"]["type"] == "overloaded_error"
        openai = parse_sse(codex(server, codex_body()).text)
        assert [n for n, _ in openai] == ["response.created", "response.failed"]
        assert openai[1][1]["response"]["error"]["message"] == "Overloaded"


def test_script_past_its_end_is_a_400() -> None:
    with ModelStandin([{"text": "only"}]) as server:
        got = claude(server, claude_body(1))
        assert got.status_code == 400
        assert "no step for assistant turn 1" in got.json()["error"]["message"]


def test_drop_before_any_byte_then_answer() -> None:
    with ModelStandin([{"drop": {}}, {"text": "back"}]) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            claude(server, claude_body())
        assert claude(server, claude_body()).status_code == 200
        assert [r["served"] for r in server.requests()] == ["drop", "answer"]


def _read_stream(url: str, body: dict[str, Any]) -> tuple[int, str]:
    """Status and text of a streamed answer, read chunk by chunk; raises if the stream is cut."""
    received: list[str] = []
    with httpx.stream("POST", url, json=body, timeout=5) as got:
        try:
            received.extend(got.iter_text())
        except httpx.RemoteProtocolError as exc:
            raise CutStream(got.status_code, "".join(received)) from exc
    return got.status_code, "".join(received)


class CutStream(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(status, text)
        self.status = status
        self.text = text


def test_drop_after_headers_cuts_the_stream() -> None:
    with ModelStandin([{"drop": {"after_headers": True, "times": 2}}, {"text": "back"}]) as server:
        with pytest.raises(CutStream) as anthropic:
            _read_stream(server.url + "/v1/messages", claude_body())
        assert anthropic.value.status == 200
        assert [n for n, _ in parse_sse(anthropic.value.text)] == ["message_start", "ping"]
        with pytest.raises(CutStream) as openai:
            _read_stream(server.openai_base_url + "/responses", codex_body())
        assert [n for n, _ in parse_sse(openai.value.text)] == ["response.created", "response.in_progress"]
        assert _read_stream(server.url + "/v1/messages", claude_body())[0] == 200


def test_stall_without_seconds_is_bounded_by_the_max() -> None:
    with ModelStandin([{"stall": {}}, {"text": "late"}], max_stall_seconds=0.3) as server:
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError):
            claude(server, claude_body())
        elapsed = time.monotonic() - started
        assert 0.25 <= elapsed < 5
        assert server.requests()[0]["served"] == "stall"
        assert claude(server, claude_body()).status_code == 200


def test_stall_then_answer_slowly_in_both_dialects() -> None:
    script = [{"stall": {"seconds": 0.2, "then": "answer", "times": 2}}, {"text": "slow"}]
    with ModelStandin(script) as server:
        started = time.monotonic()
        events = parse_sse(claude(server, claude_body()).text)
        assert time.monotonic() - started >= 0.2
        assert stop_reason(events) == "end_turn"
        started = time.monotonic()
        item = output_item(parse_sse(codex(server, codex_body()).text))
        assert time.monotonic() - started >= 0.2
        assert item["content"][0]["text"] == "slow"


def test_stall_after_headers_holds_the_stream_open_then_finishes() -> None:
    script = [{"stall": {"seconds": 0.3, "then": "answer", "after_headers": True}}, {"text": "slow"}]
    with ModelStandin(script) as server:
        with httpx.stream("POST", server.url + "/v1/messages", json=claude_body(), timeout=5) as got:
            started = time.monotonic()
            chunks = list(got.iter_text())
        text = "".join(chunks)
        assert time.monotonic() - started >= 0.25
        assert [n for n, _ in parse_sse(text)][:2] == ["message_start", "ping"]
        assert stop_reason(parse_sse(text)) == "end_turn"


def test_stop_ends_a_stall_at_once() -> None:
    server = ModelStandin([{"stall": {"seconds": 60}}], max_stall_seconds=60).start()
    outcome: list[BaseException | int] = []

    def call() -> None:
        try:
            outcome.append(claude(server, claude_body()).status_code)
        except httpx.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 5
    while not server.requests() and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert time.monotonic() - started < 3
    assert isinstance(outcome[0], httpx.RemoteProtocolError)


def test_body_over_the_limit_is_413() -> None:
    with ModelStandin([{"text": "x"}], max_body_bytes=1000) as server:
        got = claude(server, claude_body())
        assert got.status_code == 413
        assert got.json()["error"]["type"] == "request_too_large"
        assert server.requests()[0]["served"] == "too_large"


def test_a_body_that_is_not_a_json_object_is_400() -> None:
    with ModelStandin([{"text": "x"}]) as server:
        got = httpx.post(server.url + "/v1/responses", content=b"[1, 2", timeout=5)
        assert got.status_code == 400
        assert got.json()["error"]["type"] == "invalid_request_error"


# -- the script and the command ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "fragment"),
    [
        ({"steps": [{"text": "a", "bash": "b"}]}, "step 0: must be an object with exactly one key"),
        ([{"text": "a"}, {"wrte": {}}], "step 1: unknown step 'wrte'"),
        ([{"write": {"path": "a"}}], "missing ['content']"),
        ([{"write": {"path": "a", "content": "x\nEOF\ny"}}], "heredoc"),
        ([{"error": {"status": 200}}], "status must be 400..599"),
        ([{"error": {"status": 500, "times": 0}}], "times must be"),
        ([{"stall": {"seconds": -1}}], "seconds must be"),
        ([{"stall": {"then": "explode"}}], 'then must be "drop" or "answer"'),
        ({"steps": [], "workspace": "relative"}, "workspace: must be an absolute path"),
        ({"steps": [], "colour": "red"}, "unknown top-level key"),
        ("not a script", "steps: must be a list"),
    ],
)
def test_bad_scripts_are_refused_naming_the_step(script: Any, fragment: str) -> None:
    with pytest.raises(ScriptError, match=None) as caught:
        parse_script(script)
    assert fragment in str(caught.value)


def test_a_script_file_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{nope")
    with pytest.raises(ScriptError, match=r"s\.json: not JSON"):
        ModelStandin(path)


def test_command_registers_model_standin(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["model-standin", "--script", "s.json", "--port", "9", "--record", "r.jsonl", "--api-key-env", "K"]
    )
    assert (args.script, args.port, args.record, args.api_key_env) == (
        Path("s.json"),
        9,
        Path("r.jsonl"),
        "K",
    )
    assert callable(args.handler)


def test_baton_model_standin_serves_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"workspace": WS, "steps": [{"write": {"path": "a.txt", "content": "x"}}]}))
    record = tmp_path / "requests.jsonl"
    runner = (
        "import argparse, sys; from emulator.model.command import register; p = argparse.ArgumentParser(); "
        "register(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); sys.exit(a.handler(a))"
    )
    argv = ["model-standin", "--script", str(script), "--record", str(record), "--api-key-env", "STANDIN_KEY"]
    proc = subprocess.Popen(
        [sys.executable, "-c", runner, *argv],
        cwd=ROOT,
        env={**os.environ, "STANDIN_KEY": "k"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[3]
        assert url.startswith("http://127.0.0.1:")
        got = httpx.post(url + "/v1/messages", json=claude_body(), headers={"x-api-key": "k"}, timeout=10)
        assert tool_use(parse_sse(got.text)) == ("Write", {"file_path": f"{WS}/a.txt", "content": "x"})
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    (entry,) = [json.loads(x) for x in record.read_text().splitlines()]
    assert entry["auth"] == {"x-api-key": key_fingerprint("k")}


def test_reset_starts_the_script_over() -> None:
    with ModelStandin([{"error": {"status": 503}}, {"text": "x"}]) as server:
        assert claude(server, claude_body()).status_code == 503
        assert claude(server, claude_body()).status_code == 200
        server.reset()
        assert server.requests() == []
        assert claude(server, claude_body()).status_code == 503


def test_command_refuses_a_missing_script_or_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["model-standin", "--script", str(tmp_path / "absent.json")])
    assert args.handler(args) == 2
    assert "absent.json: cannot read it" in capsys.readouterr().err
    args = parser.parse_args(["model-standin", "--script", "x", "--api-key-env", "BATON_TEST_UNSET_KEY_VAR"])
    assert args.handler(args) == 2
    assert "$BATON_TEST_UNSET_KEY_VAR is unset" in capsys.readouterr().err
