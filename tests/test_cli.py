"""The `baton` command's edge: what every subcommand gets from `baton.cli.main`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "args",
    [("policy", "schema"), ("gate", "explain", "--agent", "claude-code"), ("--help",), ("verify", "--help")],
)
def test_a_reader_that_closes_early_ends_baton_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`baton ... | head`: the reader leaves before baton writes (here a real `true`, gone before
    baton starts, so the pipe is closed every time); baton exits 141 as a shell's SIGPIPE would,
    with no BrokenPipeError traceback and no "Exception ignored" at shutdown."""
    read, write = os.pipe()
    reader = subprocess.Popen(["true"], stdin=read)
    os.close(read)
    reader.wait(timeout=30)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "baton", *args],
            stdout=write, stderr=subprocess.PIPE, cwd=tmp_path, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == ""
    # argparse's own help swallows the error (exit 0); what a command prints ends in 141.
    assert done.returncode == (0 if "--help" in args else 141)
