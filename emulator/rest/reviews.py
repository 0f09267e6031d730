"""Pull request reviews and review comments over REST: create, list, get, reply, edit.

GitHub's paths, status codes (a new review is 200, a new comment 201) and answers
(:mod:`emulator.rest.shapes_reviews`); the changes themselves, their rules and their
webhooks are :mod:`emulator.reviewing`'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from emulator.core import ApiRequest, Reply, RouteSpec, paginate
from emulator.errors import ApiError, invalid_request, not_found, validation_failed
from emulator.rest import reviews_validation as rules
from emulator.rest import shapes_reviews
from emulator.reviewing import comments_of, edit_review_comment, reply, single_comment, submit_review
from emulator.state import Pull, Repo, Review, ReviewComment


def _pull(req: ApiRequest, repo: Repo) -> Pull:
    found = req.state.pull(repo.full_name, req.int_param("pull_number"))
    if found is None:
        raise not_found()
    return found


def _visible(req: ApiRequest, review: Review) -> bool:
    """A pending review is its author's alone."""
    return review.state != "PENDING" or review.user.lower() == req.acting_login().lower()


def _review(req: ApiRequest, repo: Repo, pull: Pull) -> Review:
    found = req.state.reviews.get(req.int_param("review_id"))
    if (
        found is None
        or found.repo != repo.full_name
        or found.number != pull.number
        or not _visible(req, found)
    ):
        raise not_found()
    return found


def _submitted(req: ApiRequest, comment: ReviewComment) -> bool:
    review = req.state.reviews.get(comment.review_id)
    return review is not None and review.state != "PENDING"


def _comment(req: ApiRequest, repo: Repo, pull: Pull | None = None) -> ReviewComment:
    found = req.state.review_comments.get(req.int_param("comment_id"))
    if (
        found is None
        or found.repo != repo.full_name
        or (pull is not None and found.number != pull.number)
        or not _submitted(req, found)
    ):
        raise not_found()
    return found


async def create_review(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "write")
    pull = _pull(req, repo)
    body = req.json_object()
    docs = rules.REVIEW_DOCS
    text = rules.string(body, "body", docs)
    event = rules.one_of(body, "event", tuple(rules.EVENTS), docs)
    commit_id = rules.string(body, "commit_id", docs)
    raw = body.get("comments") or []
    if not isinstance(raw, list):
        raise invalid_request(f"For 'properties/comments', {rules.shown(raw)} is not an array.", docs)
    comments = [rules.wanted(item, docs, where="items") for item in raw]
    review = submit_review(
        req.emu,
        req.base,
        repo,
        pull,
        user=req.acting_login(),
        body=text,
        event=event,
        comments=comments,
        commit_id=commit_id,
        acting=req.caller.app,
        pending=req.pending,
    )
    return Reply(shapes_reviews.review(req.base, req.state, repo, review))


async def list_reviews(req: ApiRequest) -> Reply:
    """Chronological, as GitHub lists them; another's pending review is not shown."""
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo)
    found = sorted(
        (
            r
            for r in req.state.reviews.values()
            if r.repo == repo.full_name and r.number == pull.number and _visible(req, r)
        ),
        key=lambda r: r.id,
    )
    page, headers = paginate(req, found)
    return Reply([shapes_reviews.review(req.base, req.state, repo, r) for r in page], headers=headers)


