"""How a person calls Baton in text they write: `/baton …` on its first line, or `@<slug> …` at its start.

Routing reads a comment's call (``bot.routing``); the worker reads the same grammar in a submitted
review's body and line comments, which reach it from GitHub rather than in the webhook
(``worker.runs.iteration``). One grammar in one place, so both read a call alike.
"""

from __future__ import annotations

#: What starts a command line (the first line of a comment).
COMMAND_PREFIX = "/baton "


def mentioned(body: str, slug: str | None) -> str | None:
    """The instruction after `@<slug> ` at the start of ``body``, or None. A quoted line ("> @...")
    or a mention further in is not a call; neither is a mention with nothing asked."""
    if not slug:
        return None
    head = f"@{slug}"
    if body[: len(head)].lower() != head.lower():
        return None
    rest = body[len(head) :]
    if rest[:1] not in (" ", "\t", "\n", "\r"):
        return None  # `@baton-acme2`: another account
    return rest.strip() or None


def instruction(body: str | None, slug: str | None) -> str | None:
    """What ``body`` asks Baton to do, from its first line on: after `/baton ` or `@<slug> `; None
    when it does not call Baton (or calls it with nothing asked)."""
    if not body:
        return None
    if body.startswith(COMMAND_PREFIX):
        return body[len(COMMAND_PREFIX) :].strip() or None
    return mentioned(body, slug)
