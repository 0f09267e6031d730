"""Real Redis topologies on loopback for the tests, the drills and the benchmarks: a primary, its
replicas and the Sentinels that watch them, each a `redis-server` process of its own.

Sentinel is told to act fast (a primary is down after ``DOWN_AFTER_MS``), so a failover takes a
second or two rather than Sentinel's default half-minute. Ports are chosen free and taken by the
server itself; a server that finds its port taken meanwhile is started again on another.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from baton.redis_server import free_port, server_binary

SERVICE = "baton-primary"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_S = 20.0


@dataclass
class Node:
    """One redis-server (a data node or a Sentinel), restartable on its own port and directory."""

    directory: Path
    sentinel: bool = False
    password: str | None = None
    lines: list[str] = field(default_factory=list)  # the configuration, beyond port and dir
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def client(self, timeout: float = 2.0) -> redis.Redis:
        password = None if self.sentinel else self.password
        return redis.Redis("127.0.0.1", self.port, password=password, socket_timeout=timeout,
                           socket_connect_timeout=timeout)  # fmt: skip

    def start(self) -> None:
        """Start (or start again, on the same port once it has one) and wait until it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not self.port  # a node started before keeps its port (replicas and Sentinels know it)
        for _ in range(3 if fresh else 1):
            if fresh:
                self.port = free_port()
            config = self.directory / ("sentinel.conf" if self.sentinel else "redis.conf")
            if not self.sentinel or not config.exists():  # a Sentinel rewrites its own file: keep it
                body = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.directory}", "save ''",
                        "appendonly yes", "appendfsync everysec", *self.lines]  # fmt: skip
                if self.sentinel:
                    body = [f"port {self.port}", "bind 127.0.0.1", f"dir {self.directory}", *self.lines]
                config.write_text("\n".join(body) + "\n")
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


@dataclass
class Topology:
    """A primary, ``replicas`` replicas of it and ``sentinels`` Sentinels watching it (quorum 2)."""

    directory: Path
    replicas: int = 2
    sentinels: int = 3
    password: str | None = None
    data: list[Node] = field(default_factory=list)
    watchers: list[Node] = field(default_factory=list)

    def start(self) -> Topology:
        auth = [f"requirepass {self.password}", f"masterauth {self.password}"] if self.password else []
        primary = Node(self.directory / "node-0", password=self.password, lines=list(auth))
        primary.start()
        self.data = [primary]
        for n in range(self.replicas):
            replica = Node(self.directory / f"node-{n + 1}", password=self.password,
                           lines=[*auth, f"replicaof 127.0.0.1 {primary.port}"])  # fmt: skip
            replica.start()
            self.data.append(replica)
        self.wait_replicas(self.replicas)
        for n in range(self.sentinels):
            lines = [f"sentinel monitor {SERVICE} 127.0.0.1 {primary.port} {min(2, self.sentinels)}",
                     f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                     f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                     f"sentinel parallel-syncs {SERVICE} {max(1, self.replicas)}"]  # fmt: skip
            if self.password:
                lines.append(f"sentinel auth-pass {SERVICE} {self.password}")
            watcher = Node(self.directory / f"sentinel-{n}", sentinel=True, lines=lines)
            watcher.start()
            self.watchers.append(watcher)
        self.wait_for(
            lambda: all(self._sees_all(w) for w in self.watchers), 30, "the Sentinels to see every node"
        )
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
        hosts = ",".join(f"127.0.0.1:{w.port}" for w in self.watchers)
        auth = f":{self.password}@" if self.password else ""
        return f"redis+sentinel://{auth}{hosts}/{SERVICE}/0"

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

    def direct_client(self) -> redis.Redis:
        return self.primary().client()

    def wait_replicas(self, count: int, timeout: float = 30) -> None:
        def synced() -> bool:
            client = self.data[0].client() if not self.watchers else self.direct_client()
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
            if node is old:
                return False
            client = node.client()
            try:
                return client.info("replication").get("role") == "master"
            except redis.RedisError:
                return False
            finally:
                client.close()

        self.wait_for(promoted, timeout, "Sentinel to promote a replica")
        return self.primary()

    @staticmethod
    def wait_for(predicate: object, timeout: float, what: str) -> None:
        assert callable(predicate)
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
    directory: Path, *, replicas: int = 2, sentinels: int = 3, password: str | None = None
) -> Iterator[Topology]:
    setup = Topology(directory, replicas=replicas, sentinels=sentinels, password=password)
    try:
        yield setup.start()
    finally:
        setup.stop()
