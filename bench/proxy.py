"""Egress proxy: throughput through CONNECT, and the latency it adds per request and per tunnel.

Three processes, as in a run: the proxy as Baton runs it (a thread in this process), an
origin (blocking sockets, a thread per connection) and a client standing in for the agent
in its box. Every figure is measured both through the proxy (UNIX socket, routed hosts)
and directly against the origin, by the same client. Each stream opens with a real TLS
ClientHello for its host (the proxy checks its name before it connects the tunnel); the origin
skips that record and then speaks plain bytes, so the figures are the proxy's, not TLS's.

    .venv/bin/python bench/proxy.py [--mib 512] [--requests 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.runner.proxy import EgressProxy

STREAM_HOST = "stream.bench.example"
HTTP_HOST = "http.bench.example"
_BLOCK = memoryview(os.urandom(1 << 20))
_HTTP_BODY = b"ok\n" * 100
_HTTP_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
    len(_HTTP_BODY),
    _HTTP_BODY,
)


def client_hello(host: str) -> bytes:
    """The first flight of Python's own TLS client for ``host``: what an agent's tunnel starts with."""
    context = ssl.create_default_context()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer: enough
        tls.do_handshake()
    return outgoing.read()


# -- the origin (a child process) -------------------------------------------------------------------


def _skip_record(conn: socket.socket) -> None:
    """Read and drop the client's TLS record (its ClientHello)."""
    header = b""
    while len(header) < 5 and (chunk := conn.recv(5 - len(header))):
        header += chunk
    left = int.from_bytes(header[3:5], "big") if len(header) == 5 else 0
    while left > 0 and (chunk := conn.recv(left)):
        left -= len(chunk)


def _origin_stream(conn: socket.socket) -> None:
    """A ClientHello, one line (`SEND n`, `RECV n` or `ECHO`), then bytes."""
    with conn:
        _skip_record(conn)
        line = b""
        while not line.endswith(b"\n") and (byte := conn.recv(1)):
            line += byte
        command, _, arg = line.decode().strip().partition(" ")
        if command == "SEND":
            left = int(arg)
            while left > 0:
                left -= conn.send(_BLOCK[: min(left, len(_BLOCK))])
        elif command == "RECV":
            left, buffer = int(arg), bytearray(1 << 20)
            while left > 0 and (n := conn.recv_into(buffer)):
                left -= n
            conn.sendall(b"OK\n")
        elif command == "ECHO":
            while data := conn.recv(65536):
                conn.sendall(data)


def _origin_http(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        conn.sendall(_HTTP_ANSWER)


def _listen(handler: Callable[[socket.socket], None]) -> int:
    server = socket.create_server(("127.0.0.1", 0), backlog=512)

    def loop() -> None:
        while True:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    port: int = server.getsockname()[1]
    return port


def origin_main() -> None:
    print(json.dumps({"stream": _listen(_origin_stream), "http": _listen(_origin_http)}), flush=True)
    sys.stdin.read()  # until the parent goes away


# -- the client ---------------------------------------------------------------------------------------


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the head ended")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(head.decode(errors="replace"))
    return rest


_HELLO = client_hello(STREAM_HOST)


def _stream(proxy: Path | None, port: int) -> socket.socket:
    """A byte stream to the origin's stream port, its ClientHello sent: a tunnel, or direct TCP."""
    if proxy is None:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(proxy))
        sock.sendall(f"CONNECT {STREAM_HOST}:443 HTTP/1.1\r\nHost: {STREAM_HOST}:443\r\n\r\n".encode())
        if _read_head(sock):
            raise ConnectionError("unexpected bytes after the 200")
    sock.sendall(_HELLO)
    return sock


def tunnel_setup(proxy: Path | None, port: int) -> float:
    """Seconds from a new connection to the first byte back after the ClientHello."""
    started = time.perf_counter()
    with _stream(proxy, port) as sock:
        sock.sendall(b"ECHO\nx")
        if sock.recv(1) != b"x":
            raise ConnectionError("no echo")
    return time.perf_counter() - started


def download(proxy: Path | None, port: int, size: int) -> float:
    buffer = bytearray(1 << 20)
    with _stream(proxy, port) as sock:
        started = time.perf_counter()
        sock.sendall(f"SEND {size}\n".encode())
        left = size
        while left > 0:
            n = sock.recv_into(buffer)
            if not n:
                raise ConnectionError("short download")
            left -= n
        return size / (time.perf_counter() - started) / 1e6


def upload(proxy: Path | None, port: int, size: int) -> float:
    with _stream(proxy, port) as sock:
        started = time.perf_counter()
        sock.sendall(f"RECV {size}\n".encode())
        left = size
        while left > 0:
            left -= sock.send(_BLOCK[: min(left, len(_BLOCK))])
        if sock.recv(3) != b"OK\n":
            raise ConnectionError("short upload")
        return size / (time.perf_counter() - started) / 1e6


