"""Talking to a pull request Baton opened: whose it is, what was asked on it, and the answers.

An iteration (``Kind.ITERATE``) runs the issue's agent again on the pull request's head: after a
`/baton <instruction>` or `@<slug> <instruction>` comment on the pull request, or a submitted
review whose body or line comments call Baton the same way (one run per review, all its line
comments together). Whether the pull request is Baton's is read fresh, never taken from the
webhook: its head is a `baton/issue-<n>` branch of this very repository (a fork's branch of that
name is not) and its author is the App's bot.

What the person wrote is untrusted: it reaches the agent only inside the prompt's data blocks
(``worker.runner.prompt``), the receipts bind it by digest with its taint (``Conversation.inputs``),
and nothing here branches on it but the fixed call grammar (``baton.calls``). The decisions are
pure; ``read_pull`` and ``read_review`` ask GitHub.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from githubkit import GitHub

from baton import calls
from baton.tasks import BRANCH_PREFIX
from worker import publish
from worker.github import api
from worker.messages import inert
from worker.runner import prompt

#: A branch Baton pushes for issue n (``baton.tasks.BRANCH_PREFIX`` + n).
_BRANCH = re.compile(re.escape(BRANCH_PREFIX) + r"([1-9][0-9]{0,9})")
#: The line comments of one review read from GitHub (one page, GitHub's largest); more are counted.
MAX_LINE_COMMENTS = 100


@dataclass(frozen=True, slots=True)
class LineComment:
    """One comment on a line of the pull request: where it points, what it says (untrusted), and the
    thread it belongs to (GitHub takes replies to a thread's first comment only)."""

    id: int
    path: str
    line: int | None  # on the pull request's head; None: outdated (the line is gone)
    start_line: int | None
    body: str
    thread: int

    def where(self) -> str:
        """In Baton's words, for the prompt (inside the comment's block) and the replies."""
        if self.line is None:
            return f"{self.path} (an outdated line: the pull request has changed there since)"
        if self.start_line is not None and self.start_line != self.line:
            return f"{self.path} lines {self.start_line}-{self.line}"
        return f"{self.path} line {self.line}"

    def to_data(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "line": self.line, "start_line": self.start_line,
                "body": self.body, "thread": self.thread}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Conversation:
    """What was asked on the pull request, as the run's agent gets it."""

    pull_request: int
    asked_by: str
    instruction: str | None = None  # the comment's, or the review body's call (None: only its lines)
    comments: tuple[LineComment, ...] = ()
    review_id: int | None = None
    #: Line comments of the review beyond ``MAX_LINE_COMMENTS``: not read, and said so.
    left_out: int = 0

    def notes(self) -> list[prompt.Note]:
        return [prompt.Note(c.where(), c.body) for c in self.comments]

    def inputs(self) -> list[dict[str, Any]]:
        """Each piece of the person's text by sha256, tainted untrusted: what the receipts bind."""
        found: list[dict[str, Any]] = []
        if self.instruction is not None:
            found.append(_input(f"instruction on #{self.pull_request}", self.instruction))
        for c in self.comments:
            found.append(_input(f"review comment {c.id} on #{self.pull_request}", c.body))
        return found

    def to_data(self) -> dict[str, Any]:
        return {"pull_request": self.pull_request, "asked_by": self.asked_by, "instruction": self.instruction,
                "comments": [c.to_data() for c in self.comments], "review_id": self.review_id,
                "left_out": self.left_out}  # fmt: skip

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Conversation:
        comments = tuple(LineComment(**c) for c in data.get("comments") or ())
        return cls(int(data["pull_request"]), str(data["asked_by"]), data.get("instruction"), comments,
                   data.get("review_id"), int(data.get("left_out") or 0))  # fmt: skip


def _input(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": hashlib.sha256(text.encode()).hexdigest()},
            "taint": ["untrustedInput"]}  # fmt: skip


# -- whose pull request ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pull:
    """A pull request Baton opened, as GitHub has it now."""

    number: int
    issue: int
    head_sha: str
    branch: str
    open: bool


def baton_pull(pull: Mapping[str, Any], *, repo_id: int, bot_login: str) -> Pull | str:
    """``pull`` if it is Baton's: its head a `baton/issue-<n>` branch of this repository and its
    author the App's bot. Otherwise why not, in Baton's words."""
    head = pull.get("head")
    head = head if isinstance(head, Mapping) else {}
    ref = head.get("ref")
    found = _BRANCH.fullmatch(ref) if isinstance(ref, str) else None
    if found is None:
        return "its head is not a branch Baton pushes (`baton/issue-<n>`)"
    head_repo = head.get("repo")
    if not isinstance(head_repo, Mapping) or head_repo.get("id") != repo_id:
        return "its head branch is in another repository (a fork), not one Baton pushed"
    user = pull.get("user")
    if not isinstance(user, Mapping) or user.get("login") != bot_login:
        return "Baton did not open it"
    sha = head.get("sha")
    if not isinstance(sha, str) or not sha:
        return "GitHub named no head commit for it"
    return Pull(int(pull["number"]), int(found.group(1)), sha, str(ref), pull.get("state") == "open")


def read_pull(gh: GitHub[Any], full_name: str, number: int) -> dict[str, Any]:
    found: dict[str, Any] = api.request(gh, "GET", f"{api.repo_path(full_name)}/pulls/{number}")
    return found


# -- what a review asks ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Review:
    """A submitted review as GitHub has it now: who wrote it, its body, its line comments."""

    id: int
    author: str
    state: str
    body: str
    comments: tuple[LineComment, ...] = ()
    left_out: int = 0

    def calls(self, slug: str) -> bool:
        """Whether its body or any of its line comments calls Baton (`/baton …`, `@<slug> …`)."""
        texts = (self.body, *(c.body for c in self.comments))
        return any(calls.instruction(text, slug) is not None for text in texts)


def read_review(gh: GitHub[Any], full_name: str, number: int, review_id: int) -> Review:
    """The review and its line comments (``MAX_LINE_COMMENTS`` at most; the rest counted), fresh."""
    path = f"{api.repo_path(full_name)}/pulls/{number}/reviews/{review_id}"
    data = api.request(gh, "GET", path)
    listed = api.request(gh, "GET", f"{path}/comments", params={"per_page": MAX_LINE_COMMENTS})
    comments = tuple(_line_comment(c) for c in listed if isinstance(c, Mapping))[:MAX_LINE_COMMENTS]
    user = data.get("user") if isinstance(data.get("user"), Mapping) else {}
    more = MAX_LINE_COMMENTS if len(listed) >= MAX_LINE_COMMENTS else 0  # a full page: there may be more
    return Review(int(data["id"]), str((user or {}).get("login") or ""), str(data.get("state") or ""),
                  str(data.get("body") or ""), comments, left_out=more)  # fmt: skip


def _line_comment(raw: Mapping[str, Any]) -> LineComment:
    def number(name: str) -> int | None:
        value = raw.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    root = number("in_reply_to_id")
    return LineComment(int(raw["id"]), str(raw.get("path") or ""), number("line"), number("start_line"),
                       str(raw.get("body") or ""), root if root is not None else int(raw["id"]))  # fmt: skip


def of_comment(pull_request: int, asked_by: str, instruction: str) -> Conversation:
    """A `/baton <instruction>` comment on the pull request."""
    return Conversation(pull_request, asked_by, instruction)


def of_review(pull_request: int, review: Review, slug: str) -> Conversation:
    """A review that calls Baton: its body's call (or, with none, its whole body when it has text),
    and all its line comments, as their authors wrote them."""
    asked = calls.instruction(review.body, slug)
    instruction = asked if asked is not None else (review.body.strip() or None)
    return Conversation(pull_request, review.author, instruction, review.comments, review.id, review.left_out)


# -- the answers -----------------------------------------------------------------------------------


def replies(
    conversation: Conversation, *, task_id: str, commit: str | None, changed: Sequence[str], why_not: str
) -> tuple[publish.Reply, ...]:
    """One reply per thread the review's line comments are in: what changed on that file (``commit``
    pushed, ``changed`` the paths it touched), or why nothing was pushed (``why_not``, Baton's words)."""
    marker = publish.REPLY_MARKER.format(task_id=task_id)
    out: list[publish.Reply] = []
    seen: set[int] = set()
    for comment in conversation.comments:
        if comment.thread in seen:
            continue
        seen.add(comment.thread)
        if commit is None:
            text = f"Baton pushed nothing for this review: {why_not}"
        elif comment.path in changed:
            text = f"Baton pushed {commit[:12]} for this review; it changes {inert(comment.path, 200)}."
        else:
            text = (f"Baton pushed {commit[:12]} for this review; it leaves {inert(comment.path, 200)} "
                    "as it was.")  # fmt: skip
        out.append(publish.Reply(comment.thread, f"{text}\n\n<sub>task `{task_id}`</sub>\n{marker}"))
    return tuple(out)
