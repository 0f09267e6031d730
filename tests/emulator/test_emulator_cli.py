"""`baton emulator --port P --state DIR` serves the API on loopback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from bot.cli import build_parser
from emulator.server import free_port


def test_parser_registers_emulator_command(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["emulator", "--port", "9999", "--state", str(tmp_path), "--token-ttl", "5"]
    )
    assert (args.port, args.state, args.token_ttl) == (9999, tmp_path, 5.0)
    assert callable(args.handler)


def test_baton_emulator_starts_and_answers(tmp_path: Path) -> None:
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from bot.cli import main; sys.exit(main())",
            "emulator",
            "--port",
            str(port),
            "--state",
            str(tmp_path / "gh"),
        ],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/_emulator/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None
        assert health.json() == {"ok": True}
        missing = httpx.get(f"http://127.0.0.1:{port}/repos/a/b", timeout=5)
        assert missing.status_code == 404
        assert missing.json()["message"] == "Not Found"
        assert (tmp_path / "gh" / "github-requests.jsonl").read_text().count("\n") == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
