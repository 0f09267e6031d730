"""The box: an agent process under bubblewrap, and an honest report of what held it.

What the agent gets, every run:

- its own user, pid, ipc, uts, cgroup and mount namespaces, and a network
  namespace with loopback only unless ``network="host"``; uid/gid 1000 inside
  (the worker's uid outside), no capabilities, no new privileges, no nested
  user namespaces, its own session, SIGKILL when the worker dies;
- a root built from nothing: /usr read-only (with /bin, /lib… as on the host),
  a fresh /proc, a read-only minimal /dev with a small /dev/shm, its own /tmp,
  ``/workspace`` (the cwd) and ``/home/agent`` read-write; nothing else of the
  host (no /root, /home, /run, /var, /sys, /work, no worker HOME or cwd);
- not the host's /etc but an allow-list of harmless system files (linker
  cache, CA certificates, time zone, alternatives, protocols, services) plus
  passwd, group, hosts and nsswitch.conf written for the box. Left out on
  purpose: shadow/gshadow, ssh (host keys), ssl/private, gitconfig, npmrc and
  pip.conf (credentials), environment, every service's configuration;
- exactly the spec's environment plus what the box sets;
- as pid 1, Baton's own init (``box_init``, on the box's Python): with
  ``network="proxy"`` it forwards 127.0.0.1:3128 to Baton's egress proxy,
  whose UNIX socket is bound in (the only way out), and, with a
  ``gateway_socket``, 127.0.0.1:3129 to the run's model gateway;
- the agent under rlimits (file size, processes, no core dumps) and a seccomp
  filter (``seccomp``: no UNIX or other non-inet sockets, io_uring, ptrace,
  keyrings, bpf, new user namespaces...) that the init applies to it alone;
- memory bounded by a cgroup v2 ``memory.max`` where the machine delegates
  one, otherwise by the supervisor here, which sums the box's processes'
  memory (PSS) and stops the box past the limit; and the disk its workspace,
  HOME and /tmp take, measured the same way.

bwrap aborts before starting the agent if any of it cannot be built. What can
be checked from the host is checked on the box's first process while it waits
(bwrap's ``--block-fd``): namespaces, uid map, capabilities, cgroup. Then the
agent still waits for "go" on its stdin, sent once bwrap's init guards itself
against the worker's death (see ``_Run._release``). The init says on the
first line of stderr, before the agent exists, which limits and filter it
applied. The :class:`BoxReport` claims nothing more than that.

This module is the process: it reads what the argv depends on from the host, spawns bwrap,
watches it and reports. The argv itself is built, from plain data, in ``worker.runner.bwrap``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import selectors
import signal as signals
import subprocess
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol

from baton.errors import BatonError
from worker.runner import box_init, bwrap
from worker.runner.bwrap import (
    AGENT_HOME,
    GATEWAY_PORT,
    PROXY_SOCKET,
    RESERVED_ENV,
    SYSTEM_PATH,
    WORKSPACE,
    MiB,
    Network,
)
from worker.runner.probe import (
    BoxReport,
    FirstProcess,
    Host,
    Limits,
    Probe,
    Protection,
    first_process,
    host,
    join_cgroup,
    new_cgroup,
    report,
    run_probe,
    wait_in_syscall,
)
from worker.runner.supervise import MEMORY_EVERY_S, Limit, Supervisor, size

__all__ = ["AGENT_HOME", "GATEWAY_PORT", "PROXY_SOCKET", "SYSTEM_PATH", "WORKSPACE", "BoxError", "BoxReport",
           "BoxResult", "BoxSpec", "MiB", "Probe", "Protection", "probe", "run"]  # fmt: skip

#: A cancelled box gets at most this long between SIGTERM and SIGKILL (its spec's grace_s if shorter).
CANCEL_GRACE_S = 3.0
#: How often a running box looks at its ``stop`` event.
STOP_POLL_S = 0.2
#: The in-box init's source, at ``bwrap.INIT_PATH`` in every box.
_INIT = Path(box_init.__file__).read_bytes()
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
log = logging.getLogger("baton.box")


class Stop(Protocol):
    """What ends a box early: a ``threading.Event``, or anything else that can say it is set."""

    def is_set(self) -> bool: ...


class Either:
    """Set when either event is: a box watches one ``stop`` (a cancel, or its gateway's spend cap)."""

    def __init__(self, first: Stop | None, second: Stop) -> None:
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.second.is_set() or (self.first is not None and self.first.is_set())


class BoxError(BatonError):
    """The box could not be built or started (``box-unavailable``, ``box-setup-failed``,
    ``box-forwarder-failed``, ``box-seccomp-failed``). An agent that fails is a
    :class:`BoxResult`, not this."""


@dataclass(frozen=True)
class BoxSpec:
    argv: Sequence[str]
    workspace: Path
    home: Path
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    ro_binds: Sequence[str | Path] = ()
    network: Network = "none"
    proxy_socket: Path | None = None
    #: The run's model gateway (``network="proxy"`` only): bound in, forwarded on 127.0.0.1:3129.
    gateway_socket: Path | None = None
    timeout_s: float = 1800.0
    grace_s: float = 30.0
    max_output_bytes: int = MiB
    max_file_bytes: int | None = 1024 * MiB
    max_processes: int | None = 1024
    memory_bytes: int | None = None
    #: The workspace, HOME and /tmp together; the supervisor stops the box past it.
    max_disk_bytes: int | None = None
    #: The workspace bound read-only (a reviewer's box): the report then lists it as not writable.
    workspace_readonly: bool = False

    def __post_init__(self) -> None:
        if not self.argv or any(not isinstance(a, str) or "\0" in a for a in self.argv):
            raise ValueError("argv must be a non-empty sequence of strings without NUL")
        for name, value in self.env.items():
            if not _ENV_NAME.fullmatch(name) or "\0" in value:
                raise ValueError(f"env: {name!r} is not a valid name, or its value holds a NUL")
            if name in RESERVED_ENV:
                raise ValueError(f"env: {name} is set by the box itself")
        if self.network not in ("none", "proxy", "host"):
            raise ValueError(f"network must be none, proxy or host, not {self.network!r}")
        if (self.network == "proxy") != (self.proxy_socket is not None):
            raise ValueError('proxy_socket is required with network="proxy", and only then')
        if self.gateway_socket is not None and self.network != "proxy":
            raise ValueError(
                'gateway_socket goes with network="proxy" (elsewhere the gateway listens on TCP)'
            )
        if self.timeout_s <= 0 or self.grace_s < 0 or self.max_output_bytes < 0:
            raise ValueError("timeout_s must be > 0, grace_s and max_output_bytes >= 0")
        limits = (self.max_file_bytes, self.max_processes, self.memory_bytes, self.max_disk_bytes)
        if any(n is not None and n <= 0 for n in limits):
            raise ValueError(
                "max_file_bytes, max_processes, memory_bytes and max_disk_bytes must be positive or None"
            )
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "ro_binds", tuple(Path(os.path.normpath(p)) for p in self.ro_binds))


