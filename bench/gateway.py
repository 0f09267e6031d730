"""Model gateway: the latency it adds per call, time to the first streamed byte, calls per second.

Three processes, as in a run: the gateway as the worker runs it (on its engine's loop, in this
process), a provider standing in for the vendor (an asyncio server in a child process,
answering a fixed Anthropic Messages stream on keep-alive connections) and a client standing in
for the agent (a child process, raw HTTP/1.1 on kept-alive connections). Every latency figure
is taken both through the gateway (its UNIX socket, the placeholder key, a Claude-Code-shaped
request of ~40 KB that the gateway parses, checks and re-encodes) and straight to the provider,
by the same client, interleaved.

    .venv/bin/python bench/gateway.py [--calls 2000] [--stream-calls 200] [--seconds 5] [--clients 8]

Targets (the model-gateway issue): added latency p50 ≤ 2 ms on loopback; time to first streamed
byte unchanged within noise; ≥ 200 calls/s through one gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.policy import Agent
from worker.runner import gateway

KEY = "sk-bench-real-key"
PLACEHOLDER = "baton-placeholder-bench"
#: How long the provider holds a stream between its first event and the rest (a model thinking).
STREAM_HOLD_S = 0.05


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


_HEAD_EVENT = _sse(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "usage": {"input_tokens": 10000, "output_tokens": 1},
        },
    },
)
_REST = b"".join(
    [
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        *(
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "word " * 8},
                },
            )
            for _ in range(20)
        ),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 160}},
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


# -- the provider (a child process) ------------------------------------------------------------------


async def _provider(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = await reader.readexactly(length)
            hold = b'"user_id":"hold"' in body or b'"user_id": "hold"' in body
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            writer.write(_chunk(_HEAD_EVENT))
            await writer.drain()
            if hold:
                await asyncio.sleep(STREAM_HOLD_S)
            writer.write(_chunk(_REST) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def provider_main() -> None:
    async def serve() -> None:
        server = await asyncio.start_server(_provider, "127.0.0.1", 0)
        print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
        await server.serve_forever()

    asyncio.run(serve())


# -- the client (a child process) ------------------------------------------------------------------


def request_body(*, hold: bool = False) -> bytes:
    """A request shaped like Claude Code's (23 plain tools, system blocks, a conversation), ~40 KB;
    ``hold``: the provider holds its answer after the first event (it reads that from the body, which
    the gateway passes on as the agent sent it)."""
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 60} for i in range(8)},
    }
    tools = [
        {"name": f"Tool{i}", "description": "Does a thing. " * 40, "input_schema": schema} for i in range(23)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug. " * 50}]}
    ]
    for i in range(6):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i}",
                        "name": "Read",
                        "input": {"file_path": f"/workspace/f{i}.py"},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "line of code\n" * 40}
                ],
            }
        )
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "messages": messages,
        "system": [{"type": "text", "text": "You are an agent. " * 100}],
        "tools": tools,
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "hold" if hold else "u"},
    }
    return json.dumps(body).encode()


class _Connection:
    def __init__(self, where: str | tuple[str, int]) -> None:
        family = socket.AF_UNIX if isinstance(where, str) else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.connect(where)
        if family == socket.AF_INET:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def call(self, path: str, body: bytes) -> tuple[float, float]:
        """(time to the first body byte, time to the end), from the request's first byte."""
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: "
            f"{PLACEHOLDER if path.startswith('/anthropic') else KEY}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        started = time.perf_counter()
        self.sock.sendall(head.encode() + body)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        self.buffer = self.buffer.split(b"\r\n\r\n", 1)[1]
        while b"\r\n" not in self.buffer:
            self.buffer += self._recv()
        first = time.perf_counter() - started
        while b"0\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        self.buffer = self.buffer.split(b"0\r\n\r\n", 1)[1]
        return first, time.perf_counter() - started

    def _recv(self) -> bytes:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        return data


