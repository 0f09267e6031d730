"""The verifier runs with only the standard library and `cryptography`: a customer checks a receipt
without installing Baton's server dependencies (redis, orjson, starlette, ...)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from evidence.keys import SigningKey
from evidence.verify import bundle
from tests.evidence.test_verify import MemoryLog, make_envelope

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("redis", "orjson", "bot", "worker", "httpx", "starlette", "yaml", "githubkit", "rq")
COMMIT = "a" * 40


def isolated_path(tmp_path: Path) -> Path:
    """A directory holding a copy of evidence/, `cryptography`, and exactly what it loads at runtime:
    its Rust extension imports `_cffi_backend` (cffi's compiled module), not cffi or pycparser."""
    path = tmp_path / "path"
    path.mkdir()
    shutil.copytree(ROOT / "evidence", path / "evidence", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("cryptography", "_cffi_backend"):
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is not installed"
        assert spec.origin is not None, f"{name} has no file"
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (path / source.name).symlink_to(source)
    return path


def run(path: Path, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -I -S`: no site-packages, no PYTHONPATH, no user site; sys.path is set by the script."""
    prelude = f"import sys; sys.path.insert(0, {str(path)!r})\n"
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + script],
                          cwd=cwd, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


CHECK_MODULES = """
import importlib.util, json
leaked = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden})
visible = [m for m in ("redis", "orjson", "cffi", "pycparser", "bot") if importlib.util.find_spec(m)]
print(json.dumps({{"leaked": leaked, "visible": visible, "modules": sorted(sys.modules)}}))
"""


def test_verify_runs_with_only_cryptography(tmp_path: Path) -> None:
    path = isolated_path(tmp_path)
    key = SigningKey.generate()
    log = MemoryLog(key)
    envelopes = [make_envelope(key, commit=f"{i:040x}") for i in range(2)] + [
        make_envelope(key, commit=COMMIT)
    ]
    for envelope in envelopes:
        log.append(envelope)
    (tmp_path / "receipt.json").write_text(json.dumps(bundle(envelopes[2], log.entry(2))))
    (tmp_path / "key.pub").write_text(key.public.pem())
    check = CHECK_MODULES.format(forbidden=set(FORBIDDEN))

    library = run(path, f"""
import json
from evidence import cli, verify
from evidence.keys import read_keys
keys = read_keys(open("key.pub").read(), "key.pub")
result = verify.verify_receipt(json.load(open("receipt.json")), keys, commit="{COMMIT}")
assert (result.log_index, result.tree_size, result.checked_log) == (2, 3, True), result
""" + check, cwd=tmp_path)  # fmt: skip
    assert library.returncode == 0, library.stderr
    out = json.loads(library.stdout)
    assert out["leaked"] == []
    assert out["visible"] == []  # the interpreter really could not have imported them
    assert "evidence.verify" in out["modules"]
    assert "evidence.cli" in out["modules"]
    assert "cryptography" in out["modules"]

    command = run(path, f"""
import runpy
sys.argv = ["evidence.cli", "verify", "receipt.json", "--key", "key.pub", "--commit", "{COMMIT}"]
try:
    runpy.run_module("evidence.cli", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
print("exit", code)
""" + check, cwd=tmp_path)  # fmt: skip
    assert command.returncode == 0, command.stderr
    summary, exit_line, modules = command.stdout.splitlines()
    assert summary.startswith("valid: https://in-toto.io/attestation/test-result/v0.1 about octo/repo")
    assert "log index 2 of tree size 3" in summary
    assert exit_line == "exit 0"
    assert json.loads(modules)["leaked"] == []
