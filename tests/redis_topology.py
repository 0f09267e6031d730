"""Real Redis topologies on loopback for the tests, the drills and the benchmarks: a primary, its
replicas and the Sentinels that watch them, each a `redis-server` process of its own.

Sentinel is told to act fast (a primary is down after ``DOWN_AFTER_MS``), so a failover takes a
second or two rather than Sentinel's default half-minute. Ports are chosen free; a node that loses
its fresh port to another process meanwhile is started again on another. Optionally the data nodes
log in with an ACL user, the Sentinels have a password of their own, and everything speaks TLS
(a CA made for the run: ``make_certs``).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from baton.redis_server import free_port, server_binary

SERVICE = "baton-primary"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_S = 20.0


@dataclass(frozen=True)
class Security:
    """How the nodes are reached: an ACL user (or the default user) with a password, a password of
    the Sentinels' own, and TLS with the certificates in ``tls`` (see ``make_certs``)."""

    user: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    tls: Path | None = None

    def client_kwargs(self, *, sentinel: bool) -> dict[str, object]:
        found: dict[str, object] = {}
        if sentinel:
            if self.sentinel_password:
                found["password"] = self.sentinel_password
        else:
            if self.user:
                found["username"] = self.user
            if self.password:
                found["password"] = self.password
        if self.tls is not None:
            found.update(ssl=True, ssl_ca_certs=str(self.tls / "ca.crt"))
        return found

    def node_lines(self) -> list[str]:
        lines = []
        if self.user:
            lines += [f"user {self.user} on >{self.password} ~* &* +@all", "user default off",
                      f"masteruser {self.user}", f"masterauth {self.password}"]  # fmt: skip
        elif self.password:
            lines += [f"requirepass {self.password}", f"masterauth {self.password}"]
        return lines + self._tls_lines()

    def sentinel_lines(self) -> list[str]:
        lines = []
        if self.user:
            lines.append(f"sentinel auth-user {SERVICE} {self.user}")
        if self.password:
            lines.append(f"sentinel auth-pass {SERVICE} {self.password}")
        if self.sentinel_password:
            lines += [
                f"requirepass {self.sentinel_password}",
                f"sentinel sentinel-pass {self.sentinel_password}",
            ]
        return lines + self._tls_lines()

    def _tls_lines(self) -> list[str]:
        if self.tls is None:
            return []
        files = [f"tls-cert-file {self.tls / 'server.crt'}", f"tls-key-file {self.tls / 'server.key'}",
                 f"tls-ca-cert-file {self.tls / 'ca.crt'}"]  # fmt: skip
        return [*files, "tls-replication yes", "tls-auth-clients no"]


