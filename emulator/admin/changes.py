"""Admin API, part three: people changing what exists (close, reopen, unlabel, push, re-run, uninstall).

Each handler changes the state the way a person does on github.com and sends
the webhook GitHub sends for that change, signed, with the person as
``sender``, before the admin call answers (unless ``"wait": false``).
"""

from __future__ import annotations

import shutil
from typing import Any

from emulator import check_suites, webhooks
from emulator.admin.setup import (
    LOGIN,
    AdminBase,
    AdminError,
    canonical_repo,
    checked_files,
    ensure_user,
    need_str,
    str_list,
)
from emulator.core import emit
from emulator.pushes import push_events
from emulator.rest import issues as routes_issues
from emulator.rest import pulls as routes_pulls
from emulator.rest import shapes
from emulator.state import Delivery, Installation, Pull, Repo

_STATE_REASONS = {"completed", "not_planned"}


def _answer(pending: list[Delivery], **extra: Any) -> dict[str, Any]:
    return {**extra, "deliveries": [webhooks.summary(d) for d in pending]}


class ChangesAdmin(AdminBase):
    def _pull(self, repo: Repo, number: str) -> Pull:
        found = self.emu.state.pull(repo.full_name, int(number)) if number.isdigit() else None
        if found is None:
            raise AdminError(404, f"no pull request #{number} in {repo.full_name}")
        return found

    def _sender(self, body: dict[str, Any]) -> str:
        return ensure_user(self.emu, need_str(body, "sender", LOGIN)).login

    # -- issues and pull requests ---------------------------------------------
    async def close_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Close an issue (``issues.closed``), or a pull by its number (``pull_request.closed``)."""
        repo = self._repo(params)
        item = self._issue(repo, params["number"])
        sender = self._sender(body)
        reason = body.get("state_reason", "completed")
        if reason not in _STATE_REASONS:
            raise AdminError(422, "'state_reason' must be completed or not_planned")
        if item.state == "closed":
            raise AdminError(422, f"#{item.number} is already closed")
        pending: list[Delivery] = []
        routes_issues.change_state(
            self.emu, base, repo, item, "closed", reason=reason, pending=pending, sender=sender, acting=None
        )
        await self._send(pending, body)
        return 200, _answer(pending, state=item.state, state_reason=item.state_reason)

    async def reopen_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Reopen an issue (``issues.reopened``) or a pull (``pull_request.reopened``)."""
        repo = self._repo(params)
        item = self._issue(repo, params["number"])
        sender = self._sender(body)
        if item.state == "open":
            raise AdminError(422, f"#{item.number} is already open")
        if item.is_pull:
            pull = self._pull(repo, params["number"])
            routes_pulls.check_reopenable(self.emu, repo, pull)
        pending: list[Delivery] = []
        routes_issues.change_state(
            self.emu, base, repo, item, "open", reason=None, pending=pending, sender=sender, acting=None
        )
        await self._send(pending, body)
        return 200, _answer(pending, state=item.state, state_reason=item.state_reason)

    async def unlabel_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """A person removes one label (``issues.unlabeled`` / ``pull_request.unlabeled``)."""
        repo = self._repo(params)
        item = self._issue(repo, params["number"])
        sender = self._sender(body)
        pending: list[Delivery] = []
        routes_issues.remove_label(
            self.emu, base, repo, item, params["name"], pending=pending, sender=sender, acting=None
        )
        await self._send(pending, body)
        return 200, _answer(pending, labels=item.labels)

    async def close_pull(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        self._pull(self._repo(params), params["number"])
        return await self.close_issue(body, params, base)

    async def reopen_pull(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        self._pull(self._repo(params), params["number"])
        return await self.reopen_issue(body, params, base)

    async def ready_for_review(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """A draft becomes ready: ``pull_request.ready_for_review``."""
        return await self._set_draft(body, params, base, draft=False)

    async def convert_to_draft(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """Back to a draft: ``pull_request.converted_to_draft``."""
        return await self._set_draft(body, params, base, draft=True)

    async def _set_draft(
        self, body: dict[str, Any], params: dict[str, str], base: str, *, draft: bool
    ) -> tuple[int, Any]:
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        sender = self._sender(body)
        item = self.emu.state.issue(repo.full_name, pull.number)
        if item is None or item.state != "open":
            raise AdminError(422, f"pull request #{pull.number} is not open")
        if pull.draft == draft:
            raise AdminError(422, f"pull request #{pull.number} is {'already' if draft else 'not'} a draft")
        pending: list[Delivery] = []
        routes_pulls.set_draft(self.emu, base, repo, pull, draft, pending=pending, sender=sender)
        await self._send(pending, body)
        return 200, _answer(pending, draft=pull.draft)

    async def push_to_pull(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """A person pushes one commit (``files``: path → text, null deletes) onto the pull's head branch.

        Sends ``push`` and, while the pull is open, ``pull_request.synchronize``.
        A head in a fork gets the commit in the fork (the push goes to the fork's Apps).
        """
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        sender = self._sender(body)
        files = checked_files(body)
        if not files:
            raise AdminError(422, "'files' must name at least one path")
        head_repo = self.emu.state.pull_head_repo(pull)
        if head_repo is None:
            raise AdminError(422, f"the head repository {pull.head_repo} no longer exists")
        git = self.emu.git(head_repo)
        before = git.branches()
        if pull.head_ref not in before:
            raise AdminError(422, f"the head branch {pull.head_ref} no longer exists")
        message = str(body.get("message") or f"Update {', '.join(sorted(files))}")
        person = self.emu.state.user(sender)
        email = (person.email if person is not None and person.email else None) or (
            f"{person.id}+{sender}@users.noreply.github.com" if person is not None else f"{sender}@localhost"
        )
        sha = git.commit_files(pull.head_ref, files, message, author=(sender, email))  # the pusher's own
        pending = push_events(
            self.emu, base, head_repo, before=before, after=git.branches(), sender=sender, acting=None
        )
        await self._send(pending, body)
        return 201, _answer(pending, sha=sha, before=before[pull.head_ref], after=sha, branch=pull.head_ref)

    # -- checks -----------------------------------------------------------------
    async def rerequest_suite(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """A person clicks "Re-run all checks": ``check_suite.rerequested`` to the suite's App."""
        ident = params["suite_id"]
        suite = self.emu.state.check_suites.get(int(ident)) if ident.isdigit() else None
        if suite is None:
            raise AdminError(404, "no such check suite")
        repo = self.emu.state.repos[suite.repo]
        sender = self._sender(body)
        pending: list[Delivery] = []
        check_suites.rerequest(self.emu, base, repo, suite, pending=pending, sender=sender)
        await self._send(pending, body)
        return 200, _answer(pending)

    # -- installations and repositories -------------------------------------------
    def _installation(self, params: dict[str, str]) -> Installation:
        ident = params["installation_id"]
        inst = self.emu.state.installations.get(int(ident)) if ident.isdigit() else None
        if inst is None:
            raise AdminError(404, "no such installation")
        return inst

    async def installation_repositories(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """An org admin adds repositories to (``added``) or removes them from (``removed``) the installation.

        Removing from an ``all`` installation turns it into ``selected`` with
        every other repository, as GitHub's settings page does.
        """
        state = self.emu.state
        inst = self._installation(params)
        action = params["action"]
        if action not in {"added", "removed"}:
            raise AdminError(404, "action must be added or removed")
        names = [canonical_repo(self.emu, inst.account, n) for n in str_list(body, "repositories")]
        repos = [state.repos.get(n) for n in names]
        missing = [n for n, r in zip(names, repos, strict=True) if r is None]
        if missing or not names:
            raise AdminError(
                422, f"'repositories' must name existing repositories of {inst.account}: {missing}"
            )
        current = {r.full_name for r in state.installation_repos(inst)}
        if action == "added":
            if inst.repository_selection == "all":
                raise AdminError(422, "the installation already covers all repositories")
            changed = [r for r in repos if r is not None and r.full_name not in current]
            inst.repositories = [*inst.repositories, *(r.full_name for r in changed)]
        else:
            changed = [r for r in repos if r is not None and r.full_name in current]
            inst.repository_selection = "selected"
            gone = {r.full_name for r in changed}
            inst.repositories = sorted(n for n in current if n not in gone)
        if not changed:
            raise AdminError(422, f"nothing to {'add' if action == 'added' else 'remove'}")
        sender = ensure_user(self.emu, str(body.get("sender") or inst.account))
        mini = [shapes.mini_repository(r) for r in changed]
        payload: dict[str, Any] = {
            "action": action,
            "installation": shapes.installation(base, state, inst),
            "repository_selection": inst.repository_selection,
            "repositories_added": mini if action == "added" else [],
            "repositories_removed": mini if action == "removed" else [],
            "requester": None,
            "sender": shapes.simple_user(base, sender),
        }
        org = webhooks.organization(base, state, inst.account)
        if org is not None:
            payload["organization"] = org
        app = state.apps[inst.app_id]
        pending = (
            [webhooks.record(state, app, "installation_repositories", payload)]
            if app.webhook_url and inst.suspended_at is None
            else []
        )
        await self._send(pending, body)
        return 200, _answer(
            pending, repository_selection=inst.repository_selection, repositories=inst.repositories
        )

    async def delete_repo(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Delete a repository: ``repository.deleted`` to subscribed Apps, then 404 everywhere."""
        repo = self._repo(params)
        sender = ensure_user(self.emu, str(body.get("sender") or repo.owner))
        pending: list[Delivery] = []
        emit(self.emu, base, repo, "repository", {"action": "deleted"}, pending=pending, sender=sender.login)
        self.emu.state.delete_repo(repo)
        shutil.rmtree(self.emu.git(repo).path, ignore_errors=True)
        await self._send(pending, body)
        return 200, _answer(pending, deleted=repo.full_name)
