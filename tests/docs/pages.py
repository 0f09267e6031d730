"""The documentation pages, read as GitHub renders them: headings' anchors, links, fenced blocks.

Shared by the docs tests so that "what is a link", "what is an anchor" and "what is a
shell example" are each decided in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose links and shell examples are checked: the front door and docs/.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "emulator" / "README.md"]
#: Fence info strings that mark a shell example (a ``console`` block is a transcript: shown, not
#: run; test_transcripts.py checks that its ``baton`` commands still parse).
SHELL = {"sh", "bash", "shell"}
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`]*)")
_MARKER = re.compile(r"^<!--\s*run:\s*(.*?)\s*-->$")
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its info string, its text, and the run marker just before it."""

    page: Path
    line: int
    info: str
    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (the same character, at least as many)."""
    text = line.strip()
    return len(text) >= len(fence) and set(text) == {fence[0]}


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, info = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            j += 1
        previous = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = _MARKER.match(previous)
        found.append(
            Block(page, i + 1, info, "\n".join(lines[i + 1 : j]), marker.group(1) if marker else None)
        )
        i = j + 1
    return found


def prose(page: Path) -> str:
    """``page`` without its fenced blocks and inline code, where a link is not a link."""
    return re.sub(r"`[^`\n]*`", "``", prose_with_code(page))


def links(page: Path) -> list[str]:
    """Every link target in ``page``'s prose."""
    return _LINK.findall(prose(page))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for ``page``'s headings (a repeated heading gets ``-1``, ``-2``…)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_with_code(page).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m is None:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def prose_with_code(page: Path) -> str:
    """``page`` without its fenced blocks, inline code kept (a heading's code span is in its anchor)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    inside: str | None = None
    kept: list[str] = []
    for line in lines:
        m = _FENCE.match(line)
        if inside is None and m is not None:
            inside = m.group(1)
        elif inside is not None and _closes(line, inside):
            inside = None
        elif inside is None:
            kept.append(line)
    return "\n".join(kept)