@dataclass(frozen=True)
class BoxResult:
    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    duration_s: float
    report: BoxReport
    #: ``stop`` ended the box (never together with ``timed_out``: a stop during the timeout's
    #: grace only shortens it). With ``exit_code`` and ``signal`` None, the agent never started.
    cancelled: bool = False
    #: The box passed a limit Baton measures, and was stopped for it (the report says which held).
    over_limit: Limit | None = None
    #: What the supervisor measured (its samples, their cost, the peaks): varies run to run, so
    #: not in the report.
    measured: Mapping[str, float] = field(default_factory=dict)

    def excerpt(
        self, lines: int = 20, *, stream: Literal["stdout", "stderr"] | None = None, max_chars: int = 2000
    ) -> str:
        """The last ``lines`` lines of a stream as safe, printable text, for status messages.

        ``stream=None``: stderr, or stdout if stderr is blank. Decoded with
        replacement; terminal escape sequences removed; every other control or
        format character (bidi overrides, zero-width ones) becomes U+FFFD.
        """
        chosen = stream or ("stderr" if self.stderr.strip() else "stdout")
        return safe_tail(self.stderr if chosen == "stderr" else self.stdout, lines, max_chars)


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
                      r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?|\x1b[ -/]*[0-~]?|\x9b[0-?]*[ -/]*[@-~]")  # fmt: skip


