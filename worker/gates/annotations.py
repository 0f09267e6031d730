"""A command gate's output as GitHub annotations: ``path:line[:col]: message`` lines, and no others.

The output is the PR's own code talking, so every line is judged as hostile: a
path must be relative, canonical and inside the tree (with ``known_paths``, a
file of the commit), a message is one printable line of bounded length, and
the count is bounded, so a gate cannot flood a check run or point outside it.

Understood: ``path:line[:col]: message`` (gcc/clang, go, mypy, flake8, ruff's
concise format, pytest's ``path:line: AssertionError``, eslint's unix format),
with ``./`` prefixes and absolute paths under the box's ``/workspace``; and the
rustc-style location line `` --> path:line:col`` under its headline (ruff's
default format, rustc), whose message is the line just above it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence

from worker.github.limits import ANNOTATION_LEVELS, MAX_OUTPUT_CHARS, MAX_TITLE_CHARS, Annotation
from worker.runner.box import WORKSPACE, safe_tail

__all__ = ["DEFAULT_LIMIT", "MAX_MESSAGE_CHARS", "parse"]

#: Annotations per gate: ten requests of GitHub's 50; enough to show a broken build, not a flood.
DEFAULT_LIMIT = 500
#: One line of a tool's output, far below what GitHub takes (``MAX_OUTPUT_CHARS``), so a gate's
#: annotations together stay small whatever it prints.
MAX_MESSAGE_CHARS = min(1000, MAX_OUTPUT_CHARS)
_NUMBER = r"(?P<line>[0-9]{1,9})(?::(?P<col>[0-9]{1,9}))?"
_PLAIN = re.compile(r"\s*(?P<path>[^\s:]+):" + _NUMBER + r":(?P<message>.*)")
_ARROW = re.compile(r"\s*-->\s*(?P<path>[^\s:]+):" + _NUMBER + r"\s*")
#: A severity word the tool put first lowers the level (never raises it above the caller's).
_SEVERITY = re.compile(r"(?P<word>fatal error|error|warning|note|info|help)\b", re.IGNORECASE)
_WORD_LEVEL = {"fatal error": "failure", "error": "failure", "warning": "warning", "note": "notice",
               "info": "notice", "help": "notice"}  # fmt: skip


def parse(
    output: str,
    *,
    known_paths: Collection[str] | None = None,
    level: str = "failure",
    limit: int = DEFAULT_LIMIT,
    title: str | None = None,
    roots: Sequence[str] = (WORKSPACE,),
) -> list[Annotation]:
    """The annotations ``output`` names, in the order it names them, duplicates dropped, at most ``limit``.

    ``known_paths``: the commit's files; a line naming any other path is ignored.
    ``roots``: absolute directories that stand for the tree's top (the box's workspace), so a tool
    printing absolute paths (eslint) still lands on the right file.
    """
    if level not in ANNOTATION_LEVELS:
        raise ValueError(f"level must be one of {ANNOTATION_LEVELS}, not {level!r}")
    if limit < 0:
        raise ValueError("limit must be >= 0")
    found: list[Annotation] = []
    seen: set[tuple[str, int, str, str]] = set()
    previous = ""
    for line in _clean(output).split("\n"):
        if len(found) >= limit:
            break
        hit = _located(line, previous)
        previous = line
        if hit is None:
            continue
        raw_path, number, message = hit
        path = _tree_path(raw_path, roots, known_paths)
        message = _one_line(message)
        if path is None or not message:
            continue
        annotation = Annotation(path=path, start_line=max(number, 1), end_line=max(number, 1),
                                level=_level(message, level), message=message,
                                title=title[:MAX_TITLE_CHARS] if title else None)  # fmt: skip
        key = (annotation.path, annotation.start_line, annotation.level, annotation.message)
        if key not in seen:
            seen.add(key)
            found.append(annotation)
    return found


def _clean(output: str) -> str:
    """The same cleaning as a gate's tail: terminal escapes gone, control characters made visible."""
    data = output.encode("utf-8", errors="replace")
    return safe_tail(data, lines=data.count(b"\n") + 2, max_chars=len(data) + 1)


def _located(line: str, previous: str) -> tuple[str, int, str] | None:
    """(path, line number, message) if ``line`` points at a place, else None."""
    if (arrow := _ARROW.fullmatch(line)) is not None:
        # The headline sits on the line above; another location there is no message.
        if _ARROW.fullmatch(previous) or _PLAIN.fullmatch(previous):
            return None
        return arrow["path"], int(arrow["line"]), previous
    if (plain := _PLAIN.fullmatch(line)) is not None:
        return plain["path"], int(plain["line"]), plain["message"]
    return None


def _tree_path(path: str, roots: Sequence[str], known: Collection[str] | None) -> str | None:
    """``path`` relative to the tree's top, or None if it is not plainly inside the tree."""
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            path = path[len(prefix) :]
            break
    while path.startswith("./"):
        path = path[2:]
    parts = path.split("/")
    if not path or any(part in ("", ".", "..") for part in parts):  # absolute paths have an empty first part
        return None
    if any(ch == "\ufffd" or unicodedata.category(ch)[0] == "C" for ch in path):
        return None
    if known is None:
        # A time of day (12:30:45: …) is not a file; with the commit's files to check against it cannot slip.
        return None if path.isdigit() else path
    return path if path in known else None


def _one_line(message: str) -> str:
    text = " ".join(message.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _level(message: str, ceiling: str) -> str:
    word = _SEVERITY.match(message)
    said = _WORD_LEVEL[word["word"].lower()] if word else ceiling
    return min(said, ceiling, key=ANNOTATION_LEVELS.index)
