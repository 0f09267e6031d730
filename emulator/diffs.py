"""Where a review comment may go: lines of a file's patch, as GitHub anchors comments to them.

Pure functions on the ``patch`` text GitHub lists for a file (the hunks, from the first
``@@`` on). A comment names a ``line`` and a ``side``: on ``RIGHT`` the line number in
the new file (an added or unchanged line), on ``LEFT`` in the old one (a deleted or
unchanged line); it must be a line shown in one of the hunks. ``position`` (the old way)
counts lines from the first hunk's header: the line below it is 1, and later hunk headers
count as lines too. A comment's ``diff_hunk`` is its hunk's header and lines up to the
commented line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass(frozen=True)
class DiffLine:
    """One line shown in a patch."""

    position: int  # also its index among the patch's lines (the first hunk header is 0)
    kind: str  # "+" added, "-" deleted, " " unchanged
    old: int | None  # its number on the LEFT (None: added)
    new: int | None  # its number on the RIGHT (None: deleted)
    hunk: int  # index of its hunk's header among the patch's lines


def lines(patch: str) -> list[DiffLine]:
    """Every line the patch shows, in order, with both sides' numbers."""
    out: list[DiffLine] = []
    old = new = 0
    hunk = -1
    for index, text in enumerate(patch.split("\n")):
        header = _HUNK.match(text)
        if header is not None:
            old, new, hunk = int(header.group(1)), int(header.group(2)), index
            continue
        if hunk < 0 or text.startswith("\\"):  # "\ No newline at end of file" is not a line
            continue
        kind = text[:1] or " "
        out.append(
            DiffLine(
                position=index,
                kind=kind,
                old=old if kind != "+" else None,
                new=new if kind != "-" else None,
                hunk=hunk,
            )
        )
        if kind != "+":
            old += 1
        if kind != "-":
            new += 1
    return out


def find(patch: str, line: int, side: str) -> DiffLine | None:
    """The shown line with that number on that side (``LEFT`` or ``RIGHT``), if the patch shows it."""
    for shown in lines(patch):
        if (shown.old if side == "LEFT" else shown.new) == line:
            return shown
    return None


def at_position(patch: str, position: int) -> DiffLine | None:
    return next((shown for shown in lines(patch) if shown.position == position), None)


def hunk_text(patch: str, until: DiffLine) -> str:
    """``diff_hunk``: the header of ``until``'s hunk and its lines through ``until``."""
    return "\n".join(patch.split("\n")[until.hunk : until.position + 1])


def first_hunk(patch: str) -> str:
    """The first hunk whole: the ``diff_hunk`` of a comment on a file rather than a line."""
    rows = patch.split("\n")
    ends = [i for i, text in enumerate(rows) if _HUNK.match(text)]
    stop = ends[1] if len(ends) > 1 else len(rows)
    return "\n".join(rows[:stop])
