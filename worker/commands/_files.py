"""Reading a local file an admin names on the command line, without trusting what it is.

Shared by every command that takes a file (`baton policy`, `baton gate`, `baton run`): a FIFO with
no writer would block, `/dev/zero` would exhaust memory, and a path checked before opening could be
swapped after. So the file is opened without waiting, its type is checked on the open descriptor,
and at most one byte over the limit is read.
"""

from __future__ import annotations

import os
import stat

#: Opened without waiting: a FIFO with no writer must be refused, not block the command.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)

CANNOT_READ, NOT_REGULAR, TOO_LARGE = "cannot-read", "not-regular", "too-large"


class Refused(Exception):
    """The file was not read. ``problem`` is CANNOT_READ, NOT_REGULAR or TOO_LARGE; ``detail`` says why
    (the OS's reason, or what kind of file it is)."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem = problem
        self.detail = detail


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def read_limited(path: str, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, if it holds at most ``limit`` of them; else Refused."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise Refused(CANNOT_READ, str(exc.strerror)) from exc
    chunks: list[bytes] = []
    size = 0
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(NOT_REGULAR, _kind(mode))
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Refused(CANNOT_READ, str(exc.strerror)) from exc
    finally:
        os.close(fd)
    if size > limit:
        raise Refused(TOO_LARGE, f"larger than {limit} bytes")
    return b"".join(chunks)