def client_main(
    gateway_socket: str, port: int, *, calls: int, stream_calls: int, seconds: float, clients: int
) -> None:
    body, held = request_body(), request_body(hold=True)
    through, direct = _Connection(gateway_socket), _Connection(("127.0.0.1", port))
    for _ in range(50):  # warm both paths: connections, the gateway's pool, caches
        through.call("/anthropic/v1/messages", body)
        direct.call("/v1/messages", body)
    via, straight = [], []
    for _ in range(calls):
        straight.append(direct.call("/v1/messages", body)[1])
        via.append(through.call("/anthropic/v1/messages", body)[1])
    first_via, first_straight = [], []
    for _ in range(stream_calls):
        first_straight.append(direct.call("/v1/messages", held)[0])
        first_via.append(through.call("/anthropic/v1/messages", held)[0])
    idle_via, idle_straight = [], []  # the same idle gap before an answer sent at once: the baseline
    for _ in range(stream_calls):
        time.sleep(STREAM_HOLD_S)
        idle_straight.append(direct.call("/v1/messages", body)[0])
        time.sleep(STREAM_HOLD_S)
        idle_via.append(through.call("/anthropic/v1/messages", body)[0])
    figures: dict[str, Any] = {
        "request_bytes": len(body),
        "calls": calls,
        "stream_calls": stream_calls,
        "added_p50_us": round((statistics.median(via) - statistics.median(straight)) * 1e6),
        "direct_p50_us": round(statistics.median(straight) * 1e6),
        "gateway_p50_us": round(statistics.median(via) * 1e6),
        "direct_p99_us": round(_pct(straight, 0.99) * 1e6),
        "gateway_p99_us": round(_pct(via, 0.99) * 1e6),
        "first_byte_direct_p50_ms": round(statistics.median(first_straight) * 1e3, 2),
        "first_byte_gateway_p50_ms": round(statistics.median(first_via) * 1e3, 2),
        "first_byte_idle_direct_p50_ms": round(statistics.median(idle_straight) * 1e3, 2),
        "first_byte_idle_gateway_p50_ms": round(statistics.median(idle_via) * 1e3, 2),
        "calls_per_s": _throughput(gateway_socket, body, seconds, clients),
    }
    print(json.dumps(figures), flush=True)


def _throughput(gateway_socket: str, body: bytes, seconds: float, clients: int) -> float:
    """Calls per second through the gateway with ``clients`` kept-alive connections (threads)."""
    import threading  # noqa: PLC0415 - only this part of the client needs it

    counts = [0] * clients
    deadline = time.perf_counter() + seconds

    def hammer(i: int) -> None:
        connection = _Connection(gateway_socket)
        while time.perf_counter() < deadline:
            connection.call("/anthropic/v1/messages", body)
            counts[i] += 1

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return round(sum(counts) / (time.perf_counter() - started), 1)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per latency case")
    parser.add_argument("--stream-calls", type=int, default=200, help="calls for the first-byte case")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the throughput run")
    parser.add_argument("--clients", type=int, default=8, help="connections in the throughput run")
    parser.add_argument("--provider", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.provider:
        provider_main()
        return
    if args.client:
        client_main(
            args.client,
            args.port,
            calls=args.calls,
            stream_calls=args.stream_calls,
            seconds=args.seconds,
            clients=args.clients,
        )
        return
    print(
        f"load average before: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}, "
        f"python {sys.version.split()[0]}"
    )
    provider = subprocess.Popen([sys.executable, __file__, "--provider"], stdout=subprocess.PIPE)
    if provider.stdout is None:
        raise RuntimeError("no pipe from the provider")
    port = json.loads(provider.stdout.readline())["port"]
    directory = tempfile.mkdtemp(prefix="baton-bench-")
    path = Path(directory) / "model.sock"
    agent = Agent(adapter="command", model_endpoints=("api.anthropic.com",), command=("x",))
    upstreams = gateway.upstreams_for(
        agent, environ={"ANTHROPIC_API_KEY": KEY}, base_urls={"anthropic": f"http://127.0.0.1:{port}"}
    )
    config = gateway.Config(PLACEHOLDER, upstreams, False, gateway.BUILTIN, gateway.SpendCap())
    try:
        with gateway.ModelGateway(path, config) as gw:
            client = [
                sys.executable,
                __file__,
                "--client",
                str(path),
                "--port",
                str(port),
                "--calls",
                str(args.calls),
                "--stream-calls",
                str(args.stream_calls),
                "--seconds",
                str(args.seconds),
                "--clients",
                str(args.clients),
            ]
            done = subprocess.run(client, check=True, capture_output=True, text=True)
            totals = gw.journal.totals()
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        figures["journaled_calls"] = totals["calls"]
        figures["refused"] = totals["refused"]
    finally:
        provider.terminate()
        provider.wait(10)
        os.rmdir(directory)
    print(
        f"added latency per call: p50 {figures['added_p50_us']} µs (direct {figures['direct_p50_us']} µs, "
        f"through the gateway {figures['gateway_p50_us']} µs; p99 {figures['direct_p99_us']} / "
        f"{figures['gateway_p99_us']} µs)"
    )
    print(
        f"first streamed byte: direct p50 {figures['first_byte_direct_p50_ms']} ms, through the gateway "
        f"{figures['first_byte_gateway_p50_ms']} ms "
        f"(the provider holds the rest {STREAM_HOLD_S * 1000:.0f} ms); an answer sent at once after the same "
        f"idle: direct {figures['first_byte_idle_direct_p50_ms']} ms, through the gateway "
        f"{figures['first_byte_idle_gateway_p50_ms']} ms"
    )
    print(f"throughput: {figures['calls_per_s']} calls/s through one gateway ({args.clients} connections)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
