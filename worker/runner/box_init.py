"""The box's first program: the "go" gate, Baton's forwarders, then the agent under its limits and filter.

This file is not imported by the worker: its source runs inside the box, on the box's own
``python3 -I -S`` (``bwrap.command`` puts it there), so it uses the standard library only, the
cheap C modules at that (``_socket``, ``_thread``, ``_signal``: the Python wrappers cost ~8 ms of
start-up), and nothing newer than Python 3.8.

It replaces a shell gate, ``socat`` and ``prlimit``, and it is the only way the seccomp filter
can spare the forwarder: the forwarder must create UNIX sockets (to reach the proxy and the
model gateway outside), the agent must not. So:

1. listen on the forwarders' loopback ports (before anything else: a failure is reported and
   nothing starts), then wait for "go" on stdin, read byte by byte so that the agent inherits
   the rest of stdin unread;
2. fork the agent: its rlimits, then ``no_new_privs`` and the filter, then one line on stderr
   (:data:`READY`) saying what it applied, written before ``exec`` so the agent cannot forge it;
3. forward connections until the agent exits, then exit with its status (128+N for signal N,
   as bwrap reports it). It makes itself non-dumpable, so the agent cannot read or write its
   memory through /proc, and passes the worker's SIGTERM on to every other process in the box.

Arguments: ``forward=PORT:SOCKET`` (repeatable), ``rlimit=NAME:VALUE`` (core, fsize, nproc),
``seccomp=PATH`` (a BPF program), then ``--`` and the agent's argv.
"""

from __future__ import annotations

import _socket  # the C modules: ``socket`` (and ``typing``) would cost the box ~10 ms of start-up
import _thread
import os
import sys

#: First line of the box's stderr once the agent's limits are applied (the worker strips it).
READY = b"baton-box: ready"
#: The line instead when the forwarder could not listen.
FORWARDER_FAILED = b"baton-box: the proxy forwarder did not start"
#: The line instead when the seccomp filter could not be applied: the agent does not start.
SECCOMP_FAILED = b"baton-box: the seccomp filter could not be applied"
#: Exit status of the box when it refused to start the agent (the worker tells these apart by the line).
REFUSED = 125
#: Connections forwarded at once; more are closed at once (the proxy's own limit is the same).
MAX_CONNECTIONS = 256
_CHUNK = 256 * 1024
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 4, 38, 22, 2
_ENOENT = 2


def parse(args: list[str]) -> tuple[list[tuple[int, str]], list[tuple[str, int]], bytes | None, list[str]]:
    """(forwards, rlimits, seccomp program, agent argv) from this program's arguments."""
    forwards: list[tuple[int, str]] = []
    limits: list[tuple[str, int]] = []
    program: bytes | None = None
    if "--" not in args:
        raise ValueError("no -- before the agent's argv")
    split = args.index("--")
    for arg in args[:split]:
        key, _, value = arg.partition("=")
        if key == "forward":
            port, _, path = value.partition(":")
            forwards.append((int(port), path))
        elif key == "rlimit":
            name, _, number = value.partition(":")
            limits.append((name, int(number)))
        elif key == "seccomp":
            with open(value, "rb") as file:
                program = file.read()
        else:
            raise ValueError("unknown argument " + repr(arg))
    argv = args[split + 1 :]
    if not argv:
        raise ValueError("no agent argv")
    return forwards, limits, program, argv


def _say(line: bytes) -> None:
    os.write(2, line + b"\n")


def _listen(port: int) -> int:
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock.detach()


def _wait_for_go() -> bool:
    got = b""
    while len(got) < 3:
        byte = os.read(0, 1)
        if not byte:
            return False
        got += byte
    return got == b"go\n"