def safe_tail(data: bytes, lines: int, max_chars: int) -> str:
    text = data[-max_chars * 4 :].decode("utf-8", errors="replace")
    text = _ESCAPES.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "".join(ch if ch == "\n" else _printable(ch) for ch in text)
    tail = "\n".join(text.rstrip("\n").split("\n")[-lines:]) if lines > 0 else ""
    return tail[-max_chars:]


def _printable(ch: str) -> str:
    kind = unicodedata.category(ch)
    if ch == "\t" or kind == "Zs":
        return " "
    return "\ufffd" if kind[0] == "C" or kind in ("Zl", "Zp") else ch


def run(spec: BoxSpec, *, stop: Stop | None = None) -> BoxResult:
    """Run ``spec.argv`` in a box and wait: at most ``timeout_s``, then SIGTERM, ``grace_s``, SIGKILL.

    ``stop`` (set from another thread, e.g. on ``/baton cancel``) ends the box the same way at
    once, with at most ``CANCEL_GRACE_S`` of grace; it is looked at every ``STOP_POLL_S``.
    Already set before the box starts: nothing is started, and the result says ``cancelled``
    with no exit code, so callers handle one kind of cancel, not a result and an exception.
    """
    facts = host()
    if facts.bwrap_problem is not None:
        raise BoxError("box-unavailable", facts.bwrap_problem)
    _check_paths(spec)
    if facts.python is None:
        raise BoxError("box-unavailable", facts.python_reason)
    if stop is not None and stop.is_set():
        return _Run(spec, facts).unstarted()
    with _Run(spec, facts) as box:
        return box.wait(stop)


@cache
def probe() -> Probe:
    """What this machine enforces, found once per process by running two small boxes."""
    return run_probe(lambda **fields: run(BoxSpec(**fields)), BoxError)


def _check_paths(spec: BoxSpec) -> None:
    for name, path in (("workspace", spec.workspace), ("home", spec.home)):
        if not path.is_absolute() or not path.is_dir() or path.resolve() == Path("/"):
            raise ValueError(f"{name} must be an existing directory given by absolute path, not {path}")
    sockets = [s for s in (spec.proxy_socket, spec.gateway_socket) if s is not None]
    for sock in sockets:
        if not sock.is_socket():
            raise ValueError(f"{sock} is not a UNIX socket")
    kept = [spec.workspace, spec.home, *sockets]
    with contextlib.suppress(RuntimeError, KeyError):
        kept += [Path.home()] if Path.home().resolve() != Path("/") else []
    for path in map(Path, spec.ro_binds):
        if not path.is_absolute() or not path.exists():
            raise ValueError(f"ro_binds: {path} is not an existing absolute path")
        if any(str(path) == p or str(path).startswith(p + "/") for p in bwrap.BOX_PATHS):
            raise ValueError(f"ro_binds: {path} would cover what the box mounts itself")
        if any(k.resolve().is_relative_to(path.resolve()) for k in kept):
            raise ValueError(
                f"ro_binds: {path} would show the worker's home, the workspace, a home or a socket"
            )


class _Capture:
    def __init__(self, cap: int) -> None:
        self.data, self.total, self.cap = bytearray(), 0, cap

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.data) < self.cap:
            self.data += chunk[: self.cap - len(self.data)]


