"""The gateway's HTTP side: requests from the box in, inference out, every exchange journaled.

One :class:`GatewayServer` per run, on the process's engine loop (``engine``). A
connection from the box carries HTTP/1.1 requests one after another (keep-alive);
each is read whole (head and body, both bounded), judged by ``admit`` (pure), checked
against the spend cap, and then either answered here, in the protocol's own error
shape, or sent to the provider with the real key. The provider's answer goes back
to the agent chunk by chunk, re-framed as chunked, through a :class:`~meter.Meter`
that reads its usage on the way; nothing waits for the answer's end but the
journal entry.

Everything is bounded: the head (64 KiB) and the time to send it, the body (32 MiB,
Anthropic's own limit), the connections at once, the requests per connection, the
silence of a kept-alive connection, and the provider's time (``engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson

from worker.runner import http1
from worker.runner.gateway import admit as _admit
from worker.runner.gateway.engine import UPSTREAM_TIMEOUT, Engine
from worker.runner.gateway.journal import ANSWERED, FAILED, PROBE, REFUSED, Exchange, Journal, target_of
from worker.runner.gateway.meter import Meter
from worker.runner.gateway.prices import PriceTable
from worker.runner.gateway.providers import Auth, Protocol, Wire
from worker.runner.gateway.refusals import Reason, Refusal
from worker.runner.gateway.spend import Left, SpendCap, usd

log = logging.getLogger("baton.gateway")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
HEAD_TIMEOUT = 30.0
#: A kept-alive connection with no new request for this long is closed.
IDLE_TIMEOUT = 120.0
MAX_CONNECTIONS = 64
MAX_REQUESTS_PER_CONNECTION = 10_000
#: Answer headers passed back to the agent (the rest, cookies and framing above all, are not).
_ANSWER_HEADERS = (
    "content-type",
    "request-id",
    "x-request-id",
    "retry-after",
    "cache-control",
    "openai-processing-ms",
    "openai-version",
)
_ANSWER_PREFIXES = ("anthropic-ratelimit-", "x-ratelimit-")
#: Sent to the pool with each request (a transport reads its timeouts from the request).
_TIMEOUTS: dict[str, Any] = {"timeout": UPSTREAM_TIMEOUT.as_dict()}


@dataclass(frozen=True)
class Upstream:
    """Where one provider's calls go, and the key they carry (None: the worker has none)."""

    wire: Wire
    base_url: str
    key: str | None = field(repr=False)  # the real key: never in a repr, a log line or the box
    key_env: str = ""


@dataclass(frozen=True)
class Config:
    placeholder: str
    upstreams: Mapping[str, Upstream]
    server_tools: bool
    prices: PriceTable
    cap: SpendCap
    #: Called once, on the loop's thread, when a call is refused for the cap (the runner stops the box).
    on_over_budget: Callable[[str], None] | None = None


class _Closed(Exception):
    """The connection is over (the client left, or sent what cannot be answered in-line)."""


@dataclass(frozen=True)
class _Asked:
    """One request as it was read: all the journal needs of it, whatever becomes of it."""

    method: str
    target: str
    body: bytes
    started: float
    #: The connection ends after the answer (the client said so, or the request was unreadable).
    close: bool
    headers: http1.Headers = ()

    @property
    def provider(self) -> str | None:
        """The provider the target names (``/anthropic/…``), before anything was judged."""
        return self.target.partition("?")[0].lstrip("/").partition("/")[0] or None


