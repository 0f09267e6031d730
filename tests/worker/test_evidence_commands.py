"""`baton audit` and `baton replay` as an operator runs them: where they find Redis, what they say."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from baton import envfile, redis_server
from baton.redis_server import EmbeddedRedis
from tests.worker.conftest import Stage
from tests.worker.test_receipts import _agent_pr


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`baton ARGS` in ``cwd`` with no Baton settings in the environment but ``env``."""
    environ = {"PATH": os.environ["PATH"], "XDG_CACHE_HOME": str(cwd / "cache"), **env}
    return subprocess.run([sys.executable, "-m", "baton", *args], capture_output=True, text=True,
                          cwd=cwd, env=environ, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize("args", [("audit", "verify"), ("audit", "head"), ("replay", "--all")])
def test_audit_and_replay_read_dot_env_as_the_other_commands_do(
    tmp_path: Path, redis_url: str, args: tuple[str, ...]
) -> None:
    (tmp_path / envfile.ENV_NAME).write_text(
        f"REDIS_URL={redis_url}\nBATON_AUDIT_SECRET={secrets.token_hex(32)}\n"
    )
    done = _run(tmp_path, *args)
    assert "REDIS_URL" not in done.stderr
    assert "BATON_AUDIT_SECRET" not in done.stderr
    if args[0] == "replay":  # an empty Redis: nothing to replay, said as such
        assert (done.returncode, done.stderr.strip()) == (
            2,
            "baton replay: no recorded decision for any task",
        )
    else:
        assert done.returncode == 0, done.stderr


def test_audit_finds_the_embedded_redis_baton_serve_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No REDIS_URL: like `baton worker` and `baton doctor`, the embedded server's URL file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where `baton serve` writes it
    state = redis_server.state_file()
    with EmbeddedRedis(data_dir=tmp_path / "redis", state_file=state, durable=False):
        done = _run(tmp_path, "audit", "verify", BATON_AUDIT_SECRET=secrets.token_hex(32))
    assert (done.returncode, done.stdout.strip()) == (0, "no audit chain in this Redis yet"), done.stderr


def test_replay_without_a_key_says_no_signature_was_checked(
    stage: Stage, tmp_path: Path, redis_url: str
) -> None:
    """The signed bytes are compared either way; only a key checks the signature over them, and
    replay says which it did, and how to check one."""
    task_id, _, _ = _agent_pr(stage)
    done = _run(tmp_path, "replay", task_id, REDIS_URL=redis_url)
    assert done.returncode == 0, done.stderr
    [admission, run] = done.stdout.strip().splitlines()
    assert "not signed" in admission
    assert "signed bytes identical, signature NOT checked" in run
    assert "no signature was checked" in done.stderr
    assert "--key" in done.stderr
    as_json = _run(tmp_path, "replay", task_id, "--json", REDIS_URL=redis_url)
    assert [r["signature_checked"] for r in orjson.loads(as_json.stdout)["tasks"][task_id]] == [False, False]

    assert stage.ctx.signer is not None
    public = tmp_path / "baton-signing-key.pub.pem"
    public.write_text(stage.ctx.signer.key.public.pem())
    checked = _run(tmp_path, "replay", task_id, "--key", str(public), REDIS_URL=redis_url)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().splitlines()[1].endswith("…")
    assert "signed bytes identical, signature verified" in checked.stdout
    assert checked.stderr == ""
