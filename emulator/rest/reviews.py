"""Pull request reviews and review comments: create, list, get, reply, edit, with their webhooks.

As on GitHub, every review comment belongs to a review: a review made with ``comments``
holds them, and a single comment or a reply is a review of its own (state
``COMMENTED``). A review made without ``event`` stays ``PENDING``: only its author sees
it and its comments, and no webhook goes out. Submitting sends ``pull_request_review``
``submitted``, then one ``pull_request_review_comment`` ``created`` per comment, in order.

The mutations (:func:`submit_review`, :func:`single_comment`, :func:`reply`,
:func:`edit_review_comment`) are plain functions so the admin API performs them as a
person through the same code as the REST API.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from emulator.core import ApiRequest, Emulator, Reply, RouteSpec, emit, paginate
from emulator.errors import ApiError, invalid_request, not_found, validation_failed
from emulator.rest import reviews_validation as rules
from emulator.rest import shapes_reviews
from emulator.rest.pulls import NULL_SHA, hook_pull, pull_shas
from emulator.state import App, Delivery, Pull, Repo, Review, ReviewComment
from emulator.types import JSONObject

#: GitHub's answers when a pull request's author reviews it (live API's words).
OWN_APPROVAL = "Can not approve your own pull request"
OWN_CHANGES = "Review Can not request changes on your own pull request"
ONE_PENDING = "User can only have one pending review per pull request"


# -- reading the diff ------------------------------------------------------------------------------


def commit_in_pull(emu: Emulator, repo: Repo, pull: Pull, sha: str) -> bool:
    """Whether ``sha`` is one of the pull request's commits (merge-base..head)."""
    head, base_sha = pull_shas(emu, repo, pull)
    git = emu.git(repo)
    if NULL_SHA in (head, base_sha) or not git.has_commit(sha):
        return False
    return git.is_ancestor(sha, head) and not git.is_ancestor(sha, base_sha)


def patches(emu: Emulator, repo: Repo, pull: Pull, commit_id: str) -> dict[str, str | None]:
    """Each changed file's patch from the merge-base with the base branch to ``commit_id``."""
    _, base_sha = pull_shas(emu, repo, pull)
    git = emu.git(repo)
    merge_base = git.merge_base(base_sha, commit_id)
    if merge_base is None:
        return {}
    return {change.filename: change.patch for change in git.changes(merge_base, commit_id)}


# -- the webhooks ----------------------------------------------------------------------------------


def _pull_for_hook(emu: Emulator, base: str, repo: Repo, pull: Pull) -> JSONObject:
    return shapes_reviews.simple_pull(hook_pull(emu, base, repo, pull))


def _emit_submitted(
    emu: Emulator,
    base: str,
    repo: Repo,
    pull: Pull,
    review: Review,
    *,
    pending: list[Delivery],
    acting: App | None,
) -> None:
    """``pull_request_review.submitted``, then ``pull_request_review_comment.created`` per comment."""
    state = emu.state
    item = state.issue(repo.full_name, pull.number)
    if item is not None:
        state.touch(item)
    shown = _pull_for_hook(emu, base, repo, pull)
    payload = {
        "action": "submitted",
        "review": shapes_reviews.review(base, state, repo, review, hook=True),
        "pull_request": shown,
    }
    emit(emu, base, repo, "pull_request_review", payload, pending=pending, sender=review.user, acting=acting)
    for comment in comments_of(emu, review):
        created = {
            "action": "created",
            "comment": shapes_reviews.review_comment(base, state, repo, comment),
            "pull_request": shown,
        }
        emit(
            emu,
            base,
            repo,
            "pull_request_review_comment",
            created,
            pending=pending,
            sender=review.user,
            acting=acting,
        )


# -- the mutations ---------------------------------------------------------------------------------


def comments_of(emu: Emulator, review: Review) -> list[ReviewComment]:
    return sorted(
        (c for c in emu.state.review_comments.values() if c.review_id == review.id), key=lambda c: c.id
    )


