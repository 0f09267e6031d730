"""The egress proxy, over real sockets: a UNIX-socket client, loopback origins in threads, socat."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import logging
import os
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from baton.redis_server import free_port
from tests.worker.runner.tls import client_hello
from worker.runner.proxy import NO_HOST, OTHER_HOSTS, EgressProxy
from worker.runner.proxy_log import MAX_KEYS, MAX_NAMES, OTHER_NAMES, EgressLog
from worker.runner.proxy_rules import is_dns_name

MODEL = "api.anthropic.com"


# -- origins ---------------------------------------------------------------------------------------


class _Echo(socketserver.BaseRequestHandler):
    """Echoes every byte; closes after the client's EOF (so half-close is visible end to end)."""

    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Http(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def _answer(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while (line := self.rfile.readline().split(b";")[0].strip()) and (size := int(line, 16)):
                body += self.rfile.read(size)
                self.rfile.readline()
            if not line:  # the proxy dropped the request mid-body
                return
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        record = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                  "body": body.decode()}  # fmt: skip
        self.server.seen.append(record)  # type: ignore[attr-defined]
        out = json.dumps(record).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # the default 5 overflows under the concurrency tests, and Linux then resets


@contextlib.contextmanager
def serve(handler: type[socketserver.BaseRequestHandler]) -> Iterator[_Threaded]:
    server = _Threaded(("127.0.0.1", 0), handler)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def port_of(server: _Threaded) -> int:
    return int(server.server_address[1])


@pytest.fixture
def echo() -> Iterator[_Threaded]:
    with serve(_Echo) as server:
        yield server


@pytest.fixture
def web() -> Iterator[_Threaded]:
    with serve(_Http) as server:
        yield server


@pytest.fixture
def sock_path() -> Iterator[Path]:
    """A short path: AF_UNIX paths stop at 107 bytes, pytest's tmp_path can be longer."""
    directory = tempfile.mkdtemp(prefix="bp-", dir="/tmp")
    yield Path(directory) / "proxy.sock"
    shutil.rmtree(directory)


def proxy_for(path: Path, origin: _Threaded, **kwargs: Any) -> EgressProxy:
    routes = {MODEL: ("127.0.0.1", port_of(origin))}
    return EgressProxy(path, allow=[MODEL, "github.com"], routes=routes, **kwargs)


# -- a client speaking HTTP over the UNIX socket ------------------------------------------------------


def dial(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def read_head(sock: socket.socket) -> tuple[int, bytes, bytes]:
    """Status, the head, and whatever arrived after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, rest


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def ask(path: Path, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes, return the status and the whole answer (the proxy closes after refusals)."""
    with dial(path) as sock:
        sock.sendall(request)
        answer = read_all(sock)
    return int(answer.split(b" ")[1]), answer


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n and (chunk := sock.recv(n - len(data))):
        data += chunk
    return data


def tunnel(path: Path, host: str = MODEL, port: int = 443) -> socket.socket:
    """A CONNECT tunnel through to an echo origin, past the proxy's ClientHello check (its hello
    for ``host`` echoed back: ``len(client_hello(host))`` more bytes each way in the log)."""
    sock = dial(path)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    status, _, rest = read_head(sock)
    assert (status, rest) == (200, b""), status
    hello = client_hello(host)
    sock.sendall(hello)
    assert recv_exactly(sock, len(hello)) == hello
    return sock


class UnixHTTPConnection(http.client.HTTPConnection):
    """The stdlib's HTTP client, pointed at the proxy's socket as an agent's HTTP_PROXY would be."""

    def __init__(self, path: Path) -> None:
        super().__init__("proxy", timeout=10)
        self.path = path

    def connect(self) -> None:
        self.sock = dial(self.path)


def entry(proxy: EgressProxy, host: str, port: int, allowed: bool) -> dict[str, Any]:
    found = [e for e in proxy.log.to_data() if (e["host"], e["port"], e["allowed"]) == (host, port, allowed)]
    assert len(found) == 1, proxy.log.to_data()
    return found[0]


def eventually(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("baton-proxy")]


# -- what gets through -------------------------------------------------------------------------------


def test_connect_to_a_routed_host_tunnels_and_counts_both_ways(sock_path: Path, echo: _Threaded) -> None:
    payload = os.urandom(300_000)
    with proxy_for(sock_path, echo) as proxy, tunnel(sock_path) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)  # half-close: the echo finishes, then the origin closes
        assert read_all(sock) == payload
        hello = len(client_hello(MODEL))
        assert entry(proxy, MODEL, 443, True) == {
            "host": MODEL, "port": 443, "allowed": True, "connections": 1,
            "bytes_up": 300_000 + hello, "bytes_down": 300_000 + hello, "reasons": {},
        }  # fmt: skip


def test_a_route_replaces_dns_and_the_port_rule(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo) as proxy:
        for port in (443, 80, 8443):
            with tunnel(sock_path, "API.Anthropic.COM.", port) as sock:
                sock.sendall(b"ping")
                assert sock.recv(4) == b"ping"
        hello = len(client_hello("API.Anthropic.COM."))
        assert [(e["host"], e["port"], e["bytes_down"]) for e in proxy.log.to_data()] == [
            (MODEL, 80, 4 + hello), (MODEL, 443, 4 + hello), (MODEL, 8443, 4 + hello)
        ]  # fmt: skip


def test_absolute_form_get_is_forwarded_with_the_urls_host(sock_path: Path, web: _Threaded) -> None:
    with proxy_for(sock_path, web) as proxy:
        conn = UnixHTTPConnection(sock_path)
        headers = {"Host": "evil.example", "Proxy-Authorization": "Basic eA==", "X-Keep": "1"}
        conn.request("GET", f"http://{MODEL}/v1/messages?beta=true", headers=headers)
        response = conn.getresponse()
        body = json.loads(response.read())
        conn.close()
        assert response.status == 200
        assert body["path"] == "/v1/messages?beta=true"
        assert body["headers"]["Host"] == MODEL  # the client's Host never reaches the origin
        assert body["headers"]["Connection"] == "close"
        assert body["headers"]["X-Keep"] == "1"
        assert "Proxy-Authorization" not in body["headers"]
        logged = entry(proxy, MODEL, 80, True)
        assert logged["connections"] == 1
        assert logged["bytes_up"] > 0
        assert logged["bytes_down"] > len(json.dumps(body))


@pytest.mark.parametrize("chunked", [False, True])
def test_absolute_form_post_forwards_exactly_its_body(sock_path: Path, web: _Threaded, chunked: bool) -> None:
    text = "x" * 70_000
    with proxy_for(sock_path, web):
        conn = UnixHTTPConnection(sock_path)
        if chunked:
            chunks = iter([text[:10].encode(), text[10:].encode()])
            conn.request("POST", f"http://{MODEL}:443/v1/messages", body=chunks, encode_chunked=True)
        else:
            conn.request("POST", f"http://{MODEL}/v1/messages", body=text)
        response = conn.getresponse()
        body = json.loads(response.read())
        conn.close()
    assert response.status == 200
    assert body["body"] == text
    assert body["headers"]["Host"] == (f"{MODEL}:443" if chunked else MODEL)


def test_nothing_after_the_judged_request_reaches_the_origin(sock_path: Path, web: _Threaded) -> None:
    smuggled = b"GET /two HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    with proxy_for(sock_path, web), dial(sock_path) as sock:
        sock.sendall(b"GET http://api.anthropic.com/one HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi" + smuggled)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert [(r["path"], r["body"]) for r in web.seen] == [("/one", "hi")]  # type: ignore[attr-defined]


def test_a_chunked_body_that_breaks_its_framing_is_dropped(sock_path: Path, web: _Threaded) -> None:
    with proxy_for(sock_path, web), dial(sock_path) as sock:
        sock.sendall(b"POST http://api.anthropic.com/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"zz\r\nhello\r\n0\r\n\r\n")  # fmt: skip
        assert read_all(sock) == b""
    assert web.seen == []  # type: ignore[attr-defined]


# -- what does not ------------------------------------------------------------------------------------


def test_a_host_not_allowed_is_403_naming_it_and_logged_refused(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo) as proxy:
        status, answer = ask(sock_path, b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
        assert status == 403
        assert answer.endswith(b"evil.example:443 (host-not-allowed)\n")
        status, _ = ask(sock_path, b"GET http://Evil.Example./x HTTP/1.1\r\n\r\n")
        assert status == 403
        assert proxy.log.to_data() == [
            {"host": "evil.example", "port": 80, "allowed": False, "connections": 1, "bytes_up": 0,
             "bytes_down": 0, "reasons": {"host-not-allowed": 1}},
            {"host": "evil.example", "port": 443, "allowed": False, "connections": 1, "bytes_up": 0,
             "bytes_down": 0, "reasons": {"host-not-allowed": 1}},
        ]  # fmt: skip


IP_LITERALS = [
    "127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "017700000001",
    "[::1]", "[::ffff:127.0.0.1]", "[fe80::1%25eth0]", "10.0.0.1", "169.254.169.254", "8.8.8.8",
    "0x7f", "1.2.3.4.", "::1",
]  # fmt: skip


@pytest.mark.parametrize("host", IP_LITERALS)
def test_every_spelling_of_an_address_is_403(sock_path: Path, echo: _Threaded, host: str) -> None:
    with proxy_for(sock_path, echo) as proxy:
        connect_status, _ = ask(sock_path, f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode())
        get_status, answer = ask(sock_path, f"GET http://{host}/ HTTP/1.1\r\n\r\n".encode())
        assert (connect_status, get_status) == (403, 403), answer
        assert all(not e["allowed"] for e in proxy.log.to_data())
        assert all(e["reasons"] == {"not-a-dns-name": 1} for e in proxy.log.to_data())


def test_addresses_and_non_names_cannot_even_be_configured(sock_path: Path) -> None:
    for bad in ("127.0.0.1", "0x7f.1", "*.github.com", "exa_mple.com", "[::1]", ""):
        with pytest.raises(ValueError, match="not a DNS host name"):
            EgressProxy(sock_path, allow=[bad])
    with pytest.raises(ValueError, match="not an IP address"):
        EgressProxy(sock_path, allow=[MODEL], routes={MODEL: ("localhost", 80)})


@pytest.mark.parametrize(
    ("host", "ok"),
    [("github.com", True), ("a-b.c0.example", True), ("xn--p1ai", True), ("localhost", True),
     ("1.2.3.4", False), ("a.1", False), ("a.0x1f", False), ("-a.com", False), ("a..com", False),
     ("a" * 64 + ".com", False), ("é.com", False), ("a.com:80", False), ("a%2ecom", False)],
)  # fmt: skip
def test_what_counts_as_a_dns_name(host: str, ok: bool) -> None:
    assert is_dns_name(host) is ok


def test_port_22_on_an_allowed_host_is_403(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo) as proxy:
        status, answer = ask(sock_path, b"CONNECT github.com:22 HTTP/1.1\r\n\r\n")
        assert status == 403
        assert b"github.com:22 (port-not-allowed)" in answer
        assert entry(proxy, "github.com", 22, False)["reasons"] == {"port-not-allowed": 1}


def test_a_routed_host_missing_from_allow_is_refused(sock_path: Path, echo: _Threaded) -> None:
    routes = {MODEL: ("127.0.0.1", port_of(echo))}
    with EgressProxy(sock_path, allow=["github.com"], routes=routes) as proxy:
        assert ask(sock_path, f"CONNECT {MODEL}:443 HTTP/1.1\r\n\r\n".encode())[0] == 403
        assert entry(proxy, MODEL, 443, False)["reasons"] == {"host-not-allowed": 1}


def test_a_name_that_does_not_resolve_is_502_and_logged(sock_path: Path) -> None:
    with EgressProxy(sock_path, allow=["nothing.invalid"]) as proxy:
        status, answer = ask(sock_path, b"CONNECT nothing.invalid:443 HTTP/1.1\r\n\r\n")
        assert status == 502
        assert b"nothing.invalid:443 (dns-failed)" in answer
        assert entry(proxy, "nothing.invalid", 443, True) == {
            "host": "nothing.invalid", "port": 443, "allowed": True, "connections": 1,
            "bytes_up": 0, "bytes_down": 0, "reasons": {"dns-failed": 1},
        }  # fmt: skip


def test_an_allowed_name_resolving_to_loopback_is_refused(sock_path: Path) -> None:
    with EgressProxy(sock_path, allow=["localhost"]) as proxy:
        assert ask(sock_path, b"CONNECT localhost:443 HTTP/1.1\r\n\r\n")[0] == 403
        assert entry(proxy, "localhost", 443, False)["reasons"] == {"non-public-address": 1}


def test_a_route_nobody_listens_on_is_502_or_after_the_hello_a_tls_alert(sock_path: Path) -> None:
    """A tunnel connects to its origin only once its ClientHello passed, after the 200: then the
    client learns of the failure as TLS does, by a fatal alert (internal_error)."""
    with EgressProxy(sock_path, allow=[MODEL], routes={MODEL: ("127.0.0.1", free_port())}) as proxy:
        assert ask(sock_path, f"GET http://{MODEL}/ HTTP/1.1\r\n\r\n".encode())[0] == 502
        with dial(sock_path) as sock:
            sock.sendall(f"CONNECT {MODEL}:443 HTTP/1.1\r\n\r\n".encode())
            assert read_head(sock)[0] == 200
            sock.sendall(client_hello(MODEL))
            assert read_all(sock) == b"\x15\x03\x03\x00\x02\x02\x50"
        assert entry(proxy, MODEL, 443, True)["reasons"] == {"connect-failed": 1}
        assert entry(proxy, MODEL, 80, True)["reasons"] == {"connect-failed": 1}


MALFORMED = {
    "origin-form": (b"GET /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n", "not-absolute-form"),
    "asterisk": (b"OPTIONS * HTTP/1.1\r\n\r\n", "not-absolute-form"),
    "garbage": (b"hello there\r\n\r\n", "bad-request-line"),
    "http2": (b"GET http://api.anthropic.com/ HTTP/2.0\r\n\r\n", "bad-request-line"),
    "double space": (b"GET  http://api.anthropic.com/ HTTP/1.1\r\n\r\n", "bad-request-line"),
    "binary": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "bad-request-line"),
    "connect without port": (b"CONNECT api.anthropic.com HTTP/1.1\r\n\r\n", "bad-target"),
    "connect bad port": (b"CONNECT api.anthropic.com:99999 HTTP/1.1\r\n\r\n", "bad-target"),
    "userinfo": (b"GET http://u:p@api.anthropic.com/ HTTP/1.1\r\n\r\n", "bad-target"),
    "https scheme": (b"GET https://api.anthropic.com/ HTTP/1.1\r\n\r\n", "unsupported-scheme"),
    "header without colon": (b"GET http://api.anthropic.com/ HTTP/1.1\r\nNoColon\r\n\r\n", "bad-header"),
    "folded header": (b"GET http://api.anthropic.com/ HTTP/1.1\r\nA: b\r\n c\r\n\r\n", "bad-header"),
    "bare LF": (b"GET http://api.anthropic.com/ HTTP/1.1\nHost: x\r\n\r\n", "bad-request-line"),
    "TE and CL": (b"POST http://api.anthropic.com/ HTTP/1.1\r\nContent-Length: 3\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n", "bad-body-framing"),
    "two lengths": (b"POST http://api.anthropic.com/ HTTP/1.1\r\nContent-Length: 3\r\n"
                    b"Content-Length: 4\r\n\r\n", "bad-body-framing"),
    "headers over 16 KiB": (b"GET http://api.anthropic.com/ HTTP/1.1\r\nX: " + b"a" * 16_400 + b"\r\n\r\n",
                            "head-too-large"),
    "headers over 256 KiB": (b"GET http://api.anthropic.com/ HTTP/1.1\r\nX: " + b"a" * 300_000 + b"\r\n\r\n",
                             "head-too-large"),
}  # fmt: skip


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_requests_are_400_under_the_no_host_key(
    sock_path: Path, echo: _Threaded, case: str
) -> None:
    request, reason = MALFORMED[case]
    with proxy_for(sock_path, echo) as proxy:
        with dial(sock_path) as sock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed mid-upload: fine
                sock.sendall(request)
            status, _, _ = read_head(sock)
        assert status == 400
        assert proxy.log.to_data() == [{"host": NO_HOST, "port": 0, "allowed": False, "connections": 1,
                                        "bytes_up": 0, "bytes_down": 0, "reasons": {reason: 1}}]  # fmt: skip
        assert echo.seen == []  # type: ignore[attr-defined]


def test_a_head_that_never_ends_is_408(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo, head_timeout=0.3) as proxy, dial(sock_path) as sock:
        sock.sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n")
        assert read_head(sock)[0] == 408
        assert entry(proxy, NO_HOST, 0, False)["reasons"] == {"head-timeout": 1}


def test_the_log_stays_bounded_whatever_hosts_the_agent_asks_for() -> None:
    log = EgressLog()
    for i in range(MAX_KEYS + 50):
        log.record(f"h{i}.example", 443, allowed=False, reason="host-not-allowed")
    log.record("x" * 10_000, 443, allowed=False, reason="not-a-dns-name")
    data = log.to_data()
    assert len(data) == MAX_KEYS + 1
    assert data[0] == {"host": OTHER_HOSTS, "port": 0, "allowed": False, "connections": 51, "bytes_up": 0,
                       "bytes_down": 0, "reasons": {"host-not-allowed": 50, "not-a-dns-name": 1}}  # fmt: skip
    assert data == sorted(data, key=lambda e: (e["host"], e["port"], e["allowed"]))
    short = EgressLog()
    short.record("x" * 10_000, 443, allowed=False)
    assert len(short.to_data()[0]["host"]) == 253


def test_the_tls_names_a_refused_host_was_asked_under_stay_bounded() -> None:
    log = EgressLog()
    for i in range(MAX_NAMES + 5):
        log.record(MODEL, 443, allowed=False, reason="sni-mismatch", sni=f"n{i}.example")
    log.record(MODEL, 443, allowed=False, reason="sni-mismatch", sni="n0.example")
    log.record(MODEL, 443, allowed=False, reason="sni-mismatch", sni="x" * 10_000)
    names = log.to_data()[0]["sni"]
    assert len(names) == MAX_NAMES + 1
    assert (names["n0.example"], names[OTHER_NAMES]) == (2, 6)


# -- bounds and lifecycle -------------------------------------------------------------------------------


def test_an_idle_tunnel_is_closed(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo, idle_timeout=0.3) as proxy, tunnel(sock_path) as sock:
        started = time.monotonic()
        for _ in range(3):  # traffic keeps it open past the timeout...
            sock.sendall(b"x")
            assert sock.recv(1) == b"x"
            time.sleep(0.15)
        assert sock.recv(1) == b""  # ...silence ends it
        assert 0.6 < time.monotonic() - started < 5
        eventually(lambda: proxy.active_connections == 0)


def test_concurrent_connects_are_bounded(sock_path: Path, echo: _Threaded) -> None:
    with proxy_for(sock_path, echo, max_connections=8) as proxy:
        open_tunnels = [tunnel(sock_path) for _ in range(8)]
        try:
            with dial(sock_path) as refused:  # answered at once, before any request is read
                assert read_head(refused)[0] == 503
            assert entry(proxy, NO_HOST, 0, False)["reasons"] == {"too-many-connections": 1}
            open_tunnels.pop().close()
            eventually(lambda: proxy.active_connections < 8)
            open_tunnels.append(tunnel(sock_path))
        finally:
            for sock in open_tunnels:
                sock.close()
        assert entry(proxy, MODEL, 443, True)["connections"] == 9


def test_many_concurrent_tunnels_all_get_through(sock_path: Path, echo: _Threaded) -> None:
    failures: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with tunnel(sock_path) as sock:
                message = f"hello {i}".encode() * 100
                sock.sendall(message)
                sock.shutdown(socket.SHUT_WR)
                assert read_all(sock) == message
        except BaseException as exc:
            failures.append(exc)

    with proxy_for(sock_path, echo) as proxy:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert failures == []
        logged = entry(proxy, MODEL, 443, True)
        assert logged["connections"] == 64
        hellos = 64 * len(client_hello(MODEL))
        assert (
            logged["bytes_up"]
            == logged["bytes_down"]
            == hellos + sum(len(f"hello {i}") * 100 for i in range(64))
        )


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_stop_closes_everything_even_with_traffic(
    sock_path: Path, echo: _Threaded, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="baton.proxy")
    before = fds()
    proxy = proxy_for(sock_path, echo)
    with proxy:
        assert sock_path.is_socket()
        assert oct(sock_path.stat().st_mode & 0o777) == "0o600"
        assert len(proxy_threads()) == 1
        ask(sock_path, b"CONNECT nothing.invalid:443 HTTP/1.1\r\n\r\n")  # starts a resolver thread
        clients = [tunnel(sock_path) for _ in range(3)]
        clients[0].sendall(b"in flight" * 10_000)
        clients.append(dial(sock_path))  # connected, no request yet
        clients[-1].sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n")  # half a head
        eventually(lambda: proxy.active_connections == 4)
    try:
        for sock in clients:
            read_all(sock)  # returns at EOF (a 10 s timeout otherwise): the proxy closed each one
    finally:
        for sock in clients:
            sock.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not proxy.running
    assert proxy_threads() == []
    assert not sock_path.exists()
    eventually(lambda: fds() <= before)  # the echo origin closes its side on its own thread
    proxy.stop()  # twice is fine
    assert proxy.log.to_data()[0]["host"] == MODEL  # the log outlives the proxy
    with pytest.raises(RuntimeError):
        proxy.start()


def test_an_existing_path_is_not_taken_over(sock_path: Path) -> None:
    sock_path.write_text("someone else's")
    with pytest.raises(OSError, match="in use"):
        EgressProxy(sock_path, allow=[MODEL]).start()
    assert sock_path.read_text() == "someone else's"
    assert proxy_threads() == []


# -- the way the box reaches it -------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed")
def test_through_a_socat_forwarder_as_in_the_box(sock_path: Path, echo: _Threaded, web: _Threaded) -> None:
    port = free_port()
    routes = {MODEL: ("127.0.0.1", port_of(echo)), "models.example": ("127.0.0.1", port_of(web))}
    with EgressProxy(sock_path, allow=[MODEL, "models.example"], routes=routes) as proxy:
        forwarder = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{sock_path}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            eventually(lambda: _listening(port))
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(f"CONNECT {MODEL}:443 HTTP/1.1\r\n\r\n".encode())
                assert read_head(sock)[0] == 200
                hello = client_hello(MODEL)
                sock.sendall(hello)
                assert recv_exactly(sock, len(hello)) == hello
                sock.sendall(b"through socat")
                sock.shutdown(socket.SHUT_WR)
                assert read_all(sock) == b"through socat"
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # what HTTP_PROXY makes
            conn.request("GET", "http://models.example/v1/models")
            response = conn.getresponse()
            assert (response.status, json.loads(response.read())["path"]) == (200, "/v1/models")
            conn.close()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n")
                assert read_head(sock)[0] == 403
        finally:
            forwarder.terminate()
            forwarder.wait(10)
        assert [(e["host"], e["port"], e["allowed"]) for e in proxy.log.to_data()] == [
            ("127.0.0.1", 22, False), (MODEL, 443, True), ("models.example", 80, True)
        ]  # fmt: skip


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
