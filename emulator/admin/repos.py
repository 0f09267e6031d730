"""Admin API, part four: forks, and people's commits onto branches.

Forking copies the parent's branches and tags into a new repository of
another account and sends ``fork`` to the parent's Apps. A commit onto a
branch is set-up (silent), unless the branch is the head of an open pull
request, in this repository or in one the branch's repository was forked
from: then it is a person's push, with ``push`` and ``pull_request.synchronize``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from emulator import forks, webhooks
from emulator.admin.setup import (
    LOGIN,
    REPO_NAME,
    AdminBase,
    AdminError,
    checked_files,
    ensure_user,
    need_str,
)
from emulator.gitrepo import GitError, safe_ref
from emulator.pushes import open_pulls_on, push_events
from emulator.rest import shapes
from emulator.state import Delivery


class ReposAdmin(AdminBase):
    async def fork(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Fork into ``owner`` (an existing user or organization), as ``name`` (default the parent's).

        The fork has the parent's visibility, default branch and every branch
        and tag; ``fork`` goes to the parent's subscribed Apps, ``sender`` (default the owner) as sender.
        """
        state = self.emu.state
        parent = self._repo(params)
        login = need_str(body, "owner", LOGIN)
        owner = state.user(login)
        if owner is None or owner.type == "Bot":
            raise AdminError(422, f"'owner' must be an existing user or organization, not {login}")
        name = need_str(body, "name", REPO_NAME) if body.get("name") is not None else parent.name
        if owner.login.lower() == parent.owner.lower():
            raise AdminError(422, f"{owner.login} owns {parent.full_name}; a fork needs another account")
        if state.repo(owner.login, name) is not None:
            raise AdminError(409, f"repository {owner.login}/{name} exists")
        sender = ensure_user(self.emu, need_str(body, "sender", LOGIN) if "sender" in body else owner.login)
        pending: list[Delivery] = []
        try:
            fork = forks.create_fork(
                self.emu, base, parent, owner, name, sender=sender.login, pending=pending
            )
        except GitError as exc:
            raise AdminError(422, f"git: {exc}") from exc
        await self._send(pending, body)
        git = self.emu.git(fork)
        return 201, {
            **dataclasses.asdict(fork),
            "full_name": fork.full_name,
            "clone_url": f"{base}/{fork.full_name}.git",
            "file_url": git.url,
            "path": str(git.path),
            "head_sha": git.branch_sha(fork.default_branch),
            "repository": shapes.repository(base, state, fork, full=True),
            "deliveries": [webhooks.summary(d) for d in pending],
        }

    async def commit(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Commit files to a branch (new branches start from ``base``, default the default branch).

        Onto the head branch of an open pull request this is ``sender``'s push
        (default the repository's owner): ``push`` and ``pull_request.synchronize``.
        """
        repo = self._repo(params)
        branch = need_str(body, "branch")
        if not safe_ref(branch):
            raise AdminError(422, "'branch' must be a plain branch name")
        files = checked_files(body)
        if not files:
            raise AdminError(422, "'files' must name at least one path")
        message = body.get("message") or f"Update {', '.join(sorted(files))}"
        sender = need_str(body, "sender", LOGIN) if "sender" in body else repo.owner
        git = self.emu.git(repo)
        before = git.branches()
        try:
            sha = git.commit_files(
                branch, files, str(message), base=str(body.get("base") or repo.default_branch)
            )
        except GitError as exc:
            raise AdminError(422, f"git: {exc}") from exc
        pending: list[Delivery] = []
        if open_pulls_on(self.emu, repo, branch):
            login = ensure_user(self.emu, sender).login
            pending = push_events(
                self.emu, base, repo, before=before, after=git.branches(), sender=login, acting=None
            )
        await self._send(pending, body)
        return 201, {"sha": sha, "branch": branch, "deliveries": [webhooks.summary(d) for d in pending]}
