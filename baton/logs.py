"""JSON log lines on stderr. A log line never carries a secret or a payload body.

Ordinary logging goes through the stdlib ``logging`` module with a JSON
formatter. The one line per webhook delivery has its own lean path
(``DeliveryLog``): at thousands of deliveries a second, a LogRecord plus a
write syscall per line cost a tenth of the request budget, so lines from one
event-loop turn are written together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from typing import IO

import orjson

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def timestamp(seconds: float) -> str:
    """RFC 3339, UTC, milliseconds: the one timestamp format Baton writes."""
    return _second(int(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


@functools.lru_cache(maxsize=4)
def _second(whole: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED:
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # uvicorn's access log duplicates our per-delivery line; its error log stays.
    logging.getLogger("uvicorn.access").disabled = True


class DeliveryLog:
    """One JSON line per delivery, in the same shape as JsonFormatter's lines."""

    LOGGER = "baton.webhooks"

    def __init__(self, stream: IO[bytes] | None = None, *, enabled: bool | None = None) -> None:
        self._stream = stream
        self._buffer: list[bytes] = []
        self._enabled = (
            logging.getLogger(self.LOGGER).isEnabledFor(logging.INFO) if enabled is None else enabled
        )

    def write(self, fields: dict[str, object]) -> None:
        if not self._enabled:
            return
        line = {
            "ts": timestamp(time.time()),
            "level": "info",
            "logger": self.LOGGER,
            "msg": "delivery",
            **fields,
        }
        if not self._buffer:
            asyncio.get_running_loop().call_soon(self.flush)
        self._buffer.append(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))

    def flush(self) -> None:
        lines, self._buffer = self._buffer, []
        stream = self._stream or sys.stderr.buffer
        try:
            stream.write(b"".join(lines))
            stream.flush()
        except (OSError, ValueError):  # stderr closed or full: never fail a delivery over a log line
            pass