class GatewayServer:
    def __init__(self, config: Config, engine: Engine, journal: Journal) -> None:
        self.config = config
        self.engine = engine
        self.journal = journal
        self.over_budget: str | None = None
        self._granted = {name: u.wire for name, u in config.upstreams.items()}
        self._servers: list[asyncio.AbstractServer] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._closing = False

    async def serve(self, *, unix: socket.socket, tcp: socket.socket | None = None) -> None:
        """Serve on already-bound sockets (bound by the caller, so errors surface there)."""
        self._servers.append(await asyncio.start_unix_server(self._accept, sock=unix, limit=MAX_HEAD_BYTES))
        if tcp is not None:
            self._servers.append(await asyncio.start_server(self._accept, sock=tcp, limit=MAX_HEAD_BYTES))

    async def close(self) -> None:
        self._closing = True
        for server in self._servers:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if len(self._handlers) > MAX_CONNECTIONS or self._closing:
                busy = Refusal(Reason.BUSY, f"more than {MAX_CONNECTIONS} connections to the gateway at once")
                await self._refuse(writer, None, busy)
                return
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                if not await self._request(reader, writer):
                    return
        except (_Closed, ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("model gateway: a connection failed")
        finally:
            writer.transport.abort()

    # -- one request ----------------------------------------------------------------------------

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read, judge and answer one request; False when the connection should end."""
        read = await self._read(reader)
        if read is None:
            return False
        if isinstance(read, Refusal):
            await self._refuse(writer, _Asked("?", "?", b"", time.monotonic(), close=True), read)
            return False
        asked = read
        judged = _admit.admit(asked.method, asked.target, asked.headers, asked.body,
                              placeholder=self.config.placeholder, granted=self._granted,
                              server_tools=self.config.server_tools)  # fmt: skip
        if isinstance(judged, _admit.Probe):
            self._record(asked, PROBE, 404)
            await self._write_simple(writer, 404, b"", close=asked.close, head_only=asked.method == "HEAD")
            return not asked.close
        if isinstance(judged, Refusal):
            return await self._refuse(writer, asked, judged)
        capped = await self._spendable(judged)
        if capped is not None:
            return await self._refuse(writer, asked, capped, judged)
        return await self._forward(writer, asked, judged)

    async def _read(self, reader: asyncio.StreamReader) -> _Asked | Refusal | None:
        """The next request, whole; a Refusal for one that cannot be read (the connection then ends);
        None when the client is gone or silent."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                raw = [await reader.readuntil(b"\r\n")]
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        except asyncio.LimitOverrunError:
            return Refusal(Reason.TOO_LARGE, "the request line is too long")
        started = time.monotonic()
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                    raw.append(line)
                    if sum(map(len, raw)) > MAX_HEAD_BYTES:
                        raise asyncio.LimitOverrunError("head", 0)
        except asyncio.LimitOverrunError:
            return Refusal(Reason.TOO_LARGE, f"the request head is over {MAX_HEAD_BYTES} bytes")
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        lines = [item[:-2].decode("latin-1") for item in raw]
        request = http1.request_line(lines[0])
        headers = http1.fields(lines[1:]) if request is not None else None
        framing = http1.framing(headers) if headers is not None else None
        if request is None or headers is None or framing is None:
            return Refusal(Reason.BAD_REQUEST, "the request head is not HTTP/1.1 Baton reads")
        try:
            async with asyncio.timeout(IDLE_TIMEOUT):
                body = await _body(reader, framing)
        except TimeoutError:
            return Refusal(Reason.BAD_REQUEST, f"the body did not arrive within {IDLE_TIMEOUT:.0f} s")
        except asyncio.LimitOverrunError:
            return Refusal(Reason.BAD_REQUEST, "a line of the chunked body is too long")
        if isinstance(body, Refusal):
            return body
        method, target, version = request
        return _Asked(
            method, target, body, started, close=http1.wants_close(version, headers), headers=headers
        )

    # -- the spend cap --------------------------------------------------------------------------

    async def _spendable(self, admitted: _admit.Admitted) -> Refusal | None:
        """Refused when the run or its day has reached its model spend cap (counting inference only)."""
        if not admitted.operation.metered:
            return None
        reached = self._run_cap_reached()
        if reached is not None:
            return self._over(reached)
        if self.config.cap.ledger is None:
            return None
        try:
            left = await asyncio.get_running_loop().run_in_executor(None, self.config.cap.ledger.left)
        except Exception as exc:
            log.warning("model gateway: could not read the day's model spend: %r", exc)
            return Refusal(Reason.BUDGET_UNKNOWN, "Baton could not read today's model spend, so it refused")
        reached = _day_cap_reached(left)
        return None if reached is None else self._over(reached)

    def _run_cap_reached(self) -> str | None:
        cap, spent = self.config.cap.per_run_usd, self.journal.spent_usd + self.config.cap.spent_before_usd
        if cap is None or spent < cap:
            return None
        return (
            f"this run has spent {usd(spent)} of its {usd(cap)} model budget (limits.max_model_spend_per_run)"
        )

    def _over(self, text: str) -> Refusal:
        """The first refusal for the cap tells the runner, once, which stops the box."""
        if self.over_budget is None:
            self.over_budget = text
            if self.config.on_over_budget is not None:
                try:
                    self.config.on_over_budget(text)
                except Exception:
                    log.exception("model gateway: the over-budget callback failed")
        return Refusal(Reason.OVER_BUDGET, text)

    async def _charge(self, cost: float) -> None:
        """Count ``cost`` in the day budgets (off the loop: the ledger may block on Redis)."""
        left = None
        if cost > 0 and self.config.cap.ledger is not None:
            left = await asyncio.get_running_loop().run_in_executor(None, self._count, cost)
        self._reached(left)

    def _charge_now(self, cost: float) -> None:
        """The same, on this thread: where there is no waiting any more (the call is being cancelled)."""
        self._reached(self._count(cost) if cost > 0 and self.config.cap.ledger is not None else None)

    def _count(self, cost: float) -> Left | None:
        try:
            return self.config.cap.ledger.charge(cost) if self.config.cap.ledger is not None else None
        except Exception as exc:
            log.warning("model gateway: could not count %s of model spend: %r", usd(cost), exc)
            return None

    def _reached(self, left: Left | None) -> None:
        """A call that reached a cap ends the run now, not at the agent's next call: calls in flight
        together all passed the check before them, and an agent need not call again."""
        reached = self._run_cap_reached() or _day_cap_reached(left)
        if reached is not None:
            self._over(reached)

    # -- the provider ---------------------------------------------------------------------------

    async def _forward(self, writer: asyncio.StreamWriter, asked: _Asked, admitted: _admit.Admitted) -> bool:
        upstream = self.config.upstreams[admitted.provider]
        if upstream.key is None:
            missing = Refusal(
                Reason.NO_UPSTREAM_KEY,
                f"the worker has no {upstream.key_env} for "
                f"{admitted.provider}; set it where `baton worker` runs",
            )
            return await self._refuse(writer, asked, missing, admitted)
        headers = _upstream_headers(upstream, admitted)
        request = httpx.Request("POST", _url(upstream, admitted), content=admitted.body, headers=headers,
                                extensions=_TIMEOUTS)  # fmt: skip
        try:
            answer = await self.engine.transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            log.info("model gateway: %s timed out: %r", admitted.provider, exc)
            late = Refusal(Reason.UPSTREAM_TIMEOUT, f"{admitted.provider} did not answer in time")
            return await self._refuse(writer, asked, late, admitted)
        except httpx.HTTPError as exc:
            log.info("model gateway: %s could not be reached: %r", admitted.provider, exc)
            down = Refusal(Reason.UPSTREAM_FAILED, f"{admitted.provider} could not be reached")
            return await self._refuse(writer, asked, down, admitted)
        event_stream = answer.headers.get("content-type", "").startswith("text/event-stream")
        meter = Meter(admitted.operation.protocol, event_stream=event_stream, request_bytes=len(asked.body))
        digest = hashlib.sha256()
        first_byte: float | None = None
        settled = False

        def settle() -> float:
            """Journal the exchange at its price; before the agent sees the answer end, so whoever
            reads the journal once the agent has its answer finds it there. Returns the cost."""
            nonlocal settled
            settled = True
            usage = meter.finish()
            cost, priced_as = 0.0, None
            if admitted.operation.metered:
                price, priced_as = self.config.prices.price(admitted.provider, admitted.model)
                cost = price.cost(usage)
            self._record(asked, ANSWERED if 200 <= answer.status_code < 300 else FAILED, answer.status_code,
                         admitted=admitted, response=(meter.response_bytes, digest.hexdigest()),
                         usage=usage.to_data(), cost=(cost, priced_as), first_byte=first_byte)  # fmt: skip
            return cost

        try:
            writer.write(_head(answer.status_code, _answer_headers(answer.headers), close=asked.close))
            async for chunk in answer.aiter_raw():  # as they come: a chunk size would buffer
                if first_byte is None:
                    first_byte = time.monotonic()
                meter.feed(chunk)
                digest.update(chunk)
                writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                await writer.drain()
            await answer.aclose()
            await self._charge(settle())
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, RuntimeError, httpx.HTTPError) as exc:
            # The agent hung up, or the provider's answer broke off: what passed is metered.
            log.info("model gateway: a %s answer ended early: %r", admitted.provider, exc)
            return False
        finally:
            if not settled:  # an early end, or the gateway stopping: still journaled and counted
                self._charge_now(settle())
            await asyncio.shield(answer.aclose())
        return not asked.close

    # -- what the gateway answers and keeps -----------------------------------------------------

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        asked: _Asked | None,
        refusal: Refusal,
        admitted: _admit.Admitted | None = None,
    ) -> bool:
        """Journal the refusal (``asked`` None: nothing was read) and answer it in the protocol's own
        error shape; True if the connection may carry another request."""
        if asked is not None:
            outcome = (
                FAILED if refusal.reason in (Reason.UPSTREAM_FAILED, Reason.UPSTREAM_TIMEOUT) else REFUSED
            )
            self._record(asked, outcome, refusal.status, refusal=refusal, admitted=admitted)
        close = asked is None or asked.close
        upstream = self.config.upstreams.get((asked.provider if asked else None) or "")
        await self._write_simple(
            writer, refusal.status, _error_body(upstream.wire if upstream else None, refusal), close=close
        )
        return not close

    def _record(
        self,
        asked: _Asked,
        outcome: str,
        status: int,
        *,
        refusal: Refusal | None = None,
        admitted: _admit.Admitted | None = None,
        response: tuple[int, str | None] = (0, None),
        usage: dict[str, Any] | None = None,
        cost: tuple[float, str | None] = (0.0, None),
        first_byte: float | None = None,
    ) -> None:
        provider = asked.provider if asked.provider in self.config.upstreams else None
        self.journal.add(
            Exchange(
                seq=self.journal.next_seq(),
                at=_now(),
                target=target_of(asked.method, asked.target),
                provider=provider,
                operation=admitted.operation.name if admitted else None,
                model=admitted.model[:200] if admitted else None,
                stream=bool(admitted and admitted.stream),
                outcome=outcome,
                status=status,
                reason=str(refusal.reason) if refusal else None,
                detail=refusal.detail if refusal else None,
                request_bytes=len(asked.body),
                request_sha256=hashlib.sha256(asked.body).hexdigest(),
                response_bytes=response[0],
                response_sha256=response[1],
                usage=usage,
                cost_usd=round(cost[0], 8),
                priced_as=cost[1],
                duration_ms=_ms(asked.started),
                first_byte_ms=None if first_byte is None else _ms(asked.started, first_byte),
            )
        )

    async def _write_simple(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: bytes,
        *,
        close: bool,
        head_only: bool = False,
    ) -> None:
        head = [f"HTTP/1.1 {status} {_phrase(status)}", f"Content-Length: {len(payload)}"]
        if payload:
            head.append("Content-Type: application/json")
        head.append("Connection: close" if close else "Connection: keep-alive")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (b"" if head_only else payload))
        await writer.drain()
        if close:
            raise _Closed


