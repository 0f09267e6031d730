"""A small loopback webhook receiver for the emulator tests, and a signature check."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from githubkit.webhooks import verify


@dataclass
class Received:
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.raw)
        return data

    @property
    def event(self) -> tuple[str, str | None]:
        """(``X-GitHub-Event``, ``action``)."""
        return self.headers["x-github-event"], self.body.get("action")


@dataclass
class Receiver:
    url: str
    items: list[Received] = field(default_factory=list)
    status: int = 202

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.items) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.items)


@contextmanager
def serve_receiver() -> Iterator[Receiver]:
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            holder[0].items.append(Received({k.lower(): v for k, v in self.headers.items()}, raw))
            self.send_response(holder[0].status)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/webhooks"))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


def assert_signed(item: Received, secret: str) -> None:
    """Signed with the App's secret, with the headers every GitHub delivery has."""
    expected = "sha256=" + hmac.new(secret.encode(), item.raw, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(item.headers["x-hub-signature-256"], expected)
    assert verify(secret, item.raw, item.headers["x-hub-signature-256"])
    assert not verify("wrong secret", item.raw, item.headers["x-hub-signature-256"])
    assert item.headers["user-agent"].startswith("GitHub-Hookshot/")
    assert item.headers["content-type"] == "application/json"
    assert item.headers["x-github-hook-id"].isdigit()
    assert len(item.headers["x-github-delivery"]) == 36
