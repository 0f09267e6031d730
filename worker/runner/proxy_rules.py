"""What the egress proxy lets through, decided on plain data: no sockets, no clock.

Every byte the box sends is hostile input, so the request head is parsed
strictly and anything unusual is a 400 rather than a guess. The policy is
written about host *names*; an address in any spelling libc still accepts
(``127.1``, ``2130706433``, ``0x7f.1``, ``[::1]``) would step around it, so only
proper DNS names are ever considered, and names resolving to loopback,
private or link-local space are refused too (a name is not a licence to reach
the worker's own network or a cloud metadata endpoint).
"""

from __future__ import annotations

import enum
import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.runner import http1, tls_hello

#: Largest request head (request line and headers) accepted.
MAX_HEAD_BYTES = 16 * 1024
#: The only ports a host allowed by name may be reached on (routed hosts excepted).
ALLOWED_PORTS = frozenset({80, 443})


class Reason(enum.StrEnum):
    """Why a request did not get through: stable codes for the egress log."""

    # 400: the request never named a host the proxy could judge.
    BAD_REQUEST_LINE = "bad-request-line"
    NOT_ABSOLUTE_FORM = "not-absolute-form"
    UNSUPPORTED_SCHEME = "unsupported-scheme"
    BAD_TARGET = "bad-target"
    BAD_HEADER = "bad-header"
    HEAD_TOO_LARGE = "head-too-large"
    BAD_BODY_FRAMING = "bad-body-framing"
    # 408 / 503: nothing was judged either.
    HEAD_TIMEOUT = "head-timeout"
    BUSY = "too-many-connections"
    # 403: refused by policy.
    NOT_A_DNS_NAME = "not-a-dns-name"
    NOT_ALLOWED = "host-not-allowed"
    PORT_NOT_ALLOWED = "port-not-allowed"
    NON_PUBLIC_ADDRESS = "non-public-address"
    #: A model provider's host: model traffic goes through Baton's model gateway, never the proxy.
    MODEL_HOST = "model-host"
    # 502 / 504: allowed, but the origin could not be reached.
    DNS_FAILED = "dns-failed"
    CONNECT_FAILED = "connect-failed"
    CONNECT_TIMEOUT = "connect-timeout"
    # After a CONNECT's 200, before any connection to the origin: the tunnel's first bytes, judged.
    NOT_TLS = "not-tls"
    BAD_CLIENT_HELLO = "bad-client-hello"
    CLIENT_HELLO_TOO_LARGE = "client-hello-too-large"
    CLIENT_HELLO_TIMEOUT = "client-hello-timeout"
    CLIENT_HELLO_INCOMPLETE = "client-hello-incomplete"
    #: A ClientHello without a server name: the name the origin serves would be its own choice.
    SNI_MISSING = "sni-missing"
    #: A ClientHello for another name than the CONNECT's host (domain fronting, or ECH's outer name).
    SNI_MISMATCH = "sni-mismatch"


_BAD_REQUEST = (400, "Bad Request")
_FORBIDDEN = (403, "Forbidden")
STATUS: dict[Reason, tuple[int, str]] = {
    Reason.BAD_REQUEST_LINE: _BAD_REQUEST,
    Reason.NOT_ABSOLUTE_FORM: _BAD_REQUEST,
    Reason.UNSUPPORTED_SCHEME: _BAD_REQUEST,
    Reason.BAD_TARGET: _BAD_REQUEST,
    Reason.BAD_HEADER: _BAD_REQUEST,
    Reason.HEAD_TOO_LARGE: _BAD_REQUEST,
    Reason.BAD_BODY_FRAMING: _BAD_REQUEST,
    Reason.HEAD_TIMEOUT: (408, "Request Timeout"),
    Reason.BUSY: (503, "Service Unavailable"),
    Reason.NOT_A_DNS_NAME: _FORBIDDEN,
    Reason.NOT_ALLOWED: _FORBIDDEN,
    Reason.PORT_NOT_ALLOWED: _FORBIDDEN,
    Reason.NON_PUBLIC_ADDRESS: _FORBIDDEN,
    Reason.MODEL_HOST: _FORBIDDEN,
    Reason.DNS_FAILED: (502, "Bad Gateway"),
    Reason.CONNECT_FAILED: (502, "Bad Gateway"),
    Reason.CONNECT_TIMEOUT: (504, "Gateway Timeout"),
    # Sent inside the tunnel, and only to a client that speaks HTTP there (``not-tls``).
    Reason.NOT_TLS: _FORBIDDEN,
    Reason.BAD_CLIENT_HELLO: _BAD_REQUEST,
    Reason.CLIENT_HELLO_TOO_LARGE: _BAD_REQUEST,
    Reason.CLIENT_HELLO_TIMEOUT: (408, "Request Timeout"),
    Reason.CLIENT_HELLO_INCOMPLETE: _BAD_REQUEST,
    Reason.SNI_MISSING: _FORBIDDEN,
    Reason.SNI_MISMATCH: _FORBIDDEN,
}

