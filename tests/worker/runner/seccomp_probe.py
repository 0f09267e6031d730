"""A process that applies a seccomp program, as the box's init will, then tries what an agent might.

Run as ``python seccomp_probe.py PROGRAM_HEX|- UNIX_SOCKET_PATH TCP_PORT`` ("-": no filter, the
baseline). Prints one JSON object: probe name -> 0 (it worked), an errno, or -signal (the process
trying it was killed). x86-64 only: the raw numbers below are x86-64's.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
KEY_SPEC_PROCESS_KEYRING = -2


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def apply(program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def sys_call(nr: int, *args: int | bytes | ctypes.Array[ctypes.c_char] | None) -> int:
    """The raw call: 0 when it worked (a returned fd is closed), else its errno."""
    ctypes.set_errno(0)
    wrapped = [ctypes.c_long(a) if isinstance(a, int) and a < 0 else a for a in args]
    wrapped = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in wrapped]
    result = libc.syscall(ctypes.c_long(nr), *wrapped)
    return ctypes.get_errno() if result == -1 else 0


def fd_call(nr: int, *args: int | bytes | ctypes.Array[ctypes.c_char] | None) -> int:
    ctypes.set_errno(0)
    wrapped = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    fd = libc.syscall(ctypes.c_long(nr), *wrapped)
    if fd == -1:
        return ctypes.get_errno()
    os.close(fd)
    return 0


def in_child(attempt: Callable[[], int]) -> int:
    """``attempt`` in a forked child (it may change the process or kill it): its result or -signal."""
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            code = attempt()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def oserror(attempt: Callable[[], object]) -> int:
    try:
        attempt()
    except OSError as e:
        return e.errno or 255
    return 0


def open_socket(family: int, kind: int, proto: int = 0) -> None:
    socket.socket(family, kind, proto).close()


def connect(family: int, address: object) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(address)


def socketpair() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        a.sendall(b"x")
        if b.recv(1) != b"x":
            raise OSError(5, "socketpair lost a byte")


def ptrace_sibling(request: int) -> int:
    """Trace a sibling (a child of this process) that is blocked on a pipe; kill it after."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        return sys_call(101, request, pid, 0, 0)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(w)


def process_vm(nr: int) -> int:
    here, there = ctypes.create_string_buffer(8), ctypes.create_string_buffer(b"baton", 8)

    def iovec(buf: ctypes.Array[ctypes.c_char]) -> ctypes.Array[ctypes.c_char]:
        return ctypes.create_string_buffer(
            ctypes.c_uint64(ctypes.addressof(buf)).value.to_bytes(8, "little") + (8).to_bytes(8, "little"), 16
        )

    return sys_call(nr, os.getpid(), iovec(here), 1, iovec(there), 1, 0)


def thread() -> int:
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(1))
    t.start()
    t.join(10)
    return 0 if done else 255


def fork() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    return 0 if os.WEXITSTATUS(status) == 7 else 255


def posix_spawn_true() -> int:
    """glibc's posix_spawn (like pthread_create) tries clone3 first and falls back to clone on ENOSYS."""
    pid = os.posix_spawnp("true", ["true"], dict(os.environ))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) and 255


def i386_getpid() -> int:
    """getpid through the i386 table (int 0x80), the bypass a filter must close."""
    code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")  # mov eax, 20 (getpid); int 0x80; ret
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    pid = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    return 0 if pid == os.getpid() else 255


def main() -> None:
    program_hex, unix_path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if program_hex != "-":
        apply(bytes.fromhex(program_hex))
    params = ctypes.create_string_buffer(120)
    zeros = ctypes.create_string_buffer(128)
    probes: dict[str, Callable[[], int]] = {
        "socket unix": lambda: oserror(lambda: open_socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "connect host unix socket": lambda: oserror(lambda: connect(socket.AF_UNIX, unix_path)),
        "socket netlink": lambda: oserror(lambda: open_socket(socket.AF_NETLINK, socket.SOCK_RAW)),
        "socket packet": lambda: oserror(lambda: open_socket(socket.AF_PACKET, socket.SOCK_RAW)),
        "tcp4 connect": lambda: oserror(lambda: connect(socket.AF_INET, ("127.0.0.1", port))),
        "tcp6 connect": lambda: oserror(lambda: connect(socket.AF_INET6, ("::ffff:127.0.0.1", port))),
        "socketpair unix": lambda: oserror(socketpair),
        "io_uring_setup": lambda: fd_call(425, 1, params),
        "io_uring_enter": lambda: sys_call(426, -1, 0, 0, 0, None, 0),
        "io_uring_register": lambda: sys_call(427, -1, 0, None, 0),
        "ptrace attach sibling": lambda: ptrace_sibling(PTRACE_ATTACH),
        "ptrace seize sibling": lambda: ptrace_sibling(PTRACE_SEIZE),
        "process_vm_readv": lambda: process_vm(310),
        "process_vm_writev": lambda: process_vm(311),
        "keyctl": lambda: sys_call(250, 0, KEY_SPEC_PROCESS_KEYRING, 1),  # KEYCTL_GET_KEYRING_ID, create
        "add_key": lambda: sys_call(248, b"user", b"baton-probe", b"x", 1, KEY_SPEC_PROCESS_KEYRING),
        "request_key": lambda: sys_call(249, b"user", b"baton-absent", None, 0),
        "bpf": lambda: sys_call(321, 0xFFFF, None, 0),  # an unknown command: EINVAL unfiltered
        "perf_event_open": lambda: fd_call(298, zeros, 0, -1, -1, 0),
        "userfaultfd": lambda: fd_call(323, 0),
        "kexec_load": lambda: sys_call(246, 0, 0, None, 0x8000),  # an unknown flag: EINVAL unfiltered
        "kexec_file_load": lambda: sys_call(320, -1, -1, 0, None, 0x8000),
        "setns": lambda: sys_call(308, -1, 0),
        "unshare newuser": lambda: in_child(lambda: sys_call(272, CLONE_NEWUSER)),
        "clone newuser": lambda: in_child(clone_newuser),
        "unshare 0": lambda: sys_call(272, 0),
        "fork": fork,
        "thread": thread,
        "subprocess true": lambda: oserror(lambda: subprocess.run(["true"], check=True, timeout=30)),
        "posix_spawn true": posix_spawn_true,
        "clone3": lambda: sys_call(435, None, 0),
        "personality addr_no_randomize": lambda: in_child(lambda: personality(0x0040000)),
        "personality query": lambda: personality(0xFFFFFFFF),
        "personality linux": lambda: in_child(lambda: personality(0)),
        "x32 getpid": lambda: sys_call(39 | 0x40000000),
        "i386 getpid": lambda: in_child(i386_getpid),
    }
    print(json.dumps({name: probe() for name, probe in probes.items()}))


def clone_newuser() -> int:
    """clone(CLONE_NEWUSER | SIGCHLD) with no new stack: like fork, the child returns here and exits."""
    ctypes.set_errno(0)
    pid = libc.syscall(ctypes.c_long(56), ctypes.c_ulong(CLONE_NEWUSER | SIGCHLD), None, None, None, None)
    if pid == 0:
        os._exit(0)
    if pid == -1:
        return ctypes.get_errno()
    os.waitpid(pid, 0)
    return 0


def personality(persona: int) -> int:
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(135), ctypes.c_ulong(persona))
    return ctypes.get_errno() if result == -1 else 0


if __name__ == "__main__":
    main()
