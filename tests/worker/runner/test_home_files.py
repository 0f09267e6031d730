"""What an adapter puts in the agent's HOME, and how Baton reads back what the agent wrote there.

The HOME is the agent's: anything in it after the run may be a link it planted to a file of the
worker's host. Reading its result file must never follow one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from worker.runner import adapters
from worker.runner.installed import install_dirs
from worker.runner.run import read_own_file


def test_the_result_file_is_read_as_the_agent_left_it(tmp_path: Path) -> None:
    (tmp_path / ".baton").mkdir()
    (tmp_path / ".baton" / "traj.json").write_bytes(b'{"info": {}}' + b" " * 100)
    assert read_own_file(tmp_path, ".baton/traj.json", limit=12) == b'{"info": {}}'
    assert read_own_file(tmp_path, ".baton/missing.json") == b""


def test_a_link_the_agent_planted_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("the worker's file")
    home = tmp_path / "home"
    (home / ".baton").mkdir(parents=True)
    (home / ".baton" / "traj.json").symlink_to(secret)
    assert read_own_file(home, ".baton/traj.json") == b""
    os.rename(home / ".baton", home / "moved")
    (home / ".baton").symlink_to(tmp_path)  # a linked directory on the way
    (tmp_path / "traj.json").write_text("the worker's other file")
    assert read_own_file(home, ".baton/traj.json") == b""


def test_a_fifo_in_place_of_the_result_file_does_not_hang_the_worker(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "traj.json")
    assert read_own_file(tmp_path, "traj.json") == b""


def test_a_spec_may_only_write_plain_relative_paths_in_home(tmp_path: Path) -> None:
    spec = dataclasses.replace(adapters.SPECS["script"], home_files=lambda _: {"../outside": "x"})
    agent = adapters.Agent(adapter="script", tools=())
    with pytest.raises(ValueError, match="not a plain relative path"):
        adapters.build_invocation(spec, agent, granted_tools=(), model_base_url=None, env_values={},
                                  prompt_path="/p", workspace="/w", search_path="/usr/bin")  # fmt: skip
    with pytest.raises(ValueError, match="result_file"):
        dataclasses.replace(adapters.SPECS["script"], result_file="/etc/passwd")


def test_a_pip_installed_cli_brings_its_whole_venv_and_its_python_into_the_box(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /x\n")
    (venv / "bin" / "python").symlink_to(sys.executable)
    tool = venv / "bin" / "tool"
    tool.write_text(f"#!{venv / 'bin' / 'python'}\nprint('hi')\n")
    tool.chmod(0o755)
    found = install_dirs(str(tool))
    assert str(venv) in found
    base = Path(os.path.realpath(sys.executable)).parent.parent
    if str(base) not in ("/usr", "/"):  # a pyenv or /opt interpreter: its prefix holds the stdlib
        assert str(base) in found
