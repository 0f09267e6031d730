"""The `baton` command's edge: what every subcommand gets from `baton.cli.main`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.cli import build_parser


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


def _parsers(
    parser: argparse.ArgumentParser, name: str = "baton"
) -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")
        yield name, parser, action


def test_every_commands_help_describes_each_of_its_flags() -> None:
    """`baton CMD --help` is where a newcomer looks first: every flag, argument and subcommand says
    what it is for, and every command says what it does."""
    undescribed = []
    for name, parser, action in _parsers(build_parser()):
        if isinstance(action, argparse._SubParsersAction):
            undescribed += [f"{name} {c.dest}" for c in action._choices_actions if not c.help]
        elif not action.help:
            undescribed.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        if name != "baton" and leaf and not parser.description:
            undescribed.append(f"{name}: no description")
    assert sorted(set(undescribed)) == []
