"""A TCP forwarder, a process of its own: a service on this machine's loopback made reachable at
another address (the gateway of ``tests.hosts``' network namespaces, whose loopback is their own).

Bytes are copied both ways untouched, so it carries Redis's protocol as well as HTTP. Given
several backends, each connection goes to the next in turn, and one that refuses the connection is
skipped. (``tests.balancer`` is the HTTP balancer that spreads *requests* over `baton serve`
processes.)

    python -m tests.forwarder --listen 10.213.7.1:0 --to 127.0.0.1:6379

It prints ``listening HOST:PORT`` once bound, and dies with the process that started it
(``--parent``). ``Forwarder`` starts one and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 20.0
CONNECT_TIMEOUT_S = 5.0
CHUNK = 64 * 1024


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # a half-close passes through (HTTP clients rarely do it; Redis never)
    except (ConnectionError, OSError):
        writer.close()


class _Forwarder:
    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self.turn = itertools.cycle(range(len(backends)))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in self.backends:
            host, port = self.backends[next(self.turn)]
            with contextlib.suppress(OSError, TimeoutError):
                return await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        return None

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:  # every backend refused: the client sees its connection closed
            client_w.close()
            return
        backend_r, backend_w = backend
        try:
            await asyncio.gather(_pipe(client_r, backend_w), _pipe(backend_r, client_w))
        finally:
            for w in (client_w, backend_w):
                w.close()


async def _serve(listen: tuple[str, int], backends: list[tuple[str, int]]) -> None:
    forwarder = _Forwarder(backends)
    server = await asyncio.start_server(forwarder.handle, *listen, reuse_address=True)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"listening {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _die_with(parent: int) -> None:
    """Be killed if the process that started us dies (Linux), as an orphan would outlive its test."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A TCP forwarder for Baton's tests.")
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT (port 0: any free one)")
    parser.add_argument("--to", type=_address, action="append", required=True, help="a backend HOST:PORT")
    parser.add_argument("--parent", type=int, help="exit when this process does")
    args = parser.parse_args(argv)
    if args.parent is not None:
        _die_with(args.parent)
    asyncio.run(_serve(args.listen, args.to))
    return 0


class Forwarder:
    """``python -m tests.forwarder`` as a child process; ``port`` is where it listens."""

    def __init__(self, listen_host: str, backends: list[tuple[str, int]], *, listen_port: int = 0) -> None:
        self.host = listen_host
        argv = [sys.executable, "-m", "tests.forwarder", "--listen", f"{listen_host}:{listen_port}",
                "--parent", str(os.getpid())]  # fmt: skip
        for host, port in backends:
            argv += ["--to", f"{host}:{port}"]
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop(); a file, not a pipe: read only on failure
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.errors)
        self.port = self._wait_listening()

    def _wait_listening(self) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode()
                if line.startswith("listening "):
                    return int(line.rsplit(":", 1)[1])
            if self.proc.poll() is not None:
                break
        self.stop()
        self.errors.seek(0)
        err = self.errors.read().decode(errors="replace")[-2000:]
        raise RuntimeError(f"the forwarder did not start listening on {self.host}: {err}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.errors.close()

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
