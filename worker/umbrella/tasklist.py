"""The task list of an issue's body, as GitHub renders it: what a split makes sub-issues of.

An item is a top-level list line starting with a task box: ``- [ ] text`` (``*``, ``+`` or ``1.``
for the bullet; ``[x]`` or ``[X]`` when ticked), with the lines indented under it (its details, a
code block, sub-items: part of its unit of work, not units of their own). Lines inside a top-level
fenced code block are not items (GitHub does not render them as boxes). The text is untrusted: it
is quoted to the sub-issue and to the agent, never branched on. Pure.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

_ITEM = re.compile(r"(?:[-*+]|[0-9]{1,9}[.)]) \[( |x|X)\] (.*)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
#: Characters of an item kept (its title is cut to GitHub's 256; the sub-issue's body keeps this much).
MAX_ITEM_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class Item:
    """One box of the task list: its place (1-based among the items), its text, whether ticked."""

    index: int
    text: str
    ticked: bool

    @property
    def title(self) -> str:
        """Its first line."""
        return self.text.split("\n", 1)[0]


def items(body: str | None) -> list[Item]:
    """The top-level task-list items of ``body``, in order, each with the lines indented under it."""
    found: list[tuple[str, bool, list[str]]] = []
    fence: str | None = None
    under: list[str] | None = None  # the lines of the item being read
    for line in (body or "").replace("\r\n", "\n").split("\n"):
        if under is not None and (line.startswith(("  ", "\t")) or not line.strip()):
            under.append(line)
            continue
        under = None
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
        under = []
        found.append((match.group(2).strip(), match.group(1) != " ", under))
    out = []
    for index, (first, ticked, rest) in enumerate(found, start=1):
        details = textwrap.dedent("\n".join(rest)).strip("\n")
        text = f"{first}\n{details}" if details else first
        out.append(Item(index, text[:MAX_ITEM_CHARS], ticked))
    return out
