"""Linking issues as parent and sub-issue, and the ``sub_issues`` webhooks each change sends.

A link is told to both ends: ``sub_issue_added`` goes to the Apps of the parent's repository
(``repository`` is the parent's, ``sub_issue_repo`` the sub-issue's) and ``parent_issue_added``
to those of the sub-issue's (``repository`` the sub-issue's, ``parent_issue_repo`` the
parent's), in that order; removing sends ``sub_issue_removed`` then ``parent_issue_removed``
the same way. Moving a sub-issue (``replace_parent``) is its removal from the old parent,
then its addition to the new one: four deliveries. Each payload's ``sub_issue`` and
``parent_issue`` are the issues as the REST API serves them after the change, so the
parent's ``sub_issues_summary`` already counts it. Reordering sends nothing (GitHub has no
such action). The order and the two ends are the emulator's reading of GitHub's schemas.

The REST API (:mod:`emulator.rest.sub_issues`) and the admin API's people
(:mod:`emulator.admin.sub_issues`) both change links through these functions; every rule
(:mod:`emulator.hierarchy`) is checked before anything changes.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator import hierarchy
from emulator.core import Emulator, emit
from emulator.errors import ApiError
from emulator.rest import shapes, shapes_items
from emulator.state import App, Delivery, Issue, Repo

ADD_DOCS = "https://docs.github.com/rest/issues/sub-issues#add-sub-issue"
REMOVE_DOCS = "https://docs.github.com/rest/issues/sub-issues#remove-sub-issue"
PRIORITY_DOCS = "https://docs.github.com/rest/issues/sub-issues#reprioritize-sub-issue"
#: A sub-issue named by ``sub_issue_id`` is unknown, or hidden from the caller.
NO_SUCH_SUB_ISSUE = "The provided sub-issue does not exist"
#: The issue named is not a sub-issue of this parent (the emulator's words when removing).
NOT_LINKED = "Sub-issue relationship does not exist"


def _repo(emu: Emulator, item: Issue) -> Repo:
    return emu.state.repos[item.repo]


def _emit(
    emu: Emulator,
    base: str,
    parent: Issue,
    child: Issue,
    *,
    added: bool,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """``sub_issue_<added|removed>`` to the parent's repository, then ``parent_issue_…`` to the child's."""
    state = emu.state
    state.touch(parent)
    state.touch(child)
    parent_repo, child_repo = _repo(emu, parent), _repo(emu, child)
    ends = {
        "sub_issue_id": child.id,
        "sub_issue": shapes_items.issue(base, state, child_repo, child),
        "parent_issue_id": parent.id,
        "parent_issue": shapes_items.issue(base, state, parent_repo, parent),
    }
    word = "added" if added else "removed"
    on_parent = {
        "action": f"sub_issue_{word}",
        **ends,
        "sub_issue_repo": shapes.repository(base, state, child_repo),
    }
    on_child = {
        "action": f"parent_issue_{word}",
        **ends,
        "parent_issue_repo": shapes.repository(base, state, parent_repo),
    }
    for repo, body in ((parent_repo, on_parent), (child_repo, on_child)):
        emit(emu, base, repo, "sub_issues", body, pending=pending, sender=sender, acting=acting)


def _unlink(
    emu: Emulator,
    base: str,
    parent: Issue,
    child: Issue,
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    child.parent_id = None
    child.sub_issue_rank = 0
    _emit(emu, base, parent, child, added=False, pending=pending, sender=sender, acting=acting)


def add(
    emu: Emulator,
    base: str,
    parent: Issue,
    child: Issue,
    *,
    replace_parent: bool,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """``child`` becomes ``parent``'s last sub-issue, or GitHub's 422 naming every rule it breaks.

    The height limit is checked only once the other rules hold, and refused on its own,
    as GitHub checks it after the link's own validations.
    """
    state = emu.state
    broken = hierarchy.refusals(state, parent, child, replace_parent=replace_parent)
    if broken:
        raise ApiError(
            422, f"{hierarchy.ADD_FAILED} {hierarchy.sentence(broken)}", documentation_url=ADD_DOCS
        )
    if hierarchy.too_deep(state, parent, child):
        raise ApiError(422, f"{hierarchy.ADD_FAILED} {hierarchy.TOO_DEEP}", documentation_url=ADD_DOCS)
    former = hierarchy.parent_of(state, child)
    if former is not None:  # replace_parent: first taken from the old parent
        _unlink(emu, base, former, child, pending=pending, sender=sender, acting=acting)
    siblings = hierarchy.children(state, parent)
    child.parent_id = parent.id
    child.sub_issue_rank = 1 + max((s.sub_issue_rank for s in siblings), default=-1)
    _emit(emu, base, parent, child, added=True, pending=pending, sender=sender, acting=acting)


def remove(
    emu: Emulator,
    base: str,
    parent: Issue,
    child: Issue,
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """``child`` is no longer ``parent``'s sub-issue (404 if it was not one)."""
    if child.parent_id != parent.id:
        raise ApiError(404, NOT_LINKED, documentation_url=REMOVE_DOCS)
    _unlink(emu, base, parent, child, pending=pending, sender=sender, acting=acting)


def _unprioritizable(message: str) -> ApiError:
    return ApiError(422, message, documentation_url=PRIORITY_DOCS)


def _anchor(
    emu: Emulator,
    parent: Issue,
    child: Issue,
    *,
    before: int | None,
    after: int | None,
    can_read: Callable[[Issue], bool],
) -> int:
    """The id ``child`` goes next to, checked as GitHub checks it (its 422s and 403, in its order)."""
    if before is None and after is None:
        raise _unprioritizable("Either a before_id or after_id argument must be provided")
    if before is not None and after is not None:
        raise _unprioritizable("Only the before_id or the after_id argument may be provided, but not both")
    anchor = before if before is not None else after
    if anchor == parent.id:
        raise _unprioritizable("The provided positional id cannot be the parent issue")
    if anchor == child.id:
        raise _unprioritizable("The provided positional id cannot be the child issue")
    other = emu.state.issues.get(anchor) if anchor is not None else None
    if other is not None and not can_read(other):
        raise ApiError(
            403,
            "You do not have read access to the issue at the provided positional id",
            documentation_url=PRIORITY_DOCS,
        )
    if other is None or other.parent_id != parent.id:
        raise _unprioritizable("Provided positional argument is not a sub-issue of the provided parent")
    return other.id


def reprioritize(
    emu: Emulator,
    parent: Issue,
    child: Issue,
    *,
    before: int | None,
    after: int | None,
    can_read: Callable[[Issue], bool],
) -> None:
    """Move ``child`` just before ``before`` or just after ``after`` among ``parent``'s sub-issues.

    ``can_read``: whether the caller may see the issue named as the place (else GitHub's 403).
    """
    if child.id == parent.id:
        raise _unprioritizable("A sub-issue cannot be prioritized against itself")
    if child.parent_id != parent.id:
        raise ApiError(404, NOT_LINKED, documentation_url=PRIORITY_DOCS)
    anchor = _anchor(emu, parent, child, before=before, after=after, can_read=can_read)
    state = emu.state
    order = [s.id for s in hierarchy.children(state, parent)]
    if before is not None:
        moved = hierarchy.reordered(order, child.id, before=anchor, after=None)
    else:
        moved = hierarchy.reordered(order, child.id, before=None, after=anchor)
    for rank, ident in enumerate(moved):
        state.issues[ident].sub_issue_rank = rank
