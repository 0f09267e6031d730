"""Shared by the runner's tests: a small git repository, the box's two directories, and `baton run`
of a real agent CLI.

The pinned real agent CLIs are ``agent_cli_bin`` (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

#: A fixed identity and no system config: the same commits on every machine.
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip


#: The model key the real CLIs' tests hand the worker (the stand-in's, never a real one).
TEST_KEY = "sk-test-not-a-secret"
SAY_HELLO = "# Say hello\n\nPlease add hello.txt.\n"


def cli_env(agent_cli_bin: Path, key_env: str, key: str = TEST_KEY) -> dict[str, str]:
    """The worker's environment for a real CLI: the pinned CLIs first on PATH, and a model key."""
    return {**os.environ, "PATH": f"{agent_cli_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}", key_env: key}


def baton_run(tmp_path: Path, repo: Path, org: str, agent: str, *extra: str, upstream: str,
              env: dict[str, str], issue: str = SAY_HELLO,
              timeout: float = 120) -> tuple[int, dict[str, Any], float]:  # fmt: skip
    """``baton run`` of an issue with no recipe, the model gateway's provider calling ``upstream``
    (``gemini=http://…``), ``extra`` after the rest: (exit code, run record, seconds)."""
    (tmp_path / "org.yml").write_text(org)
    (tmp_path / "issue.md").write_text(issue)
    argv = [sys.executable, "-m", "baton", "run", "--agent", agent, "--repo", str(repo), "--issue-file",
            str(tmp_path / "issue.md"), "--org", str(tmp_path / "org.yml"), "--json", "--upstream", upstream,
            *extra]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    record = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {"stderr": done.stderr}
    return done.returncode, record, time.monotonic() - started


def offered(request: dict[str, Any]) -> set[str]:
    """Tool names a request offers: Chat Completions' ``function.name``, Anthropic's ``name``, Gemini's
    ``functionDeclarations[].name``."""
    names: set[str] = set()
    for tool in request.get("body", {}).get("tools") or []:
        function = tool.get("function")
        declared = tool.get("functionDeclarations")
        if isinstance(declared, list):
            names.update(d.get("name") for d in declared)
        else:
            names.add(function.get("name") if isinstance(function, dict) else tool.get("name"))
    return names


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit on ``main``: ``app.py``."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("print('hi')\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "app")
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A box's workspace and HOME."""
    work, home = tmp_path / "workspace", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    return work, home
