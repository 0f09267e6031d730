"""Shared by `baton policy` and `baton gate`: read the org and repo files, merge them.

Local files stand in for what the worker will read from GitHub (the org's
``.github`` repository and the repo's default branch), so an admin can test a
policy before committing it.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys

from worker.policy import (
    INVALID,
    MAX_POLICY_BYTES,
    Merged,
    PolicyDoc,
    PolicyError,
    Problem,
    merge,
    org_policy,
    parse,
)

#: Opened without waiting: a FIFO with no writer must be refused, not block the command.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


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


def read_bytes(path: str) -> bytes:
    """The file's bytes, if it is a regular file of at most MAX_POLICY_BYTES.

    Reads at most one byte over the limit, so /dev/zero or a huge file cannot
    exhaust memory, and checks the type on the open descriptor, so the path
    cannot be swapped for something else between the check and the read.
    """

    def refuse(message: str) -> PolicyError:
        return PolicyError(INVALID, [Problem(path, 1, 1, message)])

    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise refuse(f"cannot read file: {exc.strerror}") from exc
    chunks: list[bytes] = []
    size = 0
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(f"not a regular file ({_kind(mode)}); give the path of a baton.yml file")
        while size <= MAX_POLICY_BYTES:
            chunk = os.read(fd, MAX_POLICY_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise refuse(f"cannot read file: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if size > MAX_POLICY_BYTES:
        raise refuse(
            f"file is larger than {MAX_POLICY_BYTES} bytes, the most a policy file may be; shorten it"
        )
    return b"".join(chunks)


def read_doc(path: str | None) -> PolicyDoc | None:
    return None if path is None else parse(read_bytes(path), path)


def effective(org_path: str | None, repo_path: str | None) -> Merged:
    """Merge the files; PolicyError if either is invalid (dropped widenings are in ``.problems``)."""
    return merge(org_policy(read_doc(org_path)), read_doc(repo_path))


def report(problems: tuple[Problem, ...]) -> None:
    for problem in problems:
        print(problem, file=sys.stderr)


def add_org_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--org",
        metavar="ORG.yml",
        help="the org ceiling (baton.yml from the org's .github repository); default: built-in defaults",
    )
