"""The `baton` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``handler`` (a function ``(argparse.Namespace) -> int``). Errors that
Baton raises on purpose are caught here, once, and printed as one line.
"""

from __future__ import annotations

import argparse
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


def main(argv: Sequence[str] | None = None) -> int:
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
