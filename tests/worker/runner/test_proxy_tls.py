"""The egress proxy's TLS name check, end to end: Python's TLS client through a real CONNECT tunnel
to a real TLS server on loopback (self-signed for allowed.example, routed there by name)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.runner.test_proxy import dial, entry, eventually, read_all, read_head
from tests.worker.runner.tls import TlsOrigin, records, tls_origin
from worker.runner import box
from worker.runner.proxy import EgressProxy

ALLOWED = "allowed.example"


@pytest.fixture
def sock_path() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="bt-", dir="/tmp")  # AF_UNIX paths stop at 107 bytes
    yield Path(directory) / "proxy.sock"
    shutil.rmtree(directory)


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[TlsOrigin]:
    """Serves allowed.example and other.example (one CDN front), and counts what reaches it."""
    with tls_origin(tmp_path, [ALLOWED, "other.example"]) as server:
        yield server


@contextlib.contextmanager
def proxy(sock_path: Path, origin: TlsOrigin, **kwargs: Any) -> Iterator[EgressProxy]:
    routes = {ALLOWED: ("127.0.0.1", origin.port)}
    with EgressProxy(sock_path, allow=[ALLOWED], routes=routes, **kwargs) as running:
        yield running


def connected(sock_path: Path, host: str = ALLOWED) -> socket.socket:
    sock = dial(sock_path)
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    status, _, rest = read_head(sock)
    assert (status, rest) == (200, b"")
    return sock


def client(origin: TlsOrigin, verify: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(origin.cert))
    if not verify:  # a fronting client asks for another name; the certificate is beside the point
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def test_a_handshake_for_the_connect_host_gets_through(sock_path: Path, origin: TlsOrigin) -> None:
    with proxy(sock_path, origin) as running:
        with client(origin).wrap_socket(connected(sock_path), server_hostname=ALLOWED) as tls:
            tls.sendall(b"hello\n")
            assert tls.recv(100) == b"echo: hello\n"
        logged = entry(running, ALLOWED, 443, True)
    assert (origin.connections, origin.names, origin.lines) == (1, [ALLOWED], [b"hello\n"])
    assert logged["connections"] == 1
    assert logged["bytes_up"] > 200  # the hello and what followed it
    assert "sni" not in logged


def test_a_hello_in_several_records_and_reads_gets_through(sock_path: Path, origin: TlsOrigin) -> None:
    """The client's first flight re-cut into TLS records of 1, 50 and 100 bytes, sent in 7-byte
    writes: legal TLS, which the proxy and the server both reassemble."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client(origin).wrap_bio(incoming, outgoing, server_hostname=ALLOWED)
    with proxy(sock_path, origin) as running, connected(sock_path) as sock:
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        split = records(hello[5:], [1, 50, 100])
        for at in range(0, len(split), 7):
            sock.sendall(split[at : at + 7])
        for _ in range(10):  # the rest of the handshake, as Python's client drives it
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        sock.sendall(outgoing.read())
        tls.write(b"in pieces\n")
        sock.sendall(outgoing.read())
        answer = b""
        while not answer.endswith(b"\n"):
            incoming.write(sock.recv(65536))
            with contextlib.suppress(ssl.SSLWantReadError):
                answer += tls.read(100)
        assert answer == b"echo: in pieces\n"
        assert entry(running, ALLOWED, 443, True)["connections"] == 1
    assert origin.names == [ALLOWED]


def test_a_handshake_for_another_name_is_refused_before_the_origin(
    sock_path: Path, origin: TlsOrigin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="baton.proxy")
    with proxy(sock_path, origin) as running, connected(sock_path) as sock:
        with pytest.raises(ssl.SSLError, match="ACCESS_DENIED"):
            client(origin, verify=False).wrap_socket(sock, server_hostname="other.example")
        assert entry(running, ALLOWED, 443, False) == {
            "host": ALLOWED, "port": 443, "allowed": False, "connections": 1, "bytes_up": 0,
            "bytes_down": 0, "reasons": {"sni-mismatch": 1}, "sni": {"other.example": 1},
        }  # fmt: skip
    assert origin.connections == 0
    assert (
        "CONNECT allowed.example:443 refused (sni-mismatch), TLS server name 'other.example'" in caplog.text
    )


def test_a_handshake_without_a_server_name_is_refused(sock_path: Path, origin: TlsOrigin) -> None:
    with proxy(sock_path, origin) as running, connected(sock_path) as sock:
        with pytest.raises(ssl.SSLError, match="ACCESS_DENIED"):
            client(origin, verify=False).wrap_socket(sock, server_hostname=None)
        logged = entry(running, ALLOWED, 443, False)
    assert logged["reasons"] == {"sni-missing": 1}
    assert "sni" not in logged
    assert origin.connections == 0


