"""Sub-issues over REST: list, add, remove, reprioritise, and a sub-issue's parent.

GitHub's paths, status codes and answers (``issue`` objects: the list holds the sub-issues,
``GET …/parent`` the parent, and add (201), remove and reprioritise (200) answer the parent
issue after the change). A sub-issue is named by its ``id``, not its number, and may be in
another repository of the same owner. Reading needs ``issues: read`` on the parent's
repository; a change needs ``issues: write`` there and on the sub-issue's repository.
A sub-issue in a repository the caller cannot read is not listed and cannot be named
(404, as if it did not exist). The rules and the webhooks are :mod:`emulator.sub_issuing`'s.
"""

from __future__ import annotations

from typing import Any

from emulator import hierarchy, sub_issuing
from emulator.auth import authorize_repo
from emulator.core import ApiRequest, Reply, RouteSpec, paginate
from emulator.errors import ApiError, invalid_request
from emulator.rest import reviews_validation as schema
from emulator.rest import shapes_items
from emulator.state import Issue, Repo

LIST_DOCS = "https://docs.github.com/rest/issues/sub-issues#list-sub-issues"
PARENT_DOCS = "https://docs.github.com/rest/issues/sub-issues#get-parent-issue"


def _parent(req: ApiRequest, level: str) -> tuple[Repo, Issue]:
    """The path's issue, if the caller may ``issues:level`` on its repository."""
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    authorize_repo(req.caller, repo, "issues", level)
    return repo, item


def _readable(req: ApiRequest, item: Issue) -> bool:
    try:
        authorize_repo(req.caller, req.state.repos[item.repo], "issues", "read")
    except ApiError:
        return False
    return True


def _named(req: ApiRequest, body: dict[str, Any], key: str, docs: str) -> Issue:
    """The issue ``body[key]`` names by id: it must exist and be readable (else 404), and writable."""
    ident = schema.integer(body, key, docs)
    if ident is None:
        raise schema.missing([key], docs)
    found = req.state.issues.get(ident)
    if found is None or not _readable(req, found):
        raise ApiError(404, sub_issuing.NO_SUCH_SUB_ISSUE, documentation_url=docs)
    authorize_repo(req.caller, req.state.repos[found.repo], "issues", "write")
    return found


def _boolean(body: dict[str, Any], key: str, docs: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise invalid_request(f"For 'properties/{key}', {schema.shown(value)} is not a boolean.", docs)
    return bool(value)


def _shown(req: ApiRequest, item: Issue) -> dict[str, Any]:
    return shapes_items.issue(req.base, req.state, req.state.repos[item.repo], item)


async def list_sub_issues(req: ApiRequest) -> Reply:
    """The issue's sub-issues in their order, paginated (``per_page``, ``page``, ``Link``)."""
    _, parent = _parent(req, "read")
    found = [c for c in hierarchy.children(req.state, parent) if _readable(req, c)]
    page, headers = paginate(req, found)
    return Reply([_shown(req, c) for c in page], headers=headers)


async def get_parent(req: ApiRequest) -> Reply:
    _, item = _parent(req, "read")
    parent = hierarchy.parent_of(req.state, item)
    if parent is None or not _readable(req, parent):
        raise ApiError(404, "No parent issue found", documentation_url=PARENT_DOCS)
    return Reply(_shown(req, parent))


async def add_sub_issue(req: ApiRequest) -> Reply:
    """``sub_issue_id`` (an issue's id) becomes the last sub-issue; ``replace_parent`` moves it."""
    _, parent = _parent(req, "write")
    body = req.json_object()
    docs = sub_issuing.ADD_DOCS
    replace_parent = _boolean(body, "replace_parent", docs)  # the whole body's schema first
    child = _named(req, body, "sub_issue_id", docs)
    sub_issuing.add(
        req.emu,
        req.base,
        parent,
        child,
        replace_parent=replace_parent,
        pending=req.pending,
        sender=None,
        acting=req.caller.app,
    )
    return Reply(_shown(req, parent), status=201)


async def remove_sub_issue(req: ApiRequest) -> Reply:
    _, parent = _parent(req, "write")
    child = _named(req, req.json_object(), "sub_issue_id", sub_issuing.REMOVE_DOCS)
    sub_issuing.remove(
        req.emu, req.base, parent, child, pending=req.pending, sender=None, acting=req.caller.app
    )
    return Reply(_shown(req, parent))


async def reprioritize_sub_issue(req: ApiRequest) -> Reply:
    """Move ``sub_issue_id`` just after ``after_id`` or just before ``before_id`` (one of them)."""
    _, parent = _parent(req, "write")
    body = req.json_object()
    docs = sub_issuing.PRIORITY_DOCS
    before = schema.integer(body, "before_id", docs)  # the whole body's schema first
    after = schema.integer(body, "after_id", docs)
    child = _named(req, body, "sub_issue_id", docs)
    sub_issuing.reprioritize(
        req.emu,
        parent,
        child,
        before=before,
        after=after,
        can_read=lambda item: _readable(req, item),
    )
    return Reply(_shown(req, parent))


ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues", list_sub_issues),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues", add_sub_issue),
    ("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issue", remove_sub_issue),
    ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues/priority", reprioritize_sub_issue),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/parent", get_parent),
]
