"""``baton model-standin``: run the scripted model-provider stand-in (see :mod:`emulator.model.standin`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from emulator.model.script import ScriptError
from emulator.model.standin import MAX_STALL_SECONDS, ModelStandin


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "model-standin",
        help="run a scripted stand-in for the Anthropic, OpenAI and Gemini APIs (for tests and the demo)",
        description="Serve POST /v1/messages (Anthropic, as Claude Code uses it), POST /v1/responses "
        "(OpenAI Responses, as Codex uses it), POST /v1/chat/completions (Chat Completions, as Qwen Code, "
        "OpenCode, Aider and mini-swe-agent use it) and /v1beta/models/MODEL:streamGenerateContent "
        "(Gemini, as Gemini CLI uses it) on 127.0.0.1, answering each assistant turn from a JSON script "
        "(see emulator/README.md). Every request is recorded, key values only as SHA-256.",
    )
    parser.add_argument("--script", type=Path, required=True, help="the JSON script of turns")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--record", type=Path, default=None, help="append one JSON line per request here")
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        default=None,
        help="require the key held in this environment variable (x-api-key / Bearer / x-goog-api-key)",
    )
    parser.add_argument("--workspace", default=None, help="absolute directory for relative file paths")
    parser.add_argument(
        "--max-stall",
        type=float,
        default=MAX_STALL_SECONDS,
        help=f"longest a stall step may hold a request, in seconds (default {MAX_STALL_SECONDS:g})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    api_key = None
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"baton model-standin: ${args.api_key_env} is unset or empty", file=sys.stderr)
            return 2
    try:
        standin = ModelStandin(
            args.script,
            port=args.port,
            record_file=args.record,
            api_key=api_key,
            workspace=args.workspace,
            max_stall_seconds=args.max_stall,
        )
    except (ScriptError, ValueError, OSError) as exc:
        print(f"baton model-standin: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    print(
        f"model stand-in on {standin.url} (Anthropic and Gemini base URL {standin.anthropic_base_url}, "
        f"OpenAI base_url {standin.openai_base_url})",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        standin.serve_forever()
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
