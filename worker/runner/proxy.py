"""Baton's egress proxy: the only way out of an agent's box, and the log of what went out.

The box has loopback and nothing else, not even DNS; a forwarder inside it turns
loopback TCP into this UNIX socket, which is bound into the box. So every
decision is made out of the agent's reach: names are judged by
``proxy_rules``, resolved and connected to here, and every request lands in
the run's egress log (``proxy_log``). A CONNECT tunnel must open with a TLS
ClientHello for the very host it was allowed for (``tls_hello``); the origin is
connected to only once it did, so a refused tunnel never reaches it.

It is an asyncio server on its own event loop in a background thread, because
the runner around it is synchronous (``with EgressProxy(...) as proxy:`` around
a box run). Everything it holds is bounded: the request head, the time to
send it, a tunnel's ClientHello and the time to send it, the connect to an
origin, a tunnel's silence, the number of connections; nothing escapes the
thread (errors go to the ``baton.proxy`` log).
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

from worker.runner import tls_hello
from worker.runner.proxy_log import NO_HOST, OTHER_HOSTS, EgressEntry, EgressLog
from worker.runner.proxy_relay import IdleWatch, forward_body, pump, relay
from worker.runner.proxy_rules import (
    STATUS,
    UNREACHABLE,
    Head,
    Policy,
    Reason,
    Route,
    is_public,
    judge_hello,
    parse_head,
    shown_name,
)
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
_Address = tuple[str, int]


def _alert(description: int) -> bytes:
    """A fatal TLS alert record (RFC 8446 §6): what a TLS client understands in place of a ServerHello."""
    return bytes([21, 3, 3, 0, 2, 2, description])


#: A refused ClientHello: access_denied, so the client's error says it was refused, not that it broke.
_ACCESS_DENIED = _alert(49)
#: The ClientHello was fine but the origin could not be reached (the 200 was already sent).
_INTERNAL_ERROR = _alert(80)


class EgressProxy:
    """An HTTP proxy on a UNIX socket that lets a box reach exactly the hosts in ``allow``.

    ``allow``: host names (case and a trailing dot do not matter); each may be reached on
    ports 80 and 443, by CONNECT or by an absolute-form ``http://`` request; a CONNECT tunnel
    must open with a TLS ClientHello naming its host (``sni-missing``, ``sni-mismatch``,
    ``not-tls``, …; the egress log keeps the name seen). ``routes``:
    host → (IP, port) used instead of DNS and the port rule; a routed host must also be
    in ``allow``. ``model_hosts`` are refused whatever ``allow`` says (``model-host``);
    ``gateway`` is the model gateway's address in the box and its socket outside: a
    request for that address is handed to the gateway (a CLI that ignores ``NO_PROXY``
    sends its model calls here), which journals it, so the egress log does not; a CONNECT
    to it carries plain HTTP and is not checked for TLS. One
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
        if head.connect and route.unix is None:
            await self._tunnel(head, route, (reader, writer))
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
            if head.connect:
                writer.write(_ESTABLISHED)
            await self._exchange(head, entry, (reader, writer), (origin_reader, origin_writer))
        finally:
            await self._close(origin_writer)

    async def _tunnel(self, head: Head, route: Route, client: _Streams) -> None:
        """CONNECT: resolve, answer 200, judge the ClientHello, and only then connect to the origin.

        Resolving first keeps the refusals a client can read as HTTP (``dns-failed``,
        ``non-public-address``) before the 200; connecting last means a refused tunnel never
        reaches the origin, not even as an empty TCP connection, and holds none open while a
        slow client sends its hello. The price: an origin that does not answer is, after the 200,
        a TLS alert and a closed tunnel rather than a 502 (the egress log has the reason).
        """
        reader, writer = client
        loop = asyncio.get_running_loop()
        addresses = await self._resolve(route, loop.time() + self._connect_timeout)
        if isinstance(addresses, Reason):
            await self._refuse(writer, head.host, head.port, addresses)
            return
        writer.write(_ESTABLISHED)
        first, found = await self._client_hello(reader)
        refused = found if isinstance(found, Reason) else judge_hello(head.host, found)
        if refused is not None:
            seen = None if isinstance(found, Reason) else shown_name(found)
            await self._refuse_tunnel(writer, head, refused, seen)
            return
        opened = await self._connect(route, addresses, loop.time() + self._connect_timeout)
        if isinstance(opened, Reason):
            self._log.record(head.host, head.port, allowed=True, reason=opened)
            log.info("egress proxy: CONNECT %s:%d failed after its 200 (%s)", head.host, head.port, opened)
            await self._send(writer, _INTERNAL_ERROR)
            return
        origin_reader, origin_writer = opened
        try:
            entry = self._log.record(head.host, head.port, allowed=True)
            log.debug("egress proxy: CONNECT %s:%d", head.host, head.port)
            await self._exchange(head, entry, client, (origin_reader, origin_writer), first=first)
        finally:
            await self._close(origin_writer)

    async def _client_hello(
        self, reader: asyncio.StreamReader
    ) -> tuple[bytes, tls_hello.Hello | tls_hello.Problem | Reason]:
        """The tunnel's first bytes, read until they are judged: at most ``tls_hello.MAX_BYTES``,
        within the head timeout; what was read is forwarded as is once the hello passed."""
        data = bytearray()
        need = 1
        try:
            async with asyncio.timeout(self._head_timeout):
                while True:  # each turn reads at least a byte, and parse() decides by MAX_BYTES
                    chunk = await reader.read(tls_hello.MAX_BYTES - len(data))
                    if not chunk:
                        return bytes(data), Reason.CLIENT_HELLO_INCOMPLETE
                    data += chunk
                    if len(data) < need:
                        continue
                    found = tls_hello.parse(bytes(data))
                    if isinstance(found, tls_hello.NeedMore):
                        need = found.total
                        continue
                    return bytes(data), found
        except TimeoutError:
            return bytes(data), Reason.CLIENT_HELLO_TIMEOUT

    async def _refuse_tunnel(self, writer: asyncio.StreamWriter, head: Head, reason: Reason,
                             seen: str | None) -> None:  # fmt: skip
        """Close a tunnel whose first bytes did not pass, logging the name the hello carried.

        A client that speaks HTTP in the tunnel reads an HTTP refusal, a TLS client an alert;
        one that sent too little or too slowly gets nothing but the close.
        """
        self._log.record(head.host, head.port, allowed=False, reason=reason, sni=seen)
        log.info(
            "egress proxy: CONNECT %s:%d refused (%s), TLS server name %s",
            head.host, head.port, reason, "none" if seen is None else repr(seen),
        )  # fmt: skip
        if reason is Reason.NOT_TLS:
            await self._send(writer, self._answer(head.host, head.port, reason))
        elif reason not in (Reason.CLIENT_HELLO_TIMEOUT, Reason.CLIENT_HELLO_INCOMPLETE):
            await self._send(writer, _ACCESS_DENIED)

    async def _exchange(
        self, head: Head, entry: EgressEntry, client: _Streams, origin: _Streams, *, first: bytes = b""
    ) -> None:
        """Tunnel bytes both ways (CONNECT, after the ``first`` ones already read), or send the
        request and stream the answer back."""
        idle = IdleWatch(asyncio.get_running_loop(), self._idle_timeout)
        if head.connect:
            if first:
                entry.up(len(first))
                origin[1].write(first)
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
        addresses = await self._resolve(route, deadline)
        if isinstance(addresses, Reason):
            return addresses
        return await self._connect(route, addresses, deadline)

    async def _resolve(self, route: Route, deadline: float) -> list[_Address] | Reason:
        """The route's fixed address, or the public addresses its name resolves to."""
        loop = asyncio.get_running_loop()
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
        return addresses

    async def _connect(self, route: Route, addresses: list[_Address], deadline: float) -> _Streams | Reason:
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
        await self._send(writer, self._answer(host, port, reason))

    @staticmethod
    def _answer(host: str, port: int, reason: Reason) -> bytes:
        status, phrase = STATUS[reason]
        if host == NO_HOST:
            text = f"{status} {phrase}: {reason}\n"
        else:
            log.info("egress proxy: %s:%d answered %d (%s)", host, port, status, reason)
            text = f"{status} {phrase}: {host}:{port} ({reason})\n"
        body = text.encode()
        return (
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
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
