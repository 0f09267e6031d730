"""The `baton` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``handler`` (a function ``(argparse.Namespace) -> int``). Errors that
Baton raises on purpose are caught here, once, and printed as one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import bot.commands.serve
import demo.play
import emulator.command
import emulator.model.command
import evidence.cli
import worker.commands.doctor
import worker.commands.evidence
import worker.commands.gate
import worker.commands.policy
import worker.commands.run
import worker.commands.worker
from baton.errors import BatonError

#: Subcommand modules, in the order `baton --help` lists them. Imported, not named by string, so the
#: layering test sees every edge: this module is the one place the kernel composes the other packages.
COMMANDS: tuple[ModuleType, ...] = (
    demo.play,  # what a newcomer runs first
    bot.commands.serve,
    worker.commands.worker,
    worker.commands.policy,
    worker.commands.gate,
    evidence.cli,  # keys generate, verify, log verify
    worker.commands.evidence,  # audit verify|export, replay
    worker.commands.run,
    worker.commands.doctor,  # does everything Baton needs work here
    emulator.command,
    emulator.model.command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="baton",
        description="Hand GitHub issues to coding agents without handing them the keys.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


#: The exit status of a command whose reader went away (``baton ... | head``): 128 + SIGPIPE, what a
#: shell reports for a program SIGPIPE ended, as well-behaved CLIs exit.
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at shutdown, where a closed pipe prints "Exception ignored"
    except BrokenPipeError:
        # Python's documented recipe: the reader has gone, so whatever is still buffered goes to
        # devnull (the interpreter flushes stdout once more as it exits), and baton ends quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    return code


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except BatonError as exc:
        print(f"baton {args.command}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
