"""`baton serve`'s HTTP protocol: an answer's head and body in one write, and HTTP/1.1 as uvicorn has it.

The joining is checked on a transport that records its writes (the socket's side of the
asyncio.Transport contract); the protocol itself through uvicorn on a loopback socket, with
keep-alive, pipelined requests, `Connection: close`, streamed answers and the webhook path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from baton.settings import Settings
from bot.app import WEBHOOK_PATH, create_app
from bot.protocol import JoinedWrites, OneWriteProtocol
from tests.conftest import SECRET, delivery_headers, labeled, listening_socket


class Recording(asyncio.Transport):
    """What reached the socket: one entry per write, and whether it closed or was aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


async def _turn() -> None:
    """Let the loop run what was scheduled for the end of this turn."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_a_head_and_its_body_written_in_one_turn_are_one_write() -> None:
    async def play() -> list[bytes]:
        socket_side = Recording()
        joined = JoinedWrites(socket_side, asyncio.get_running_loop())
        joined.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n")
        joined.write(b"{}")
        await _turn()
        return socket_side.writes

    assert asyncio.run(play()) == [b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}"]


def test_a_lone_write_goes_out_at_the_end_of_its_turn_and_order_is_kept() -> None:
    async def play() -> list[list[bytes]]:
        socket_side = Recording()
        joined = JoinedWrites(socket_side, asyncio.get_running_loop())
        seen = []
        joined.write(b"head")
        seen.append(list(socket_side.writes))  # held for now
        await _turn()
        seen.append(list(socket_side.writes))
        for chunk in (b"a", b"b", b"c"):  # a streamed answer: joined in pairs, never reordered
            joined.write(chunk)
        await _turn()
        seen.append(list(socket_side.writes))
        return seen

    held, flushed, streamed = asyncio.run(play())
    assert held == []
    assert flushed == [b"head"]
    assert b"".join(streamed) == b"headabc"


def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    async def play() -> tuple[Recording, Recording]:
        loop = asyncio.get_running_loop()
        closing, aborting = Recording(), Recording()
        first, second = JoinedWrites(closing, loop), JoinedWrites(aborting, loop)
        first.write(b"last words")
        first.close()
        second.write(b"never sent")
        second.abort()
        await _turn()
        return closing, aborting

    closing, aborting = asyncio.run(play())
    assert (closing.writes, closing.closed) == ([b"last words"], True)
    assert (aborting.writes, aborting.aborted) == ([], True)


# -- the protocol in uvicorn, over loopback ---------------------------------------------------------


@contextlib.contextmanager
def serving(app: ASGIApp) -> Iterator[tuple[str, int]]:
    """``app`` served by uvicorn with `baton serve`'s protocol on a loopback socket."""
    sock = listening_socket()
    config = uvicorn.Config(app, http=OneWriteProtocol, loop="uvloop", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def streamed(scope: Scope, receive: Receive, send: Send) -> None:
    """An answer without a length, in three parts with pauses between (chunked encoding)."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for part in (b"one ", b"two ", b"three"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def read_answers(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` answers with a content-length off ``sock``, each as head + body bytes."""
    data = b""
    answers: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(answers) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode()
            length = int(
                next(x.split(":")[1] for x in head.split("\r\n") if x.lower().startswith("content-length"))
            )
            end = head_end + 4 + length
            if len(data) >= end:
                answers.append(data[:end])
                data = data[end:]
                continue
        assert time.monotonic() < deadline, data
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} answers"
        data += chunk
    return answers


def test_keep_alive_pipelining_and_connection_close_through_the_protocol(redis_url: str) -> None:
    app = create_app(Settings(webhook_secrets=(SECRET,), redis_timeout=2.0), redis_url)
    with serving(app) as (host, port):
        # Keep-alive: one connection, many answers.
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as client:
            for _ in range(3):
                assert client.get("/healthz").json()["status"] == "ok"
            body = json.dumps(labeled()).encode()
            answer = client.post(WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues"))
            assert answer.status_code == 202, answer.text
        # Two requests in one packet: two answers, in order.
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
            first, second = read_answers(sock, 2)
            assert first.startswith(b"HTTP/1.1 200 ")
            assert second.startswith(b"HTTP/1.1 404 ")
        # Connection: close: the whole answer, then the end of the stream.
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            head, _, rest = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert json.loads(rest)["status"] == "ok"


def test_a_streamed_answer_arrives_whole_through_the_protocol() -> None:
    with serving(streamed) as (host, port), httpx.Client(base_url=f"http://{host}:{port}") as client:
        for _ in range(2):
            answer = client.get("/")
            assert answer.status_code == 200
            assert answer.headers["transfer-encoding"] == "chunked"
            assert answer.text == "one two three"


@pytest.mark.parametrize("expect", [True, False])
def test_a_body_sent_after_100_continue_is_read(redis_url: str, expect: bool) -> None:
    """The interim `100 Continue` is a write of its own, before the final answer, not held behind it."""
    app = create_app(Settings(webhook_secrets=(SECRET,), redis_timeout=2.0), redis_url)
    body = json.dumps(labeled()).encode()
    headers = {**delivery_headers(body, "issues"), "Content-Length": str(len(body)), "Host": "x"}
    if expect:
        headers["Expect"] = "100-continue"
    head = f"POST {WEBHOOK_PATH} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with serving(app) as (host, port), socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(head.encode())
        if expect:
            interim = sock.recv(65536)  # the server asks for the body before it is sent
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        (answer,) = read_answers(sock, 1)
        assert answer.startswith(b"HTTP/1.1 202 "), answer
