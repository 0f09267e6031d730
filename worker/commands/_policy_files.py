"""Shared by `baton policy` and `baton gate`: read the org and repo files, merge them.

Local files stand in for what the worker will read from GitHub (the org's
``.github`` repository and the repo's default branch), so an admin can test a
policy before committing it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from worker.policy import INVALID, Merged, PolicyDoc, PolicyError, Problem, merge, org_policy, parse


def read_doc(path: str | None) -> PolicyDoc | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(INVALID, [Problem(path, 1, 1, f"cannot read file: {exc.strerror}")]) from exc
    return parse(data, path)


def effective(org_path: str | None, repo_path: str | None) -> Merged:
    """Merge the files; PolicyError if either is invalid (widening is in ``.problems``)."""
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