#: Failures of requests the policy allowed (the log's ``allowed`` is true only for these and successes).
UNREACHABLE = frozenset({Reason.DNS_FAILED, Reason.CONNECT_FAILED, Reason.CONNECT_TIMEOUT})

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A last label that starts with a digit is how libc spells an address (``0x7f``, ``1``).
_TOP_LABEL = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")


def normalise_host(host: str) -> str:
    """Compare names as DNS does: case-insensitively, with the root's trailing dot optional."""
    host = host.lower()
    return host[:-1] if host.endswith(".") else host


def is_dns_name(host: str) -> bool:
    """A normalised host is a proper DNS name, and no spelling of an address."""
    if not host or len(host) > 253:
        return False
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or not _TOP_LABEL.fullmatch(labels[-1]):
        return False
    try:  # belt and braces: the label rules above already exclude these
        socket.inet_aton(host)
    except OSError:
        pass
    else:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True
    return False


def is_public(address: str) -> bool:
    """An address an allowed name may resolve to: globally routable, not loopback/private/metadata."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


_HELLO_PROBLEMS = {
    tls_hello.Problem.NOT_TLS: Reason.NOT_TLS,
    tls_hello.Problem.NOT_CLIENT_HELLO: Reason.BAD_CLIENT_HELLO,
    tls_hello.Problem.MALFORMED: Reason.BAD_CLIENT_HELLO,
    tls_hello.Problem.MANY_NAMES: Reason.BAD_CLIENT_HELLO,
    tls_hello.Problem.TOO_LARGE: Reason.CLIENT_HELLO_TOO_LARGE,
    tls_hello.Problem.NO_SNI: Reason.SNI_MISSING,
}


def judge_hello(host: str, found: tls_hello.Hello | tls_hello.Problem) -> Reason | None:
    """``None`` when a tunnel to ``host`` (normalised, a DNS name) opens with a ClientHello for it.

    Names compare as the proxy's host names do (case, a trailing dot), on the bytes as sent: an
    internationalised name is in its A-label form on both sides, and a server name that is not
    ASCII (or holds a NUL) matches nothing.
    """
    if isinstance(found, tls_hello.Problem):
        return _HELLO_PROBLEMS[found]
    try:
        name = found.server_name.decode("ascii")
    except UnicodeDecodeError:
        return Reason.SNI_MISMATCH
    return None if normalise_host(name) == host else Reason.SNI_MISMATCH


def shown_name(found: tls_hello.Hello | tls_hello.Problem) -> str | None:
    """The server name for the egress log: printable whatever bytes the client sent."""
    if isinstance(found, tls_hello.Problem):
        return None
    return tls_hello.printable(found.server_name)


@dataclass(frozen=True)
class Head:
    """A request head that parsed: what the client asked for, and how its body is framed."""

    connect: bool
    host: str  # normalised, not yet judged: it may be anything printable
    port: int
    method: str = "CONNECT"
    path: str = ""
    version: str = "HTTP/1.1"
    headers: tuple[tuple[str, str], ...] = ()
    content_length: int = 0
    chunked: bool = False

    def forwarded(self) -> bytes:
        """The head sent to the origin: origin-form, one ``Host`` from the URL, ``Connection: close``.

        The client's own ``Host`` is dropped (RFC 9112 §3.2.2): otherwise a request for an
        allowed name could ask a shared front end for any other site.
        """
        host = self.host if self.port == 80 else f"{self.host}:{self.port}"
        lines = [f"{self.method} {self.path} {self.version}", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_head(data: bytes) -> Head | Reason:
    """Parse a request head ending in CRLFCRLF: a ``Head``, or the reason it is a 400."""
    if len(data) > MAX_HEAD_BYTES:
        return Reason.HEAD_TOO_LARGE
    lines = data.decode("latin-1")[:-4].split("\r\n")
    line = http1.request_line(lines[0])
    if line is None:
        return Reason.BAD_REQUEST_LINE
    method, target, version = line
    headers = http1.fields(lines[1:])
    if headers is None:
        return Reason.BAD_HEADER
    if method == "CONNECT":
        authority = _authority(target, default_port=None)
        if isinstance(authority, Reason):
            return authority
        return Head(connect=True, host=authority[0], port=authority[1], version=version)
    if target.startswith("/") or target == "*":
        return Reason.NOT_ABSOLUTE_FORM
    scheme, sep, rest = target.partition("://")
    if not sep or not http1.TOKEN.fullmatch(scheme):
        return Reason.BAD_TARGET
    if scheme.lower() != "http":
        return Reason.UNSUPPORTED_SCHEME
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority = _authority(rest[:cut], default_port=80)
    if isinstance(authority, Reason):
        return authority
    path = rest[cut:].partition("#")[0]
    path = path if path.startswith("/") else "/" + path
    framing = http1.framing(headers)
    if framing is None:
        return Reason.BAD_BODY_FRAMING
    kept = http1.end_to_end(headers)
    return Head(connect=False, host=authority[0], port=authority[1], method=method, path=path,
                version=version, headers=kept, content_length=framing[0], chunked=framing[1])  # fmt: skip


def _authority(text: str, default_port: int | None) -> tuple[str, int] | Reason:
    if not text or "@" in text:  # userinfo has no business in a proxy request
        return Reason.BAD_TARGET
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return Reason.BAD_TARGET
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return Reason.BAD_TARGET
        port_text = rest[1:] if rest else None
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    else:
        host, port_text = text, None
    if not port_text:
        if default_port is None:
            return Reason.BAD_TARGET
        port = default_port
    elif port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        return Reason.BAD_TARGET
    if not host:
        return Reason.BAD_TARGET
    return normalise_host(host), port


@dataclass(frozen=True)
class Route:
    """Where an allowed request goes: a fixed address (a route), the name resolved by the proxy, or
    (``unix``) the model gateway's socket, for a client that sends its gateway requests through the
    proxy rather than straight to the gateway's address in the box."""

    host: str
    port: int
    address: tuple[str, int] | None
    unix: Path | None = None


