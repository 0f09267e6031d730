"""The seccomp filter, judged by the kernel that will enforce it and by a classic-BPF interpreter.

The kernel runs the x86-64 program in a real process (``seccomp_probe.py``) that tries what a
hostile agent would; the interpreter runs both machines' programs (arm64 cannot run here) on the
same cases, and must agree with the kernel where both can be asked.
"""

from __future__ import annotations

import json
import platform
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from worker.runner import seccomp
from worker.runner.seccomp import (
    AF_INET,
    AF_INET6,
    AF_UNIX,
    CLONE_NEWUSER,
    ENOSYS,
    EPERM,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    Unsupported,
)

PROBE = Path(__file__).with_name("seccomp_probe.py")
AF_NETLINK, AF_PACKET = 16, 17
#: Errno the marked program answers instead of EPERM (EHWPOISON: nothing here returns it by itself).
MARK = 133
ALLOW, REFUSE, NOSYS = SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: Other ABIs a process on each machine can call the kernel with: i386 and x32 kin, AArch32.
FOREIGN_ARCH = {"x86_64": (0x40000003, 0xC00000B7), "aarch64": (0x40000028, 0xC000003E)}
#: Allowed calls the filter does not name; numbers from the same headers as the module's tables.
OTHER_CALLS = {
    "x86_64": {"read": 0, "getpid": 39, "socketpair": 53, "vfork": 58},
    "aarch64": {"read": 63, "getpid": 172, "socketpair": 199},
}
FORK_FLAGS = 0x01200011  # CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | SIGCHLD (glibc's fork)
THREAD_FLAGS = 0x003D0F00  # glibc's pthread_create: CLONE_VM | CLONE_FS | ... | CLONE_CHILD_CLEARTID

#: (probe name in seccomp_probe.py, or a name of its own; system call; arg0; verdict).
CASES: tuple[tuple[str, str, int, int], ...] = (
    ("socket unix", "socket", AF_UNIX, REFUSE),
    ("socket netlink", "socket", AF_NETLINK, REFUSE),
    ("socket packet", "socket", AF_PACKET, REFUSE),
    ("tcp4 connect", "socket", AF_INET, ALLOW),
    ("tcp6 connect", "socket", AF_INET6, ALLOW),
    ("socket inet, high bits set", "socket", (1 << 32) | AF_INET, ALLOW),
    ("socket unix, high bits set", "socket", (1 << 32) | AF_UNIX, REFUSE),
    ("socketpair unix", "socketpair", AF_UNIX, ALLOW),
    ("io_uring_setup", "io_uring_setup", 1, REFUSE),
    ("io_uring_enter", "io_uring_enter", 0, REFUSE),
    ("io_uring_register", "io_uring_register", 0, REFUSE),
    ("ptrace attach sibling", "ptrace", 16, REFUSE),
    ("ptrace seize sibling", "ptrace", 0x4206, REFUSE),
    ("process_vm_readv", "process_vm_readv", 1, REFUSE),
    ("process_vm_writev", "process_vm_writev", 1, REFUSE),
    ("keyctl", "keyctl", 0, REFUSE),
    ("add_key", "add_key", 0, REFUSE),
    ("request_key", "request_key", 0, REFUSE),
    ("bpf", "bpf", 0, REFUSE),
    ("perf_event_open", "perf_event_open", 0, REFUSE),
    ("userfaultfd", "userfaultfd", 0, REFUSE),
    ("kexec_load", "kexec_load", 0, REFUSE),
    ("kexec_file_load", "kexec_file_load", 0, REFUSE),
    ("setns", "setns", 0, REFUSE),
    ("unshare newuser", "unshare", CLONE_NEWUSER, REFUSE),
    ("clone newuser", "clone", CLONE_NEWUSER | 17, REFUSE),
    ("unshare 0", "unshare", 0, ALLOW),
    ("fork", "clone", FORK_FLAGS, ALLOW),
    ("thread", "clone", THREAD_FLAGS, ALLOW),
    ("clone3", "clone3", 0, NOSYS),
    ("personality addr_no_randomize", "personality", 0x0040000, REFUSE),
    ("personality query", "personality", 0xFFFFFFFF, ALLOW),
    ("personality linux", "personality", 0, ALLOW),
    ("personality, high bits of the query", "personality", (1 << 32) | 0xFFFFFFFF, ALLOW),
    ("getpid", "getpid", 0, ALLOW),
    ("read", "read", 0, ALLOW),
)
#: Cases only the interpreter can ask (the probe process does not try them by these names).
INTERPRETER_ONLY = frozenset(
    {
        "socket inet, high bits set",
        "socket unix, high bits set",
        "personality, high bits of the query",
        "getpid",
        "read",
    }
)
KERNEL_CASES = tuple(c for c in CASES if c[0] not in INTERPRETER_ONLY)
#: What each verdict looks like to the probe: the real program, and the one whose EPERM is MARK.
SEEN = {ALLOW: 0, REFUSE: EPERM, NOSYS: ENOSYS}
SEEN_MARKED = {ALLOW: 0, REFUSE: MARK, NOSYS: ENOSYS}
on_x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the kernel runs only its own program")


