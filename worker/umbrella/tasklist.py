"""The task list of an issue's body, as GitHub renders it: what a split makes sub-issues of.

An item is a top-level list line starting with a task box: ``- [ ] text`` (``*``, ``+`` or ``1.``
for the bullet; ``[x]`` or ``[X]`` when ticked). Lines inside fenced code blocks are not items
(GitHub does not render them as boxes), nor are nested items (a sub-item is part of its parent's
unit of work, not a unit of its own). The text is untrusted: it is quoted to the sub-issue and to
the agent, never branched on. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ITEM = re.compile(r"(?:[-*+]|[0-9]{1,9}[.)]) \[( |x|X)\] (.*)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
#: Characters of an item kept (GitHub caps an issue title at 256; the body keeps the whole line).
MAX_ITEM_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class Item:
    """One box of the task list: its place (1-based among the items), its text, whether ticked."""

    index: int
    text: str
    ticked: bool


def items(body: str | None) -> list[Item]:
    """The top-level task-list items of ``body``, in order."""
    found: list[Item] = []
    fence: str | None = None
    for line in (body or "").replace("\r\n", "\n").split("\n"):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened is not None and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened is not None:
            fence = opened.group(1)
            continue
        match = _ITEM.fullmatch(line.rstrip())
        if match is None or not match.group(2).strip():
            continue
        found.append(Item(len(found) + 1, match.group(2).strip()[:MAX_ITEM_CHARS], match.group(1) != " "))
    return found