def _new_review(
    emu: Emulator,
    repo: Repo,
    pull: Pull,
    *,
    user: str,
    body: str | None,
    state: str,
    commit_id: str,
    acting: App | None,
) -> Review:
    store = emu.state
    now = store.now()
    review = Review(
        id=store.new_id(),
        repo=repo.full_name,
        number=pull.number,
        user=user,
        body=body,
        state=state,
        commit_id=commit_id,
        created_at=now,
        submitted_at=None if state == "PENDING" else now,
        app_id=acting.id if acting is not None else None,
    )
    store.reviews[review.id] = review
    return review


def _new_comment(
    emu: Emulator, review: Review, spot: rules.Spot, body: str, *, in_reply_to: int | None = None
) -> ReviewComment:
    store = emu.state
    now = store.now()
    comment = ReviewComment(
        id=store.new_id(),
        repo=review.repo,
        number=review.number,
        review_id=review.id,
        user=review.user,
        body=body,
        path=spot.path,
        commit_id=review.commit_id,
        diff_hunk=spot.diff_hunk,
        position=spot.position,
        line=spot.line,
        side=spot.side,
        start_line=spot.start_line,
        start_side=spot.start_side,
        in_reply_to_id=in_reply_to,
        created_at=now,
        updated_at=now,
        app_id=review.app_id,
    )
    store.review_comments[comment.id] = comment
    return comment


def _pending_of(emu: Emulator, repo: Repo, pull: Pull, user: str) -> Review | None:
    lowered = user.lower()
    return next(
        (
            r
            for r in emu.state.reviews.values()
            if r.repo == repo.full_name
            and r.number == pull.number
            and r.state == "PENDING"
            and r.user.lower() == lowered
        ),
        None,
    )


def submit_review(
    emu: Emulator,
    base: str,
    repo: Repo,
    pull: Pull,
    *,
    user: str,
    body: str | None,
    event: str | None,
    comments: list[rules.Wanted],
    commit_id: str | None,
    acting: App | None,
    pending: list[Delivery],
) -> Review:
    """A review as ``POST …/reviews`` makes it; every rule is checked before anything is stored."""
    state = emu.state
    author = state.issue(repo.full_name, pull.number)
    if author is not None and author.user.lower() == user.lower() and event in {"APPROVE", "REQUEST_CHANGES"}:
        raise rules.unprocessable([OWN_APPROVAL if event == "APPROVE" else OWN_CHANGES])
    if event is None and _pending_of(emu, repo, pull, user) is not None:
        raise rules.unprocessable([ONE_PENDING])
    if not body and (event == "REQUEST_CHANGES" or (event == "COMMENT" and not comments)):
        raise rules.unprocessable(["Body can't be blank"])  # the words are the emulator's
    head, _ = pull_shas(emu, repo, pull)
    commit = commit_id or head
    if not commit_in_pull(emu, repo, pull, commit):
        raise rules.review_error([rules.COMMIT_NOT_IN_PULL, rules.NO_DIFF_HUNK])
    files = patches(emu, repo, pull, commit) if comments else {}
    spots = []
    for asked in comments:
        spot = rules.place(files, asked)
        if isinstance(spot, list):
            raise rules.review_error(spot)
        spots.append((spot, asked.body))
    review = _new_review(
        emu,
        repo,
        pull,
        user=user,
        body=body or None,
        state=rules.EVENTS.get(event or "", "PENDING"),
        commit_id=commit,
        acting=acting,
    )
    for spot, text in spots:
        _new_comment(emu, review, spot, text)
    if review.state != "PENDING":
        _emit_submitted(emu, base, repo, pull, review, pending=pending, acting=acting)
    return review


