"""``baton emulator``: run the local GitHub emulator (see :mod:`emulator`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from emulator.server import serve


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "emulator",
        help="run a local GitHub API emulator (for tests and the demo)",
        description="Serve GitHub's REST API for Baton on 127.0.0.1, with bare git repositories, "
        "signed webhooks and fault injection. State, repositories and the request log live in --state.",
    )
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765)")
    parser.add_argument("--state", type=Path, required=True, help="directory for state.json, repos/ and logs")
    parser.add_argument(
        "--token-ttl",
        type=float,
        default=None,
        help="installation token lifetime in seconds (GitHub: 3600)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(f"GitHub emulator on http://127.0.0.1:{args.port} (state in {args.state})", flush=True)
    serve(args.state, args.port, token_ttl_seconds=args.token_ttl)
    return 0
