"""The issue's status comment: what Baton is doing with this issue, in plain words.

One comment per issue, found again by a hidden marker on its first line and
edited in place as tasks move (queued, refused, denied, running, PR opened,
failed): the thread gets one Baton comment, never a stream. Rendering is a
pure function; posting it is ``worker.github.issues``'s job.

The first line is the marker, so the comment can never start with `/baton `
and re-trigger Baton; commands it suggests are quoted in code spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from worker.github.limits import MAX_COMMENT_CHARS, truncate
from worker.lifecycle import State
from worker.messages import fenced, inert

MARKER = "<!-- baton:status v1 -->"
RECEIPT_TOO_LARGE = (
    "The run's signed receipt is in Baton's transparency log, but too large for this comment "
    "(GitHub's limit): the operator can serve it."
)

HEADLINE: dict[State, str] = {
    State.QUEUED: "⏳ Queued",
    State.RUNNING: "⚙️ Working on it",
    State.REFUSED: "🚫 Not started: this request was refused",
    State.DENIED: "🛑 Not started: the capability gate denied this run",
    State.PR_OPENED: "📬 Pull request opened",
    State.DONE: "✅ Done",
    State.FAILED: "❌ Failed",
    State.TIMED_OUT: "⌛ Timed out",
    State.CANCELLED: "⏹️ Cancelled",
}


@dataclass(frozen=True, slots=True)
class Status:
    state: State
    task_id: str
    agent: str | None
    summary: str
    details: Sequence[str] = field(default_factory=tuple)
    next_steps: Sequence[str] = field(default_factory=tuple)
    evidence: str | None = None  # preformatted (the gate's explanation, policy problems), in a code block
    notices: Sequence[str] = field(default_factory=tuple)  # said once, at the end (e.g. which ceiling)
    headline: str | None = None  # instead of the state's (e.g. "No changes" for a run that is done)
    #: A signed receipt's section (``worker.receipts.Receipt.text``), for a run with no check run to carry it.
    receipt: str | None = None


def render(status: Status) -> str:
    """The comment's Markdown. ``summary``, ``details`` and ``next_steps`` are Baton's own words,
    with anything a person typed already passed through ``inert``; ``agent`` is quoted here."""
    who = f" · agent {inert(status.agent)}" if status.agent else ""
    lines = [
        MARKER,
        f"### Baton: {status.headline or HEADLINE[status.state]}",
        "",
        status.summary,
    ]
    if status.evidence:
        lines += ["", fenced(status.evidence)]
    if status.details:
        lines += ["", *(f"- {d}" for d in status.details)]
    if status.next_steps:
        lines += ["", "**What you can do**", "", *(f"- {s}" for s in status.next_steps)]
    tail = [*(["", *(f"> {n}" for n in status.notices)] if status.notices else []),
            "", f"<sub>task `{status.task_id}`{who} · state `{status.state}`</sub>"]  # fmt: skip
    if status.receipt:
        # A receipt is whole or absent: a bundle cut short verifies as nothing.
        whole = "\n".join([*lines, "", status.receipt.rstrip("\n"), *tail])
        if len(whole.encode()) <= MAX_COMMENT_CHARS:
            return whole
        lines += ["", RECEIPT_TOO_LARGE]
    return truncate("\n".join([*lines, *tail]), MAX_COMMENT_CHARS, None)


def is_status_comment(body: str | None) -> bool:
    return body is not None and body.startswith(MARKER)
