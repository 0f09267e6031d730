"""``DIR/github-requests.jsonl``: one JSON line per API request, for tests and the demo.

The keys are fixed (``method``, ``path``, ``query``, ``body``, ``status``,
``duration_ms``, ``counted``, ``client_port``) so other tools can read the log without knowing
the emulator. ``duration_ms`` is the time from the request's arrival to its
answer being ready (not sent); ``counted`` says whether it used one request of
the caller's primary rate limit (false for a 304, and for requests refused
before the limit is consulted: faults, a bad API version, bad credentials);
``client_port`` is the caller's TCP port, so a test can tell a reused connection
from a new one.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from emulator.types import JSONObject

LOG_NAME = "github-requests.jsonl"


def parse_body(raw: bytes) -> Any:
    """The request body as JSON, or None when it is empty or not JSON."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class RequestLog:
    """Appends lines under a lock; also keeps them in memory for the admin API."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / LOG_NAME if directory is not None else None
        self.lines: list[JSONObject] = []
        self._lock = threading.Lock()

    def record(
        self,
        method: str,
        path: str,
        query: dict[str, Any],
        body: Any,
        status: int,
        *,
        duration_ms: float,
        counted: bool,
        client_port: int | None = None,
    ) -> None:
        line: JSONObject = {
            "method": method,
            "path": path,
            "query": query,
            "body": body,
            "status": status,
            "duration_ms": duration_ms,
            "counted": counted,
            # Which connection it came on: a client that reuses its connections keeps its port.
            "client_port": client_port,
        }
        text = json.dumps(line, separators=(",", ":"), sort_keys=False)
        with self._lock:
            self.lines.append(line)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as fh:
                    fh.write(text + "\n")
