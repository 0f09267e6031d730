"""What Baton says on GitHub: user-supplied text made inert, and one fixed sentence per error.

Everything a person outside Baton typed (an agent name, a label, a login, a
line of a policy file) reaches a comment or a check run only through
``inert``: a Markdown code span that no backtick inside can close, on one line,
so it can never become a mention, a link, an image or a fake heading.

Errors are described by their stable code, never by their exception text:
exception text can carry URLs, tokens' neighbours or a library's internals
(``data_model=<class …>``), so it goes to the worker log, and the issue gets
the sentence ``baton.codes`` registers for its code.
"""

from __future__ import annotations

import re
import unicodedata

from baton import codes

#: Longest user-supplied value quoted verbatim; longer ones are cut with an ellipsis.
MAX_QUOTED = 100
_BACKTICKS = re.compile(r"`+")


def inert(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` as a one-line code span: no mention, link, emphasis or HTML survives in it."""
    cleaned = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
        for ch in text
        if unicodedata.category(ch) != "Cf"  # zero-width and bidi controls: invisible tricks
    ).strip()
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    if not cleaned:
        return "` `"
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(cleaned)), default=0)
    fence = "`" * (longest + 1)
    if longest:  # CommonMark strips one space each side, so a leading/trailing backtick still shows
        return f"{fence} {cleaned} {fence}"
    return f"{fence}{cleaned}{fence}"


def fenced(text: str, info: str = "text") -> str:
    """A fenced code block that nothing inside ``text`` can close."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def failure(code: str) -> str:
    """The sentence an issue or check run shows for error ``code`` (never exception text)."""
    return codes.sentence(code)