async def _body(reader: asyncio.StreamReader, framing: tuple[int, bool]) -> bytes | Refusal:
    """The body as framed (Content-Length or chunked, by ``http1``'s grammar, the proxy's too)."""
    length, chunked = framing
    too_large = Refusal(Reason.TOO_LARGE, f"the body is over {MAX_BODY_BYTES} bytes")
    if not chunked:
        if length > MAX_BODY_BYTES:
            return too_large
        return await reader.readexactly(length) if length else b""
    badly = Refusal(Reason.BAD_REQUEST, "the chunked body is not framed as HTTP/1.1 says")
    data = bytearray()
    while (size := http1.chunk_size(await reader.readuntil(b"\r\n"))) != 0:
        if size is None:
            return badly
        if len(data) + size > MAX_BODY_BYTES:
            return too_large
        data += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            return badly
    while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
        if not http1.is_trailer(trailer):
            return badly
    return bytes(data)


def _day_cap_reached(left: Left | None) -> str | None:
    if left is None or left.usd > 0:
        return None
    return (f"{left.scope} has spent {usd(left.limit - left.usd)} of its {usd(left.limit)} model budget "
            f"today (UTC; {left.setting})")  # fmt: skip


def _url(upstream: Upstream, admitted: _admit.Admitted) -> str:
    url = upstream.base_url.rstrip("/") + admitted.operation.path
    return url + ("?" + urlencode(admitted.operation.query) if admitted.operation.query else "")


