"""Moving bytes for the egress proxy once a request was allowed: tunnels, bodies, idleness.

Counting happens before each write, so a client that has received some bytes
can rely on the egress log already holding them. A relay ends on the first
error, on idleness in both directions, or when its answer is complete; it
never reads more from the client than the request it was judged on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from worker.runner import http1
from worker.runner.proxy_rules import Head

log = logging.getLogger("baton.proxy")
_CHUNK = 256 * 1024


class BadBody(ValueError):
    """The request body does not match its framing; the connection is dropped."""


class IdleWatch:
    """Ends a relay when neither direction has moved a byte for ``timeout`` seconds.

    One timer per connection, re-armed lazily, instead of a timeout around every read:
    a long download leaves the upload direction silent, and that is not idleness.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        self.last = loop.time()
        self.fired = False
        self.tasks: list[asyncio.Task[None]] = []
        self._timer = loop.call_at(self.last + timeout, self._check)

    def touch(self) -> None:
        self.last = self._loop.time()

    def _check(self) -> None:
        due = self.last + self._timeout
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        self.fired = True
        for task in self.tasks:
            task.cancel()

    def close(self) -> None:
        self._timer.cancel()


async def pump(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    count: Callable[[int], None],
    idle: IdleWatch,
    *,
    eof: bool = True,
) -> None:
    """Copy until ``src`` ends, then (``eof``) half-close ``dst`` so the other direction may finish."""
    read, write, drain, touch = src.read, dst.write, dst.drain, idle.touch
    while data := await read(_CHUNK):
        touch()
        count(len(data))
        write(data)
        await drain()
    if eof and dst.can_write_eof() and not dst.is_closing():
        dst.write_eof()


async def forward_body(
    head: Head,
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    count: Callable[[int], None],
    idle: IdleWatch,
) -> None:
    """Send exactly the body the head announced, checking chunked framing as it passes."""
    if not head.chunked:
        await _copy(src, dst, head.content_length, count, idle)
        return

    def send(data: bytes) -> None:
        idle.touch()
        count(len(data))
        dst.write(data)

    while True:
        line = await _line(src)
        size = http1.chunk_size(line)
        if size is None:
            raise BadBody("chunk size line")
        send(line)
        if size == 0:
            break
        await _copy(src, dst, size, count, idle)
        if await src.readexactly(2) != b"\r\n":
            raise BadBody("chunk not followed by CRLF")
        send(b"\r\n")
    while (line := await _line(src)) != b"\r\n":
        if not http1.is_trailer(line):
            raise BadBody("trailer line")
        send(line)
    send(line)
    await dst.drain()


async def _line(src: asyncio.StreamReader) -> bytes:
    try:
        line = await src.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise BadBody("line too long") from None
    if len(line) > http1.MAX_CHUNK_LINE:
        raise BadBody("line too long")
    return line


async def _copy(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    n: int,
    count: Callable[[int], None],
    idle: IdleWatch,
) -> None:
    while n > 0:
        data = await src.read(min(n, _CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(data)
        idle.touch()
        count(len(data))
        dst.write(data)
        await dst.drain()


async def relay(
    up: Coroutine[Any, Any, None], down: Coroutine[Any, Any, None], idle: IdleWatch, *, both: bool
) -> None:
    """Run both directions; end on the first failure, on idleness, or when done.

    Done is both directions ended (``both``, a tunnel) or the answer complete (a forwarded
    request: an origin may answer before the whole body arrived).
    """
    tasks = [asyncio.ensure_future(up), asyncio.ensure_future(down)]
    idle.tasks = tasks
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(t.cancelled() or t.exception() is not None for t in done):
                break
            if not both and tasks[1] in done:
                break
    finally:
        idle.close()
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, BadBody):
                log.info("egress proxy: request body dropped: %s", result)
            elif isinstance(result, Exception):
                log.debug("egress proxy: relay ended: %r", result)
