"""Hostile agents in the real box: each tries one way out or one way to take the machine down.

Every test here failed before the box had its seccomp filter, its supervisor and its init
(the agent connected to the host's socket, set up io_uring, attached to its sibling, grew
without end, filled the disk). Each asserts what a reviewer would check: the attempt was
refused or the box was stopped, for the reason the report and the result give.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.runner import box
from worker.runner.box import BoxResult, BoxSpec
from worker.runner.probe import host

PY = "/usr/bin/python3"
EPERM = os.strerror(1)


def run(dirs: tuple[Path, Path], source: str, **kwargs: object) -> BoxResult:
    """Run a python3 program as the agent (written into the workspace first)."""
    (dirs[0] / "agent.py").write_text(source)
    return box.run(BoxSpec(argv=[PY, "-I", "/workspace/agent.py"], workspace=dirs[0], home=dirs[1],
                           timeout_s=60, grace_s=1, **kwargs))  # type: ignore[arg-type]  # fmt: skip


class _Listener:
    """A UNIX socket on the host that hands every connection a token and counts them."""

    def __init__(self, address: str) -> None:
        self.token, self.connections = uuid.uuid4().hex, 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(address)
        self.server.listen()
        self.server.settimeout(0.1)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(self.token.encode())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.server.close()


@pytest.fixture
def host_socket(tmp_path: Path) -> Iterator[tuple[Path, _Listener]]:
    """A host service's UNIX socket (think docker.sock) in a directory the box can see."""
    shown = tmp_path / "shown"
    shown.mkdir()
    listener = _Listener(str(shown / "service.sock"))
    yield shown, listener
    listener.close()


CONNECT_UNIX = """import socket, sys
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sys.argv[1] if len(sys.argv) > 1 else {address!r})
    print("connected", s.recv(64).decode())
except OSError as exc:
    print("refused", exc.strerror)
"""


def test_a_unix_socket_the_box_can_see_cannot_be_connected_to(
    dirs: tuple[Path, Path], host_socket: tuple[Path, _Listener]
) -> None:
    shown, listener = host_socket
    done = run(dirs, CONNECT_UNIX.format(address=str(shown / "service.sock")), ro_binds=[shown])
    assert done.stdout.decode().strip() == f"refused {EPERM}", done.stderr
    assert listener.connections == 0
    assert listener.token.encode() not in done.stdout
    assert done.report.seccomp.in_force
    assert "seccomp on" in done.report.summary


def test_an_abstract_socket_of_the_host_cannot_be_reached_even_on_the_host_s_network(
    dirs: tuple[Path, Path],
) -> None:
    """With ``network="host"`` (no cut-off here) the box shares the host's abstract UNIX sockets:
    only the filter stands between the agent and, say, a container runtime's."""
    name = f"\0baton-test-{uuid.uuid4().hex}"
    listener = _Listener(name)
    try:
        done = run(dirs, CONNECT_UNIX.format(address=name), network="host")
    finally:
        listener.close()
    assert done.stdout.decode().strip() == f"refused {EPERM}", done.stderr
    assert listener.connections == 0


IO_URING = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)  # io_uring_setup, the same number on x86-64 and arm64
print("io_uring", "ok" if fd >= 0 else os.strerror(ctypes.get_errno()))
"""


def test_io_uring_is_refused(dirs: tuple[Path, Path]) -> None:
    done = run(dirs, IO_URING)
    assert done.stdout.decode().strip() == f"io_uring {EPERM}", done.stderr


PTRACE = """import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
sibling = os.fork()
if sibling == 0:
    time.sleep(30)
    os._exit(0)
PTRACE_ATTACH = 16
got = libc.ptrace(PTRACE_ATTACH, sibling, None, None)
print("ptrace", "attached" if got == 0 else os.strerror(ctypes.get_errno()))
mem = "read"
try:
    with open(f"/proc/1/mem", "rb") as f:  # the box's init, which is not filtered
        pass
except OSError as exc:
    mem = exc.strerror
print("init memory", mem)
os.kill(sibling, 9)
"""


def test_a_sibling_cannot_be_traced_and_the_init_s_memory_cannot_be_opened(dirs: tuple[Path, Path]) -> None:
    done = run(dirs, PTRACE)
    lines = done.stdout.decode().splitlines()
    assert lines == [f"ptrace {EPERM}", f"init memory {os.strerror(13)}"], done.stderr


UNSHARE = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
got = libc.unshare(0x10000000)  # CLONE_NEWUSER
print("unshare", "ok" if got == 0 else os.strerror(ctypes.get_errno()))
pid = os.fork()  # plain forks still work
if pid == 0:
    os._exit(7)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_no_new_user_namespace_but_forks_work(dirs: tuple[Path, Path]) -> None:
    done = run(dirs, UNSHARE)
    assert done.stdout.decode().splitlines() == [f"unshare {EPERM}", "fork 7"], done.stderr


GROW = """import time
held = []
while True:
    held.append(bytearray(16 * 1024 * 1024))  # touched: bytearray zero-fills
    time.sleep(0.01)
