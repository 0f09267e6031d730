"""`baton serve`: the web process (and, with --worker, a worker beside it)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from baton import envfile, logs, redis_server, settings
from baton.errors import ConfigError
from bot.app import METRICS_PATH, WEBHOOK_PATH, create_app
from bot.protocol import OneWriteProtocol
from bot.setup_page import new_token


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after a graceful stop, which would skip our cleanup
    (stopping the worker and the embedded Redis); here a signal only asks it to exit.

    With ``worker`` it also watches that process: if it ends while serve runs
    (for any reason, even exit 0), serve stops too, rather than answering 202
    to tasks nothing will run. ``worker_lost`` then says so.
    """

    def __init__(self, config: uvicorn.Config, worker: subprocess.Popen[bytes] | None = None) -> None:
        super().__init__(config)
        self.worker = worker
        self.worker_lost = False

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def on_tick(self, counter: int) -> bool:
        # Every 0.1 s in uvicorn's main loop; poll() is one non-blocking waitpid.
        if self.worker is not None and not self.should_exit and self.worker.poll() is not None:
            self.worker_lost = True
            return True
        return await super().on_tick(counter)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help=f"receive GitHub webhooks at POST {WEBHOOK_PATH}",
        description=f"Receive GitHub's webhooks at POST {WEBHOOK_PATH}, queue each as a task, and serve "
        "the status page and the evidence (keys, log, receipts). Settings come from the environment, "
        f"then ./{envfile.ENV_NAME}. Without APP_ID/PRIVATE_KEY it starts in setup mode and prints a "
        "link to register the App; without REDIS_URL it runs an embedded Redis that `baton worker`, "
        "`baton doctor`, `baton audit` and `baton replay` on this machine find.",
    )
    p.add_argument(
        "--worker",
        action="store_true",
        help="also run `baton worker` on the same Redis (serve exits if it does)",
    )
    p.add_argument("--host", type=_host, help="address to listen on (wins over HOST; default 127.0.0.1)")
    p.add_argument("--port", type=_port, help="port to listen on (wins over PORT; default 3000)")
    p.set_defaults(handler=run)


def _host(text: str) -> str:
    host = text.strip().strip("[]")  # [::1] as well as ::1
    if not host or any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(f"expected an address such as 0.0.0.0 or ::1, got {text!r}")
    return host


def _port(text: str) -> int:
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


def with_flags(config: settings.Settings, host: str | None, port: int | None) -> settings.Settings:
    """``config`` with --host/--port applied (flags win over HOST/PORT), checked as PORT is."""
    config = dataclasses.replace(config, host=host or config.host, port=config.port if port is None else port)
    if port is not None and config.metrics_port == port:
        raise ConfigError(
            "bad-setting",
            f"--port {port} is BATON_METRICS_PORT too: /metrics moves off the main port, so choose another",
        )
    return config


def _mode(config: settings.Settings, loaded: list[str], setup_token: str) -> str:
    """What the start-up line adds: where settings came from, and what is not configured yet (in
    setup mode, the setup page's link with this process's token: its only way in)."""
    said = f" (settings from ./{envfile.ENV_NAME}: {', '.join(loaded)})" if loaded else ""
    if config.setup_mode:
        base = config.public_url or f"http://{config.host}:{config.port}"
        said += (
            f" (SETUP MODE: no APP_ID/PRIVATE_KEY; register the App at {base}/?token={setup_token}"
            + ("; webhooks answer 503 until WEBHOOK_SECRET is set" if not config.webhook_secrets else "")
            + ")"
        )
    elif not config.webhook_secrets:
        said += " (no WEBHOOK_SECRET: webhooks answer 503)"
    return said


def listen(host: str, port: int) -> socket.socket:
    """A bound socket for uvicorn; a port already in use is one clear line, not a traceback."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            "cannot-listen", f"cannot listen on {host}:{port} ({exc.strerror}); free the port or change it"
        ) from exc
    return sock


def refuse_unsigned(config: settings.Settings, *, worker: bool) -> None:
    """A serve that accepts webhooks (it has a secret), holds App credentials, or runs a worker would
    hand out or make evidence nobody signed: it stops before it binds a port, saying which variable
    to set. Only setup mode with no webhook secret (it accepts nothing) starts without the keys: the
    setup page's registration is what writes them."""
    missing = config.missing_evidence()
    if missing is not None and (worker or not config.setup_mode or config.webhook_secrets):
        raise ConfigError("missing-evidence", missing)


def run(args: argparse.Namespace) -> int:
    # As Probot does: `.env` in the working directory (what the setup page writes) fills in what the
    # environment does not set; the worker started with --worker inherits it.
    loaded = envfile.load_into(os.environ, Path.cwd() / envfile.ENV_NAME)
    config = with_flags(settings.load(), args.host, args.port)
    refuse_unsigned(config, worker=args.worker)
    logs.configure(config.log_level)
    embedded = None
    url = config.redis_url
    if url is None:
        embedded = redis_server.start_for_serve()
        url = embedded.url
    worker: subprocess.Popen[bytes] | None = None
    sockets: list[socket.socket] = []
    try:
        sockets.append(listen(config.host, config.port))
        if config.metrics_port is not None:
            sockets.append(listen(config.host, config.metrics_port))
        if args.worker:
            env = {**os.environ, "REDIS_URL": url}
            argv = [sys.executable, "-m", "baton", "worker"]
            worker = subprocess.Popen(argv, env=env)  # noqa: S603 - our own argv
        where = "embedded Redis" if embedded else "REDIS_URL"
        setup_token = new_token()
        mode = _mode(config, loaded, setup_token)
        metrics = (
            f"; metrics at http://{config.host}:{config.metrics_port}{METRICS_PATH}"
            if config.metrics_port is not None
            else ""
        )
        print(
            f"baton serve: http://{config.host}:{config.port}{WEBHOOK_PATH} on {where}{metrics}{mode}",
            file=sys.stderr,
            flush=True,
        )
        server = _Server(
            uvicorn.Config(
                create_app(config, url, setup_token=setup_token),
                host=config.host,
                port=config.port,
                loop="uvloop" if sys.platform != "win32" else "asyncio",
                http=OneWriteProtocol,  # httptools, one write per answer
                lifespan="on",
                access_log=False,
                log_config=None,
                server_header=False,
                proxy_headers=False,  # Baton never uses the client address
            ),
            worker,
        )
        server.run(sockets=sockets)
        if worker is not None and server.worker_lost:
            print(
                f"baton serve: its worker (pid {worker.pid}) exited with code {worker.returncode}, so serve "
                "stopped too (tasks would be queued with nothing to run them); restart it",
                file=sys.stderr,
                flush=True,
            )
            return 1
    finally:
        for sock in sockets:
            sock.close()
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=35)
            except subprocess.TimeoutExpired:
                worker.kill()
        if embedded is not None:
            embedded.stop()
    return 0