class _Run:
    """One box from spawn until its last process is gone."""

    def __init__(self, spec: BoxSpec, facts: Host) -> None:
        self.spec, self.facts = spec, facts
        self.out, self.err = _Capture(spec.max_output_bytes), _Capture(spec.max_output_bytes)
        self.status = b""
        self.seen = FirstProcess()
        self.memory = Protection(False, "no memory limit was asked for")
        self.memory_held: Literal["cgroup", "supervisor"] | None = None
        self.processes: Literal["rlimit", "cgroup"] = "rlimit"
        self.supervisor = Supervisor(memory_bytes=None, disk_bytes=None, trees=(), pids=list, mounts=list)
        self.over_limit: Limit | None = None
        self.applied: frozenset[str] | None = None  # what the init said it applied, once it did
        self.seccomp = facts.seccomp
        self.child: int | None = None  # the box's init, pid 1 inside
        self.pid_ns: int | None = None
        self.cgroup: Path | None = None
        self.pids_cgroup: Path | None = None  # cgroup v1, where v2 does not hold the processes
        self.timed_out = self.killed = self.cancelled = False
        self.fds: list[int] = []
        self.started = time.monotonic()
        self.guarded = False
        self.pending = memoryview(b"")
        self.released = False  # "go" is on its way
        self.proc: subprocess.Popen[bytes]
        self.sel: selectors.BaseSelector

    def _memfd(self, data: bytes) -> int:
        fd = os.memfd_create("baton-box")
        self.fds.append(fd)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def __enter__(self) -> _Run:
        spec, facts = self.spec, self.facts
        self.status_r, status_w = os.pipe()
        self.block_r, self.block_w = os.pipe()
        self.fds += [self.status_r, status_w, self.block_r, self.block_w]
        try:
            supervised = spec.memory_bytes
            if spec.memory_bytes is not None and facts.memory_cgroup is not None:
                try:
                    self.cgroup = new_cgroup(facts.memory_cgroup, spec.memory_bytes, spec.max_processes)
                    supervised = None
                except OSError as exc:
                    log.warning(
                        "box: no cgroup in %s (%s); the supervisor measures memory", facts.memory_cgroup, exc
                    )
            if spec.max_processes is not None and self.cgroup is None and facts.pids_cgroup is not None:
                try:
                    self.pids_cgroup = new_cgroup(facts.pids_cgroup, None, spec.max_processes)
                except OSError as exc:
                    log.warning("box: no pids cgroup in %s (%s)", facts.pids_cgroup, exc)
            if supervised is not None:
                why = facts.memory_cgroup_reason if self.cgroup is None else ""
                self.memory, self.memory_held = _supervised_memory(supervised, why), "supervisor"
            self.supervisor = Supervisor(
                memory_bytes=supervised, disk_bytes=spec.max_disk_bytes, trees=(spec.workspace, spec.home),
                pids=self._box_pids, mounts=self._tmpfs_on_host,
            )  # fmt: skip
            options = [*bwrap.options(_mounts(spec, facts, self._memfd)), "--json-status-fd", str(status_w)]
            args_fd = self._memfd(
                b"".join(o.encode() + b"\0" for o in [*options, "--block-fd", str(self.block_r)])
            )
            passed = [fd for fd in self.fds if fd not in (self.status_r, self.block_w)]
            self.started = time.monotonic()
            self.proc = subprocess.Popen(  # noqa: S603 - bwrap by absolute path, argv as a list
                [facts.bwrap or "bwrap", "--args", str(args_fd), "--", *_command(spec, facts)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=bwrap.environment(spec.env, spec.network),
                cwd="/",
                pass_fds=passed,
                start_new_session=True,
            )
        except BaseException:
            self.__exit__()
            raise
        for fd in passed:
            os.close(fd)
            self.fds.remove(fd)
        return self

    def __exit__(self, *_: object) -> None:
        proc: subprocess.Popen[bytes] | None = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            self._kill()
            proc.wait()
        self._wait_box_gone()
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()
        for pipe in (proc.stdin, proc.stdout, proc.stderr) if proc else ():
            if pipe is not None:
                pipe.close()
        for group in (self.cgroup, self.pids_cgroup):
            if group is not None:
                with contextlib.suppress(OSError):
                    group.rmdir()

    def wait(self, stop: Stop | None = None) -> BoxResult:
        proc, spec = self.proc, self.spec
        if proc.stdout is None or proc.stderr is None:  # pragma: no cover - both are pipes
            raise BoxError("box-setup-failed", "bwrap has no output pipes")
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, self.out)
        sel.register(proc.stderr, selectors.EVENT_READ, self.err)
        sel.register(self.status_r, selectors.EVENT_READ, None)
        self.sel = sel
        term_at = self.started + spec.timeout_s
        kill_at = term_at + spec.grace_s
        watching = stop  # None once it was seen set
        while sel.get_map() or proc.poll() is None:
            now = time.monotonic()
            if watching is not None and watching.is_set():
                watching, kill_at = None, self._stopped(now, kill_at)
            if now >= term_at and not self.timed_out and not self.cancelled:
                self.timed_out = True
                self._signal_agents()
            if now >= kill_at and not self.killed:
                self._kill()
            next_at = now + 1 if self.killed else kill_at if self.timed_out or self.cancelled else term_at
            next_at = next_at if watching is None else min(next_at, now + STOP_POLL_S)
            next_at = min(next_at, self._supervise(now))
            if not sel.get_map():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, next_at - now))
            for key, _ in sel.select(timeout=max(0.0, next_at - now)) if sel.get_map() else ():
                if key.data == "stdin":
                    self._feed()
                elif not (chunk := os.read(key.fd, 65536)):
                    sel.unregister(key.fileobj)
                elif isinstance(key.data, _Capture):
                    key.data.add(chunk)
                else:
                    self._on_status(chunk)
        sel.close()
        duration = time.monotonic() - self.started
        self._wait_box_gone()
        return self._result(proc.returncode, duration)

    def _supervise(self, now: float) -> float:
        """Sample the box if due (and kill it past a limit); when the next sample is due."""
        if self.child is None or self.killed:
            return float("inf")
        if now >= self.supervisor.due():
            self.over_limit = self.supervisor.sample()
            if self.over_limit is not None:
                self._kill()
                return float("inf")
        return self.supervisor.due()

    def _stopped(self, now: float, kill_at: float) -> float:
        """``stop`` is set: SIGTERM at once (unless the timeout did already); the new SIGKILL time."""
        self.cancelled = not self.timed_out
        if self.cancelled:
            self._signal_agents()
        return min(kill_at, now + min(self.spec.grace_s, CANCEL_GRACE_S))

    def _feed(self) -> None:
        stdin = self.proc.stdin
        if stdin is None:  # pragma: no cover - registered only with a stdin pipe
            return
        try:
            self.pending = self.pending[os.write(stdin.fileno(), self.pending[:65536]) :]
        except BlockingIOError:
            return
        except OSError:  # the agent closed its stdin: the rest is dropped
            self.pending = self.pending[:0]
        if not self.pending:
            self.sel.unregister(stdin)
            stdin.close()

    def _on_status(self, chunk: bytes) -> None:
        """bwrap's first status line names the box's init; check it, let it go on, cgroup it."""
        self.status += chunk
        if self.child is not None or b"\n" not in self.status:
            return
        try:
            first = json.loads(self.status.split(b"\n", 1)[0])
            child = int(first["child-pid"])
            ns = {k.removesuffix("-namespace"): int(v) for k, v in first.items() if k.endswith("-namespace")}
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # never released: the box dies at its timeout
        self.child, self.pid_ns = child, ns.get("pid")
        self.seen = first_process(child, ns, self.block_r, min(self.spec.timeout_s, 10.0))
        # Let bwrap exec the init now: moving it into a cgroup (a few ms on cgroup v1) overlaps the
        # init's own start-up, and the agent, forked only after "go", is born inside.
        with contextlib.suppress(OSError):  # the box died already
            os.write(self.block_w, b"x")
        if self.cgroup is not None and self.spec.memory_bytes is not None:
            failed = join_cgroup(self.cgroup, child)
            if failed is None:
                self.memory = Protection(
                    True, f"{size(self.spec.memory_bytes)} (cgroup v2 memory.max, no swap)"
                )
                self.memory_held = "cgroup"
                self.processes = "cgroup" if (self.cgroup / "pids.max").exists() else "rlimit"
            else:  # the supervisor holds it instead
                self.memory, self.memory_held = (
                    _supervised_memory(self.spec.memory_bytes, failed),
                    "supervisor",
                )
                self.supervisor.memory_bytes, self.supervisor.memory_at = (
                    self.spec.memory_bytes,
                    time.monotonic(),
                )
        if self.pids_cgroup is not None:
            held = join_cgroup(self.pids_cgroup, child, hierarchy=":pids:") is None
            self.processes = "cgroup" if held and (self.pids_cgroup / "pids.max").exists() else self.processes
        self._release(child)

    def _release(self, child: int) -> None:
        """Send "go" (then the agent's stdin) once the box's init guards itself.

        The box's init is Baton's (pid 1, ``--as-pid-1``), with bwrap's SIGKILL-on-parent-death
        set before it was exec'd; seen reading its stdin, it is that init, at its gate. So
        "go" goes only then, and a worker that dies before sending it closes the box's
        stdin instead: the gate reads EOF and the agent never starts.
        """
        self.guarded = wait_in_syscall(child, "read", 0, min(self.spec.timeout_s, 10.0))
        self.pending = memoryview(b"go\n" + (self.spec.stdin or b""))
        self.released = True
        if self.proc.stdin is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)
            self.sel.register(self.proc.stdin, selectors.EVENT_WRITE, "stdin")

    def _tmpfs_on_host(self) -> list[str]:
        """The box's own tmpfs mounts as the host reaches them (for the disk they hold)."""
        return (
            []
            if self.child is None
            else [f"/proc/{self.child}/root{bwrap.TMP}", f"/proc/{self.child}/root{bwrap.SHM}"]
        )

    def _box_pids(self) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            with contextlib.suppress(OSError):
                if name.isdigit() and os.stat(f"/proc/{name}/ns/pid").st_ino == self.pid_ns:
                    found.append(int(name))
        return found

    def _signal_agents(self) -> None:
        """SIGTERM to the box's init, which passes it on to every process in the box (or, if the
        agent was not started yet, ends with none started). A box not let go yet is killed."""
        if self.child is None or self.pid_ns is None or not self.released:
            self._kill()
            return
        if self._box_alive():
            with contextlib.suppress(OSError):
                os.kill(self.child, signals.SIGTERM)

    def _kill(self) -> None:
        """SIGKILL the box's init (the kernel then kills its whole pid namespace) and bwrap."""
        self.killed = True
        if self._box_alive():
            with contextlib.suppress(OSError):
                os.kill(self.child or 0, signals.SIGKILL)
        proc: subprocess.Popen[bytes] | None = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signals.SIGKILL)

    def _box_alive(self) -> bool:
        """Is the box's init still running? Once it is a zombie, its pid namespace is empty."""
        if self.child is None:
            return False
        try:
            state = Path(f"/proc/{self.child}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            same = os.stat(f"/proc/{self.child}/ns/pid").st_ino == self.pid_ns
        except (OSError, IndexError):
            return False
        return same and state not in (b"Z", b"X")

    def _wait_box_gone(self) -> None:
        """bwrap is gone; the init dies with it (``--die-with-parent``), its namespace with it."""
        deadline, delay = time.monotonic() + 5, 0.0002
        while self._box_alive():
            if time.monotonic() > deadline - 4:
                self._kill()
            if time.monotonic() > deadline:  # pragma: no cover - the kernel did not deliver SIGKILL
                raise BoxError("box-setup-failed", f"the box's init (pid {self.child}) survived SIGKILL")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _result(self, returncode: int, duration: float) -> BoxResult:
        launched = any(b'"exit-code"' in line for line in self.status.splitlines()[1:])
        stderr = bytes(self.err.data)
        if not launched and not self.timed_out and not self.cancelled and self.over_limit is None:
            raise BoxError(
                "box-setup-failed", "bubblewrap could not build the box: " + safe_tail(stderr, 3, 500)
            )
        first, _, rest = stderr.partition(b"\n")
        if returncode == box_init.REFUSED and first.startswith(box_init.FORWARDER_FAILED):
            raise BoxError("box-forwarder-failed", "the proxy forwarder in the box did not start listening")
        if returncode == box_init.REFUSED and first.startswith(box_init.SECCOMP_FAILED):
            raise BoxError("box-seccomp-failed", first.decode("utf-8", "replace"))
        if first.startswith(box_init.READY):  # written by the init before the agent existed
            self.applied = frozenset(first[len(box_init.READY) :].decode("ascii", "replace").split())
            stderr = rest
            self.err.total -= len(first) + 1
        if self.over_limit is None and self.cgroup is not None and _oom_killed(self.cgroup):
            self.over_limit = Limit(
                "memory", self.spec.memory_bytes or 0, self.spec.memory_bytes or 0, "cgroup"
            )
        code: int | None = returncode
        sig: int | None = None
        if returncode < 0:  # bwrap itself was killed
            code, sig = None, -returncode
        elif returncode > 128 and returncode - 128 in {s.value for s in signals.Signals}:  # bwrap's 128+n
            code, sig = None, returncode - 128
        return BoxResult(
            exit_code=code,
            signal=sig,
            timed_out=self.timed_out,
            cancelled=self.cancelled,
            stdout=bytes(self.out.data),
            stderr=stderr,
            stdout_bytes=self.out.total,
            stderr_bytes=self.err.total,
            duration_s=duration,
            report=self._report(),
            over_limit=self.over_limit,
            measured=self.supervisor.measured(),
        )

    def unstarted(self) -> BoxResult:
        """Cancelled before bwrap was started: no process, no output, nothing verified."""
        if self.spec.memory_bytes is not None:
            self.memory = Protection(False, "not in force: the box was cancelled before it started")
        return BoxResult(exit_code=None, signal=None, timed_out=False, cancelled=True, stdout=b"",
                         stderr=b"", stdout_bytes=0, stderr_bytes=0, duration_s=0.0,
                         report=self._report(started=False))  # fmt: skip

    def _report(self, *, started: bool = True) -> BoxReport:
        return report(
            Limits(
                network=self.spec.network,
                max_file_bytes=self.spec.max_file_bytes,
                max_processes=self.spec.max_processes,
                memory=self.memory,
                memory_bytes=self.spec.memory_bytes if self.memory_held else None,
                memory_held=self.memory_held,
                processes=self.processes,
                max_disk_bytes=self.spec.max_disk_bytes,
                applied=self.applied,
                seccomp=self.seccomp,
            ),
            self.facts,
            self.seen,
            guarded=self.guarded,
            writable=bwrap.writable(not self.spec.workspace_readonly),
            ro_binds=tuple(map(str, self.spec.ro_binds)),
            started=started,
        )


def _mounts(spec: BoxSpec, facts: Host, memfd: Callable[[bytes], int]) -> bwrap.Mounts:
    """What the box's mounts depend on, read from the host: which allowed /etc entries exist (a
    directory is bound, a file copied), and a memfd for each copied or written /etc file."""
    dirs: list[str] = []
    copies = dict(bwrap.ETC_WRITTEN)
    for entry in bwrap.etc_entries(spec.network):
        if os.path.isdir(f"/etc/{entry}"):
            dirs.append(entry)
        else:
            with contextlib.suppress(OSError):
                copies.setdefault(entry, Path(f"/etc/{entry}").read_bytes())
    return bwrap.Mounts(
        network=spec.network,
        workspace=str(spec.workspace.resolve()),
        home=str(spec.home.resolve()),
        proxy_socket=None if spec.proxy_socket is None else str(spec.proxy_socket.resolve()),
        gateway_socket=None if spec.gateway_socket is None else str(spec.gateway_socket.resolve()),
        ro_binds=tuple(map(str, spec.ro_binds)),
        workspace_readonly=spec.workspace_readonly,
        root_links=facts.root_links,
        etc_dirs=tuple(dirs),
        etc_files=tuple((name, memfd(content)) for name, content in copies.items()),
        box_files=((bwrap.INIT_PATH, memfd(_INIT)),
                   *(((bwrap.SECCOMP_PATH, memfd(facts.seccomp)),) if facts.seccomp is not None else ())),
    )  # fmt: skip


def _command(spec: BoxSpec, facts: Host) -> list[str]:
    return bwrap.command(
        spec.argv,
        python=facts.python or "python3",
        network=spec.network,
        gateway=spec.gateway_socket is not None,
        max_file_bytes=spec.max_file_bytes,
        max_processes=spec.max_processes,
        seccomp=facts.seccomp is not None,
    )


def _supervised_memory(limit: int, no_cgroup: str) -> Protection:
    why = f"; no cgroup: {no_cgroup}" if no_cgroup else ""
    return Protection(True, f"{size(limit)} (PSS of the box's processes, measured by Baton's supervisor "
                            f"every {MEMORY_EVERY_S:g} s{why})")  # fmt: skip


def _oom_killed(group: Path) -> bool:
    """Did the kernel kill a process of this cgroup for passing memory.max?"""
    try:
        events = dict(line.split() for line in (group / "memory.events").read_text().splitlines())
        return int(events.get("oom_kill", "0")) > 0
    except (OSError, ValueError):
        return False
