"""GitHub's validation of review and review-comment requests, as pure functions.

Three kinds of 422, worded as GitHub words them:

* schema violations: ``Invalid request.\\n\\n<detail>`` (``"body" wasn't supplied.``,
  ``For 'properties/event', "MERGE" is not a possible value.``);
* a comment's place in the diff, for a review: ``Unprocessable Entity`` with ``errors`` a
  list of one sentence (``Pull request review thread line must be part of the diff and
  Pull request review thread diff hunk can't be blank``);
* the same for a single comment: ``Validation Failed`` with ``errors`` objects of resource
  ``PullRequestReviewComment`` and field ``pull_request_review_thread.line``, ``.path``,
  ``.start_line``, ``.end_commit_oid`` or ``.diff_hunk``.

The place is checked by :func:`place` against the files' patches (:mod:`emulator.diffs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from emulator import diffs
from emulator.errors import ApiError, invalid_request, validation_failed

REVIEW_DOCS = "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request"
COMMENT_DOCS = "https://docs.github.com/rest/pulls/comments#create-a-review-comment-for-a-pull-request"
REPLY_DOCS = "https://docs.github.com/rest/pulls/comments#create-a-reply-for-a-review-comment"
EDIT_DOCS = "https://docs.github.com/rest/pulls/comments#update-a-review-comment-for-a-pull-request"
#: A review's ``event`` and the state it leaves the review in (no event: ``PENDING``).
EVENTS = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}
SIDES = ("LEFT", "RIGHT")
MAX_BODY_CHARS = 65536


@dataclass(frozen=True)
class Spot:
    """A validated place for a new comment in a file's diff."""

    path: str
    line: int
    side: str
    start_line: int | None
    start_side: str | None
    position: int
    diff_hunk: str


@dataclass(frozen=True)
class Problem:
    """One reason a comment cannot go where it was asked (GitHub's ``pull_request_review_thread`` errors)."""

    field: str  # line | start_line | path | end_commit_oid | diff_hunk
    code: str  # custom | invalid | missing_field
    message: str = ""  # for ``custom``: what follows the field's name


LINE_NOT_IN_DIFF = Problem("line", "custom", "must be part of the diff")
START_NOT_IN_HUNK = Problem("start_line", "custom", "must be part of the same hunk as the line.")
START_AFTER_LINE = Problem("start_line", "custom", "must precede the end line.")
NO_DIFF_HUNK = Problem("diff_hunk", "missing_field")
PATH_INVALID = Problem("path", "invalid")
COMMIT_NOT_IN_PULL = Problem("end_commit_oid", "custom", "is not part of the pull request")


def shown(value: Any) -> str:
    """A value as GitHub's schema errors print it (JSON)."""
    return json.dumps(value)


def missing(names: list[str], docs: str) -> ApiError:
    quoted = ", ".join(f'"{n}"' for n in names)
    return invalid_request(f"{quoted} {'wasn' if len(names) == 1 else 'weren'}'t supplied.", docs)


def string(body: dict[str, Any], key: str, docs: str, *, where: str = "properties") -> str | None:
    """A property the schema types as a string (absent or null: None)."""
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise invalid_request(f"For '{where}/{key}', {shown(value)} is not a string.", docs)
    if isinstance(value, str) and len(value) > MAX_BODY_CHARS:
        raise invalid_request(
            f"Only {MAX_BODY_CHARS} characters are allowed; {len(value)} were supplied.", docs
        )
    return value


def integer(body: dict[str, Any], key: str, docs: str, *, where: str = "properties") -> int | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise invalid_request(f"For '{where}/{key}', {shown(value)} is not an integer.", docs)
    return value


def one_of(
    body: dict[str, Any], key: str, allowed: tuple[str, ...], docs: str, *, where: str = "properties"
) -> str | None:
    value = string(body, key, docs, where=where)
    if value is not None and value not in allowed:
        raise invalid_request(f"For '{where}/{key}', {shown(value)} is not a possible value.", docs)
    return value


@dataclass(frozen=True)
class Wanted:
    """A comment as asked for: ``line`` (with ``side``, and ``start_*`` for several lines) or ``position``."""

    path: str
    body: str
    line: int | None
    side: str
    start_line: int | None
    start_side: str | None
    position: int | None


