"""GitHub's closing keywords: the issues a merged pull request closes.

As GitHub's docs describe them ("Linking a pull request to an issue", "Using keywords in issues
and pull requests"): one of ``close``, ``closes``, ``closed``, ``fix``, ``fixes``, ``fixed``,
``resolve``, ``resolves``, ``resolved``, in any case and optionally followed by a colon, then
``#NUMBER`` (an issue of the same repository) or ``OWNER/REPOSITORY#NUMBER``; several issues
need the keyword before each (``Resolves #10, resolves #123``: ``Closes #1, #2`` closes #1
only). The keywords count in the pull request's description and in commit messages, and only
when the pull request is merged into the repository's **default** branch. A keyword naming a
pull request closes that pull request too ("Merging the referencing pull request also closes
the referenced pull request").

The emulator's own reading: only issues of the merged pull's repository are closed (an
``OWNER/REPOSITORY#N`` naming another repository is ignored); the commit messages read are
those the merge brought onto the default branch (so a squash's own message, not the squashed
commits' unless its message carries them, as the default one does); the keyword must stand as
a word and be followed by whitespace or a colon; each issue is closed once, in the order the
texts name them (the description first), each as ``issues.closed`` (``state_reason``
``completed``) sent by the person or App that merged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from emulator.core import Emulator
from emulator.rest import issues as routes_issues
from emulator.state import App, Delivery, Issue, Repo

#: A closing keyword and the issue it names; group 1/2: owner/repository (optional), 3: number.
KEYWORD = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)(?::[ \t]*|[ \t]+)"
    r"(?:([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)/([A-Za-z0-9_.-]+))?#(\d+)\b",
    re.IGNORECASE,
)


def named(texts: Iterable[str | None], full_name: str) -> list[int]:
    """The issue numbers of ``full_name`` the texts close, each once, in the order first named."""
    found: list[int] = []
    for text in texts:
        for owner, name, number in KEYWORD.findall(text or ""):
            if owner and f"{owner}/{name}".lower() != full_name.lower():
                continue
            if int(number) not in found:
                found.append(int(number))
    return found


def close_named(
    emu: Emulator,
    base: str,
    repo: Repo,
    merged: Issue,
    texts: list[str | None],
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> list[Issue]:
    """Close the open issues (and pull requests) of ``repo`` the texts name; answers those closed.

    ``merged`` is the merged pull request's own issue record (never closed here).
    """
    closed: list[Issue] = []
    for number in named(texts, repo.full_name):
        item = emu.state.issue(repo.full_name, number)
        if item is None or item is merged or item.state != "open":
            continue
        routes_issues.change_state(
            emu, base, repo, item, "closed", reason="completed", pending=pending, sender=sender, acting=acting
        )
        closed.append(item)
    return closed