def _upstream_headers(upstream: Upstream, admitted: _admit.Admitted) -> list[tuple[str, str]]:
    headers = list(admitted.headers)
    given = {name for name, _ in headers}
    headers += [(name, value) for name, value in upstream.wire.default_headers.items() if name not in given]
    key = str(upstream.key)
    auth = upstream.wire.auth
    headers.append((str(auth), f"Bearer {key}" if auth is Auth.BEARER else key))
    headers.append(("accept-encoding", "identity"))
    return headers


def _answer_headers(headers: httpx.Headers) -> list[tuple[str, str]]:
    return [
        (name, value)
        for name, value in headers.multi_items()
        if name.lower() in _ANSWER_HEADERS or name.lower().startswith(_ANSWER_PREFIXES)
    ]


def _head(status: int, headers: list[tuple[str, str]], *, close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_phrase(status)}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines += ["Transfer-Encoding: chunked", "Connection: close" if close else "Connection: keep-alive"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _error_body(wire: Wire | None, refusal: Refusal) -> bytes:
    """The refusal in the protocol's own error shape, so the CLI shows Baton's sentence."""
    message = f"Baton's model gateway refused this request ({refusal.reason}): {refusal.detail}"
    protocol = wire.protocols[0] if wire else None
    data: dict[str, Any]
    if protocol is Protocol.ANTHROPIC:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            413: "request_too_large",
        }.get(refusal.status, "api_error")
        data = {"type": "error", "error": {"type": kind, "message": message}}
    elif protocol is Protocol.GEMINI:
        status = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(
            refusal.status, "UNAVAILABLE"
        )
        data = {"error": {"code": refusal.status, "message": message, "status": status}}
    else:
        data = {
            "error": {"message": message, "type": "baton_gateway", "param": None, "code": str(refusal.reason)}
        }
    return orjson.dumps(data)


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:  # a provider's own code (Anthropic's 529, say)
        return "Status"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(start: float, end: float | None = None) -> float:
    return round(((end if end is not None else time.monotonic()) - start) * 1000, 3)
