"""One event loop and one upstream connection pool per worker process, shared by its runs' gateways.

Every run has a gateway of its own (its socket, its placeholder, its journal), but
they all serve on this loop and reach the providers through this pool, so a worker
keeps its TLS connections to a provider warm from one run to the next. A process
made by ``fork`` (an RQ job process) starts an engine of its own: a loop thread does
not survive a fork, and neither may a connection shared with the parent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx

log = logging.getLogger("baton.gateway")

T = TypeVar("T")

#: How long to wait for a provider: to connect, for each read of a streamed answer (a model may think
#: for minutes between two events), to send the request, to get a pooled connection.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=30.0)
UPSTREAM_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=60.0)


class Engine:
    """A daemon thread running an asyncio loop, and the upstream pool that lives on it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._transport: httpx.AsyncHTTPTransport | None = None
        self._thread = threading.Thread(target=self._run, name="baton-gateway", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    @property
    def transport(self) -> httpx.AsyncHTTPTransport:
        """The pool; made on first use, on the loop's thread (its connections belong to the loop).

        A transport, not a client: it keeps no cookies (one run's answer must not put anything in
        another run's requests; the pool serves every run of the process, whatever their orgs),
        follows no redirect, adds no header of its own and does not use the worker's HTTP(S)_PROXY.
        It is also cheaper: the client's layers were a tenth of the gateway's time (bench/RESULTS.md)."""
        if self._transport is None:
            self._transport = httpx.AsyncHTTPTransport(limits=UPSTREAM_LIMITS, trust_env=False, retries=0)
        return self._transport

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)


_engine: Engine | None = None
_lock = threading.Lock()


def engine() -> Engine:
    """This process's engine (a new one after a fork)."""
    global _engine  # noqa: PLW0603 - one per process, made on first use
    with _lock:
        if _engine is None or _engine.pid != os.getpid():
            _engine = Engine()
        return _engine
