"""`baton emulator --port P --state DIR` serves the API on loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from baton.cli import build_parser
from emulator.server import free_port


def test_parser_registers_emulator_command(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["emulator", "--port", "9999", "--state", str(tmp_path), "--token-ttl", "5"]
    )
    assert (args.port, args.state, args.token_ttl) == (9999, tmp_path, 5.0)
    assert callable(args.handler)


def _start(state: Path, port: int) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from baton.cli import main; sys.exit(main())",
            "emulator",
            "--port",
            str(port),
            "--state",
            str(state),
        ],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_healthy(proc: subprocess.Popen[bytes], port: int) -> httpx.Response | None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/_emulator/health", timeout=1)
        except httpx.TransportError:
            time.sleep(0.1)
    return None


def test_baton_emulator_starts_and_answers(tmp_path: Path) -> None:
    port = free_port()
    proc = _start(tmp_path / "gh", port)
    try:
        health = _wait_healthy(proc, port)
        assert health is not None
        assert health.json() == {"ok": True}
        missing = httpx.get(f"http://127.0.0.1:{port}/repos/a/b", timeout=5)
        assert missing.status_code == 404
        assert missing.json()["message"] == "Not Found"
        assert (tmp_path / "gh" / "github-requests.jsonl").read_text().count("\n") == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_state_is_on_disk_after_the_cli_is_stopped(tmp_path: Path, stop: signal.Signals) -> None:
    """State is written shortly after a change; SIGTERM/SIGINT write whatever is still unsaved."""
    port = free_port()
    proc = _start(tmp_path / "gh", port)
    try:
        assert _wait_healthy(proc, port) is not None
        for n in range(20):
            created = httpx.post(
                f"http://127.0.0.1:{port}/_emulator/users", json={"login": f"u{n}"}, timeout=5
            )
            assert created.status_code == 201
        proc.send_signal(stop)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    users = json.loads((tmp_path / "gh" / "state.json").read_text())["users"]
    assert [u["login"] for u in users] == [f"u{n}" for n in range(20)]
