"""Shared by the runner's tests: a small git repository, the box's two directories.

The pinned real agent CLIs are ``agent_cli_bin`` (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

#: A fixed identity and no system config: the same commits on every machine.
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@localhost", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip


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
