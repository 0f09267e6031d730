"""The gateway over real sockets: a gateway on a UNIX socket, the model stand-in as its provider.

The stand-in is told the real key (``REAL_KEY``), so it answers 401 to anything else: a call
that reaches it with the placeholder, or with no key, fails there as it would at the vendor.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from emulator.model.standin import ModelStandin
from worker.policy import Agent
from worker.runner import gateway

REAL_KEY = "sk-ant-real-key-canary-3f9a"
PLACEHOLDER = "baton-placeholder-gateway-test"
TEXT = [{"text": "Done."}] * 50


@dataclass
class Opened:
    gw: gateway.ModelGateway
    client: httpx.Client
    standin: ModelStandin
    stopped: list[str]

    def post(self, path: str, body: Any, *, key: str | None = PLACEHOLDER, **headers: str) -> httpx.Response:
        given = {"content-type": "application/json", **headers}
        if key is not None:
            given.setdefault("x-api-key", key)
        return self.client.post(path, json=body, headers=given)


@contextlib.contextmanager
def opened(
    tmp_path: Path,
    script: Any = TEXT,
    *,
    endpoints: tuple[str, ...] = ("api.anthropic.com", "api.openai.com"),
    per_run: float | None = None,
    ledger: gateway.Ledger | None = None,
    server_tools: bool = False,
    keys: Mapping[str, str] | None = None,
    tcp: bool = False,
) -> Iterator[Opened]:
    stopped: list[str] = []
    with ModelStandin(script, api_key=REAL_KEY, workspace="/workspace") as standin:
        agent = Agent(adapter="command", model_endpoints=endpoints, command=("x",))
        environ = keys if keys is not None else {"ANTHROPIC_API_KEY": REAL_KEY, "OPENAI_API_KEY": REAL_KEY}
        upstreams = gateway.upstreams_for(
            agent, environ=environ, base_urls={"anthropic": standin.url, "openai": standin.url}
        )
        config = gateway.Config(
            PLACEHOLDER,
            upstreams,
            server_tools,
            gateway.BUILTIN,
            gateway.SpendCap(per_run, ledger),
            stopped.append,
        )
        with gateway.ModelGateway(tmp_path / "model.sock", config, tcp=tcp) as gw:
            transport = httpx.HTTPTransport(uds=str(tmp_path / "model.sock"))
            with httpx.Client(transport=transport, base_url="http://127.0.0.1:3129", timeout=30) as client:
                yield Opened(gw, client, standin, stopped)


def raw_exchange(path: Path, data: bytes, *, read: int = 65536) -> bytes:
    """Send bytes on a fresh connection to the gateway and read until it closes (bounded)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(data)
        got = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while len(got) < read and (chunk := sock.recv(65536)):
                got += chunk
        return got


@pytest.fixture
def anthropic_request() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hi"}],
    }