def make_certs(directory: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 and localhost, made now (never committed)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "baton test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    (directory / "ca.crt").write_bytes(ca.public_bytes(pem))
    (directory / "server.crt").write_bytes(cert.public_bytes(pem))
    (directory / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return directory


@dataclass
class Node:
    """One redis-server (a data node or a Sentinel), restartable on its own port and directory."""

    directory: Path
    sentinel: bool = False
    security: Security = field(default_factory=Security)
    lines: list[str] = field(default_factory=list)  # the configuration, beyond port, dir and security
    #: Where other hosts reach it (a bridge's address, ``tests.hosts``); it listens there and on loopback.
    address: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def client(self, timeout: float = 2.0) -> redis.Redis:
        extra = self.security.client_kwargs(sentinel=self.sentinel)
        return redis.Redis("127.0.0.1", self.port, socket_timeout=timeout, socket_connect_timeout=timeout,
                           **extra)  # type: ignore[arg-type]  # fmt: skip

    def start(self) -> None:
        """Start (or start again, on the same port once it has one) and wait until it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not self.port  # a node started before keeps its port (replicas and Sentinels know it)
        for _ in range(3 if fresh else 1):
            if fresh:
                self.port = free_port()
            config = self.directory / ("sentinel.conf" if self.sentinel else "redis.conf")
            if fresh or not self.sentinel:  # a Sentinel rewrites its own file as it learns: keep it
                tls = self.security.tls is not None
                listen = [f"port {0 if tls else self.port}"] + ([f"tls-port {self.port}"] if tls else [])
                bind = "127.0.0.1" if self.address == "127.0.0.1" else f"127.0.0.1 {self.address}"
                announce = "sentinel announce-ip" if self.sentinel else "replica-announce-ip"
                announce = f"{announce} {self.address}"
                body = [*listen, f"bind {bind}", f"dir {self.directory}", announce]
                if not self.sentinel:
                    body += ["save ''", "appendonly yes", "appendfsync everysec", *self.security.node_lines()]
                else:
                    body += self.security.sentinel_lines()
                config.write_text("\n".join([*body, *self.lines]) + "\n")
            argv = [server_binary(), str(config)] + (["--sentinel"] if self.sentinel else [])
            with (self.directory / "server.log").open("ab") as out:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=out)
            if self._ready():
                return
            self.kill()
        raise RuntimeError(f"redis-server did not start: {self.log()[-1500:]}")

    def _ready(self) -> bool:
        client = self.client(timeout=0.5)
        deadline = time.monotonic() + START_S
        try:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    return False
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    if client.ping():
                        return True
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no fsync, no goodbye to replicas or clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=20)
        self.proc = None

    def freeze(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def role(self) -> str | None:
        client = self.client(timeout=1.0)
        try:
            return str(client.info("replication").get("role"))
        except redis.RedisError:
            return None
        finally:
            client.close()


@dataclass
class Topology:
    """A primary, ``replicas`` replicas of it and ``sentinels`` Sentinels watching it (quorum 2)."""

    directory: Path
    replicas: int = 2
    sentinels: int = 3
    security: Security = field(default_factory=Security)
    #: The address every node is known by (``Node.address``); other hosts reach the topology there.
    address: str = "127.0.0.1"
    data: list[Node] = field(default_factory=list)
    watchers: list[Node] = field(default_factory=list)

    def start(self) -> Topology:
        primary = Node(self.directory / "node-0", security=self.security, address=self.address)
        primary.start()
        self.data = [primary]
        for n in range(self.replicas):
            replica = Node(self.directory / f"node-{n + 1}", security=self.security, address=self.address,
                           lines=[f"replicaof {self.address} {primary.port}"])  # fmt: skip
            replica.start()
            self.data.append(replica)
        self.wait_replicas(self.replicas)
        for n in range(self.sentinels):
            lines = [f"sentinel monitor {SERVICE} {self.address} {primary.port} {min(2, self.sentinels)}",
                     f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                     f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                     f"sentinel parallel-syncs {SERVICE} {max(1, self.replicas)}"]  # fmt: skip
            where = self.directory / f"sentinel-{n}"
            watcher = Node(where, sentinel=True, security=self.security, lines=lines, address=self.address)
            watcher.start()
            self.watchers.append(watcher)
        everyone = "the Sentinels to see every node"
        self.wait_for(lambda: all(self._sees_all(w) for w in self.watchers), 30, everyone)
        return self

    def _sees_all(self, watcher: Node) -> bool:
        client = watcher.client()
        try:
            replicas = client.sentinel_slaves(SERVICE)
            others = client.sentinel_sentinels(SERVICE)
        except redis.RedisError:
            return False
        finally:
            client.close()
        return len(replicas) >= self.replicas and len(others) >= self.sentinels - 1

    @property
    def url(self) -> str:
        """REDIS_URL for Baton: the Sentinel set, the data nodes' login, the Sentinels' own."""
        sec = self.security
        hosts = ",".join(f"{self.address}:{w.port}" for w in self.watchers)
        auth = ""
        if sec.password:
            auth = f"{quote(sec.user or '', safe='')}:{quote(sec.password, safe='')}@"
        query = []
        if sec.sentinel_password:
            query.append(f"sentinel_password={quote(sec.sentinel_password, safe='')}")
        if sec.tls is not None:
            query.append(f"ssl_ca_certs={quote(str(sec.tls / 'ca.crt'), safe='/')}")
        scheme = "rediss+sentinel" if sec.tls is not None else "redis+sentinel"
        return f"{scheme}://{auth}{hosts}/{SERVICE}/0" + ("?" + "&".join(query) if query else "")

    def primary(self) -> Node:
        """The node the Sentinels name as primary now (asking each until one answers)."""
        for watcher in self.watchers:
            if not watcher.alive:
                continue
            client = watcher.client()
            try:
                _host, port = client.sentinel_get_master_addr_by_name(SERVICE)
            except (redis.RedisError, TypeError):
                continue
            finally:
                client.close()
            for node in self.data:
                if node.port == int(port):
                    return node
        raise RuntimeError("no Sentinel names a primary")

    def wait_replicas(self, count: int, timeout: float = 30) -> None:
        """Until the primary has ``count`` replicas online."""

        def synced() -> bool:
            node = self.data[0] if not self.watchers else self.primary()
            client = node.client()
            try:
                info = client.info("replication")
            except redis.RedisError:
                return False
            finally:
                client.close()
            online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            return sum(1 for v in online if v.get("state") == "online") >= count

        self.wait_for(synced, timeout, f"{count} replicas in sync")

    def wait_failover(self, old: Node, timeout: float = 30) -> Node:
        """Wait until the Sentinels name a primary other than ``old`` and it takes writes."""

        def promoted() -> bool:
            try:
                node = self.primary()
            except RuntimeError:
                return False
            return node is not old and node.role() == "master"

        self.wait_for(promoted, timeout, "Sentinel to promote a replica")
        return self.primary()

    @staticmethod
    def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in [*self.watchers, *self.data]:
            node.kill()


@contextlib.contextmanager
def topology(
    directory: Path,
    *,
    replicas: int = 2,
    sentinels: int = 3,
    security: Security | None = None,
    address: str = "127.0.0.1",
) -> Iterator[Topology]:
    setup = Topology(directory, replicas=replicas, sentinels=sentinels, security=security or Security(),
                     address=address)  # fmt: skip
    try:
        yield setup.start()
    finally:
        setup.stop()
