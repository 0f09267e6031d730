"""Shared by `baton policy` and `baton gate`: read the org and repo files, merge them.

Local files stand in for what the worker will read from GitHub (the org's
``.github`` repository and the repo's default branch), so an admin can test a
policy before committing it.
"""

from __future__ import annotations

import argparse
import sys

from worker.commands import _files
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


def read_bytes(path: str) -> bytes:
    """The file's bytes, if it is a regular file of at most MAX_POLICY_BYTES (see ``_files``)."""
    try:
        return _files.read_limited(path, MAX_POLICY_BYTES)
    except _files.Refused as exc:
        message = {
            _files.CANNOT_READ: f"cannot read file: {exc.detail}",
            _files.NOT_REGULAR: f"not a regular file ({exc.detail}); give the path of a baton.yml file",
            _files.TOO_LARGE: f"file is larger than {MAX_POLICY_BYTES} bytes, the most a policy file may be; "
            "shorten it",
        }[exc.problem]
        raise PolicyError(INVALID, [Problem(path, 1, 1, message)]) from exc


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
