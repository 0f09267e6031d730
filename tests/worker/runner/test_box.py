"""The box, run for real under bubblewrap: each property with an agent that tries to break it."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.runner import box, seccomp
from worker.runner.box import BoxError, BoxResult, BoxSpec
from worker.runner.probe import (
    find_memory_cgroup,
    find_pids_cgroup,
    host,
    join_cgroup,
    new_cgroup,
    wait_in_syscall,
)

ROOT = Path(__file__).resolve().parents[3]
PY = "/usr/bin/python3"  # the box sees the host's /usr, so the system python runs inside

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)


def run(dirs: tuple[Path, Path], argv: list[str], **kwargs: object) -> BoxResult:
    return box.run(BoxSpec(argv=argv, workspace=dirs[0], home=dirs[1], **kwargs))  # type: ignore[arg-type]


def sh(dirs: tuple[Path, Path], script: str, **kwargs: object) -> BoxResult:
    return run(dirs, ["/bin/sh", "-c", script], **kwargs)


def host_processes_with(marker: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            continue
    return found


@pytest.fixture
def unix_echo(tmp_path: Path) -> Iterator[Path]:
    """A stand-in proxy on a UNIX socket: answers every connection with ``stand-in:`` + what it got."""
    path = tmp_path / "proxy.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"stand-in:" + conn.recv(1024))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept
    server.close()
    thread.join(5)


@pytest.fixture
def tcp_listener() -> Iterator[int]:
    """A listener on the host's loopback, accepting and closing connections."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def program(dirs: tuple[Path, Path], name: str, source: str) -> str:
    """Write a python3 program into the workspace; the command line that runs it in the box."""
    (dirs[0] / name).write_text(source)
    return f"{PY} -I /workspace/{name}"


CONNECT = 'import socket, sys\nsocket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)\n'
FETCH = """import sys, urllib.request
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=10).read().decode())
    except Exception as exc:
        print("refused", exc)
"""
#: ``find -type s`` trusts readdir's d_type, which says "file" for a socket bind-mounted over a placeholder.
SOCKETS = """import os, stat
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) != "/proc"]
    for name in dirs + files:
        path = os.path.join(root, name)
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                print("socket:", path)
        except OSError:
            pass
"""
CLIENT = """import os, socket
conn = socket.create_connection(("127.0.0.1", 3128), timeout=5)
conn.sendall(b"hello")
print(conn.recv(100).decode())
print(os.environ["HTTPS_PROXY"])
"""


# -- the spec --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"argv": []}, "argv"),
        ({"env": {"HOME": "/root"}}, "set by the box"),
        ({"env": {"HTTPS_PROXY": "http://evil"}}, "set by the box"),
        ({"env": {"A=B": "x"}}, "not a valid name"),
        ({"env": {"A": "x\0y"}}, "NUL"),
        ({"network": "proxy"}, "proxy_socket"),
        ({"proxy_socket": Path("/x.sock")}, "proxy_socket"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_processes": 0}, "positive"),
    ],
)
def test_a_bad_spec_is_refused(dirs: tuple[Path, Path], kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"argv": ["true"], "workspace": dirs[0], "home": dirs[1], **kwargs}
    with pytest.raises(ValueError, match=message):
        BoxSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("bind", ["/", "{tmp}", "/proc/self", "/workspace", str(Path.home())])
def test_a_read_only_bind_may_not_uncover_what_the_box_hides(dirs: tuple[Path, Path], bind: str) -> None:
    bind = bind.format(tmp=dirs[0].parent)
    with pytest.raises(ValueError, match="ro_binds"):
        run(dirs, ["true"], ro_binds=[bind])


# -- processes -------------------------------------------------------------------------------------------


