"""Several "hosts" on one machine: each a network namespace of its own, for multi-host tests.

A ``Network`` makes a bridge in this (the root) namespace with an address of its own, the
*gateway*, and per host a namespace joined to the bridge by a veth pair, with its own address.
Processes started on a host (``Host.start``) see only that namespace's network, in the host's own
process group (a placeholder process holds the group and takes it down if the test process
dies), with a data directory of their own. Services the tests run on loopback (Redis, the GitHub
emulator) are made reachable from the hosts on the gateway's address by a forwarder process
(``tests.forwarder``) each: ``Network.reach(url)`` gives the URL a host uses. Traffic stays on
this machine: the bridge has no uplink.

Making namespaces needs root (CI runs as root on Debian) and ``ip`` (iproute2). Where they
cannot be made, ``network(...)`` skips the test and says why; there is no fallback.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.forwarder import Forwarder

#: Subnets are taken from here, one /24 per network (10.213.0.0/24 ... 10.213.255.0/24).
POOL = ipaddress.ip_network("10.213.0.0/16")
LOCK = Path(tempfile.gettempdir()) / "baton-hosts.lock"
NETNS_PREFIX = "baton-"
ALIAS_PREFIX = "baton-hosts "
#: A host's placeholder lives at most this long: it outlives no test by more than that.
MAX_LIFETIME_S = 3600
STOP_GRACE_S = 15.0
#: What a host's processes inherit of this one's environment (no proxy, no Baton setting).
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "VIRTUAL_ENV", "PYTHONPATH")

#: The placeholder: holds its host's process group; when the test process dies, kills the group.
_PLACEHOLDER = """
import os, signal, sys, time
parent, until = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < until:
    time.sleep(0.5)
