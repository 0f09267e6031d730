"""The egress log of one run: where the box tried to go, what got through, and how much.

It ends up in the run's record, so its output is deterministic (sorted, plain
data) and says for every refusal why. Only the proxy's event-loop thread
writes; other threads read snapshots. The lock guards the table's shape, not
the counters: an int increment by the single writer is seen whole by readers.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

#: The key for requests refused before they named a host (malformed, too large, too many at once).
NO_HOST = "(no host)"
#: The key for every host past ``MAX_KEYS``: the agent chooses the names it asks for, and the log
#: goes into the run's record, so its size must not be the agent's choice.
OTHER_HOSTS = "(other hosts)"
MAX_KEYS = 1024
#: Longest host kept verbatim in a key (a refused "host" can be any 16 KiB of printable text).
MAX_HOST_CHARS = 253
#: Distinct TLS server names kept per key (a refused tunnel's name is the agent's choice too).
MAX_NAMES = 8
#: The key for every TLS server name past ``MAX_NAMES`` in one entry.
OTHER_NAMES = "(other names)"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_HOST_CHARS else text[: MAX_HOST_CHARS - 1] + "…"


class EgressEntry:
    """The counters of one (host, port, allowed) key; the relay adds bytes as they pass."""

    __slots__ = ("bytes_down", "bytes_up", "connections", "reasons", "sni")

    def __init__(self) -> None:
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.reasons: Counter[str] = Counter()
        #: The TLS server names seen in tunnels refused for their ClientHello.
        self.sni: Counter[str] = Counter()

    def up(self, n: int) -> None:
        self.bytes_up += n

    def down(self, n: int) -> None:
        self.bytes_down += n


class EgressLog:
    """Per (host, port, allowed): connections, bytes up and down, why requests failed, and the TLS
    server names of the tunnels refused for them (``sni``, only when there were any)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int, bool], EgressEntry] = {}

    def record(
        self, host: str, port: int, *, allowed: bool, reason: str | None = None, sni: str | None = None
    ) -> EgressEntry:
        """Count one request under its key (each request is recorded exactly once)."""
        key = (_cut(host), port, allowed)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None and len(self._entries) >= MAX_KEYS:
                key = (OTHER_HOSTS, 0, allowed)
                entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = EgressEntry()
            entry.connections += 1
            if reason is not None:
                entry.reasons[str(reason)] += 1  # a plain str, not the enum
            if sni is not None:
                name = _cut(sni)
                if name not in entry.sni and len(entry.sni) >= MAX_NAMES:
                    name = OTHER_NAMES
                entry.sni[name] += 1
        return entry

    def to_data(self) -> list[dict[str, Any]]:
        """Plain, sorted data: by host, then port, then refused before allowed."""
        with self._lock:
            items = sorted(self._entries.items())
            data: list[dict[str, Any]] = []
            for (host, port, allowed), entry in items:
                one = {
                    "host": host,
                    "port": port,
                    "allowed": allowed,
                    "connections": entry.connections,
                    "bytes_up": entry.bytes_up,
                    "bytes_down": entry.bytes_down,
                    "reasons": dict(sorted(entry.reasons.items())),
                }
                if entry.sni:
                    one["sni"] = dict(sorted(entry.sni.items()))
                data.append(one)
            return data
