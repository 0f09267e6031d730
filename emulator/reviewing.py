"""Reviewing a pull request: reviews, review comments and replies, and the webhooks they send.

As on GitHub, every review comment belongs to a review: a review made with ``comments``
holds them, and a single comment or a reply is a review of its own (state
``COMMENTED``). A review made without ``event`` stays ``PENDING``: only its author sees
it and its comments, and no webhook goes out. Submitting sends ``pull_request_review``
``submitted``, then one ``pull_request_review_comment`` ``created`` per comment, in order.

The REST API (:mod:`emulator.rest.reviews`) and the admin API's people
(:mod:`emulator.admin.reviews`) both act through these functions, so they follow the same
rules and send the same webhooks; every rule is checked before anything is stored.
"""

from __future__ import annotations

from emulator.core import Emulator, emit
from emulator.errors import validation_failed
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
