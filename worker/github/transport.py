"""One connection pool per process for every GitHub call, and a count of the calls.

githubkit builds an httpx client (with a new SSL context and a new TCP and TLS
connection) for every request made outside ``with github:``, and closes it after:
measured, that was 63% of a worker's CPU, plus a TLS handshake with api.github.com per
call. Every GitHub client Baton makes is given this transport instead: githubkit's
short-lived clients become thin wrappers around one long-lived pool, so a job's calls
share connections, and so do the jobs of a process that runs them in-process.

RQ forks a work-horse per job: a pool inherited across ``fork`` would share sockets
between two processes, so the pool belongs to the process that made it, and a child
makes its own on first use.

Each response is also counted, by the kind of task that made it and by whether GitHub
counts it against the installation's rate limit (a ``304 Not Modified`` to a
conditional request does not); ``flush`` adds the counts to Redis for ``/metrics``.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections import Counter

import httpx
import redis

from baton import records

#: The kind of task whose calls are being made (set by ``worker.jobs`` around each task).
TASK_KIND: contextvars.ContextVar[str] = contextvars.ContextVar("baton_task_kind", default="other")
_counts: Counter[tuple[str, bool]] = Counter()
_lock = threading.Lock()


class SharedTransport(httpx.BaseTransport):
    """Delegates to this process's pool; ``close`` (called by each short-lived client) keeps it."""

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        self._limits = limits or httpx.Limits(
            max_connections=20, max_keepalive_connections=10, keepalive_expiry=60
        )
        self._pid = -1
        self._pool: httpx.HTTPTransport | None = None
        self._guard = threading.Lock()

    def _current(self) -> httpx.HTTPTransport:
        if self._pool is None or self._pid != os.getpid():
            with self._guard:
                if self._pool is None or self._pid != os.getpid():
                    # Not closed: after a fork, the parent's connections are the parent's.
                    self._pool, self._pid = httpx.HTTPTransport(limits=self._limits), os.getpid()
        return self._pool

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._current().handle_request(request)

    def close(self) -> None:
        """Clients come and go per request; the pool lives as long as the process."""


def count(response: httpx.Response) -> None:
    """A response hook: one more call by the current task kind (304s are free of the limit)."""
    with _lock:
        _counts[(TASK_KIND.get(), response.status_code != 304)] += 1


def flush(client: redis.Redis) -> None:
    """Add this process's counts to Redis (``baton.records.GITHUB_REQUESTS_KEY``) and start again."""
    with _lock:
        found = dict(_counts)
        _counts.clear()
    if not found:
        return
    with client.pipeline(transaction=False) as pipe:
        for (kind, counted), n in found.items():
            pipe.hincrby(records.GITHUB_REQUESTS_KEY, f"{kind}:{'counted' if counted else 'free'}", n)
        pipe.execute()
