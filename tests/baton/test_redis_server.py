"""The embedded Redis-protocol server: both binaries, and it never outlives Baton."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from baton import redis_server
from baton.redis_server import EmbeddedRedis, bundled_valkey, server_binary


def test_the_bundled_valkey_binary_serves_with_a_password(tmp_path: Path) -> None:
    """The fallback for machines without redis-server (the README's fresh-machine path)."""
    with EmbeddedRedis(data_dir=tmp_path, durable=True, binary=bundled_valkey()) as server:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        assert client.info("server")["server_name"] == "valkey"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        client.close()
        anonymous = redis.Redis(host="127.0.0.1", port=int(server.url.rsplit(":", 1)[1].split("/")[0]))
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("x", "1")
        anonymous.close()


def test_redis_server_on_path_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert server_binary() == str(fake)


def test_the_server_dies_with_its_parent_even_on_sigkill(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from baton.redis_server import EmbeddedRedis\n"
        f"s = EmbeddedRedis(data_dir=Path({str(tmp_path)!r}), durable=False)\n"
        "print(s.start(), flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    url = parent.stdout.readline().strip()
    parent.stdout.close()
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    assert client.ping()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
        except redis.ConnectionError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the embedded server outlived its parent")
    client.close()


def _as_started(tmp_path: Path, real: str) -> str:
    """The real server, told to keep its process title.

    Redis and Valkey overwrite their argv with a short title once they run, so
    /proc/<pid>/cmdline hides the arguments after start-up but shows them
    during it (and on systems where the title cannot be set). With
    ``set-proc-title no`` it shows what Baton passed, for as long as it runs.
    """
    wrapper = tmp_path / "server-as-started"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(real)} "$@" --set-proc-title no\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize("binary", [server_binary, bundled_valkey], ids=["from-PATH", "bundled-valkey"])
def test_the_password_is_on_no_command_line(tmp_path: Path, binary: Callable[[], str]) -> None:
    data_dir = tmp_path / 'data "quoted" dir with spaces'
    server = EmbeddedRedis(data_dir=data_dir, durable=True, binary=_as_started(tmp_path, binary()))
    with server:
        assert server.pid is not None
        password = server.url.split(":")[2].split("@")[0].encode()
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert b"--set-proc-title" in argv  # this is the argv as started, not a title
        assert password not in b" ".join(argv)
        assert password not in Path(f"/proc/{server.pid}/environ").read_bytes()
        # The configuration it did get (on stdin) is the one Baton meant.
        client = redis.Redis.from_url(server.url)
        assert client.config_get("dir")["dir"] == str(data_dir)
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        client.close()
        anonymous = redis.Redis(host="127.0.0.1", port=int(server.url.rsplit(":", 1)[1].split("/")[0]))
        with pytest.raises(redis.AuthenticationError):
            anonymous.set("x", "1")
        anonymous.close()


def test_a_port_taken_by_something_else_between_probe_and_bind_is_not_taken_for_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI: the free port went to another test's HTTP server before Redis bound it, and the
    ping read "HTTP/1.1 400". That is not our server: try another port, and leave no process behind."""

    squatter = socket.create_server(("127.0.0.1", 0))
    taken = squatter.getsockname()[1]
    done = threading.Event()

    def answer_http() -> None:
        squatter.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = squatter.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=answer_http, daemon=True)
    thread.start()
    ports = iter([taken])
    real = redis_server.free_port
    monkeypatch.setattr(redis_server, "free_port", lambda: next(ports, None) or real())
    server = EmbeddedRedis(data_dir=tmp_path / "data", binary=server_binary())
    try:
        with server:
            assert server.url is not None
            assert f":{taken}/" not in server.url
            assert redis.Redis.from_url(server.url).ping()
    finally:
        done.set()
        thread.join(5)
        squatter.close()
