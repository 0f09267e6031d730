"""Sub-issues as GitHub keeps them: whose parent is whose, the summary, the rules of a new link.

An issue has at most one parent (``Issue.parent_id``, the parent's ``id``, which may be in
another repository of the same owner) and a parent's sub-issues are in the order of their
``Issue.sub_issue_rank``. Everything here only reads the state and decides, so the REST API
and the admin API's people are refused alike; the changes and their webhooks are
:mod:`emulator.sub_issuing`'s.

GitHub's limits ("Adding sub-issues" in its docs): "up to 100 sub-issues per parent issue
and ... up to eight levels of nested sub-issues". Eight levels are read as GitHub's refusal
words them: a root and at most seven layers of sub-issues below it (a tree of height 7).
"""

from __future__ import annotations

from emulator.state import Issue, State
from emulator.types import JSONObject

#: GitHub's documented limits (see the module's docstring).
MAX_SUB_ISSUES = 100
MAX_HEIGHT = 7

#: The first sentence of every refused add; the broken rules follow it, joined as a sentence.
ADD_FAILED = "An error occurred while adding the sub-issue to the parent issue."
#: The rules of a new link, as GitHub's refusals word them (seen from the live API in public
#: logs and client code; GitHub's docs do not list them), in the order the emulator checks them.
NOT_AN_ISSUE = "Sub issue may only be an issue"
PARENT_NOT_AN_ISSUE = "Parent may only be an issue"
SAME_ISSUE = "Sub issue cannot be the same as the parent issue"
OTHER_OWNER = "Sub issue must have the same owner as the parent"
DUPLICATE = "Issue may not contain duplicate sub-issues"
ONE_PARENT = "Sub issue may only have one parent"
TOO_MANY = f"Parent cannot have more than {MAX_SUB_ISSUES} sub-issues"
CIRCULAR = "Sub issue may not create a circular dependency"
TOO_DEEP = (
    f"You can\u2019t add more than {MAX_HEIGHT} layers of sub-issues. "
    "To add a sub-issue, remove a parent issue at any level."
)


def owner_of(item: Issue) -> str:
    return item.repo.split("/", 1)[0].lower()


def parent_of(state: State, item: Issue) -> Issue | None:
    """The issue's parent, if it has one (and it still exists)."""
    return state.issues.get(item.parent_id) if item.parent_id is not None else None


def children(state: State, item: Issue) -> list[Issue]:
    """The issue's sub-issues, in their order (the parent's list, top first)."""
    found = [i for i in state.issues.values() if i.parent_id == item.id]
    return sorted(found, key=lambda i: (i.sub_issue_rank, i.id))


def ancestors(state: State, item: Issue) -> list[Issue]:
    """Parent, grandparent, … up to the root (a loop, which the rules prevent, is cut)."""
    out: list[Issue] = []
    seen = {item.id}
    up = parent_of(state, item)
    while up is not None and up.id not in seen:
        out.append(up)
        seen.add(up.id)
        up = parent_of(state, up)
    return out


def height(state: State, item: Issue) -> int:
    """Layers of sub-issues below ``item`` (0: it has none)."""
    by_parent: dict[int, list[Issue]] = {}
    for candidate in state.issues.values():
        if candidate.parent_id is not None:
            by_parent.setdefault(candidate.parent_id, []).append(candidate)
    deepest, layer, seen = 0, [item], {item.id}
    while True:
        below = [c for i in layer for c in by_parent.get(i.id, []) if c.id not in seen]
        if not below:
            return deepest
        seen.update(c.id for c in below)
        deepest, layer = deepest + 1, below


def summary(state: State, item: Issue) -> JSONObject:
    """``sub_issues_summary``: direct sub-issues, how many are closed, and that as a whole percent.

    A closed sub-issue counts as completed whatever its ``state_reason``; the percent is
    rounded down (both the emulator's reading: GitHub documents only the three fields).
    """
    subs = children(state, item)
    done = sum(1 for i in subs if i.state == "closed")
    return {
        "total": len(subs),
        "completed": done,
        "percent_completed": done * 100 // len(subs) if subs else 0,
    }


def refusals(state: State, parent: Issue, child: Issue, *, replace_parent: bool) -> list[str]:
    """Every rule adding ``child`` under ``parent`` would break (empty: it may be added).

    With ``replace_parent`` a child that has another parent may move; one already under
    this parent is still a duplicate.
    """
    out: list[str] = []
    if child.is_pull:
        out.append(NOT_AN_ISSUE)
    if parent.is_pull:
        out.append(PARENT_NOT_AN_ISSUE)
    if child.id == parent.id:
        out.append(SAME_ISSUE)
    if owner_of(child) != owner_of(parent):
        out.append(OTHER_OWNER)
    if child.parent_id == parent.id:
        out.append(DUPLICATE)
    if child.parent_id is not None and not replace_parent:
        out.append(ONE_PARENT)
    if len(children(state, parent)) >= MAX_SUB_ISSUES:
        out.append(TOO_MANY)
    if any(up.id == child.id for up in ancestors(state, parent)):
        out.append(CIRCULAR)
    return out


def too_deep(state: State, parent: Issue, child: Issue) -> bool:
    """Would the tree be taller than ``MAX_HEIGHT`` with ``child`` (and its own tree) under ``parent``?"""
    return len(ancestors(state, parent)) + 1 + height(state, child) > MAX_HEIGHT


def sentence(parts: list[str]) -> str:
    """Messages joined as GitHub (Rails' ``to_sentence``) joins them: "a", "a and b", "a, b, and c"."""
    if len(parts) <= 2:
        return " and ".join(parts)
    return ", ".join(parts[:-1]) + ", and " + parts[-1]


def reordered(order: list[int], moved: int, *, before: int | None, after: int | None) -> list[int]:
    """Ids of a parent's sub-issues with ``moved`` put just before ``before`` or just after ``after``."""
    rest = [i for i in order if i != moved]
    anchor = before if before is not None else after
    at = rest.index(anchor) if anchor in rest else len(rest)
    if before is None:
        at += 1
    return [*rest[:at], moved, *rest[at:]]
