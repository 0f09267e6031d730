"""The box's seccomp filter, as classic BPF bytes built here (no libseccomp, no process, no file read).

:func:`program` returns the array of ``struct sock_filter`` an in-box init hands to
``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog)`` after ``PR_SET_NO_NEW_PRIVS``, for the
agent (and command gates) only: the box's own forwarder stays unfiltered. Each refused call
returns ``EPERM``, so a program sees an ordinary failure rather than a crash, except:

- a system call made with another ABI's table (i386 ``int 0x80`` on x86-64, AArch32 on arm64)
  kills the process, since its numbers mean other calls and could walk round this table;
- ``clone3`` returns ``ENOSYS``: its flags sit behind a pointer a filter cannot read, so it could
  make a user namespace unseen; glibc (threads, ``posix_spawn``) and others fall back to ``clone()``
  (whose flags the filter does read) on ``ENOSYS`` only, and would fail on ``EPERM``.

``socketpair()`` stays allowed: a connected pair reaches nothing outside the process tree, and
Node's libuv and Python's asyncio subprocesses make their child's stdio with it. A host's unix
socket (docker's, systemd's) is reached only through ``socket()`` + ``connect()``, which is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
CLONE_NEWUSER = 0x10000000
#: personality(2) values that change nothing: PER_LINUX, and 0xffffffff (the query).
PERSONALITY_KEPT = (0x0, 0xFFFFFFFF)

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38
#: The kernel's limit on a filter's length (BPF_MAXINSNS, include/uapi/linux/bpf_common.h).
BPF_MAXINSNS = 4096
#: At most this many socket families may be allowed (the kernel knows fewer than 64, AF_MAX).
MAX_FAMILIES = 64

# Classic BPF opcodes (include/uapi/linux/bpf_common.h): the only ones this generator emits.
LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

# struct seccomp_data {int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];}: both machines
# are little-endian, so an argument's low 32 bits are at the start of its 8 bytes.
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_X32_BIT = 0x40000000
_INSN = struct.Struct("<HBBI")


class Unsupported(ValueError):
    """No filter is built for this machine; the box report says seccomp is not in force."""


#: Refused outright with EPERM, in the order the program tests them.
_REFUSED_CALLS = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "ptrace",
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
)
_CHECKED_CALLS = ("socket", "clone", "unshare", "clone3", "personality")

#: What the filter refuses, for the box report (stable order).
REFUSED = (
    "system calls of another ABI (i386, AArch32: the process is killed)",
    "x32 system calls",
    "unix and other non-inet sockets",
    "io_uring",
    "ptrace",
    "process_vm_readv/writev",
    "kernel keyrings (keyctl, add_key, request_key)",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec",
    "setns",
    "new user namespaces (unshare, clone; clone3 answers ENOSYS)",
    "personality changes",
)
SUMMARY = (
    "seccomp: non-inet sockets, io_uring, ptrace, process_vm_*, keyrings, bpf, perf_event_open, "
    "userfaultfd, kexec, setns, new user namespaces and personality changes refused"
)


@dataclass(frozen=True)
class _Machine:
    audit_arch: int
    #: x86-64 also takes x32 calls (number | 0x40000000) under its own audit arch.
    x32: bool
    numbers: Mapping[str, int]


# Checked on Debian 12 against /usr/include/x86_64-linux-gnu/asm/unistd_64.h (linux-libc-dev 6.1).
_X86_64 = {
    "socket": 41,
    "clone": 56,
    "ptrace": 101,
    "personality": 135,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone3": 435,
}
# arm64 uses the generic table: checked on Debian 12 against /usr/include/asm-generic/unistd.h.
_GENERIC = {
    "unshare": 97,
    "kexec_load": 104,
    "ptrace": 117,
    "personality": 92,
    "socket": 198,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "clone": 220,
    "perf_event_open": 241,
    "setns": 268,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "bpf": 280,
    "userfaultfd": 282,
    "kexec_file_load": 294,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone3": 435,
}
MACHINES: Mapping[str, _Machine] = {
    "x86_64": _Machine(audit_arch=0xC000003E, x32=True, numbers=_X86_64),  # AUDIT_ARCH_X86_64
    "aarch64": _Machine(audit_arch=0xC00000B7, x32=False, numbers=_GENERIC),  # AUDIT_ARCH_AARCH64
}


class _Assembler:
    """Instructions with jumps to named labels, resolved to BPF's forward 8-bit offsets."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        self._code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def assemble(self) -> bytes:
        if len(self._code) >= BPF_MAXINSNS:
            raise ValueError(f"seccomp program of {len(self._code)} instructions: at most {BPF_MAXINSNS - 1}")
        out = bytearray()
        for at, (code, jt, jf, k) in enumerate(self._code):
            out += _INSN.pack(code, self._offset(at, jt), self._offset(at, jf), k)
        return bytes(out)

    def _offset(self, at: int, label: str | None) -> int:
        if label is None:
            return 0
        offset = self._labels[label] - at - 1
        if not 0 <= offset <= 0xFF:
            raise ValueError(f"seccomp jump from {at} to {label!r} is {offset}: BPF jumps forward by 0..255")
        return offset