def test_the_agent_is_an_unprivileged_user_alone_in_its_namespaces(dirs: tuple[Path, Path]) -> None:
    done = sh(
        dirs,
        "id -u; id -g; hostname; grep -E '^(Cap|NoNewPrivs)' /proc/self/status; ls /proc | "
        "grep -c '^[0-9]'; ls /proc/self/fd; unshare -U true && echo NESTED-USERNS",
    )
    lines = done.stdout.decode().split("\n")
    assert done.exit_code == 0 or b"NESTED-USERNS" not in done.stdout
    assert lines[:3] == ["1000", "1000", "baton"]
    assert [line.split()[1] for line in lines[3:8]] == ["0000000000000000"] * 5  # Inh Prm Eff Bnd Amb
    assert lines[8].split() == ["NoNewPrivs:", "1"]
    assert int(lines[9]) <= 6  # init, sh, ls, grep and nothing of the host
    assert lines[10:14] == ["0", "1", "2", "3"]  # stdio, and ls's own directory fd: nothing leaked
    assert b"NESTED-USERNS" not in done.stdout
    report = done.report
    for name in ("pid", "ipc", "uts", "user", "net", "cgroup", "mount"):
        assert getattr(report, f"{name}_namespace").in_force, name
    for name in (
        "die_with_parent",
        "new_session",
        "capabilities_dropped",
        "no_new_privileges",
        "non_root_uid",
    ):
        assert getattr(report, name).in_force, name
    assert report.seccomp == box.Protection(True, seccomp.SUMMARY)  # x86-64 and arm64, CI's machines


def test_a_timed_out_agent_that_ignores_sigterm_and_left_a_daemon_is_gone(dirs: tuple[Path, Path]) -> None:
    canary = f"4242.{uuid.uuid4().int % 10**9}"
    started = time.monotonic()
    done = sh(
        dirs, f'trap "" TERM; (setsid sleep {canary} &); echo up; sleep {canary}', timeout_s=0.6, grace_s=0.6
    )
    took = time.monotonic() - started
    assert done.timed_out
    assert (done.exit_code, done.signal) == (None, signal.SIGKILL)
    assert done.stdout == b"up\n"
    assert 1.2 <= took < 4
    assert host_processes_with(canary.encode()) == []


def test_a_timed_out_agent_gets_sigterm_first(dirs: tuple[Path, Path]) -> None:
    started = time.monotonic()
    done = sh(dirs, "sleep 100", timeout_s=0.3, grace_s=20)
    assert done.timed_out
    assert done.signal == signal.SIGTERM
    assert time.monotonic() - started < 5


def test_exit_codes_and_signals_are_told_apart(dirs: tuple[Path, Path]) -> None:
    assert (sh(dirs, "exit 3").exit_code, sh(dirs, "exit 3").signal) == (3, None)
    killed = sh(dirs, "kill -KILL $$")
    assert (killed.exit_code, killed.signal, killed.timed_out) == (None, signal.SIGKILL, False)


WORKER = (
    "import os, sys; from pathlib import Path; from worker.runner import box; box.run(box.BoxSpec("
    "argv=['sleep', os.environ['CANARY']], workspace=Path(sys.argv[1]), home=Path(sys.argv[2])))"
)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def never_started(pid: int) -> bool:
    """bwrap's child, left blocked before any setup because bwrap died between its clone and
    letting the child go (a bwrap limitation, see the box's report): no agent, no children."""
    try:
        nspid = Path(f"/proc/{pid}/status").read_text().split("NSpid:")[1].split("\n")[0].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, IndexError):
        return True  # gone
    return (
        comm(pid) == "bwrap" and nspid[-1] == "1" and not children and wait_in_syscall(pid, "read", None, 0)
    )


