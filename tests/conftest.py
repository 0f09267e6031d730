"""Shared fixtures: one real Redis-protocol server per session, signed deliveries."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import uvicorn
from starlette.types import ASGIApp

from baton.redis_server import EmbeddedRedis
from bot.signature import sign
from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from evidence.keys import SigningKey

FIXTURES = Path(__file__).parent / "fixtures"
SECRET = b"test-secret-for-baton"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis"), durable=False)
    with server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session server, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def rdb(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def listening_socket() -> socket.socket:
    """A socket bound to a free loopback port and kept: no other test can take the port before
    the server starts (choosing a port, closing it and binding again later raced under xdist)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def serve_app(app: ASGIApp, sock: socket.socket | None = None) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a loopback socket (a thread), as `baton serve` does."""
    sock = sock or listening_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        raise RuntimeError("uvicorn did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def examples(event: str) -> list[dict[str, Any]]:
    """GitHub's published example payloads for one event (see fixtures/webhooks/LICENSE.md)."""
    data: list[dict[str, Any]] = json.loads((FIXTURES / "webhooks" / f"{event}.json").read_text())
    return data


def example(event: str, action: str | None, index: int = 0) -> dict[str, Any]:
    matching = [e for e in examples(event) if e.get("action") == action]
    return json.loads(json.dumps(matching[index]))  # a private copy to edit


def delivery_headers(
    body: bytes, event: str, delivery: str | None = None, secret: bytes = SECRET
) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
    }


def labeled(agent: str = "claude-code", *, installation: int = 4242) -> dict[str, Any]:
    """GitHub's `issues.labeled` example, with an agent label and an installation."""
    payload = example("issues", "labeled")
    payload["label"]["name"] = f"agent:{agent}"
    payload["installation"] = {"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="}
    return payload


def emulated_payload(directory: Path, play: Callable[[AdminClient], dict[str, Any]]) -> dict[str, Any]:
    """The body of the last webhook the emulator sends for a person's action (``play``), for
    events GitHub's published examples lack (``issues.closed``). Nothing receives it."""
    with EmulatorServer(directory) as server, AdminClient(server.url) as admin:
        world.build(admin, server.url, webhook_url="http://127.0.0.1:9/unreachable")
        delivery = play(admin)["deliveries"][-1]
        payload: dict[str, Any] = admin.call("GET", f"/deliveries/{delivery['id']}")["payload"]
        return payload


def closed_issue(directory: Path) -> dict[str, Any]:
    """`issues.closed`, as GitHub sends it when a maintainer closes an issue."""

    def play(admin: AdminClient) -> dict[str, Any]:
        number = int(admin.create_issue(world.REPO, title="Done already", user="rita")["number"])
        closed: dict[str, Any] = admin.close_issue(world.REPO, number, sender="maria")
        return closed

    return emulated_payload(directory, play)


ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PREFIX = Path.home() / ".cache" / "baton-ci" / "agent-clis"


@pytest.fixture(scope="session")
def agent_cli_bin() -> Path:
    """The directory holding the pinned agent CLIs' executables (``claude``, ``codex``, ``gemini``, ``qwen``,
    ``opencode``, ``aider``, ``mini``).

    `.ci/run` installs them (`.ci/agent-clis`) into ``AGENT_CLI_PREFIX``; run alone, the tests install
    them into the same cache. Only a machine without Node.js skips what needs them; anywhere else a
    missing CLI is a failure, because CI must run them."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js (node, npm) is not installed here: the real agent CLIs cannot run")
    prefix = Path(os.environ.get("AGENT_CLI_PREFIX") or DEFAULT_PREFIX)
    done = subprocess.run(["bash", str(ROOT / ".ci" / "agent-clis"), str(prefix)],
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, f".ci/agent-clis failed:\n{done.stdout}\n{done.stderr}"
    return prefix / "bin"


@dataclass(frozen=True)
class EvidenceKeys:
    """A signing key and an audit secret made for this test session (never a committed secret)."""

    key: SigningKey
    key_path: Path
    audit_secret: str

    def env(self) -> dict[str, str]:
        """What `baton serve` and `baton worker` need to start: they refuse to run without them."""
        return {"BATON_SIGNING_KEY_PATH": str(self.key_path), "BATON_AUDIT_SECRET": self.audit_secret}


def make_evidence_keys(directory: Path) -> EvidenceKeys:
    key = SigningKey.generate()
    path = directory / "baton-signing-key.pem"
    path.write_bytes(key.private_pem())
    path.chmod(0o600)
    return EvidenceKeys(key, path, secrets.token_hex(32))


@pytest.fixture(scope="session")
def evidence_keys(tmp_path_factory: pytest.TempPathFactory) -> EvidenceKeys:
    return make_evidence_keys(tmp_path_factory.mktemp("evidence-keys"))