# --- a classic BPF interpreter: just the opcodes the generator emits, strict about everything else


def run_bpf(program: bytes, data: bytes) -> int:
    """The seccomp verdict of ``program`` for one ``struct seccomp_data``, as the kernel computes it."""
    assert len(program) % 8 == 0, "a program is whole 8-byte instructions"
    code = [struct.unpack_from("<HBBI", program, at) for at in range(0, len(program), 8)]
    assert 0 < len(code) < seccomp.BPF_MAXINSNS
    acc, pc = 0, 0
    for _ in range(len(code)):  # jumps go forward only, so each instruction runs at most once
        assert pc < len(code), "ran off the end of the program"
        op, jt, jf, k = code[pc]
        pc += 1
        if op == seccomp.LD_W_ABS:
            assert k % 4 == 0, f"unaligned load at {k}"
            assert k + 4 <= len(data), f"load at {k} past seccomp_data"
            (acc,) = struct.unpack_from("<I", data, k)
        elif op == seccomp.JEQ_K:
            pc += jt if acc == k else jf
        elif op == seccomp.JSET_K:
            pc += jt if acc & k else jf
        elif op == seccomp.RET_K:
            return int(k)
        else:
            raise AssertionError(f"opcode {op:#x} is not one the generator emits")
    raise AssertionError("no return")


def seccomp_data(arch: int, nr: int, arg0: int = 0) -> bytes:
    return struct.pack("<iIQ6Q", nr, arch, 0x401000, arg0 & 0xFFFFFFFFFFFFFFFF, 0, 0, 0, 0, 0)


def number(machine: str, call: str) -> int:
    return {**seccomp.MACHINES[machine].numbers, **OTHER_CALLS[machine]}[call]


