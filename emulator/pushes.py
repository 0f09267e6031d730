"""Pushes: the ``push`` event and ``pull_request.synchronize``, for git pushes and people's commits.

A push over smart HTTP (:mod:`emulator.githttp`) and a person's commit onto a
pull request's head branch (the admin API) both end here, so both send the
same deliveries: one ``push`` per moved branch (``before``, ``after``, the
pushed ``commits`` and ``head_commit``), then ``pull_request.synchronize``
for every open pull request whose head is that branch. A pull's head may be
a fork's branch: the push goes to the fork's Apps, the ``synchronize`` to the
base repository's (which need not be installed on the fork), after the base's
``refs/pull/<n>/head`` has moved to the new tip.
"""

from __future__ import annotations

from typing import Any

from emulator import forks
from emulator.core import Emulator, emit
from emulator.gitrepo import GitRepo
from emulator.rest.pulls import hook_pull
from emulator.rest.shapes import bot_user
from emulator.state import App, Delivery, Pull, Repo, iso
from emulator.types import JSONObject

NULL_SHA = "0" * 40
#: GitHub lists at most this many commits in one ``push`` payload.
MAX_PUSH_COMMITS = 2048


def _commit(base: str, repo: Repo, git: GitRepo, sha: str) -> JSONObject:
    """One entry of ``commits`` (and the shape of ``head_commit``)."""
    meta = git.commit_meta(sha)
    added, removed, modified = git.touched(sha)
    person = {"name": meta.author_name, "email": meta.author_email}
    return {
        "id": sha,
        "tree_id": meta.tree,
        "distinct": True,
        "message": meta.message,
        "timestamp": iso(float(meta.timestamp)),
        "url": f"{base}/{repo.full_name}/commit/{sha}",
        "author": person,
        "committer": person,
        "added": added,
        "removed": removed,
        "modified": modified,
    }


def _pusher(emu: Emulator, sender: str | None, acting: App | None) -> dict[str, Any]:
    if sender is not None:
        user = emu.state.user(sender)
        return {"name": sender, "email": user.email if user is not None else None}
    if acting is not None:
        return {"name": bot_user(emu.state, acting).login, "email": None}
    return {"name": "ghost", "email": None}


def open_pulls_on(emu: Emulator, repo: Repo, branch: str) -> list[tuple[Repo, Pull]]:
    """(base repository, pull) of every open pull request whose head is ``repo``'s ``branch``."""
    state = emu.state
    found = []
    for pull in sorted(state.pulls.values(), key=lambda p: (p.repo, p.number)):
        base_repo = state.repos.get(pull.repo)
        item = state.issue(pull.repo, pull.number)
        if base_repo is None or item is None or item.state != "open":
            continue
        if (pull.head_repo or pull.repo) == repo.full_name and pull.head_ref == branch:
            found.append((base_repo, pull))
    return found


def push_events(
    emu: Emulator,
    base: str,
    repo: Repo,
    *,
    before: dict[str, str],
    after: dict[str, str],
    sender: str | None,
    acting: App | None,
) -> list[Delivery]:
    """``push`` per moved branch, plus ``pull_request.synchronize`` for open pulls on it.

    ``before``/``after`` map every branch to its tip before and after the push.
    """
    pending: list[Delivery] = []
    git = emu.git(repo)
    for branch in sorted(set(before) | set(after)):
        old, new = before.get(branch, NULL_SHA), after.get(branch, NULL_SHA)
        if old == new:
            continue
        deleted = new == NULL_SHA
        if deleted:
            shas: list[str] = []
        elif old == NULL_SHA:  # a new branch: what no other branch had
            shas = git.new_commits(new, list(before.values()), MAX_PUSH_COMMITS)
        else:
            shas = git.new_commits(new, [old], MAX_PUSH_COMMITS)
        commits = [_commit(base, repo, git, sha) for sha in shas]
        payload: dict[str, Any] = {
            "ref": f"refs/heads/{branch}",
            "before": old,
            "after": new,
            "created": old == NULL_SHA,
            "deleted": deleted,
            "forced": old != NULL_SHA and not deleted and not git.is_ancestor(old, new),
            "base_ref": None,
            "compare": f"{base}/{repo.full_name}/compare/{old[:12]}...{new[:12]}",
            "commits": commits,
            "head_commit": None if deleted else (commits[-1] if commits else _commit(base, repo, git, new)),
            "pusher": _pusher(emu, sender, acting),
        }
        emit(emu, base, repo, "push", payload, pending=pending, sender=sender, acting=acting)
        for base_repo, pull in open_pulls_on(emu, repo, branch):
            item = emu.state.issue(base_repo.full_name, pull.number)
            if item is None:
                continue
            if not deleted:  # GitHub keeps refs/pull/<n>/head when the head branch goes
                forks.sync_pull_ref(emu, base_repo, pull)
            emu.state.touch(item)
            sync = {
                "action": "synchronize",
                "number": pull.number,
                "before": old,
                "after": new,
                "pull_request": hook_pull(emu, base, base_repo, pull),
            }
            emit(emu, base, base_repo, "pull_request", sync, pending=pending, sender=sender, acting=acting)
    return pending
