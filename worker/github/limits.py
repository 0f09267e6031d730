"""GitHub's limits on what Baton sends it, in one place, enforced before sending.

GitHub answers 422 when a check run's output or actions break these rules,
which would lose the whole report; so Baton shapes its output to fit:
long text is cut with a visible marker that points to the full evidence,
annotations go out 50 per request, and actions are checked up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: output.summary and output.text: GitHub counts characters and also UTF-8 bytes
#: ("exceeds a maximum bytesize of 65535"); bytes are never fewer, so Baton counts bytes.
MAX_OUTPUT_CHARS = 65_535
#: output.title is not documented with a limit; GitHub truncates long titles in the UI.
MAX_TITLE_CHARS = 255
#: Annotations accepted per create/update request; later updates append.
MAX_ANNOTATIONS_PER_REQUEST = 50
MAX_ACTIONS = 3
MAX_ACTION_LABEL = 20
MAX_ACTION_IDENTIFIER = 20
MAX_ACTION_DESCRIPTION = 40
ANNOTATION_LEVELS = ("notice", "warning", "failure")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out")
#: Sub-issues one issue may hold (GitHub's docs: "up to 100 sub-issues", nested up to 8 levels).
MAX_SUB_ISSUES = 100
#: An issue comment body, in characters (GitHub: "body is too long (maximum is 65536 characters)").
MAX_COMMENT_CHARS = 65_536
#: GitHub ends a REST request it has processed for this long (REST docs, "Troubleshooting": timeouts):
#: a write sent longer ago than this, plus a margin for the way there, has landed or never will.
REQUEST_TIMEOUT_S = 10.0
SETTLED_AFTER_S = REQUEST_TIMEOUT_S + 2.0


class LimitError(ValueError):
    """Baton itself tried to send something GitHub would refuse (a bug, never user input)."""


def truncate(text: str, limit: int, evidence_url: str | None) -> str:
    """Cut ``text`` to ``limit`` UTF-8 bytes (so also characters) with a marker a reader cannot miss."""
    data = text.encode()
    if len(data) <= limit:
        return text
    where = f" Full evidence: {evidence_url}" if evidence_url else ""
    marker = f"\n\n… truncated: {len(data):,} bytes, GitHub shows at most {limit:,}.{where}"
    keep = max(0, limit - len(marker.encode()))
    return data[:keep].decode(errors="ignore") + marker


@dataclass(frozen=True, slots=True)
class Annotation:
    path: str
    start_line: int
    end_line: int
    level: str
    message: str
    title: str | None = None

    def to_api(self) -> dict[str, Any]:
        if self.level not in ANNOTATION_LEVELS:
            raise LimitError(f"annotation level {self.level!r} is not one of {ANNOTATION_LEVELS}")
        if not 1 <= self.start_line <= self.end_line:
            raise LimitError(f"annotation lines {self.start_line}-{self.end_line} are not a range")
        body: dict[str, Any] = {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "annotation_level": self.level,
            "message": truncate(self.message, MAX_OUTPUT_CHARS, None),
        }
        if self.title:
            body["title"] = self.title[:MAX_TITLE_CHARS]
        return body


def annotation_batches(annotations: Sequence[Annotation]) -> list[list[dict[str, Any]]]:
    """Annotations in request-sized batches (the first goes with the create or final update)."""
    api = [a.to_api() for a in annotations]
    return [api[i : i + MAX_ANNOTATIONS_PER_REQUEST] for i in range(0, len(api), MAX_ANNOTATIONS_PER_REQUEST)]


@dataclass(frozen=True, slots=True)
class Action:
    label: str
    identifier: str
    description: str

    def to_api(self) -> dict[str, str]:
        for field, value, limit in (
            ("label", self.label, MAX_ACTION_LABEL),
            ("identifier", self.identifier, MAX_ACTION_IDENTIFIER),
            ("description", self.description, MAX_ACTION_DESCRIPTION),
        ):
            if not value or len(value) > limit:
                raise LimitError(f"check-run action {field} {value!r} must be 1-{limit} characters")
        return {"label": self.label, "identifier": self.identifier, "description": self.description}


def actions_to_api(actions: Sequence[Action]) -> list[dict[str, str]]:
    if len(actions) > MAX_ACTIONS:
        raise LimitError(f"a check run takes at most {MAX_ACTIONS} actions, got {len(actions)}")
    return [a.to_api() for a in actions]


@dataclass(frozen=True, slots=True)
class Output:
    """A check run's output, shaped to GitHub's limits when turned into a request body."""

    title: str
    summary: str
    text: str | None = None

    def to_api(self, evidence_url: str | None) -> dict[str, str]:
        body = {
            "title": truncate(self.title, MAX_TITLE_CHARS, None),
            "summary": truncate(self.summary, MAX_OUTPUT_CHARS, evidence_url),
        }
        if self.text:
            body["text"] = truncate(self.text, MAX_OUTPUT_CHARS, evidence_url)
        return body