def test_plain_http_inside_a_tunnel_is_refused_and_told_so(sock_path: Path, origin: TlsOrigin) -> None:
    """Plain HTTP in a tunnel would carry its own Host (any site behind the front): refused."""
    with proxy(sock_path, origin) as running, connected(sock_path) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: other.example\r\n\r\n")
        answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert answer.endswith(b"allowed.example:443 (not-tls)\n")
        assert entry(running, ALLOWED, 443, False)["reasons"] == {"not-tls": 1}
    assert (origin.connections, origin.raw) == (0, [])


def test_a_hello_that_does_not_come_is_cut_off(sock_path: Path, origin: TlsOrigin) -> None:
    with proxy(sock_path, origin, head_timeout=0.3) as running:
        started = time.monotonic()
        with connected(sock_path) as silent, connected(sock_path) as halfway:
            halfway.sendall(b"\x16\x03\x01\x02\x00\x01")
            assert read_all(silent) == read_all(halfway) == b""
        assert time.monotonic() - started < 5
        assert entry(running, ALLOWED, 443, False)["reasons"] == {"client-hello-timeout": 2}
        with connected(sock_path) as quitter:
            quitter.sendall(b"\x16\x03\x01")
            quitter.shutdown(socket.SHUT_WR)
            assert read_all(quitter) == b""
        eventually(lambda: running.active_connections == 0)
        assert entry(running, ALLOWED, 443, False)["reasons"] == {
            "client-hello-timeout": 2, "client-hello-incomplete": 1
        }  # fmt: skip
    assert origin.connections == 0


def test_a_connect_to_the_gateway_still_carries_plain_http(sock_path: Path) -> None:
    """The model gateway's in-box address is served over plain HTTP: a CLI that ignores NO_PROXY
    and tunnels to it is handed to the gateway's socket unchecked, as before, and not logged."""
    gateway_sock = sock_path.with_name("gateway.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(gateway_sock))
    server.listen()

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    door = (("127.0.0.1", 3129), gateway_sock)
    try:
        with EgressProxy(sock_path, allow=[], gateway=door) as running, dial(sock_path) as sock:
            sock.sendall(b"CONNECT 127.0.0.1:3129 HTTP/1.1\r\n\r\n")
            assert read_head(sock)[::2] == (200, b"")
            sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock) == b"POST /anthropic/v1/messages HTTP/1.1\r\n\r\n"
            assert running.log.to_data() == []
    finally:
        thread.join(5)
        server.close()


#: An agent in the box: a tunnel to allowed.example, then a TLS handshake for the name it is given.
FRONTING = """import socket, ssl, sys
for name in sys.argv[1:]:
    sock = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    sock.sendall(b"CONNECT allowed.example:443 HTTP/1.1\\r\\n\\r\\n")
    head = b""
    while not head.endswith(b"\\r\\n\\r\\n"):
        head += sock.recv(1)
    context = ssl.create_default_context(cafile="/workspace/cert.pem")
    context.check_hostname = False
    try:
        with context.wrap_socket(sock, server_hostname=name) as tls:
            tls.sendall(b"hello\\n")
            print(name, tls.recv(100).decode().strip())
    except ssl.SSLError as exc:
        print(name, "refused", exc.reason)
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed here")
def test_an_agent_in_the_box_cannot_front_another_name(
    sock_path: Path, origin: TlsOrigin, dirs: tuple[Path, Path]
) -> None:
    """The box's own way out (its forwarder to the proxy's socket), an agent's own TLS client."""
    (dirs[0] / "cert.pem").write_bytes(origin.cert.read_bytes())
    (dirs[0] / "front.py").write_text(FRONTING)
    argv = ["/usr/bin/python3", "-I", "/workspace/front.py", ALLOWED, "other.example"]
    with proxy(sock_path, origin) as running:
        done = box.run(box.BoxSpec(argv=argv, workspace=dirs[0], home=dirs[1], network="proxy",
                                   proxy_socket=sock_path, timeout_s=60))  # fmt: skip
        log = running.log.to_data()
    assert done.stdout.decode().splitlines() == [
        "allowed.example echo: hello", "other.example refused TLSV1_ALERT_ACCESS_DENIED"
    ], done.stderr  # fmt: skip
    assert origin.names == [ALLOWED]
    assert [(e["host"], e["allowed"], e["reasons"], e.get("sni")) for e in log] == [
        (ALLOWED, False, {"sni-mismatch": 1}, {"other.example": 1}), (ALLOWED, True, {}, None)
    ]  # fmt: skip
