"""Baton's egress proxy: the only way out of an agent's box, and the log of what went out.

The box has loopback and nothing else, not even DNS; a forwarder inside it turns
loopback TCP into this UNIX socket, which is bound into the box. So every
decision is made out of the agent's reach: names are judged by
``proxy_rules``, resolved and connected to here, and every request lands in
the run's egress log (``proxy_log``).

It is an asyncio server on its own event loop in a background thread, because
the runner around it is synchronous (``with EgressProxy(...) as proxy:`` around
a box run). Everything it holds is bounded: the request head, the time to
send it, the connect to an origin, a tunnel's silence, the number of
connections; nothing escapes the thread (errors go to the ``baton.proxy`` log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from worker.runner.proxy_log import NO_HOST, OTHER_HOSTS, EgressEntry, EgressLog
from worker.runner.proxy_relay import IdleWatch, forward_body, pump, relay
from worker.runner.proxy_rules import STATUS, UNREACHABLE, Head, Policy, Reason, Route, is_public, parse_head
from worker.runner.unix_socket import OwnedSocket

__all__ = ["NO_HOST", "OTHER_HOSTS", "EgressLog", "EgressProxy", "Reason"]

log = logging.getLogger("baton.proxy")

CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
HEAD_TIMEOUT = 30.0
MAX_CONNECTIONS = 256
#: Read-ahead per stream. The 16 KiB head limit is checked on its own; this sets how much the relay
#: moves per event-loop turn (bench/proxy.py: 64 KiB was slower than 256 KiB on downloads).
_BUFFER = 256 * 1024
_CLOSE_TIMEOUT = 5.0
_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
_Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class EgressProxy:
    """An HTTP proxy on a UNIX socket that lets a box reach exactly the hosts in ``allow``.

    ``allow``: host names (case and a trailing dot do not matter); each may be reached on
    ports 80 and 443, by CONNECT or by an absolute-form ``http://`` request. ``routes``:
    host → (IP, port) used instead of DNS and the port rule; a routed host must also be
    in ``allow``. ``model_hosts`` are refused whatever ``allow`` says (``model-host``);
    ``gateway`` is the model gateway's address in the box and its socket outside: a
    request for that address is handed to the gateway (a CLI that ignores ``NO_PROXY``
    sends its model calls here), which journals it, so the egress log does not. One
    proxy serves one run; ``log`` is that run's egress log.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        allow: Iterable[str],
        routes: Mapping[str, tuple[str, int]] | None = None,
        *,
        model_hosts: Iterable[str] = (),
        gateway: tuple[tuple[str, int], Path] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        head_timeout: float = HEAD_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if min(connect_timeout, idle_timeout, head_timeout) <= 0 or max_connections < 1:
            raise ValueError("timeouts must be positive and max_connections at least 1")
        self._policy = Policy.build(allow, routes, model_hosts=model_hosts, gateway=gateway)
        self._path = Path(socket_path)
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._head_timeout = head_timeout
        self._max_connections = max_connections
        self._log = EgressLog()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._owned = OwnedSocket(self._path)

    @property
    def socket_path(self) -> Path:
        return self._path

    @property
    def log(self) -> EgressLog:
        """The run's egress log; readable while the proxy runs and after it stopped."""
        return self._log

    @property
    def active_connections(self) -> int:
        return len(self._handlers)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        """Bind the socket (errors such as an existing path raise here, in the caller) and serve."""
        if self._thread is not None:
            raise RuntimeError("an EgressProxy serves one run: make a new one")
        sock = self._owned.bind()
        self._thread = threading.Thread(target=self._run, args=(sock,), name="baton-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._owned.unlink()
            raise RuntimeError("the egress proxy did not start") from self._startup_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection, end the thread and remove the socket file; safe to call twice."""
        thread, loop, event = self._thread, self._loop, self._stop_requested
        if thread is None:
            return
        if thread.is_alive() and loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(event.set)
        thread.join(timeout)
        if thread.is_alive():
            log.error("the egress proxy thread did not stop within %.1f s", timeout)
        self._owned.unlink()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the thread ------------------------------------------------------------------------------

    def _run(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        resolver = ThreadPoolExecutor(max_workers=8, thread_name_prefix="baton-proxy-dns")
        loop.set_default_executor(resolver)
        loop.set_exception_handler(_log_loop_error)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(sock))
        except Exception as exc:  # nothing leaves the thread
            if self._ready.is_set():
                log.exception("the egress proxy failed")
            self._startup_error = exc
        finally:
            self._ready.set()
            sock.close()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                resolver.shutdown(wait=True, cancel_futures=True)

    async def _serve(self, sock: socket.socket) -> None:
        self._stop_requested = asyncio.Event()
        server = await asyncio.start_unix_server(self._accept, sock=sock, limit=_BUFFER)
        self._ready.set()
        try:
            await self._stop_requested.wait()
        finally:
            self._stopping = True
            server.close()
            this = asyncio.current_task()
            while tasks := [t for t in asyncio.all_tasks() if t is not this]:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()
            for _ in range(3):  # aborted transports finish closing on the next turns
                await asyncio.sleep(0)

    # -- one connection --------------------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A task of our own rather than a coroutine for asyncio.streams: there, cancelling one at
        # stop() is reported as an unhandled error (CPython 3.11).
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._handlers) > self._max_connections:
                await self._refuse(writer, NO_HOST, 0, Reason.BUSY)
            elif not self._stopping:
                await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.debug("egress proxy: a client connection ended: %r", exc)
        except Exception:
            log.exception("egress proxy: a connection failed")
        finally:
            await self._close(writer)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self._head_timeout):
                data = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():  # half a request, then the client stopped sending
                await self._refuse(writer, NO_HOST, 0, Reason.BAD_REQUEST_LINE)
            return
        except asyncio.LimitOverrunError:
            await self._refuse(writer, NO_HOST, 0, Reason.HEAD_TOO_LARGE)
            return
        except TimeoutError:
            await self._refuse(writer, NO_HOST, 0, Reason.HEAD_TIMEOUT)
            return
        head = parse_head(data)
        if isinstance(head, Reason):
            await self._refuse(writer, NO_HOST, 0, head)
            return
        route = self._policy.decide(head.host, head.port)
        if isinstance(route, Reason):
            await self._refuse(writer, head.host, head.port, route)
            return
        opened = await self._open(route)
        if isinstance(opened, Reason):
            await self._refuse(writer, head.host, head.port, opened)
            return
        origin_reader, origin_writer = opened
        try:
            # The gateway journals each model call itself; its hand-offs are plumbing, not egress.
            entry = EgressEntry() if route.unix is not None else self._log.record(head.host, head.port,
                                                                                 allowed=True)  # fmt: skip
            log.debug(
                "egress proxy: %s %s:%d", "CONNECT" if head.connect else head.method, head.host, head.port
            )
            await self._exchange(head, entry, (reader, writer), (origin_reader, origin_writer))
        finally:
            await self._close(origin_writer)

    async def _exchange(self, head: Head, entry: EgressEntry, client: _Streams, origin: _Streams) -> None:
        """Tunnel bytes both ways (CONNECT), or send the request and stream the answer back."""
        idle = IdleWatch(asyncio.get_running_loop(), self._idle_timeout)
        if head.connect:
            client[1].write(_ESTABLISHED)
            up = pump(client[0], origin[1], entry.up, idle)
            down = pump(origin[0], client[1], entry.down, idle)
        else:
            forwarded = head.forwarded()
            entry.up(len(forwarded))
            origin[1].write(forwarded)
            up = forward_body(head, client[0], origin[1], entry.up, idle)
            down = pump(origin[0], client[1], entry.down, idle, eof=False)
        await relay(up, down, idle, both=head.connect)
        if idle.fired:
            log.info("egress proxy: %s:%d idle for %.0f s, closed", head.host, head.port, self._idle_timeout)

    async def _open(self, route: Route) -> _Streams | Reason:
        """Resolve (here: the box has no DNS) and connect, within one connect timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_timeout
        if route.unix is not None:
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.open_unix_connection(str(route.unix), limit=_BUFFER)
            except (OSError, TimeoutError) as exc:
                log.warning("egress proxy: the model gateway's socket did not answer: %r", exc)
                return Reason.CONNECT_FAILED
        if route.address is not None:
            addresses = [route.address]
        else:
            try:
                async with asyncio.timeout_at(deadline):
                    infos = await loop.getaddrinfo(route.host, route.port, type=socket.SOCK_STREAM)
            except (OSError, TimeoutError) as exc:
                log.info("egress proxy: %r does not resolve: %r", route.host, exc)
                return Reason.DNS_FAILED
            found = dict.fromkeys((str(info[4][0]), int(info[4][1])) for info in infos)
            addresses = [address for address in found if is_public(address[0])]
            if not addresses:
                log.warning(
                    "egress proxy: %r resolves only to non-public addresses %s", route.host, list(found)
                )
                return Reason.NON_PUBLIC_ADDRESS
        for ip, port in addresses:
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.open_connection(ip, port, limit=_BUFFER)
            except TimeoutError:
                return Reason.CONNECT_TIMEOUT
            except OSError as exc:
                log.info("egress proxy: connect to %s:%d for %r failed: %r", ip, port, route.host, exc)
        return Reason.CONNECT_FAILED

    async def _refuse(self, writer: asyncio.StreamWriter, host: str, port: int, reason: Reason) -> None:
        """Answer with the status for ``reason``, naming the host, and log the request once."""
        self._log.record(host, port, allowed=reason in UNREACHABLE, reason=reason)
        status, phrase = STATUS[reason]
        if host == NO_HOST:
            text = f"{status} {phrase}: {reason}\n"
        else:
            log.info("egress proxy: %s:%d answered %d (%s)", host, port, status, reason)
            text = f"{status} {phrase}: {host}:{port} ({reason})\n"
        body = text.encode()
        writer.write(
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await writer.drain()

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Flush and close within a bound; when stopping (or past the bound), just drop it."""
        try:
            if not self._stopping:
                writer.close()
                async with asyncio.timeout(_CLOSE_TIMEOUT):
                    await writer.wait_closed()
        except (OSError, TimeoutError):
            pass
        finally:
            writer.transport.abort()


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    log.error(
        "egress proxy: %s", context.get("message", "event loop error"), exc_info=context.get("exception")
    )