@pytest.mark.parametrize("when", ["running", 0.0, 0.001, 0.003, 0.006, 0.012])
def test_the_box_dies_with_the_worker(dirs: tuple[Path, Path], when: str | float) -> None:
    """Killed while the agent runs, or at moments of the start-up: no agent is left running.

    (Early on, bwrap's init does not yet guard itself; the box's stdin gate keeps the agent from
    starting when the worker is gone, see ``_Run._release``.)
    """
    canary = f"4343.{uuid.uuid4().int % 10**9}"
    worker = subprocess.Popen(  # the canary is not on the worker's own command line
        [sys.executable, "-c", WORKER, str(dirs[0]), str(dirs[1])],
        cwd=ROOT,
        env={**os.environ, "CANARY": canary},
    )
    try:
        deadline = time.monotonic() + 20
        while not (found := host_processes_with(canary.encode())) or (
            when == "running" and "sleep" not in [comm(pid) for pid in found]
        ):
            assert time.monotonic() < deadline, "the box never started"
            time.sleep(0.0005)
        time.sleep(0 if when == "running" else float(when))
        worker.kill()
        worker.wait()
        deadline = time.monotonic() + 5
        while left := [pid for pid in host_processes_with(canary.encode()) if not never_started(pid)]:
            assert time.monotonic() < deadline, f"the box outlived its worker: {[comm(pid) for pid in left]}"
            time.sleep(0.02)
    finally:
        worker.kill()
        worker.wait()
        for pid in host_processes_with(canary.encode()):  # only processes this test started
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# -- filesystem and secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize("network", ["none", "proxy"])
def test_no_planted_secret_reaches_the_agent(
    tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, unix_echo: Path, network: str
) -> None:
    canaries = {
        name: f"canary-{name}-{uuid.uuid4().hex}" for name in ("env", "home", "cache", "dotenv", "tmp")
    }
    worker_home = tmp_path / "worker-home"
    (worker_home / ".cache" / "baton" / "redis").mkdir(parents=True)
    (worker_home / ".cache" / "baton" / "redis" / "server.json").write_text(
        json.dumps({"password": canaries["cache"]})
    )
    (worker_home / ".ssh").mkdir()
    (worker_home / ".ssh" / "id_ed25519").write_text(canaries["home"])
    cwd = tmp_path / "worker-cwd"
    cwd.mkdir()
    (cwd / ".env").write_text(f"GITHUB_TOKEN={canaries['dotenv']}\n")
    host_tmp = Path(tempfile.mkdtemp(prefix="baton-canary-"))
    (host_tmp / "secret").write_text(canaries["tmp"])
    monkeypatch.setenv("HOME", str(worker_home))
    monkeypatch.setenv("BATON_CANARY_SECRET", canaries["env"])
    monkeypatch.chdir(cwd)
    planted = [
        worker_home / ".cache/baton/redis/server.json",
        worker_home / ".ssh/id_ed25519",
        cwd / ".env",
        host_tmp / "secret",
        Path("/etc/shadow"),
        Path("/etc/ssh"),
        Path("/root"),
    ]
    sockets = program(dirs, "sockets.py", SOCKETS)
    script = (
        "env; echo; tr '\\0' '\\n' </proc/1/environ; tr '\\0' '\\n' </proc/self/environ; "
        "ls -la / /root /home /work /run /var /sys /etc; "
        + "".join(f"cat {p}; ls -la {p}; " for p in planted)
        + f"ls -la /tmp /home/agent; find / -path /proc -prune -o -type s -print; {sockets}; "
        "env > /workspace/env.txt; ls -laR /run > /home/agent/run.txt 2>&1; echo done"
    )
    extra = {"proxy_socket": unix_echo} if network == "proxy" else {}
    try:
        done = sh(dirs, script, network=network, env={"ALLOWED": "yes"}, **extra)
    finally:
        shutil.rmtree(host_tmp)
    seen = (
        done.stdout
        + done.stderr
        + b"".join(p.read_bytes() for d in dirs for p in d.rglob("*") if p.is_file())
    )
    for name, value in canaries.items():
        assert value.encode() not in seen, name
    assert done.stdout.endswith(b"done\n")
    out = done.stdout.decode()
    for missing in ("/root", "/work", "/var", "/sys", "/etc/shadow", "/etc/ssh", *map(str, planted[:4])):
        assert f"cannot access '{missing}'" in done.stderr.decode(), missing
    found = [line.split()[1] for line in out.splitlines() if line.startswith("socket:")]
    assert found == (["/run/baton/proxy.sock"] if network == "proxy" else [])
    run = (dirs[1] / "run.txt").read_text()
    assert "init.py" in run
    assert "seccomp.bpf" in run
    if network == "none":
        assert "proxy.sock" not in run  # /run holds Baton's init and filter, nothing of the host's


