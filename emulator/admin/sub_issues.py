"""Admin API, part six: people adding, removing and reordering sub-issues.

A person links issues the way github.com lets them: through the same functions as the
REST API (:mod:`emulator.sub_issuing`), so GitHub's rules and 422s apply and the same
``sub_issues`` webhooks go out, in the same order, with the person as ``sender``, before
the admin call answers (unless ``"wait": false``). As GitHub documents, "People with at
least triage permissions for a repository can add sub-issues": the person needs triage or
more on the parent's repository and on the sub-issue's (403 otherwise).

An issue is named by its number in the parent's repository, or as ``"owner/repo#number"``
(another repository of the same owner, or anywhere to see the owner rule refuse it).
"""

from __future__ import annotations

import re
from typing import Any

from emulator import hierarchy, sub_issuing, webhooks
from emulator.admin.setup import LOGIN, AdminBase, AdminError, ensure_user, need_str, role_of
from emulator.state import Delivery, Issue, Repo

_REFERENCE = re.compile(r"^([A-Za-z0-9\-]+)/([A-Za-z0-9_.\-]+)#(\d+)$")
#: Roles strongest first; a person needs at least triage to change sub-issues (GitHub's docs).
_ROLES = ("admin", "maintain", "write", "triage")


class SubIssuesAdmin(AdminBase):
    def _named(self, repo: Repo, value: Any, key: str) -> Issue:
        """``value``: a number in ``repo``, or ``"owner/repo#number"``."""
        if isinstance(value, int) and not isinstance(value, bool):
            return self._issue(repo, str(value))
        match = _REFERENCE.match(value) if isinstance(value, str) else None
        if match is None:
            raise AdminError(422, f"'{key}' must be an issue number or 'owner/repo#number'")
        owner, name, number = match.groups()
        return self._issue(self._repo({"owner": owner, "repo": name}), number)

    def _person(self, body: dict[str, Any], *items: Issue) -> str:
        """The ``sender``, if they have triage or more on every repository involved."""
        login = ensure_user(self.emu, need_str(body, "sender", LOGIN)).login
        for item in items:
            repo = self.emu.state.repos[item.repo]
            if role_of(repo, login) not in _ROLES:
                raise AdminError(
                    403,
                    f"{login} needs triage or more on {repo.full_name} to change sub-issues "
                    "(GitHub: people with at least triage permissions for a repository can add sub-issues)",
                )
        return login

    def _answer(self, parent: Issue, pending: list[Delivery]) -> dict[str, Any]:
        state = self.emu.state
        subs = hierarchy.children(state, parent)
        return {
            "number": parent.number,
            "id": parent.id,
            "sub_issues": [{"id": c.id, "number": c.number, "repo": c.repo} for c in subs],
            "sub_issues_summary": hierarchy.summary(state, parent),
            "deliveries": [webhooks.summary(d) for d in pending],
        }

    async def add(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """``sub_issue`` (number or ``owner/repo#number``) becomes the last sub-issue; ``replace_parent``."""
        repo = self._repo(params)
        parent = self._issue(repo, params["number"])
        child = self._named(repo, body.get("sub_issue"), "sub_issue")
        sender = self._person(body, parent, child)
        replace = body.get("replace_parent", False)
        if not isinstance(replace, bool):
            raise AdminError(422, "'replace_parent' must be true or false")
        pending: list[Delivery] = []
        sub_issuing.add(
            self.emu, base, parent, child, replace_parent=replace, pending=pending, sender=sender, acting=None
        )
        await self._send(pending, body)
        return 201, self._answer(parent, pending)

    async def remove(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """``sub_issue`` is no longer a sub-issue of the path's issue."""
        repo = self._repo(params)
        parent = self._issue(repo, params["number"])
        child = self._named(repo, body.get("sub_issue"), "sub_issue")
        sender = self._person(body, parent, child)
        pending: list[Delivery] = []
        sub_issuing.remove(self.emu, base, parent, child, pending=pending, sender=sender, acting=None)
        await self._send(pending, body)
        return 200, self._answer(parent, pending)

    async def reprioritize(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Move ``sub_issue`` just ``after`` or just ``before`` another of the parent's (no webhook)."""
        repo = self._repo(params)
        parent = self._issue(repo, params["number"])
        child = self._named(repo, body.get("sub_issue"), "sub_issue")
        self._person(body, parent, child)
        place = {key: self._named(repo, body[key], key).id for key in ("after", "before") if key in body}
        sub_issuing.reprioritize(
            self.emu,
            parent,
            child,
            before=place.get("before"),
            after=place.get("after"),
            can_read=lambda _: True,
        )
        return 200, self._answer(parent, [])