def wanted(item: Any, docs: str, *, where: str) -> Wanted:
    """One comment of a request (a review's ``comments[]`` item, or a single comment's body)."""
    if not isinstance(item, dict):
        raise invalid_request(f"For '{where}', {shown(item)} is not an object.", docs)
    absent = [name for name in ("path", "body") if item.get(name) is None]
    if absent:
        raise missing(absent, docs)
    path, text = string(item, "path", docs, where=where), string(item, "body", docs, where=where)
    line, start = integer(item, "line", docs, where=where), integer(item, "start_line", docs, where=where)
    position = integer(item, "position", docs, where=where)
    side = one_of(item, "side", SIDES, docs, where=where) or "RIGHT"
    start_side = one_of(item, "start_side", SIDES, docs, where=where)
    if path is None or text is None:  # checked above; for the type checker
        raise missing(absent or ["path"], docs)
    return Wanted(
        path, text, line, side, start, (start_side or side) if start is not None else None, position
    )


def place(patches: dict[str, str | None], asked: Wanted) -> Spot | list[Problem]:
    """Where ``asked`` goes in the diff, or the problems GitHub names, in its order."""
    patch = patches.get(asked.path)
    if patch is None:  # not a file of the pull request, or one with no text diff
        return [PATH_INVALID, NO_DIFF_HUNK]
    if asked.line is not None:
        found, side = diffs.find(patch, asked.line, asked.side), asked.side
    elif asked.position is not None:
        found = diffs.at_position(patch, asked.position)
        side = "LEFT" if found is not None and found.kind == "-" else "RIGHT"
    else:
        found, side = None, asked.side
    if found is None:
        problems = [LINE_NOT_IN_DIFF]
        if asked.start_line is not None:
            problems.append(START_NOT_IN_HUNK)
        return [*problems, NO_DIFF_HUNK]
    line = found.old if side == "LEFT" else found.new
    if line is None:  # found on that side, so never; for the type checker
        return [LINE_NOT_IN_DIFF, NO_DIFF_HUNK]
    start_side = asked.start_side
    if asked.start_line is not None and start_side is not None:
        start = diffs.find(patch, asked.start_line, start_side)
        if start is None or start.hunk != found.hunk:
            return [START_NOT_IN_HUNK]
        if start.position >= found.position:
            return [START_AFTER_LINE]
    return Spot(
        path=asked.path,
        line=line,
        side=side,
        start_line=asked.start_line,
        start_side=start_side if asked.start_line is not None else None,
        position=found.position,
        diff_hunk=diffs.hunk_text(patch, found),
    )


def _sentence(parts: list[str]) -> str:
    """Ruby's ``to_sentence``, which GitHub's messages are joined with."""
    if len(parts) <= 2:
        return " and ".join(parts)
    return ", ".join(parts[:-1]) + ", and " + parts[-1]


def _words(problem: Problem) -> str:
    name = "Pull request review thread " + problem.field.replace("_", " ")
    if problem.code == "invalid":
        return f"{name} is invalid"
    if problem.code == "missing_field":
        return f"{name} can't be blank"
    return f"{name} {problem.message}"


def unprocessable(messages: list[str], docs: str = REVIEW_DOCS) -> ApiError:
    """GitHub's 422 of the reviews API: ``Unprocessable Entity`` with ``errors`` as sentences."""
    return ApiError(422, "Unprocessable Entity", errors=messages, documentation_url=docs)


def review_error(problems: list[Problem]) -> ApiError:
    """A review's comment that cannot be placed: one sentence naming every problem."""
    return unprocessable([_sentence([_words(p) for p in problems])])


def comment_error(problems: list[Problem], docs: str = COMMENT_DOCS) -> ApiError:
    """A single comment that cannot be placed: ``Validation Failed`` with one object per problem."""
    errors: list[dict[str, Any]] = []
    for problem in problems:
        field = f"pull_request_review_thread.{problem.field}"
        entry: dict[str, Any] = {"resource": "PullRequestReviewComment", "code": problem.code, "field": field}
        if problem.code == "custom":
            entry["message"] = f"{field} {problem.message}"
        errors.append(entry)
    return validation_failed(errors, docs)