def program(machine: str, *, socket_families: frozenset[int] = frozenset({AF_INET, AF_INET6})) -> bytes:
    """The filter for ``machine`` (as ``os.uname().machine`` spells it), ready for a ``sock_fprog``.

    Pure and deterministic: the box report can name it by its hash.
    """
    spec = MACHINES.get(machine)
    if spec is None:
        supported = ", ".join(sorted(MACHINES))
        raise Unsupported(f"no seccomp filter for machine {machine!r}: only {supported} are supported")
    families = _families(socket_families)
    nr = spec.numbers
    asm = _Assembler()
    asm.op(LD_W_ABS, _ARCH)
    asm.op(JEQ_K, spec.audit_arch, jt="native")
    asm.op(RET_K, SECCOMP_RET_KILL_PROCESS)
    asm.label("native")
    asm.op(LD_W_ABS, _NR)
    if spec.x32:
        asm.op(JSET_K, _X32_BIT, jt="eperm")
    asm.op(JEQ_K, nr["socket"], jt="socket")
    asm.op(JEQ_K, nr["clone"], jt="namespaces")
    asm.op(JEQ_K, nr["unshare"], jt="namespaces")
    # clone3's flags are behind a pointer the filter cannot read: ENOSYS makes libc fall back to clone().
    asm.op(JEQ_K, nr["clone3"], jt="enosys")
    asm.op(JEQ_K, nr["personality"], jt="personality")
    for name in _REFUSED_CALLS:
        asm.op(JEQ_K, nr[name], jt="eperm")
    asm.op(RET_K, SECCOMP_RET_ALLOW)

    asm.label("socket")  # the domain is an int: the kernel reads only the low 32 bits
    asm.op(LD_W_ABS, _ARG0_LOW)
    for family in families:
        asm.op(JEQ_K, family, jt="allow")
    asm.op(RET_K, SECCOMP_RET_ERRNO | EPERM)

    asm.label("namespaces")  # CLONE_NEWUSER is in the low 32 bits of clone's and unshare's flags
    asm.op(LD_W_ABS, _ARG0_LOW)
    asm.op(JSET_K, CLONE_NEWUSER, jt="eperm", jf="allow")

    asm.label("personality")  # personality(2) takes an unsigned int: the low 32 bits are all of it
    asm.op(LD_W_ABS, _ARG0_LOW)
    for kept in PERSONALITY_KEPT:
        asm.op(JEQ_K, kept, jt="allow")

    asm.label("eperm")
    asm.op(RET_K, SECCOMP_RET_ERRNO | EPERM)
    asm.label("enosys")
    asm.op(RET_K, SECCOMP_RET_ERRNO | ENOSYS)
    asm.label("allow")
    asm.op(RET_K, SECCOMP_RET_ALLOW)
    return asm.assemble()


def _families(socket_families: frozenset[int]) -> list[int]:
    if len(socket_families) > MAX_FAMILIES:
        raise ValueError(f"socket_families: {len(socket_families)} families, at most {MAX_FAMILIES}")
    for family in socket_families:
        if type(family) is not int or not 0 <= family <= 0xFFFF:
            raise ValueError(f"socket_families: {family!r} is not an address family (an int 0..65535)")
    return sorted(socket_families)
