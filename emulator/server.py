"""Run the emulator: in the foreground (the CLI) or on a background thread (tests, the demo).

Both bind to 127.0.0.1 only. :class:`EmulatorServer` picks a free port when
given 0 and waits, with a deadline, until the server answers. Both run the
app's lifespan, whose shutdown closes the webhook client and writes
``state.json``; both also write it once the server has stopped, in case the
shutdown was cut short (a second Ctrl-C, a stop that timed out).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from emulator.app import create_app
from emulator.core import Emulator

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 10.0
#: Idle keep-alive connections stay open this long (uvicorn closes them after 5 s by default, and a
#: client reusing one just as it closes gets "connection reset": GitHub keeps them far longer).
KEEP_ALIVE_SECONDS = 120


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def serve(directory: Path, port: int, *, token_ttl_seconds: float | None = None) -> None:
    """Serve in the foreground until SIGINT/SIGTERM; the state is on disk when it returns."""
    app = create_app(directory, token_ttl_seconds=token_ttl_seconds)
    try:
        uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False,
                    timeout_keep_alive=KEEP_ALIVE_SECONDS, lifespan="on")  # fmt: skip
    finally:
        app.state.emulator.flush()


class EmulatorServer:
    """A live emulator on a background thread; use as a context manager.

    ``url`` is the API base URL (pass it as ``base_url``/``GITHUB_API_URL``);
    ``emulator`` gives direct read access to state for assertions.
    """

    def __init__(self, directory: Path, port: int = 0, *, token_ttl_seconds: float | None = None) -> None:
        self.directory = directory
        # Bound now and kept: a port chosen, closed and bound again later can be taken in between.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((HOST, port))
        self.port: int = self._socket.getsockname()[1]
        self.app = create_app(directory, token_ttl_seconds=token_ttl_seconds)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on",
                                timeout_keep_alive=KEEP_ALIVE_SECONDS)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="github-emulator", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def emulator(self) -> Emulator:
        emu: Emulator = self.app.state.emulator
        return emu

    def start(self) -> EmulatorServer:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"emulator did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Shut down; afterwards ``state.json`` holds everything (another server may load it)."""
        self.emulator.faults.clear()  # a frozen request is let go, so the server can stop
        self._server.should_exit = True
        self._thread.join(timeout=START_TIMEOUT_SECONDS)
        self._socket.close()
        self.emulator.flush()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
