"""The model stand-in's HTTP side: a bounded threading server and the handler that plays a script.

The handler reads and records a request, checks the key, counts the conversation's assistant
turns, picks the script's step for it and answers: an SSE stream or a JSON body, an HTTP error,
a stall, or a dropped connection (closing the socket with no further byte).
"""

from __future__ import annotations

import hmac
import http
import json
import logging
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from emulator.model.anthropic import Anthropic
from emulator.model.chat import Chat
from emulator.model.gemini import Gemini
from emulator.model.openai import OpenAI
from emulator.model.script import Answer, Drop, Error, Stall, pick
from emulator.model.wire import (
    Context,
    Dialect,
    Framing,
    NamedSSE,
    Rendered,
    RenderError,
    Route,
    estimate_tokens,
    key_fingerprint,
)
from emulator.types import JSONObject

if TYPE_CHECKING:
    from emulator.model.standin import ModelStandin

MAX_CONNECTIONS = 64
READ_TIMEOUT_SECONDS = 60.0
#: Headers whose values are secrets: recorded only as ``auth[name] = sha256(value)``.
SECRET_HEADERS = ("authorization", "x-api-key", "proxy-authorization", "cookie", "api-key", "x-goog-api-key")
#: Query parameters whose values are secrets (Gemini's ``?key=``): recorded as ``auth["?key"]``.
SECRET_QUERY = ("key",)
#: Each dialect claims its paths (``Dialect.route``); token counting is answered without the script.
DIALECTS: tuple[Dialect, ...] = (Anthropic(), OpenAI(), Chat(), Gemini())
_log = logging.getLogger("emulator.model.standin")


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], standin: ModelStandin) -> None:
        self.standin = standin
        self._active = 0
        self._active_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            full = self._active >= MAX_CONNECTIONS
            if not full:
                self._active += 1
        if full:
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self._active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.debug("model stand-in: connection from %s ended with an error", client_address, exc_info=True)