async def get_review(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    return Reply(shapes_reviews.review(req.base, req.state, repo, _review(req, repo, _pull(req, repo))))


async def list_review_comments_of_review(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    review = _review(req, repo, _pull(req, repo))
    page, headers = paginate(req, comments_of(req.emu, review))
    return Reply([shapes_reviews.review_comment(req.base, req.state, repo, c) for c in page], headers=headers)


def _since(req: ApiRequest) -> float | None:
    raw = req.query("since")
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise invalid_request(f"For 'since', \"{raw}\" is not a valid date-time.") from exc


async def list_pull_comments(req: ApiRequest) -> Reply:
    """The pull request's submitted review comments: ``sort`` created/updated, ``direction``, ``since``."""
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo)
    sort = req.query("sort")
    direction = req.query("direction") if sort is not None else None
    if sort not in {None, "created", "updated"} or direction not in {None, "asc", "desc"}:
        field = "sort" if sort not in {None, "created", "updated"} else "direction"
        raise validation_failed([{"resource": "PullRequestReviewComment", "code": "invalid", "field": field}])
    since = _since(req)
    found = [
        c
        for c in req.state.review_comments.values()
        if c.repo == repo.full_name
        and c.number == pull.number
        and _submitted(req, c)
        and (since is None or c.updated_at >= since)
    ]
    key = (lambda c: (c.updated_at, c.id)) if sort == "updated" else (lambda c: (c.created_at, c.id))
    found.sort(key=key, reverse=direction == "desc")
    page, headers = paginate(req, found)
    return Reply([shapes_reviews.review_comment(req.base, req.state, repo, c) for c in page], headers=headers)


async def get_comment(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    return Reply(shapes_reviews.review_comment(req.base, req.state, repo, _comment(req, repo)))


def _created(req: ApiRequest, repo: Repo, comment: ReviewComment) -> Reply:
    out = shapes_reviews.review_comment(req.base, req.state, repo, comment)
    return Reply(out, status=201, headers={"location": out["url"]})


async def create_comment(req: ApiRequest) -> Reply:
    """A single comment (its own review), or with ``in_reply_to`` a reply (then only ``body`` counts)."""
    repo = req.repo("pull_requests", "write")
    pull = _pull(req, repo)
    body = req.json_object()
    docs = rules.COMMENT_DOCS
    in_reply_to = rules.integer(body, "in_reply_to", docs)
    if in_reply_to is not None:
        text = rules.string(body, "body", docs)
        if text is None:
            raise rules.missing(["body"], docs)
        root = req.state.review_comments.get(in_reply_to)
        if (
            root is None
            or root.repo != repo.full_name
            or root.number != pull.number
            or not _submitted(req, root)
        ):
            raise not_found(docs)
        made = reply(
            req.emu,
            req.base,
            repo,
            pull,
            root,
            text=text,
            user=req.acting_login(),
            acting=req.caller.app,
            pending=req.pending,
        )
        return _created(req, repo, made)
    absent = [name for name in ("body", "commit_id", "path") if body.get(name) is None]
    if absent:
        raise rules.missing(absent, docs)
    if rules.one_of(body, "subject_type", ("line", "file"), docs) == "file":
        raise ApiError(
            422, "The emulator models comments on lines only, not subject_type: file.", documentation_url=docs
        )
    asked = rules.wanted(body, docs, where="properties")
    if asked.line is None and asked.position is None:
        raise rules.comment_error([rules.Problem("line", "missing_field"), rules.NO_DIFF_HUNK])
    commit_id = rules.string(body, "commit_id", docs) or ""
    made = single_comment(
        req.emu,
        req.base,
        repo,
        pull,
        asked,
        user=req.acting_login(),
        commit_id=commit_id,
        acting=req.caller.app,
        pending=req.pending,
    )
    return _created(req, repo, made)


async def create_reply(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "write")
    pull = _pull(req, repo)
    body = req.json_object()
    text = rules.string(body, "body", rules.REPLY_DOCS)
    if text is None:
        raise rules.missing(["body"], rules.REPLY_DOCS)
    root = _comment(req, repo, pull)
    made = reply(
        req.emu,
        req.base,
        repo,
        pull,
        root,
        text=text,
        user=req.acting_login(),
        acting=req.caller.app,
        pending=req.pending,
    )
    return _created(req, repo, made)


async def update_comment(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "write")
    comment = _comment(req, repo)
    body: dict[str, Any] = req.json_object()
    text = rules.string(body, "body", rules.EDIT_DOCS)
    if text is None:
        raise rules.missing(["body"], rules.EDIT_DOCS)
    edit_review_comment(
        req.emu, req.base, repo, comment, text=text, sender=None, acting=req.caller.app, pending=req.pending
    )
    return Reply(shapes_reviews.review_comment(req.base, req.state, repo, comment))


ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", get_comment),
    ("PATCH", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", update_comment),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", list_reviews),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", create_review),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}", get_review),
    (
        "GET",
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments",
        list_review_comments_of_review,
    ),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", list_pull_comments),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", create_comment),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies", create_reply),
]
