"""GitHub's shapes for pull request reviews and review comments, in REST answers and webhooks.

REST answers follow the OpenAPI description (``pull-request-review``,
``pull-request-review-comment``, and ``review-comment`` for a review's own comment list);
webhook objects follow the webhook schemas, which allow no other property: a review's
``state`` is lower case there (``approved``), upper case in REST (``APPROVED``), and its
missing ``body`` is ``null`` there, ``""`` in REST. The ``pull_request`` of review events
is GitHub's simple pull request: no ``merged``, ``comments``, ``commits`` or the other counts.
"""

from __future__ import annotations

from emulator.rest.shapes import account, node_id
from emulator.rest.shapes_items import author_association, reactions
from emulator.state import Repo, Review, ReviewComment, State, iso
from emulator.types import JSONObject

#: What a ``simple-pull-request`` (the webhook schemas') may hold; the full pull request has more.
SIMPLE_PULL_KEYS = frozenset(
    {
        "_links", "active_lock_reason", "assignee", "assignees", "author_association", "auto_merge", "base",
        "body", "closed_at", "comments_url", "commits_url", "created_at", "diff_url", "draft", "head",
        "html_url", "id", "issue_url", "labels", "locked", "merge_commit_sha", "merged_at", "milestone",
        "node_id", "number", "patch_url", "requested_reviewers", "requested_teams", "review_comment_url",
        "review_comments_url", "state", "statuses_url", "title", "updated_at", "url", "user",
    }
)  # fmt: skip


def simple_pull(pull: JSONObject) -> JSONObject:
    """The simple pull request review events carry, from a webhook's full one."""
    return {key: value for key, value in pull.items() if key in SIMPLE_PULL_KEYS}


def _pull_urls(base: str, repo: Repo, number: int) -> tuple[str, str]:
    """(API URL, HTML URL) of the pull request."""
    return f"{base}/repos/{repo.full_name}/pulls/{number}", f"{base}/{repo.full_name}/pull/{number}"


def review(base: str, state: State, repo: Repo, item: Review, *, hook: bool = False) -> JSONObject:
    """A review; ``hook`` for the webhook's form. A pending review has no ``submitted_at``."""
    api, html = _pull_urls(base, repo, item.number)
    own = f"{html}#pullrequestreview-{item.id}"
    out: JSONObject = {
        "id": item.id,
        "node_id": node_id("PullRequestReview", item.id),
        "user": account(base, state, item.user),
        "body": item.body if hook else (item.body or ""),
        "state": item.state.lower() if hook else item.state,
        "html_url": own,
        "pull_request_url": api,
        "author_association": author_association(repo, item.user),
        "_links": {"html": {"href": own}, "pull_request": {"href": api}},
        "commit_id": item.commit_id,
    }
    if item.submitted_at is not None:
        out["submitted_at"] = iso(item.submitted_at)
    elif hook:
        out["submitted_at"] = None
    return out


def review_comment(base: str, state: State, repo: Repo, item: ReviewComment) -> JSONObject:
    """A review comment, as REST answers and webhooks alike carry it.

    Comments are not moved when later pushes change the diff: ``line`` and
    ``position`` stay where they were made, ``original_*`` equal them.
    """
    api, html = _pull_urls(base, repo, item.number)
    url = f"{base}/repos/{repo.full_name}/pulls/comments/{item.id}"
    own = f"{html}#discussion_r{item.id}"
    out: JSONObject = {
        "url": url,
        "pull_request_review_id": item.review_id,
        "id": item.id,
        "node_id": node_id("PullRequestReviewComment", item.id),
        "diff_hunk": item.diff_hunk,
        "path": item.path,
        "position": item.position,
        "original_position": item.position,
        "commit_id": item.commit_id,
        "original_commit_id": item.commit_id,
        "user": account(base, state, item.user),
        "body": item.body,
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
        "html_url": own,
        "pull_request_url": api,
        "author_association": author_association(repo, item.user),
        "_links": {"self": {"href": url}, "html": {"href": own}, "pull_request": {"href": api}},
        "reactions": reactions(url),
        "start_line": item.start_line,
        "original_start_line": item.start_line,
        "start_side": item.start_side,
        "line": item.line,
        "original_line": item.line,
        "side": item.side,
        "subject_type": "line",
    }
    if item.in_reply_to_id is not None:
        out["in_reply_to_id"] = item.in_reply_to_id
    return out