def get(proxy: Path | None, port: int) -> float:
    """One GET on a new connection (absolute-form through the proxy), seconds until the answer ends."""
    started = time.perf_counter()
    if proxy is None:
        sock = socket.create_connection(("127.0.0.1", port))
        request = f"GET /ping HTTP/1.1\r\nHost: {HTTP_HOST}\r\n\r\n".encode()
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(proxy))
        request = f"GET http://{HTTP_HOST}/ping HTTP/1.1\r\nHost: {HTTP_HOST}\r\n\r\n".encode()
    with sock:
        sock.sendall(request)
        received = 0
        while chunk := sock.recv(65536):
            received += len(chunk)
    if received != len(_HTTP_ANSWER):
        raise ConnectionError(f"answer of {received} bytes")
    return time.perf_counter() - started


def round_trips(proxy: Path | None, port: int, count: int) -> list[float]:
    """64-byte round trips in one open stream (the tunnel already established)."""
    times = []
    with _stream(proxy, port) as sock:
        sock.sendall(b"ECHO\n")
        ping = b"p" * 64
        for _ in range(count):
            started = time.perf_counter()
            sock.sendall(ping)
            got = 0
            while got < len(ping):
                got += len(sock.recv(64 - got))
            times.append(time.perf_counter() - started)
    return times


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def client_main(path: Path, ports: dict[str, int], size: int, requests: int, repeat: int) -> None:
    """Every measurement, from a process of its own (as the agent in its box is)."""
    figures: dict[str, object] = {}
    for name, run in (("download", download), ("upload", upload)):
        for via, target in (("direct", None), ("proxy", path)):
            rates = [run(target, ports["stream"], size) for _ in range(repeat)]
            print(f"{name:8} {via:6} MB/s: " + ", ".join(f"{r:,.0f}" for r in rates), flush=True)
            figures[f"{name}_{via}_mb_s"] = [round(r) for r in rates]
    direct = round_trips(None, ports["stream"], requests)
    proxied = round_trips(path, ports["stream"], requests)
    figures["round_trip"] = _latency("round trip in an open tunnel (64 B)", direct, proxied)
    for _ in range(100):  # warm-up
        tunnel_setup(None, ports["stream"]), tunnel_setup(path, ports["stream"])
    direct, proxied = [], []
    for _ in range(requests):
        direct.append(tunnel_setup(None, ports["stream"]))
        proxied.append(tunnel_setup(path, ports["stream"]))
    figures["tunnel"] = _latency("tunnel set-up to first byte (CONNECT, ClientHello)", direct, proxied)
    for _ in range(100):  # warm-up
        get(None, ports["http"]), get(path, ports["http"])
    direct, proxied = [], []
    for _ in range(requests):
        direct.append(get(None, ports["http"]))
        proxied.append(get(path, ports["http"]))
    figures["get"] = _latency("GET on a new connection (absolute-form)", direct, proxied)
    print(json.dumps({"mib": size >> 20, "requests": requests, "repeat": repeat, **figures}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=512, help="bytes per throughput run, in MiB")
    parser.add_argument("--requests", type=int, default=2000, help="requests per latency case")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per case")
    parser.add_argument("--origin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the proxy's socket, then --ports
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        origin_main()
        return
    if args.client:
        client_main(Path(args.client), json.loads(args.ports), args.mib << 20, args.requests, args.repeat)
        return

    python = sys.version.split()[0]
    print(f"load average before: {os.getloadavg()[0]:.2f}, cpus: {os.cpu_count()}, python {python}")
    origin = subprocess.Popen(
        [sys.executable, __file__, "--origin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    if origin.stdout is None or origin.stdin is None:
        raise RuntimeError("no pipes to the origin")
    ports = json.loads(origin.stdout.readline())
    directory = tempfile.mkdtemp(prefix="baton-bench-")
    path = Path(directory) / "proxy.sock"
    routes = {STREAM_HOST: ("127.0.0.1", ports["stream"]), HTTP_HOST: ("127.0.0.1", ports["http"])}
    try:
        with EgressProxy(path, allow=list(routes), routes=routes) as proxy:
            client = [sys.executable, __file__, "--client", str(path), "--ports", json.dumps(ports)]
            client += ["--mib", str(args.mib), "--requests", str(args.requests), "--repeat", str(args.repeat)]
            subprocess.run(client, check=True)
            entries = proxy.log.to_data()
        print("egress log:", [(e["host"], e["port"], e["connections"], e["bytes_down"]) for e in entries])
    finally:
        origin.stdin.close()
        origin.terminate()
        origin.wait(10)
        os.rmdir(directory)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _latency(name: str, direct: list[float], proxied: list[float]) -> dict[str, float]:
    d50, p50 = statistics.median(direct), statistics.median(proxied)
    d99, p99 = _pct(direct, 0.99), _pct(proxied, 0.99)
    print(f"{name}: direct p50 {d50 * 1e6:.0f} µs p99 {d99 * 1e6:.0f} µs; proxy p50 {p50 * 1e6:.0f} µs "
          f"p99 {p99 * 1e6:.0f} µs; added p50 {(p50 - d50) * 1e6:.0f} µs")  # fmt: skip
    found = {"direct_p50_us": d50, "direct_p99_us": d99, "proxy_p50_us": p50, "proxy_p99_us": p99}
    return {k: round(v * 1e6) for k, v in found.items()}


if __name__ == "__main__":
    main()