def _default_message(status: int) -> str:
    if status == 529:
        return "Overloaded"
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_SECONDS
    server: StandinServer
    framing: Framing = NamedSSE()
    query: dict[str, str]

    # -- routing ---------------------------------------------------------------------------------

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("model stand-in: " + format, *args)

    def _serve(self) -> None:
        standin = self.server.standin
        split = urlsplit(self.path)
        dialect, route = _route(split.path.rstrip("/")) if self.command == "POST" else (None, None)
        headers, auth = self._headers()
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        self.query = dict(query)
        for name in SECRET_QUERY:
            if name in query:
                auth[f"?{name}"] = key_fingerprint(query.pop(name))
        self.entry: JSONObject = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "method": self.command,
            "path": split.path,
            "query": query,
            "dialect": dialect.name if dialect else None,
            "headers": headers,
            "auth": auth,
            "body": None,
            "body_bytes": 0,
            "turn": None,
            "hit": None,
            "step": None,
        }
        if dialect is None or route is None:
            self._finish_json("not_found", 404, Anthropic().error_body(404, "Not Found"))
            return
        raw = self._read_body(standin.max_body_bytes)
        if raw is None:
            self._finish_json("too_large", 413, dialect.error_body(413, "Request exceeds the maximum size"))
            return
        self.entry["body_bytes"] = len(raw)
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
        self.entry["body"] = body
        if standin.api_key is not None and not self._key_ok(dialect, standin.api_key):
            self._finish_json("unauthorized", 401, dialect.error_body(401, dialect.bad_key_message))
            return
        if not isinstance(body, dict):
            self._finish_json("bad_request", 400, dialect.error_body(400, "The body must be a JSON object."))
            return
        if route.count:
            self._finish_json("count", 200, dialect.count_body(estimate_tokens(len(raw))))
            return
        self.framing = dialect.framing(self.query)
        self._answer(standin, dialect, route, body, len(raw))

    def _answer(
        self, standin: ModelStandin, dialect: Dialect, route: Route, body: JSONObject, size: int
    ) -> None:
        turn = dialect.count_turns(body)
        hit = standin.next_hit(turn)
        ctx = Context(
            turn=turn,
            hit=hit,
            model=dialect.model(body, route),
            input_tokens=estimate_tokens(size),
            workspace=standin.workspace or standin.script.workspace or dialect.detect_workspace(body),
            minimal=standin.script.stream == "minimal",
            body=body,
        )
        stream = dialect.streams(body, route)
        step = pick(standin.script, turn, hit)
        self.entry.update(turn=turn, hit=hit, step=None if step is None else step.index)
        if step is None:
            message = f"model stand-in: the script has no step for assistant turn {turn} (request {hit})"
            self._finish_json("exhausted", 400, dialect.error_body(400, message))
        elif isinstance(step, Error):
            self._error(dialect, step, ctx, stream)
        elif isinstance(step, Drop):
            self._record("drop", None)
            if step.after_headers:
                self._send_head(self._render(dialect, standin.script.answer(turn), ctx), stream)
            self.close_connection = True  # no more bytes: the client sees the connection end here
        elif isinstance(step, Stall):
            self._stall(standin, dialect, step, ctx, stream)
        else:
            try:
                rendered = dialect.render(step, ctx)
            except RenderError as exc:
                self._finish_json("bad_script", 400, dialect.error_body(400, f"model stand-in: {exc}"))
                return
            self._record("answer", 200)
            self._send(rendered, stream)

    # -- faults ----------------------------------------------------------------------------------

    def _error(self, dialect: Dialect, step: Error, ctx: Context, stream: bool) -> None:
        message = step.message or _default_message(step.status)
        if step.in_stream and stream:
            self._record("error", 200)
            self._send(dialect.stream_error(step.status, message, ctx), stream, extra=dict(step.headers))
            return
        body = step.body if step.body is not None else dialect.error_body(step.status, message)
        self._finish_json("error", step.status, body, extra=dict(step.headers))

    def _stall(
        self, standin: ModelStandin, dialect: Dialect, step: Stall, ctx: Context, stream: bool
    ) -> None:
        """Wait (bounded by the server's max, cut short by stop), then drop or answer the turn."""
        self._record("stall", None)
        rendered = self._render(dialect, standin.script.answer(ctx.turn), ctx)
        if step.after_headers:
            self._send_head(rendered, stream)
        seconds = standin.max_stall_seconds if step.seconds is None else step.seconds
        standin.stopping.wait(min(seconds, standin.max_stall_seconds))
        self.close_connection = True
        if step.then == "drop" or standin.stopping.is_set() or rendered is None:
            return
        if not step.after_headers:
            self._send(rendered, stream)
        elif stream:
            self._stream_events(rendered, rendered.head)
        else:
            self.wfile.write(_json_bytes(rendered.message))

    def _render(self, dialect: Dialect, answer: Answer | None, ctx: Context) -> Rendered | None:
        if answer is None:
            return None
        try:
            return dialect.render(answer, ctx)
        except RenderError:
            return None

    # -- the wire --------------------------------------------------------------------------------

    def _headers(self) -> tuple[dict[str, str], dict[str, str]]:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        auth: dict[str, str] = {}
        for name in SECRET_HEADERS:
            if name in headers:
                value = headers.pop(name)
                scheme, _, token = value.partition(" ")
                secret = token.strip() if name == "authorization" and scheme.lower() == "bearer" else value
                auth[name] = key_fingerprint(secret)
        return headers, auth

    def _key_ok(self, dialect: Dialect, expected: str) -> bool:
        got = dialect.key({k.lower(): v for k, v in self.headers.items()}, self.query)
        return got is not None and hmac.compare_digest(got.encode(), expected.encode())

    def _read_body(self, limit: int) -> bytes | None:
        """The request body, or None when it is larger than ``limit`` (or unreadable)."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._read_chunked(limit)
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            return None
        if length < 0 or length > limit:
            return None
        return self.rfile.read(length)

    def _read_chunked(self, limit: int) -> bytes | None:
        data = bytearray()
        for _ in range(limit + 1):  # every chunk but the last brings a byte or more: this ends
            try:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
            except ValueError:
                return None
            if size == 0:
                for _ in range(100):  # trailers
                    if self.rfile.readline(65537) in (b"\r\n", b"\n", b""):
                        break
                return bytes(data)
            if size < 0 or len(data) + size > limit:
                return None
            data += self.rfile.read(size)
            self.rfile.readline(3)
        return None

    def _record(self, served: str, status: int | None) -> None:
        self.entry.update(served=served, status=status)
        self.server.standin.record(self.entry)

    def _finish_json(self, served: str, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        self._record(served, status)
        self._send_json(status, body, extra)

    def _send_json(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = _json_bytes(body)
        self._json_head(status, len(data), extra)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json_head(self, status: int, length: int, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def _start_stream(self, extra: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.framing.content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        """One chunk of a chunked body; empty data ends the body."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send(self, rendered: Rendered, stream: bool, extra: dict[str, str] | None = None) -> None:
        if not stream:
            self._send_json(200, rendered.message, extra)
            return
        self._start_stream(extra)
        self._stream_events(rendered, 0)

    def _stream_events(self, rendered: Rendered, start: int) -> None:
        """Events ``start`` onwards, the framing's end unless the stream fails, and the last chunk."""
        for index, (event, data) in enumerate(rendered.events[start:], start):
            self._chunk(self.framing.event(index, event, data))
        tail = self.framing.end(len(rendered.events)) if rendered.complete else b""
        if tail:
            self._chunk(tail)
        self._chunk(b"")

    def _send_head(self, rendered: Rendered | None, stream: bool) -> None:
        """The status line, the headers and (streaming) the stream's opening events; no more."""
        if stream:
            self._start_stream()
            for index, (event, data) in enumerate(rendered.events[: rendered.head] if rendered else []):
                self._chunk(self.framing.event(index, event, data))
        else:
            self._json_head(200, len(_json_bytes(rendered.message if rendered else {})))


def _route(path: str) -> tuple[Dialect | None, Route | None]:
    for dialect in DIALECTS:
        route = dialect.route(path)
        if route is not None:
            return dialect, route
    return None, None


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