# --- the kernel


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A host unix socket and a loopback TCP listener, both listening: what the box would try to reach."""
    path = str(tmp_path_factory.mktemp("seccomp") / "host.sock")
    with socket.socket(socket.AF_UNIX) as unix, socket.socket(socket.AF_INET) as tcp:
        unix.bind(path)
        unix.listen(8)
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        yield path, tcp.getsockname()[1]


def probe(program: bytes | None, targets: tuple[str, int]) -> dict[str, int]:
    path, port = targets
    argv = [sys.executable, str(PROBE), program.hex() if program is not None else "-", path, str(port)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    results: dict[str, int] = json.loads(done.stdout)
    return results


def marked(program: bytes) -> bytes:
    """``program`` with each ``RET ERRNO|EPERM`` answering MARK: an EPERM the kernel gives by itself shows."""
    refuse = struct.pack("<HBBI", seccomp.RET_K, 0, 0, REFUSE)
    mark = struct.pack("<HBBI", seccomp.RET_K, 0, 0, SECCOMP_RET_ERRNO | MARK)
    insns = [program[at : at + 8] for at in range(0, len(program), 8)]
    assert refuse in insns
    return b"".join(mark if insn == refuse else insn for insn in insns)


@pytest.fixture(scope="module")
def baseline(targets: tuple[str, int]) -> dict[str, int]:
    return probe(None, targets)


@pytest.fixture(scope="module")
def filtered(targets: tuple[str, int]) -> dict[str, int]:
    return probe(seccomp.program("x86_64"), targets)


@pytest.fixture(scope="module")
def filtered_marked(targets: tuple[str, int]) -> dict[str, int]:
    return probe(marked(seccomp.program("x86_64")), targets)


@on_x86_64
def test_unfiltered_the_probes_reach_what_the_filter_closes(baseline: Mapping[str, int]) -> None:
    assert baseline["socket unix"] == 0
    assert baseline["connect host unix socket"] == 0
    assert baseline["unshare 0"] == 0
    assert baseline["clone3"] != ENOSYS  # a kernel since 5.3 answers EINVAL for clone3(NULL, 0)


@on_x86_64
def test_the_filtered_agent_cannot_reach_a_host_unix_socket(filtered: Mapping[str, int]) -> None:
    assert filtered["socket unix"] == EPERM
    assert filtered["connect host unix socket"] == EPERM
    assert filtered["socket netlink"] == EPERM
    assert filtered["socket packet"] == EPERM


@on_x86_64
def test_the_filtered_agent_keeps_its_network_pipes_and_processes(filtered: Mapping[str, int]) -> None:
    kept = (
        "tcp4 connect",
        "tcp6 connect",
        "socketpair unix",
        "unshare 0",
        "fork",
        "thread",
        "subprocess true",
        "posix_spawn true",
        "personality query",
        "personality linux",
    )
    assert {name: filtered[name] for name in kept} == dict.fromkeys(kept, 0)


@on_x86_64
def test_the_filtered_agent_is_refused_the_escape_hatches(filtered: Mapping[str, int]) -> None:
    refused = (
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "ptrace attach sibling",
        "ptrace seize sibling",
        "process_vm_readv",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "kexec_load",
        "kexec_file_load",
        "setns",
        "unshare newuser",
        "clone newuser",
        "personality addr_no_randomize",
        "x32 getpid",
    )
    assert {name: filtered[name] for name in refused} == dict.fromkeys(refused, EPERM)
    assert filtered["clone3"] == ENOSYS


@on_x86_64
def test_an_i386_system_call_kills_the_filtered_process(
    baseline: Mapping[str, int], filtered: Mapping[str, int]
) -> None:
    if baseline["i386 getpid"] != 0:
        pytest.skip("this kernel has no i386 emulation: int 0x80 fails before seccomp sees it")
    assert filtered["i386 getpid"] == -31  # SIGSYS: SECCOMP_RET_KILL_PROCESS


@on_x86_64
@pytest.mark.parametrize(("name", "call", "arg0", "verdict"), KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_the_interpreter_agrees_with_the_kernel(
    name: str,
    call: str,
    arg0: int,
    verdict: int,
    *,
    filtered: Mapping[str, int],
    filtered_marked: Mapping[str, int],
) -> None:
    """Each EPERM is the filter's (the marked program answers MARK there), each verdict the kernel's."""
    data = seccomp_data(AUDIT_ARCH["x86_64"], number("x86_64", call), arg0)
    assert run_bpf(seccomp.program("x86_64"), data) == verdict
    assert (filtered[name], filtered_marked[name]) == (SEEN[verdict], SEEN_MARKED[verdict])


# --- the interpreter, both machines


@pytest.mark.parametrize("machine", sorted(AUDIT_ARCH))
@pytest.mark.parametrize(("name", "call", "arg0", "verdict"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_gives_the_same_verdict_on_both_machines(
    machine: str, name: str, call: str, arg0: int, verdict: int
) -> None:
    data = seccomp_data(AUDIT_ARCH[machine], number(machine, call), arg0)
    assert run_bpf(seccomp.program(machine), data) == verdict, name


@pytest.mark.parametrize("machine", sorted(AUDIT_ARCH))
def test_a_call_through_another_abi_kills_the_process(machine: str) -> None:
    program = seccomp.program(machine)
    for arch in FOREIGN_ARCH[machine]:
        for nr in (0, 20, number(machine, "getpid"), number(machine, "socket")):
            assert run_bpf(program, seccomp_data(arch, nr)) == SECCOMP_RET_KILL_PROCESS


def test_x32_calls_are_refused_on_x86_64_and_mean_nothing_special_on_arm64() -> None:
    x86, arm = seccomp.program("x86_64"), seccomp.program("aarch64")
    for nr in (39 | 0x40000000, 0x40000000 | 41, 0x40000000 + 512):
        assert run_bpf(x86, seccomp_data(AUDIT_ARCH["x86_64"], nr)) == REFUSE
    assert run_bpf(arm, seccomp_data(AUDIT_ARCH["aarch64"], 39 | 0x40000000)) == ALLOW


def test_socket_families_are_the_callers_choice() -> None:
    only_inet = seccomp.program("x86_64", socket_families=frozenset({AF_INET}))
    inet6 = seccomp_data(AUDIT_ARCH["x86_64"], number("x86_64", "socket"), AF_INET6)
    assert run_bpf(only_inet, inet6) == REFUSE
    with_unix = seccomp.program("x86_64", socket_families=frozenset({AF_INET, AF_UNIX}))
    unix = seccomp_data(AUDIT_ARCH["x86_64"], number("x86_64", "socket"), AF_UNIX)
    assert run_bpf(with_unix, unix) == ALLOW
    none = seccomp.program("x86_64", socket_families=frozenset())
    assert run_bpf(none, seccomp_data(AUDIT_ARCH["x86_64"], number("x86_64", "socket"), AF_INET)) == REFUSE


@pytest.mark.parametrize("families", [frozenset({-1}), frozenset({1 << 16}), frozenset(range(65))])
def test_a_family_that_is_not_one_is_an_error(families: frozenset[int]) -> None:
    with pytest.raises(ValueError, match="socket_families"):
        seccomp.program("x86_64", socket_families=families)


def test_an_unsupported_machine_says_which_are() -> None:
    with pytest.raises(Unsupported, match=r"'riscv64'.*aarch64, x86_64") as raised:
        seccomp.program("riscv64")
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("machine", sorted(AUDIT_ARCH))
def test_the_program_is_deterministic(machine: str) -> None:
    assert seccomp.program(machine) == seccomp.program(machine)
    one = seccomp.program(machine, socket_families=frozenset([AF_INET6, AF_INET, AF_UNIX]))
    assert one == seccomp.program(machine, socket_families=frozenset([AF_UNIX, AF_INET, AF_INET6]))
    assert one != seccomp.program(machine)


def test_the_report_names_what_is_refused() -> None:
    assert len(set(seccomp.REFUSED)) == len(seccomp.REFUSED)
    assert "unix and other non-inet sockets" in seccomp.REFUSED
    assert "io_uring" in seccomp.REFUSED
    assert "\n" not in seccomp.SUMMARY
