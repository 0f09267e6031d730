"""The docs' transcripts name commands and options that exist.

A ``console`` block shows a session (``$ command`` and what it printed): its output differs from
run to run (digests, receipt file names), so it is shown, not replayed; its commands are what a
reader types, so each ``$ baton …`` line must still parse with today's ``baton`` (a renamed option
or subcommand fails here, not in a reader's terminal). The shell examples that do run are in
test_examples.py.
"""

from __future__ import annotations

import contextlib
import io
import shlex

import pytest

from baton.cli import build_parser
from tests.docs.pages import PAGES, Block, blocks

_PROMPT = "$ "


def _transcripts() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.info == "console"]


def _baton_lines() -> list[object]:
    found = []
    for block in _transcripts():
        for n, line in enumerate(block.text.splitlines(), start=1):
            if not line.startswith(_PROMPT):
                continue
            argv = shlex.split(line[len(_PROMPT) :].split(" | ")[0])
            while argv and "=" in argv[0] and not argv[0].startswith("-"):  # NAME=value before it
                argv = argv[1:]
            if argv and argv[0].rsplit("/", 1)[-1] == "baton":
                found.append(pytest.param(argv[1:], id=f"{block.where}+{n}"))
    return found


def _parses(argv: list[str]) -> str | None:
    """None if ``baton`` accepts ``argv``; else what argparse said."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            return None if exc.code == 0 else err.getvalue().strip() or f"exit {exc.code}"
    return None


def test_the_docs_have_transcripts_to_check() -> None:
    assert len(_baton_lines()) >= 10


@pytest.mark.parametrize("argv", _baton_lines())
def test_a_transcripts_baton_command_parses_today(argv: list[str]) -> None:
    assert _parses(argv) is None


def test_a_renamed_option_is_caught() -> None:
    """The check can fail: an option `baton verify` does not have is refused."""
    assert _parses(["verify", "receipt.json", "--no-such-option"]) is not None
    assert _parses(["no-such-command"]) is not None