def _apply_filter(program: bytes) -> None:
    import ctypes  # noqa: PLC0415 - only the agent's side pays for it

    class Fprog(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    ulong = ctypes.c_ulong
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _agent(limits: list[tuple[str, int]], program: bytes | None, argv: list[str]) -> None:
    """In the forked child: limits, filter, the READY line, exec. Never returns."""
    import _signal  # type: ignore[import-not-found]  # noqa: PLC0415
    import resource  # noqa: PLC0415

    _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)  # not the init's handler, until exec resets it
    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: the
    # agent gets the defaults a shell would give it (`yes | head` ends quietly; a file past
    # RLIMIT_FSIZE stops the writer).
    for name in ("SIGPIPE", "SIGXFSZ"):
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
    names = {"core": resource.RLIMIT_CORE, "fsize": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC}
    applied = []
    try:
        for name, value in limits:
            resource.setrlimit(names[name], (value, value))
            applied.append(f"{name}={value}")
    except (KeyError, ValueError, OSError) as exc:
        _say(b"baton-box: the rlimits could not be applied: " + str(exc).encode())
        os._exit(REFUSED)
    if program is not None:
        try:
            _apply_filter(program)
        except OSError as exc:
            _say(SECCOMP_FAILED + b": " + str(exc).encode())
            os._exit(REFUSED)
        applied.append("seccomp")
    _say(READY + b" " + " ".join(applied).encode())
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - the agent's own argv, as a list, no shell
    except OSError as exc:  # as a shell says it: 127 not found, 126 found but not runnable
        _say(f"baton-box: cannot run {argv[0]}: {exc.strerror}".encode())
        os._exit(127 if exc.errno == _ENOENT else 126)


def _pump(src: _socket.socket, dst: _socket.socket) -> None:
    # try/except, not contextlib.suppress: importing contextlib costs the box's start-up
    try:
        while True:
            chunk = src.recv(_CHUNK)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    for sock, how in ((dst, 1), (src, 0)):  # SHUT_WR the other side, SHUT_RD this one
        try:  # noqa: SIM105
            sock.shutdown(how)
        except OSError:
            pass


def _serve(listen_fd: int, path: str, slots: list[int], lock: _thread.LockType) -> None:

    server = _socket.socket(fileno=listen_fd)

    def connection(client: _socket.socket) -> None:
        try:
            upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                upstream.connect(path)
            except OSError:
                upstream.close()
                return
            done = _thread.allocate_lock()
            done.acquire()

            def back() -> None:
                _pump(upstream, client)
                done.release()

            _thread.start_new_thread(back, ())
            _pump(client, upstream)
            done.acquire()
            upstream.close()
        finally:
            client.close()
            with lock:
                slots[0] -= 1

    while True:
        try:
            fd, _ = server._accept()  # type: ignore[attr-defined]  # the C socket's own accept
        except OSError:
            continue
        client = _socket.socket(fileno=fd)
        with lock:
            full = slots[0] >= MAX_CONNECTIONS
            slots[0] += not full
        if full:
            client.close()
            continue
        _thread.start_new_thread(connection, (client,))


def main(args: list[str]) -> None:
    import _signal  # noqa: PLC0415

    forwards, limits, program, argv = parse(args)
    agent = [0]  # its pid, once forked

    def on_term(_signum: int, _frame: object) -> None:
        """The worker stops the box: SIGTERM to every other process in it (kill(-1) from a pid
        namespace's init), or, before the agent exists, no agent at all."""
        if agent[0]:
            try:  # noqa: SIM105
                os.kill(-1, _signal.SIGTERM)
            except OSError:
                pass
        else:
            os._exit(128 + _signal.SIGTERM)

    # As pid 1 of its namespace this gets only the signals it has a handler for.
    _signal.signal(_signal.SIGTERM, on_term)
    try:
        listening = [(_listen(port), path) for port, path in forwards]
    except OSError:
        _say(FORWARDER_FAILED)
        os._exit(REFUSED)
    if not _wait_for_go():
        os._exit(REFUSED)
    import ctypes  # noqa: PLC0415

    # Not dumpable: this process is not filtered, so the agent must not reach its memory through
    # /proc/1/mem (nor its fds). The agent's exec makes it dumpable again; this one stays so.
    zero = ctypes.c_ulong(0)
    if ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, zero, zero, zero, zero) != 0:
        _say(b"baton-box: the init could not make itself non-dumpable")
        os._exit(REFUSED)
    for fd, _ in listening:
        os.set_inheritable(fd, False)
    child = os.fork()
    if child == 0:
        _agent(limits, program, argv)
    agent[0] = child
    os.close(0)
    if listening:
        slots, lock = [0], _thread.allocate_lock()  # connections forwarded now, shared by the doors
        for fd, path in listening:
            _thread.start_new_thread(_serve, (fd, path, slots, lock))
    while True:  # as pid 1, reap whatever is orphaned here, until the agent itself ends
        pid, status = os.wait()
        if pid == child:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