def test_only_the_workspace_home_and_tmp_are_writable(dirs: tuple[Path, Path]) -> None:
    targets = [
        "/",
        "/usr",
        "/usr/local",
        "/etc",
        "/dev",
        "/proc",
        "/workspace",
        "/home/agent",
        "/tmp",
        "/dev/shm",
        "/home",
        "/run",
    ]
    script = "".join(f"touch {t}/probe-file 2>/dev/null && echo {t}; " for t in targets)
    done = sh(
        dirs,
        script + "touch /etc/passwd 2>/dev/null && echo /etc/passwd; echo x >> /etc/hosts 2>/dev/null "
        "&& echo /etc/hosts; true",
    )
    assert done.stdout.decode().split() == ["/workspace", "/home/agent", "/tmp", "/dev/shm"]
    assert (dirs[0] / "probe-file").exists()
    assert (dirs[1] / "probe-file").exists()
    assert [w.split()[0] for w in done.report.writable] == ["/workspace", "/home/agent", "/tmp", "/dev/shm"]
    assert done.report.read_only_system.in_force


def test_a_read_only_workspace_can_be_read_but_not_changed_and_the_report_says_so(
    dirs: tuple[Path, Path],
) -> None:
    """A reviewer's box: it reads the result tree and cannot change a byte of it."""
    (dirs[0] / "result.py").write_text("print('the change')\n")
    done = sh(dirs, "cat result.py; touch new 2>/dev/null && echo MADE; echo x >> result.py 2>/dev/null "
                    "&& echo CHANGED; rm -f result.py 2>/dev/null; touch /home/agent/ok && echo HOME; true",
              workspace_readonly=True)  # fmt: skip
    assert done.stdout.decode().split("\n")[:2] == ["print('the change')", "HOME"]
    assert sorted(p.name for p in dirs[0].iterdir()) == ["result.py"]
    assert (dirs[0] / "result.py").read_text() == "print('the change')\n"
    assert [w.split()[0] for w in done.report.writable] == ["/home/agent", "/tmp", "/dev/shm"]


def test_the_cwd_is_the_workspace_and_a_system_tool_runs(dirs: tuple[Path, Path]) -> None:
    (dirs[0] / "hello.txt").write_text("hi")
    done = sh(dirs, "pwd; cat hello.txt; echo; whoami; " + PY + " -I -c 'print(1 + 1)'")
    assert done.stdout.decode().split() == ["/workspace", "hi", "agent", "2"]