def single_comment(
    emu: Emulator,
    base: str,
    repo: Repo,
    pull: Pull,
    asked: rules.Wanted,
    *,
    user: str,
    commit_id: str,
    acting: App | None,
    pending: list[Delivery],
) -> ReviewComment:
    """``POST …/pulls/{n}/comments``: one comment, in a ``COMMENTED`` review of its own."""
    if not commit_in_pull(emu, repo, pull, commit_id):
        raise rules.comment_error([rules.COMMIT_NOT_IN_PULL, rules.NO_DIFF_HUNK])
    spot = rules.place(patches(emu, repo, pull, commit_id), asked)
    if isinstance(spot, list):
        raise rules.comment_error(spot)
    _refuse_while_pending(emu, repo, pull, user, rules.COMMENT_DOCS)
    review = _new_review(
        emu, repo, pull, user=user, body=None, state="COMMENTED", commit_id=commit_id, acting=acting
    )
    comment = _new_comment(emu, review, spot, asked.body)
    _emit_submitted(emu, base, repo, pull, review, pending=pending, acting=acting)
    return comment


def _refuse_while_pending(emu: Emulator, repo: Repo, pull: Pull, user: str, docs: str) -> None:
    """A single comment or reply by someone with a pending review collides with it, as on GitHub."""
    if _pending_of(emu, repo, pull, user) is not None:
        message = "user_id can only have one pending review per pull request"
        raise validation_failed(
            [{"resource": "PullRequestReview", "code": "custom", "field": "user_id", "message": message}],
            docs,
        )


def reply(
    emu: Emulator,
    base: str,
    repo: Repo,
    pull: Pull,
    root: ReviewComment,
    *,
    text: str,
    user: str,
    acting: App | None,
    pending: list[Delivery],
) -> ReviewComment:
    """A reply in ``root``'s thread (``in_reply_to_id``), at its place, in a review of its own.

    GitHub documents replies to replies as unsupported: the emulator refuses them
    (422, its own words), so a client learns to answer the thread's first comment.
    """
    if root.in_reply_to_id is not None:
        message = f"{root.id} is a reply; answer the thread's first comment, {root.in_reply_to_id}"
        raise validation_failed(
            [
                {
                    "resource": "PullRequestReviewComment",
                    "code": "custom",
                    "field": "in_reply_to_id",
                    "message": message,
                }
            ],
            rules.REPLY_DOCS,
        )
    _refuse_while_pending(emu, repo, pull, user, rules.REPLY_DOCS)
    review = _new_review(
        emu, repo, pull, user=user, body=None, state="COMMENTED", commit_id=root.commit_id, acting=acting
    )
    spot = rules.Spot(
        path=root.path,
        line=root.line,
        side=root.side,
        start_line=root.start_line,
        start_side=root.start_side,
        position=root.position,
        diff_hunk=root.diff_hunk,
    )
    comment = _new_comment(emu, review, spot, text, in_reply_to=root.id)
    _emit_submitted(emu, base, repo, pull, review, pending=pending, acting=acting)
    return comment


def edit_review_comment(
    emu: Emulator,
    base: str,
    repo: Repo,
    comment: ReviewComment,
    *,
    text: str,
    sender: str | None,
    acting: App | None,
    pending: list[Delivery],
) -> None:
    """New body; ``pull_request_review_comment.edited`` (with ``changes.body.from``) if it changed."""
    previous = comment.body
    comment.body = text
    comment.updated_at = emu.state.now()
    pull = emu.state.pull(repo.full_name, comment.number)
    if previous == text or pull is None:
        return
    item = emu.state.issue(repo.full_name, pull.number)
    if item is not None:
        emu.state.touch(item)
    payload = {
        "action": "edited",
        "changes": {"body": {"from": previous}},
        "comment": shapes_reviews.review_comment(base, emu.state, repo, comment),
        "pull_request": _pull_for_hook(emu, base, repo, pull),
    }
    emit(
        emu, base, repo, "pull_request_review_comment", payload, pending=pending, sender=sender, acting=acting
    )


# -- the REST API ----------------------------------------------------------------------------------


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
