"""The gateway's journal: one entry per request from the box, what came of it, and what it cost.

It goes into the run record whole (bounded), the ``baton/agent`` receipt binds its
digest and totals, and the egress log lists its calls per model host. An entry
holds digests of the bytes, never the bytes: what the agent sent its model is
the repository itself. Only the gateway's loop thread appends; readers take
snapshots.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from worker.runner.gateway.providers import HOSTS
from worker.runner.gateway.refusals import VIOLATIONS

#: Entries kept in the record; past this the journal counts (totals stay exact) but keeps no more.
MAX_ENTRIES = 2000
#: Distinct violations kept (each with its count).
MAX_VIOLATIONS = 50
MAX_TARGET = 200

ANSWERED, REFUSED, FAILED, PROBE = "answered", "refused", "failed", "probe"
#: A run's violations the gateway found are coded ``model-<reason>`` (``model-foreign-credential``).
VIOLATION_PREFIX = "model-"


@dataclass(frozen=True)
class Exchange:
    seq: int
    at: str
    target: str
    provider: str | None
    operation: str | None
    model: str | None
    stream: bool
    outcome: str
    status: int
    reason: str | None
    detail: str | None
    request_bytes: int
    request_sha256: str
    response_bytes: int = 0
    response_sha256: str | None = None
    usage: dict[str, Any] | None = None
    cost_usd: float = 0.0
    priced_as: str | None = None
    duration_ms: float = 0.0
    first_byte_ms: float | None = None

    def to_data(self) -> dict[str, Any]:
        return asdict(self)


def target_of(method: str, target: str) -> str:
    """How an entry names its request: method and path, cut (the path is the agent's choice)."""
    text = f"{method} {target.partition('?')[0]}"
    return text if len(text) <= MAX_TARGET else text[: MAX_TARGET - 1] + "…"


class Journal:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Exchange] = []
        self._seq = 0
        self._dropped = 0
        self._cost = 0.0
        self._counts: Counter[str] = Counter()
        self._models: dict[tuple[str, str], dict[str, Any]] = {}
        self._hosts: dict[tuple[str, bool], dict[str, Any]] = {}
        self._violations: dict[tuple[str, str, str], int] = {}

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def add(self, entry: Exchange) -> None:
        with self._lock:
            if len(self._entries) < MAX_ENTRIES:
                self._entries.append(entry)
            else:
                self._dropped += 1
            self._counts[entry.outcome] += 1
            self._cost += entry.cost_usd
            if entry.outcome == ANSWERED and entry.provider is not None:
                self._model(entry)
            if entry.provider in HOSTS and entry.outcome != PROBE:
                host = self._hosts.setdefault(
                    (HOSTS[str(entry.provider)], entry.outcome == ANSWERED),
                    {"connections": 0, "bytes_up": 0, "bytes_down": 0, "reasons": Counter()},
                )
                host["connections"] += 1
                host["bytes_up"] += entry.request_bytes if entry.outcome == ANSWERED else 0
                host["bytes_down"] += entry.response_bytes
                if entry.reason is not None:
                    host["reasons"][f"gateway:{entry.reason}"] += 1
            if entry.reason in VIOLATIONS:
                key = (str(entry.reason), entry.target, str(entry.detail))
                if key in self._violations or len(self._violations) < MAX_VIOLATIONS:
                    self._violations[key] = self._violations.get(key, 0) + 1

    def _model(self, entry: Exchange) -> None:
        found = self._models.setdefault(
            (str(entry.provider), str(entry.model)),
            {
                "calls": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "cost_usd": 0.0,
                "estimated_calls": 0,
                "priced_as": entry.priced_as,
            },
        )
        found["calls"] += 1
        found["cost_usd"] += entry.cost_usd
        usage = entry.usage or {}
        for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            found[key] += int(usage.get(key) or 0)
        found["estimated_calls"] += 0 if usage.get("reported", True) else 1

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._cost

    def totals(self) -> dict[str, Any]:
        """Calls by outcome, tokens and dollars overall and per model (sorted: deterministic)."""
        with self._lock:
            models = [
                {
                    "provider": p,
                    "model": m,
                    **{k: (round(v, 6) if k == "cost_usd" else v) for k, v in figures.items()},
                }
                for (p, m), figures in sorted(self._models.items())
            ]
            return {
                "calls": self._counts[ANSWERED],
                "refused": self._counts[REFUSED],
                "failed": self._counts[FAILED],
                "probes": self._counts[PROBE],
                "input_tokens": sum(m["input_tokens"] for m in models),
                "output_tokens": sum(m["output_tokens"] for m in models),
                "cache_read_tokens": sum(m["cache_read_tokens"] for m in models),
                "cache_write_tokens": sum(m["cache_write_tokens"] for m in models),
                "cost_usd": round(self._cost, 6),
                "models": models,
            }

    def violations(self) -> list[dict[str, Any]]:
        """Each distinct forbidden request, as the run's violations are listed (code, where, what)."""
        with self._lock:
            return [
                {
                    "code": VIOLATION_PREFIX + reason,
                    "path": f"model API {target}",
                    "detail": detail + (f" (x{count})" if count > 1 else ""),
                }
                for (reason, target, detail), count in sorted(self._violations.items())
            ]

    def egress(self) -> list[dict[str, Any]]:
        """The model calls as egress log entries: per model host, answered and refused apart."""
        with self._lock:
            return [
                {
                    "host": host,
                    "port": 443,
                    "allowed": allowed,
                    "via": "model-gateway",
                    "connections": e["connections"],
                    "bytes_up": e["bytes_up"],
                    "bytes_down": e["bytes_down"],
                    "reasons": dict(sorted(e["reasons"].items())),
                }
                for (host, allowed), e in sorted(self._hosts.items())
            ]

    def to_data(self) -> dict[str, Any]:
        with self._lock:
            entries = [e.to_data() for e in self._entries]
            dropped = self._dropped
        return {"entries": entries, "dropped": dropped}

    def digest(self) -> str:
        """sha256 of the journal's canonical JSON: what the receipt binds."""
        data = orjson.dumps(self.to_data(), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(data).hexdigest()
