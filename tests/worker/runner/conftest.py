"""Fixtures for the runner's tests: the pinned real agent CLIs, installed once per machine.

`.ci/run` installs them (`.ci/agent-clis`) into ``AGENT_CLI_PREFIX``; run alone, these tests install
them into the same cache. Only a machine without Node.js skips the tests that need them; anywhere
else a missing CLI is a failure, because CI must run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_PREFIX = Path.home() / ".cache" / "baton-ci" / "agent-clis"


@pytest.fixture(scope="session")
def agent_cli_bin() -> Path:
    """The directory holding the pinned `claude` and `codex` executables."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js (node, npm) is not installed here: the real agent CLIs cannot run")
    prefix = Path(os.environ.get("AGENT_CLI_PREFIX") or DEFAULT_PREFIX)
    done = subprocess.run(["bash", str(ROOT / ".ci" / "agent-clis"), str(prefix)],
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, f".ci/agent-clis failed:\n{done.stdout}\n{done.stderr}"
    return prefix / "node_modules" / ".bin"