"""


def test_an_agent_that_allocates_without_end_is_stopped_and_the_worker_goes_on(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    other_dirs = tmp_path / "w2", tmp_path / "h2"
    for d in other_dirs:
        d.mkdir()
    other: list[BoxResult] = []
    neighbour = threading.Thread(
        target=lambda: other.append(run(other_dirs, "import time; time.sleep(1.5); print('still here')"))
    )
    neighbour.start()
    started = time.monotonic()
    done = run(dirs, GROW, memory_bytes=128 * 1024 * 1024)
    neighbour.join(60)
    assert done.over_limit is not None
    assert done.over_limit.kind == "memory"
    assert done.exit_code is None  # killed, not ended
    assert "memory limit of 128 MiB" in done.over_limit.describe()
    assert time.monotonic() - started < 30  # stopped at the limit, not at the timeout
    assert len(other) == 1
    assert other[0].stdout == b"still here\n"  # the run beside it was not touched
    held = "cgroup" if host().memory_cgroup is not None else "supervisor"
    assert done.over_limit.mechanism == held
    if held == "supervisor":
        assert done.over_limit.used_bytes > 128 * 1024 * 1024


FILL = """import os
n = 0
while True:
    with open(f"/workspace/fill-{n}", "wb") as f:
        f.write(os.urandom(4 * 1024 * 1024))
    n += 1
"""


def test_an_agent_that_fills_the_disk_is_stopped_at_its_limit(dirs: tuple[Path, Path]) -> None:
    started = time.monotonic()
    done = run(dirs, FILL, max_disk_bytes=64 * 1024 * 1024)
    assert done.over_limit is not None
    assert done.over_limit.kind == "disk"
    assert "disk (workspace, HOME and /tmp) limit of 64 MiB" in done.over_limit.describe()
    assert time.monotonic() - started < 30
    assert done.report.disk_limit.in_force
    assert "disk 64 MiB" in done.report.summary


TMP_FILL = """import os
with open("/tmp/big", "wb") as f:
    for _ in range(40):
        f.write(os.urandom(4 * 1024 * 1024))
        f.flush()
import time
time.sleep(30)
"""


def test_what_the_agent_writes_to_its_tmp_counts_toward_the_disk_limit(dirs: tuple[Path, Path]) -> None:
    done = run(dirs, TMP_FILL, max_disk_bytes=64 * 1024 * 1024)
    assert done.over_limit is not None
    assert done.over_limit.kind == "disk"


def test_many_empty_files_count_toward_the_disk_limit(dirs: tuple[Path, Path]) -> None:
    flood = (
        "import time\nfor n in range(100000):\n    open(f'/workspace/e{n}', 'w').close()\ntime.sleep(30)\n"
    )
    done = run(dirs, flood, max_disk_bytes=16 * 1024 * 1024)
    assert done.over_limit is not None
    assert done.over_limit.kind == "disk"


FORK = """import os, time
children = []
try:
    for _ in range(300):  # bounded: past the limit asked for, well below the machine's
        pid = os.fork()
        if pid == 0:
            time.sleep(20)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    print("refused", exc.strerror)
print("forked", len(children))
for pid in children:
    os.kill(pid, 9)
"""


def test_forks_stop_at_the_process_limit_even_under_a_root_worker(dirs: tuple[Path, Path]) -> None:
    """The kernel exempts host root from RLIMIT_NPROC; a root worker's boxes are held by a cgroup."""
    done = run(dirs, FORK, max_processes=64)
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"refused {os.strerror(11)}", done.stderr  # EAGAIN
    assert int(lines[1].split()[1]) < 64
    assert done.report.process_limit.in_force
    mechanism = "cgroup pids.max" if os.getuid() == 0 else "RLIMIT_NPROC"
    assert mechanism in done.report.process_limit.detail
    assert "processes 64" in done.report.summary


def test_the_agent_starts_with_the_signal_dispositions_a_shell_gives(dirs: tuple[Path, Path]) -> None:
    """The init runs on Python, which ignores SIGPIPE and SIGXFSZ; the agent must not inherit that."""
    done = box.run(BoxSpec(argv=["/bin/sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"],
                           workspace=dirs[0], home=dirs[1]))  # fmt: skip
    masks = dict(line.split(":\t") for line in done.stdout.decode().splitlines())
    assert int(masks["SigIgn"], 16) == 0, masks
    assert int(masks["SigBlk"], 16) == 0, masks


def test_a_directory_deeper_than_a_path_can_name_stops_the_box(dirs: tuple[Path, Path]) -> None:
    """Bytes past PATH_MAX cannot be walked by path, so the supervisor stops the box (fails closed)."""
    deep = """import os, time
for _ in range(500):
    os.mkdir("d" * 200)
    os.chdir("d" * 200)
with open("data", "wb") as f:
    f.write(b"x" * 4096)
time.sleep(30)
"""
    done = run(dirs, deep, max_disk_bytes=64 * 1024 * 1024)
    assert done.over_limit is not None
    assert done.over_limit.kind == "disk"
    assert "could not measure" in done.over_limit.describe()