def test_a_read_only_bind_is_visible_and_read_only(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    tool = tmp_path / "tools"
    tool.mkdir()
    (tool / "run-me").write_text("#!/bin/sh\necho from-tool\n")
    (tool / "run-me").chmod(0o755)
    done = sh(dirs, f"{tool}/run-me; touch {tool}/x 2>/dev/null && echo WROTE; true", ro_binds=[tool])
    assert done.stdout == b"from-tool\n"
    assert done.report.read_only_system.detail.endswith(f"; also {tool} (read-only)")


def test_a_cgroup_that_did_not_take_is_not_claimed(tmp_path: Path) -> None:
    """A directory that only looks like a cgroup: the limit is written, the process is not in it, and so
    the box would report the limit as not in force."""
    group = new_cgroup(tmp_path, 64 * 1024 * 1024)
    assert (group / "memory.max").read_text() == str(64 * 1024 * 1024)
    assert join_cgroup(group, os.getpid()) == f"the box did not show up in {group}"


# -- network ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("network", ["none", "proxy"])
def test_without_a_network_the_host_and_dns_are_unreachable(
    dirs: tuple[Path, Path], tcp_listener: int, unix_echo: Path, network: str
) -> None:
    extra = {"proxy_socket": unix_echo} if network == "proxy" else {}
    connect = program(dirs, "connect.py", CONNECT)
    script = f"{connect} {tcp_listener} 2>/dev/null && echo REACHED-HOST; "
    done = sh(
        dirs,
        script + "getent hosts example.com && echo RESOLVED; cat /proc/net/dev",
        network=network,
        **extra,
    )
    assert b"REACHED-HOST" not in done.stdout
    assert b"RESOLVED" not in done.stdout
    interfaces = [line.split(":")[0].strip() for line in done.stdout.decode().splitlines()[2:]]
    assert interfaces == ["lo"]
    assert done.report.net_namespace.in_force
    assert done.report.network == {"none": "none", "proxy": "loopback only + proxy"}[network]


def test_with_the_host_network_the_listener_is_reachable(dirs: tuple[Path, Path], tcp_listener: int) -> None:
    """The control for the test above: the same probe does reach the host when it may."""
    done = sh(
        dirs, f"{program(dirs, 'connect.py', CONNECT)} {tcp_listener} && echo REACHED-HOST", network="host"
    )
    assert done.stdout == b"REACHED-HOST\n"
    assert not done.report.net_namespace.in_force
    assert done.report.network == "host"


def test_the_forwarder_carries_loopback_3128_to_the_proxy_socket(
    dirs: tuple[Path, Path], unix_echo: Path
) -> None:
    done = sh(dirs, program(dirs, "client.py", CLIENT), network="proxy", proxy_socket=unix_echo)
    assert done.stdout.decode().split() == ["stand-in:hello", "http://127.0.0.1:3128"], done.stderr


@pytest.mark.skipif(not (ROOT / "worker" / "runner" / "proxy.py").exists(), reason="no egress proxy yet")
def test_through_the_real_egress_proxy(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    from worker.runner.proxy import EgressProxy

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the allowed host")

        def log_message(self, *_: object) -> None:
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    fetch = program(dirs, "fetch.py", FETCH) + " http://allowed.example/ http://other.example/"
    try:
        sock = tmp_path / "egress.sock"
        routes = {"allowed.example": ("127.0.0.1", web.server_address[1])}
        with EgressProxy(sock, allow=["allowed.example"], routes=routes) as proxy:
            done = sh(dirs, fetch, network="proxy", proxy_socket=sock)
            log = proxy.log.to_data()
    finally:
        web.shutdown()
        web.server_close()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "hello from the allowed host", done.stderr
    assert lines[1].startswith("refused")
    assert [(e["host"], e["allowed"]) for e in log] == [("allowed.example", True), ("other.example", False)]


# -- environment -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("network", ["none", "proxy"])
def test_the_environment_is_exactly_the_spec_plus_the_box(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, unix_echo: Path, network: str
) -> None:
    monkeypatch.setenv("WORKER_ONLY_CANARY", "must-not-pass")
    extra = {"proxy_socket": unix_echo} if network == "proxy" else {}
    done = run(
        dirs,
        ["env", "-0"],
        env={"ANTHROPIC_API_KEY": "k", "PATH": "/opt/x:/usr/bin:/bin"},
        network=network,
        **extra,
    )
    env = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if item)
    expected = {
        "ANTHROPIC_API_KEY": "k",
        "PATH": "/opt/x:/usr/bin:/bin",
        "HOME": "/home/agent",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PWD": "/workspace",
    }
    if network == "proxy":
        url = "http://127.0.0.1:3128"
        expected |= {
            "HTTPS_PROXY": url,
            "HTTP_PROXY": url,
            "https_proxy": url,
            "http_proxy": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    assert env == expected


# -- limits ----------------------------------------------------------------------------------------------


def test_output_is_capped_and_counted(dirs: tuple[Path, Path]) -> None:
    done = sh(
        dirs, "head -c 52428800 /dev/zero; head -c 300000 /dev/urandom >&2", max_output_bytes=1024 * 1024
    )
    assert (len(done.stdout), done.stdout_bytes) == (1024 * 1024, 50 * 1024 * 1024)
    assert (len(done.stderr), done.stderr_bytes) == (300000, 300000)
    assert done.exit_code == 0


def test_stdin_is_fed_in_full_while_output_is_read(dirs: tuple[Path, Path]) -> None:
    data = os.urandom(3 * 1024 * 1024)
    done = run(dirs, ["cat"], stdin=data, max_output_bytes=len(data))
    assert done.stdout == data


def test_a_file_cannot_grow_past_max_file_bytes(dirs: tuple[Path, Path]) -> None:
    done = sh(dirs, "head -c 2000000 /dev/zero > /workspace/big", max_file_bytes=1_000_000)
    assert (dirs[0] / "big").stat().st_size == 1_000_000
    assert done.exit_code != 0 or done.signal is not None
    assert done.report.file_size_limit.in_force


def test_the_process_limit_is_reported_honestly(dirs: tuple[Path, Path]) -> None:
    """RLIMIT_NPROC does not bind host uid 0: as root it is reported as not in force (and is not)."""
    done = sh(
        dirs, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 0.2 & done; wait; echo forked", max_processes=6
    )
    if os.getuid() == 0 and host().pids_cgroup is None:
        assert not done.report.process_limit.in_force
        assert "host uid 0" in done.report.process_limit.detail
        assert done.stdout == b"forked\n"
    else:  # by RLIMIT_NPROC, or for root by a cgroup's pids.max
        assert done.report.process_limit.in_force
        assert b"forked" not in done.stdout


@pytest.mark.skipif(os.getuid() != 0 or not Path(PY).exists(), reason="needs root to become another user")
def test_the_process_limit_binds_a_worker_that_is_not_root() -> None:
    """The same box started by uid 65534: now the kernel counts the box's processes and refuses the 7th."""
    base = Path(tempfile.mkdtemp(prefix="baton-nproc-"))
    try:
        for name in ("workspace", "home"):
            (base / name).mkdir()
            os.chown(base / name, 65534, 65534)
        base.chmod(0o755)
        script = (
            f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
            "from worker.runner import box; "
            "r = box.run(box.BoxSpec(argv=['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do "
            "sleep 0.2 & done; wait; echo forked'], workspace=Path(sys.argv[1], 'workspace'), "
            "home=Path(sys.argv[1], 'home'), max_processes=6)); "
            "print(json.dumps([r.stdout.decode(), r.stderr.decode(), r.report.process_limit.in_force]))"
        )
        done = subprocess.run(
            [PY, "-I", "-c", script, str(base)],
            capture_output=True,
            text=True,
            timeout=60,
            user=65534,
            group=65534,
            extra_groups=[],
            cwd="/",
            check=False,
        )
        assert done.returncode == 0, done.stderr
        stdout, stderr, in_force = json.loads(done.stdout)
        assert in_force
        assert "forked" not in stdout
        assert "fork" in stderr.lower()
    finally:
        shutil.rmtree(base)


def test_a_memory_limit_is_in_force_only_where_the_machine_delegates_it(dirs: tuple[Path, Path]) -> None:
    done = sh(dirs, "true", memory_bytes=256 * 1024 * 1024)
    facts = host()
    assert done.report.memory_limit.in_force  # by the cgroup where delegated, else by the supervisor
    held = "cgroup" if facts.memory_cgroup is not None else "supervisor"
    assert f"memory 256 MiB ({held})" in done.report.summary
    if facts.memory_cgroup is None:
        assert facts.memory_cgroup_reason in done.report.memory_limit.detail
    assert not sh(dirs, "true").report.memory_limit.in_force


def test_cgroup_v2_delegation_is_read_from_the_machine(tmp_path: Path) -> None:
    v1 = "30 23 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    v2 = "31 23 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    group = tmp_path / "sys/fs/cgroup/svc/worker"
    group.mkdir(parents=True)
    (group / "cgroup.controllers").write_text("cpu memory pids\n")
    (group / "cgroup.subtree_control").write_text("")

    def find(mounts: str, own: str = "0::/svc/worker\n", writable: bool = True) -> tuple[Path | None, str]:
        return find_memory_cgroup(own, mounts, writable=lambda _: writable, fs_root=tmp_path)

    assert find(v1) == (None, "no cgroup v2 hierarchy is mounted (memory is on a cgroup v1 hierarchy here)")
    assert find(v2, own="") == (None, "this process is in no cgroup v2 group")
    assert find(v2)[0] == group.parent  # the worker's own group holds it; boxes go beside it
    assert find(v2, writable=False)[0] is None
    assert "not delegated" in find(v2, writable=False)[1]
    (group / "cgroup.controllers").write_text("cpu pids\n")
    assert "no memory controller" in find(v2)[1]


# -- hostile output --------------------------------------------------------------------------------------


def test_hostile_output_is_kept_as_bytes_and_shown_defanged(dirs: tuple[Path, Path]) -> None:
    hostile = b"".join(
        [
            b"ok line\n\x1b[2J\x1b[31mred\x1b[0m \x1b]0;pwned title\x07 ",
            b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n",
            b"\xff\xfe\xc3( invalid utf-8 \x00 nul \x07 bell\r\noverwrite\rme\n",
            "bidi \u202egnp.exe\u202c zero\u200bwidth \u009b31m c1\n".encode(),
            b"\x1bP+q\x1b\\ tail\n",
        ]
    )
    done = run(dirs, ["cat"], stdin=hostile)
    assert done.stdout == hostile
    text = done.excerpt(lines=50, stream="stdout")
    assert not any(ord(ch) < 32 and ch != "\n" for ch in text)
    assert not any(ch in text for ch in "\x7f\x9b\u202e\u202c\u200b")
    assert "red" in text
    assert "link" in text
    assert "pwned" not in text
    assert text.splitlines()[-1] == " tail"
    assert done.excerpt(lines=2, stream="stdout").splitlines() == [text.splitlines()[-2], " tail"]
    assert len(done.excerpt(lines=1000, max_chars=10, stream="stdout")) <= 10


def test_the_excerpt_prefers_stderr(dirs: tuple[Path, Path]) -> None:
    assert sh(dirs, "echo out; echo err >&2").excerpt() == "err"
    assert sh(dirs, "echo out").excerpt() == "out"


# -- the probe and the report ----------------------------------------------------------------------------


def test_the_probe_says_what_this_machine_enforces() -> None:
    found = box.probe()
    assert found is box.probe()  # once per process
    assert (found.bwrap_runs, found.user_namespaces, found.network_namespace) == (True, True, True), (
        found.problems
    )
    assert found.network_cutoff == (found.python and not found.problems)
    assert found.seccomp
    data = found.to_data()
    assert set(data) >= {"bwrap", "network_cutoff", "memory_cgroup", "memory_cgroup_detail", "problems"}
    assert json.loads(json.dumps(data)) == data


def test_the_report_is_plain_deterministic_data(dirs: tuple[Path, Path]) -> None:
    first, second = sh(dirs, "true").report.to_data(), sh(dirs, "true").report.to_data()
    assert first == second
    assert json.loads(json.dumps(first)) == first
    assert first["network"] == "none"
    assert first["seccomp"]["in_force"] is True
    unheld = host().uid == 0 and host().pids_cgroup is None  # the kernel exempts root from RLIMIT_NPROC
    processes = "processes: no limit" if unheld else "processes 1024"
    assert first["summary"] == f"network: none; memory: no limit; {processes}; disk: no limit; seccomp on"


def test_a_box_that_cannot_be_built_raises(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    """bwrap's own failure (a bind onto a symlink inside an earlier read-only bind) is not an exit code."""
    tools = tmp_path / "tools"
    (tools / "real").mkdir(parents=True)
    (tools / "link").symlink_to(tools / "real")
    with pytest.raises(BoxError, match="could not build the box") as caught:
        run(dirs, ["true"], ro_binds=[tools, tools / "link"])
    assert caught.value.code == "box-setup-failed"


def test_a_root_worker_s_v1_pids_group_is_read_from_the_machine(tmp_path: Path) -> None:
    """Where v2 does not hold the processes, the worker's own v1 ``pids`` group does, if writable."""
    pids = "35 23 0:33 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    own = "8:pids:/svc\n1:name=systemd:/\n0::/\n"
    group = tmp_path / "sys/fs/cgroup/pids/svc"
    group.mkdir(parents=True)

    def find(mounts: str, cgroups: str = own, writable: bool = True) -> Path | None:
        return find_pids_cgroup(cgroups, mounts, writable=lambda _: writable, fs_root=tmp_path)

    assert find(pids) == group
    assert find(pids, writable=False) is None
    assert find("31 23 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n") is None  # no v1 pids hierarchy
    assert find(pids, cgroups="0::/\n") is None  # not in a pids group
