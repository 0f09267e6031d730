"""`baton serve`: the web process (and, with --worker, a worker beside it)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import uvicorn

from bot import logs, redis_server, settings
from bot.app import WEBHOOK_PATH, create_app


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after a graceful stop, which would skip our cleanup
    (stopping the worker and the embedded Redis); here a signal only asks it to exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help=f"receive GitHub webhooks at POST {WEBHOOK_PATH}")
    p.add_argument("--worker", action="store_true", help="also run `baton worker` on the same Redis")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = settings.load()
    logs.configure(config.log_level)
    embedded = None
    url = config.redis_url
    if url is None:
        embedded = redis_server.start_for_serve()
        url = embedded.url
    worker: subprocess.Popen[bytes] | None = None
    try:
        if args.worker:
            env = {**os.environ, "REDIS_URL": url}
            argv = [sys.executable, "-m", "bot.cli", "worker"]
            worker = subprocess.Popen(argv, env=env)  # noqa: S603 - our own argv
        where = "embedded Redis" if embedded else "REDIS_URL"
        mode = " (SETUP MODE: no WEBHOOK_SECRET, webhooks answer 503)" if config.setup_mode else ""
        print(
            f"baton serve: http://{config.host}:{config.port}{WEBHOOK_PATH} on {where}{mode}",
            file=sys.stderr,
            flush=True,
        )
        server = _Server(
            uvicorn.Config(
                create_app(config, url),
                host=config.host,
                port=config.port,
                loop="uvloop" if sys.platform != "win32" else "asyncio",
                http="httptools",
                lifespan="on",
                access_log=False,
                log_config=None,
                server_header=False,
                proxy_headers=False,  # Baton never uses the client address
            )
        )
        server.run()
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=35)
            except subprocess.TimeoutExpired:
                worker.kill()
        if embedded is not None:
            embedded.stop()
    return 0