@dataclass(frozen=True)
class Policy:
    """The hosts one run may reach, the few whose address is fixed instead of looked up, the model
    hosts no run reaches through the proxy, and where the model gateway is."""

    allow: frozenset[str]
    routes: Mapping[str, tuple[str, int]]
    model_hosts: frozenset[str] = frozenset()
    #: The gateway's address as the box sees it (``127.0.0.1:3129``), and its socket outside.
    gateway: tuple[tuple[str, int], Path] | None = None

    @classmethod
    def build(
        cls,
        allow: Iterable[str],
        routes: Mapping[str, tuple[str, int]] | None = None,
        *,
        model_hosts: Iterable[str] = (),
        gateway: tuple[tuple[str, int], Path] | None = None,
    ) -> Policy:
        """Validate the configuration once; a bad entry is a programming error (``ValueError``)."""
        hosts = set()
        for raw in allow:
            host = normalise_host(raw)
            if not is_dns_name(host):
                raise ValueError(f"allow: {raw!r} is not a DNS host name")
            hosts.add(host)
        fixed: dict[str, tuple[str, int]] = {}
        for raw, (ip, port) in (routes or {}).items():
            host = normalise_host(raw)
            if not is_dns_name(host):
                raise ValueError(f"routes: {raw!r} is not a DNS host name")
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"routes: {raw!r} -> {ip!r} is not an IP address") from None
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise ValueError(f"routes: {raw!r} -> port {port!r} is not a TCP port")
            fixed[host] = (ip, port)
        models = frozenset(normalise_host(h) for h in model_hosts)
        return cls(allow=frozenset(hosts), routes=fixed, model_hosts=models, gateway=gateway)

    def decide(self, host: str, port: int) -> Route | Reason:
        """The gateway first, then the name, model hosts, the allow-list, then the port; a route
        replaces DNS and the port rule.

        A route never grants access on its own: a routed host missing from ``allow`` is refused.
        A model host is refused even when an agent's ``egress`` lists it: the model channel has one
        door, the gateway, which holds the key and lets only inference through.
        """
        if self.gateway is not None and (host, port) == self.gateway[0]:
            return Route(host, port, None, unix=self.gateway[1])
        if not is_dns_name(host):
            return Reason.NOT_A_DNS_NAME
        if host in self.model_hosts:
            return Reason.MODEL_HOST
        if host not in self.allow:
            return Reason.NOT_ALLOWED
        if host in self.routes:
            return Route(host, port, self.routes[host])
        if port not in ALLOWED_PORTS:
            return Reason.PORT_NOT_ALLOWED
        return Route(host, port, None)
