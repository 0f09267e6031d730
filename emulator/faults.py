"""Injected faults: the next N requests matching a pattern fail the way GitHub fails.

Kinds: ``status`` (any 5xx or other code with GitHub's error body),
``secondary_rate_limit`` (403/429 with ``Retry-After``), ``primary_rate_limit``
(403/429 with ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset``) and
``latency`` (delay, then answer normally), ``late_answer`` (act at once, then
delay the answer: GitHub made the comment or check run, and the caller's read
timeout lost the answer) and ``freeze`` (a GitHub that takes the request and never
answers: held, with nothing done, until the rule is cleared or ``latency_ms``
passes, then ended with its ``status``, 504 by default, as GitHub ends a request it
could not finish). Rules are consumed in the order added.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from emulator.errors import ApiError

KINDS = ("status", "secondary_rate_limit", "primary_rate_limit", "latency", "late_answer", "freeze")
#: How long a ``freeze`` holds a request unless told (the most ``latency_ms`` may be).
FREEZE_MS = 60_000
_SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID "
)
_SECONDARY_DOCS = (
    "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)
_PRIMARY_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits"
_STATUS_MESSAGES = {
    500: "Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass
class Fault:
    id: int
    kind: str
    path: str  # fnmatch pattern on the request path, e.g. "/repos/*/check-runs*"
    method: str | None = None
    remaining: int = 1  # requests still to hit
    status: int = 502
    retry_after: int = 1
    reset_in: int = 1
    latency_ms: int = 0
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        return fnmatch.fnmatchcase(path, self.path)


class FaultError(ValueError):
    """A fault rule the admin API cannot accept."""


def build_fault(fault_id: int, spec: dict[str, Any]) -> Fault:
    """Validate an admin request body into a rule."""
    kind = spec.get("kind", "status")
    if kind not in KINDS:
        raise FaultError(f"kind must be one of {', '.join(KINDS)}")
    path = spec.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise FaultError("path must be a pattern starting with '/'")
    count = spec.get("count", 1)
    if not isinstance(count, int) or not 1 <= count <= 10_000:
        raise FaultError("count must be an integer from 1 to 10000")
    default_status = {"status": 502, "latency": 200, "late_answer": 200, "freeze": 504}.get(kind, 403)
    status = spec.get("status", default_status)
    if kind not in {"latency", "late_answer"} and (not isinstance(status, int) or not 400 <= status <= 599):
        raise FaultError("status must be an HTTP error code (400-599)")
    if kind in {"secondary_rate_limit", "primary_rate_limit"} and status not in {403, 429}:
        raise FaultError("rate limits answer 403 or 429")
    latency_ms = spec.get("latency_ms", FREEZE_MS if kind == "freeze" else 0)
    if not isinstance(latency_ms, int) or not 0 <= latency_ms <= FREEZE_MS:
        raise FaultError(f"latency_ms must be an integer from 0 to {FREEZE_MS}")
    method = spec.get("method")
    if method is not None and not isinstance(method, str):
        raise FaultError("method must be a string")
    return Fault(
        id=fault_id,
        kind=kind,
        path=path,
        method=method,
        remaining=count,
        status=status,
        retry_after=int(spec.get("retry_after", 1)),
        reset_in=int(spec.get("reset_in", 1)),
        latency_ms=latency_ms,
    )


class Faults:
    """The active rules; ``take`` consumes one hit from the first matching rule."""

    def __init__(self) -> None:
        self._rules: list[Fault] = []
        self._lock = threading.Lock()
        self._next = 0

    def add(self, spec: dict[str, Any]) -> Fault:
        with self._lock:
            self._next += 1
            fault = build_fault(self._next, spec)
            self._rules.append(fault)
            return fault

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._rules]

    def holds(self, fault_id: int) -> bool:
        """Is rule ``fault_id`` still in force (not cleared)? A ``freeze`` holds its requests while it is."""
        with self._lock:
            return any(f.id == fault_id for f in self._rules)

    def take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._rules:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    fault.hits += 1
                    return fault
        return None


def fault_error(fault: Fault, request_id: str) -> ApiError:
    """The GitHub answer a (non-latency) fault stands for."""
    if fault.kind == "secondary_rate_limit":
        return ApiError(
            fault.status,
            _SECONDARY_MESSAGE + f"{request_id}.",
            documentation_url=_SECONDARY_DOCS,
            headers={"retry-after": str(fault.retry_after)},
        )
    if fault.kind == "primary_rate_limit":
        reset = int(time.time()) + fault.reset_in
        return ApiError(
            fault.status,
            "API rate limit exceeded for installation.",
            documentation_url=_PRIMARY_DOCS,
            headers={
                "x-ratelimit-limit": "5000",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": str(reset),
                "x-ratelimit-used": "5000",
                "x-ratelimit-resource": "core",
            },
        )
    message = _STATUS_MESSAGES.get(fault.status, "Injected fault")
    return ApiError(fault.status, message)
