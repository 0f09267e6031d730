"""Real TLS for the proxy's tests: ClientHellos from Python's own client, a self-signed loopback
server, and a small builder of hellos Python's client would never send (several records, huge,
two names)."""

from __future__ import annotations

import contextlib
import datetime
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def client_hello(name: str | None) -> bytes:
    """The first flight of Python's TLS client for ``name`` (``None``: no server name at all)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=name)
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server: the hello is out
        tls.do_handshake()
    return outgoing.read()


def self_signed(directory: Path, names: Sequence[str]) -> tuple[Path, Path]:
    """A certificate for ``names`` and its key, as files (what ``SSLContext.load_cert_chain`` reads)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@dataclass
class TlsOrigin:
    """A loopback TLS server that answers every line with ``echo: <line>``, and what it saw."""

    port: int
    cert: Path
    connections: int = 0
    #: Bytes received before the TLS handshake, or the first bytes of a connection that was not TLS.
    raw: list[bytes] = field(default_factory=list)
    #: Server names the handshakes asked for.
    names: list[str | None] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)


@contextlib.contextmanager
def tls_origin(directory: Path, names: Sequence[str]) -> Iterator[TlsOrigin]:
    cert, key = self_signed(directory, names)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    origin = TlsOrigin(port=int(listener.getsockname()[1]), cert=cert)
    stop = threading.Event()

    def sni(_: ssl.SSLObject | ssl.SSLSocket, name: str | None, __: ssl.SSLContext) -> None:
        origin.names.append(name)

    context.sni_callback = sni

    def one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                peek = conn.recv(5, socket.MSG_PEEK)
                if peek[:1] != b"\x16":
                    origin.raw.append(conn.recv(65536))
                    return
                with context.wrap_socket(conn, server_side=True) as tls:
                    reader = tls.makefile("rb")
                    while line := reader.readline():
                        origin.lines.append(line)
                        tls.sendall(b"echo: " + line)
            except (OSError, ssl.SSLError):
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            origin.connections += 1
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield origin
    finally:
        stop.set()
        thread.join(5)
        listener.close()


# -- hellos built by hand ----------------------------------------------------------------------------


def _vector(data: bytes, length_bytes: int) -> bytes:
    return len(data).to_bytes(length_bytes, "big") + data


def extension(kind: int, data: bytes) -> bytes:
    return kind.to_bytes(2, "big") + _vector(data, 2)


def server_name(*names: bytes, name_type: int = 0) -> bytes:
    """A server_name extension listing ``names`` (RFC 6066 §3)."""
    return extension(0, _vector(b"".join(bytes([name_type]) + _vector(n, 2) for n in names), 2))


def hello_message(*extensions: bytes, session: bytes = b"\0" * 32, bare: bool = False) -> bytes:
    """A ClientHello handshake message (header included) with these extensions, in this order
    (``bare``: not even the extensions' length, as TLS 1.2 allows)."""
    body = b"\x03\x03" + b"\x11" * 32 + _vector(session, 1) + _vector(b"\x13\x01\x13\x02", 2) + b"\x01\x00"
    body += b"" if bare else _vector(b"".join(extensions), 2)
    return b"\x01" + len(body).to_bytes(3, "big") + body


def records(message: bytes, sizes: Sequence[int] = ()) -> bytes:
    """``message`` in TLS handshake records, cut after each of ``sizes`` bytes (then 16 KiB each)."""
    out, at = b"", 0
    cuts = iter(sizes)
    while at < len(message):
        size = next(cuts, 16384)
        out += b"\x16\x03\x01" + _vector(message[at : at + size], 2)
        at += size
    return out
