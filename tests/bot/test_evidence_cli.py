"""The evidence commands through the `baton` entry point: a key made by `baton keys generate` is the
one Baton signs with, and `baton verify` / `baton log verify` check what `baton serve` publishes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis

from baton import cli, settings
from bot.app import create_app
from evidence import dsse, links, statement
from evidence.encoding import canonical_json
from evidence.keys import SigningKey
from evidence.log import Log
from tests.conftest import serve_app

INSTALLATION = 77
COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8"


def baton(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """`baton ARGS` started from ``cwd``, outside the repository: only what is installed is importable."""
    return subprocess.Popen([sys.executable, "-m", "baton", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_generated_key_signs_and_baton_verify_checks_what_serve_publishes(
    tmp_path: Path,
    redis_url: str,
    rdb: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = finish(baton("keys", "generate", "--out", "keys", cwd=tmp_path))
    assert code == 0, err
    private, public = (
        tmp_path / "keys" / "baton-signing-key.pem",
        tmp_path / "keys" / "baton-signing-key.pub.pem",
    )
    assert private.stat().st_mode & 0o777 == 0o600
    assert f"BATON_SIGNING_KEY_PATH={private}" in out

    config = settings.load({"BATON_SIGNING_KEY_PATH": str(private), "BATON_AUDIT_SECRET": "s" * 32})
    assert config.signing_key is not None
    assert config.missing_evidence() is None
    log = Log(rdb, INSTALLATION)
    for sha in ("1" * 40, COMMIT, "2" * 40):
        subject = statement.Subject("octo/repo", {"gitCommit": sha})
        payload = statement.statement([subject], statement.AGENT_RUN, {"agent": "claude-code"})
        log.append(canonical_json(dsse.sign(payload, config.signing_key)), config.signing_key)
    (tmp_path / "old.json").write_text(json.dumps(log.checkpoint()))
    log.append(canonical_json(dsse.sign(payload, config.signing_key)), config.signing_key)
    (tmp_path / "other.pem").write_text(SigningKey.generate().public.pem())

    with serve_app(create_app(config, redis_url)) as base:
        logs = f"{base}/.well-known/baton/log/{INSTALLATION}"
        key = links.receipt_key(config.audit_secret or b"", INSTALLATION, 1)  # its check run's link has it
        (tmp_path / "receipt.json").write_text(httpx.get(f"{logs}/receipts/1?k={key}").text)
        (tmp_path / "keys.json").write_text(httpx.get(f"{base}/.well-known/baton/keys").text)
        (tmp_path / "new.json").write_text(httpx.get(f"{logs}/checkpoint").text)
        # The log's history, with a consistency proof fetched from serve itself (in this process:
        # every `baton` start costs a second or two).
        monkeypatch.chdir(tmp_path)
        history = cli.main(["log", "verify", "--from", "old.json", "--to", "new.json", "--key", "keys.json",
                            "--log-url", logs])  # fmt: skip
        stranger = cli.main(["verify", "receipt.json", "--key", "other.pem"])
    printed = capsys.readouterr()
    assert (history, stranger) == (0, 1), printed.err
    assert "consistent: " in printed.out
    assert "invalid: unknown-key" in printed.err

    code, out, err = finish(
        baton("verify", "receipt.json", "--key", str(public), "--commit", COMMIT, cwd=tmp_path)
    )
    assert code == 0, err
    assert out.startswith("valid: ")
    assert f"log index 1 of tree size 4 (installation {INSTALLATION})" in out