os.killpg(0, signal.SIGKILL)
"""


class Unavailable(Exception):
    """Network namespaces cannot be made here; the message says why."""


def _ip(*args: str, netns: str | None = None) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise Unavailable(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


@functools.cache
def why_not() -> str | None:
    """Why namespaces cannot be made on this machine, or None if they can (probed once)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) on PATH"
    if os.geteuid() != 0:
        return "making network namespaces and veth pairs needs root (CI runs the suite as root)"
    name, bridge = (
        f"{NETNS_PREFIX}{os.getpid()}-probe",
        f"btp{os.getpid()}",
    )  # no two test processes share them
    try:
        _ip("netns", "add", name)
        _ip("link", "add", bridge, "type", "bridge")
    except Unavailable as exc:
        return str(exc)
    finally:
        with contextlib.suppress(Unavailable):
            _ip("link", "del", bridge)
        with contextlib.suppress(Unavailable):
            _ip("netns", "del", name)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale() -> None:
    """Namespaces and bridges left by a test process that died (SIGKILL) before taking them down."""
    for line in _ip("netns", "list").splitlines():
        found = re.match(rf"{NETNS_PREFIX}(\d+)-\S+", line)
        if found and not _alive(int(found.group(1))):
            with contextlib.suppress(Unavailable):
                _ip("netns", "del", found.group(0))
    for line in _ip("-o", "link", "show", "type", "bridge").splitlines():
        found = re.search(rf"^\d+: (\S+?)[:@].*alias {ALIAS_PREFIX}(\d+)", line)
        if found and not _alive(int(found.group(2))):
            with contextlib.suppress(Unavailable):
                _ip("link", "del", found.group(1))


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of ``POOL`` no interface of this machine has an address in (called under ``LOCK``)."""
    used = {ipaddress.ip_interface(a).network for a in re.findall(r"inet (\S+)", _ip("-o", "-4", "addr"))}
    free = [n for n in POOL.subnets(new_prefix=24) if not any(n.overlaps(u) for u in used)]
    if not free:
        raise Unavailable(f"every /24 of {POOL} is in use on this machine")
    return free[secrets.randbelow(len(free))]


@dataclass
class Host:
    """One host: a network namespace, its address, its data directory and its process group."""

    name: str  # the namespace
    address: str
    data_dir: Path
    log_dir: Path
    placeholder: subprocess.Popen[bytes] | None = None
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pgid(self) -> int:
        assert self.placeholder is not None
        return self.placeholder.pid

    def _begin(self) -> None:
        argv = ["ip", "netns", "exec", self.name, sys.executable, "-c", _PLACEHOLDER, str(os.getpid()),
                str(MAX_LIFETIME_S)]  # fmt: skip
        self.placeholder = subprocess.Popen(argv, process_group=0)  # a group of its own, in this session

    def start(self, argv: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
        """Run ``argv`` on this host: in its namespace and process group, with its data directory
        (``BATON_DATA_DIR``, ``XDG_CACHE_HOME``), output to ``log_dir/log_name``."""
        environ = {k: v for k, v in os.environ.items() if k in KEPT_ENV}
        environ.update(BATON_DATA_DIR=str(self.data_dir), XDG_CACHE_HOME=str(self.data_dir / "cache"))
        environ.update(env)
        with (self.log_dir / log_name).open("ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], env=environ, stdout=out,
                                    stderr=out, process_group=self.pgid)  # fmt: skip
        self.started.append(proc)
        return proc

    def kill(self) -> None:
        """SIGKILL every process of this host at once, as a machine lost whole."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        for proc in [*self.started, self.placeholder]:
            if proc is not None:
                proc.wait(timeout=STOP_GRACE_S)

    def stop(self) -> None:
        """SIGTERM this host's processes, wait for them (bounded), then kill what is left."""
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        self.kill()

    def logs(self) -> str:
        return "".join(
            f"--- {self.name} {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


class Network:
    """A bridge (the gateway) and ``count`` hosts on it; use as a context manager."""

    def __init__(self, count: int, work: Path) -> None:
        if (reason := why_not()) is not None:
            raise Unavailable(reason)
        self.tag = secrets.token_hex(3)
        self.bridge = f"bt{self.tag}b"
        self.work = work
        self.hosts: list[Host] = []
        self.forwarders: list[Forwarder] = []
        with LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _remove_stale()
            subnet = _free_subnet()
            addresses = list(subnet.hosts())
            self.gateway = str(addresses[0])
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "alias", f"{ALIAS_PREFIX}{os.getpid()}")
            _ip("addr", "add", f"{self.gateway}/{subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        try:
            for i in range(count):
                self.hosts.append(self._host(i, str(addresses[10 + i]), subnet.prefixlen))
        except BaseException:
            self.close()
            raise

    def _host(self, i: int, address: str, prefix: int) -> Host:
        name = f"{NETNS_PREFIX}{os.getpid()}-{self.tag}-{i}"
        outside, inside = f"bt{self.tag}h{i}", f"bt{self.tag}n{i}"
        _ip("netns", "add", name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("link", "set", inside, "netns", name)
        _ip("addr", "add", f"{address}/{prefix}", "dev", inside, netns=name)
        _ip("link", "set", inside, "up", netns=name)
        _ip("link", "set", "lo", "up", netns=name)
        host = Host(name, address, self.work / f"host-{i}" / "data", self.work / f"host-{i}")
        host.data_dir.mkdir(parents=True, exist_ok=True)
        host._begin()
        return host

    def reach(self, url: str) -> str:
        """``url`` (a service on this machine's loopback) as the hosts reach it: through a forwarder
        on the gateway (the scheme, credentials and path are kept)."""
        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
            raise ValueError(f"reach() takes a loopback URL with a port, got {url!r}")
        forwarder = Forwarder(self.gateway, [("127.0.0.1", parts.port)])
        self.forwarders.append(forwarder)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (
            f"{userinfo}@{self.gateway}:{forwarder.port}" if userinfo else f"{self.gateway}:{forwarder.port}"
        )
        return urlunsplit(parts._replace(netloc=netloc))

    def logs(self) -> str:
        return "".join(h.logs() for h in self.hosts)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(Exception):
                host.stop()
            with contextlib.suppress(Unavailable):
                _ip("netns", "del", host.name)
        for forwarder in self.forwarders:
            forwarder.stop()
        with contextlib.suppress(Unavailable):
            _ip("link", "del", self.bridge)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@contextlib.contextmanager
def network(count: int, work: Path) -> Iterator[Network]:
    """A ``Network`` of ``count`` hosts, or the test skipped with the reason it cannot be made."""
    import pytest  # here: the bench uses this module without pytest

    try:
        net = Network(count, work)
    except Unavailable as exc:
        pytest.skip(f"no separate network namespaces here: {exc}")
    with net:
        yield net
