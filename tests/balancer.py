"""One address in front of several `baton serve` processes, as fly.io's proxy or a load balancer
puts it: each HTTP request goes to the next backend in turn (GitHub's sender keeps its connection
alive, so balancing connections would send everything to one), and to the one after if that one
cannot be reached (a backend being restarted). Loopback only; served by uvicorn in a thread.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence

import httpx
from starlette.types import Receive, Scope, Send

from tests.conftest import listening_socket, serve_app

#: Hop-by-hop headers a proxy does not pass on (RFC 9110 section 7.6.1), and the length it recomputes.
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


class Balancer:
    def __init__(self, backends: Sequence[int]) -> None:
        self.backends = [f"http://127.0.0.1:{port}" for port in backends]
        self.served = [0] * len(self.backends)
        self._turn = itertools.cycle(range(len(self.backends)))
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in _HOP]
        path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        with self._lock:
            first = next(self._turn)
        for i in range(len(self.backends)):
            which = (first + i) % len(self.backends)
            try:  # a client per request: nothing outlives the request, so nothing is left to close
                async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
                    answer = await client.request(scope["method"], self.backends[which] + path,
                                                  content=body, headers=headers)  # fmt: skip
            except httpx.ConnectError:
                continue
            with self._lock:
                self.served[which] += 1
            out = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
            await send({"type": "http.response.body", "body": answer.content})
            return
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": b"no backend answered"})


@contextlib.contextmanager
def balancer(backends: Sequence[int]) -> Iterator[tuple[Balancer, int]]:
    """The balancer and the port it listens on."""
    front = Balancer(backends)
    sock = listening_socket()
    port: int = sock.getsockname()[1]
    with serve_app(front, sock):
        yield front, port
