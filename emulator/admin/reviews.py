"""Admin API, part five: people reviewing pull requests and editing comments.

A person submits a review (with line comments), adds a single line comment, replies
in a review thread, or edits a comment. Each goes through the REST API's own functions
(:mod:`emulator.reviewing`, :mod:`emulator.rest.issues`), so GitHub's rules and
422s apply and the same webhooks go out, in the same order, with the person as
``sender``, before the admin call answers (unless ``"wait": false``).
"""

from __future__ import annotations

from typing import Any

from emulator import reviewing, webhooks
from emulator.admin.setup import LOGIN, AdminBase, AdminError, ensure_user, need_str
from emulator.rest import issues as routes_issues
from emulator.rest import reviews_validation as rules
from emulator.rest.pulls import pull_shas
from emulator.state import Delivery, Pull, Repo, ReviewComment


def _answer(pending: list[Delivery], **extra: Any) -> dict[str, Any]:
    return {**extra, "deliveries": [webhooks.summary(d) for d in pending]}


class ReviewsAdmin(AdminBase):
    def _pull(self, repo: Repo, number: str) -> Pull:
        found = self.emu.state.pull(repo.full_name, int(number)) if number.isdigit() else None
        if found is None:
            raise AdminError(404, f"no pull request #{number} in {repo.full_name}")
        return found

    def _review_comment(self, repo: Repo, ident: str, pull: Pull | None = None) -> ReviewComment:
        found = self.emu.state.review_comments.get(int(ident)) if ident.isdigit() else None
        if (
            found is None
            or found.repo != repo.full_name
            or (pull is not None and found.number != pull.number)
        ):
            where = f"#{pull.number}" if pull is not None else repo.full_name
            raise AdminError(404, f"no review comment {ident} on {where}")
        return found

    async def review(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """``event`` APPROVE, REQUEST_CHANGES or COMMENT (none: the review stays PENDING); ``comments``
        a list of ``{path, line, body}`` (``side``, ``start_line``, ``start_side`` optional)."""
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        pending: list[Delivery] = []
        docs = rules.REVIEW_DOCS
        raw = body.get("comments") or []
        if not isinstance(raw, list):
            raise AdminError(422, "'comments' must be a list of {path, line, body}")
        review = reviewing.submit_review(
            self.emu,
            base,
            repo,
            pull,
            user=user.login,
            body=rules.string(body, "body", docs),
            event=rules.one_of(body, "event", tuple(rules.EVENTS), docs),
            comments=[rules.wanted(item, docs, where="items") for item in raw],
            commit_id=rules.string(body, "commit_id", docs),
            acting=None,
            pending=pending,
        )
        await self._send(pending, body)
        comments = [c.id for c in reviewing.comments_of(self.emu, review)]
        return 200, _answer(pending, id=review.id, state=review.state, comments=comments)

    async def comment(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """A single line comment (``path``, ``line``, ``body``; ``side``, ``start_line``, ``commit_id``
        optional, the head by default): a review of its own, as on GitHub."""
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        asked = rules.wanted(body, rules.COMMENT_DOCS, where="properties")
        if asked.line is None:
            raise AdminError(
                422, "'line' must be the line's number in the file (on 'side', RIGHT by default)"
            )
        head, _ = pull_shas(self.emu, repo, pull)
        pending: list[Delivery] = []
        made = reviewing.single_comment(
            self.emu,
            base,
            repo,
            pull,
            asked,
            user=user.login,
            commit_id=rules.string(body, "commit_id", rules.COMMENT_DOCS) or head,
            acting=None,
            pending=pending,
        )
        await self._send(pending, body)
        return 201, _answer(pending, id=made.id, review_id=made.review_id)

    async def reply(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """A reply in the thread of review comment ``comment_id`` (its first comment)."""
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        root = self._review_comment(repo, params["comment_id"], pull)
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        pending: list[Delivery] = []
        made = reviewing.reply(
            self.emu,
            base,
            repo,
            pull,
            root,
            text=need_str(body, "body"),
            user=user.login,
            acting=None,
            pending=pending,
        )
        await self._send(pending, body)
        return 201, _answer(pending, id=made.id, review_id=made.review_id, in_reply_to_id=made.in_reply_to_id)

    async def edit_comment(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """A person edits an issue or pull request comment: ``issue_comment.edited`` if the body changed.

        ``sender`` (the editor) defaults to the comment's author; a maintainer may edit
        another's comment on GitHub, so any person may here.
        """
        repo = self._repo(params)
        ident = params["comment_id"]
        found = self.emu.state.comments.get(int(ident)) if ident.isdigit() else None
        if found is None or found.repo != repo.full_name:
            raise AdminError(404, f"no issue comment {ident} in {repo.full_name}")
        item = self._issue(repo, str(found.issue_number))
        sender = ensure_user(self.emu, need_str(body, "sender", LOGIN) if "sender" in body else found.user)
        pending: list[Delivery] = []
        routes_issues.edit_comment(
            self.emu,
            base,
            repo,
            item,
            found,
            text=need_str(body, "body"),
            pending=pending,
            sender=sender.login,
            acting=None,
        )
        await self._send(pending, body)
        return 200, _answer(pending, id=found.id, body=found.body)

    async def edit_review_comment(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """A person edits a review comment: ``pull_request_review_comment.edited`` if the body changed."""
        repo = self._repo(params)
        found = self._review_comment(repo, params["comment_id"])
        sender = ensure_user(self.emu, need_str(body, "sender", LOGIN) if "sender" in body else found.user)
        pending: list[Delivery] = []
        reviewing.edit_review_comment(
            self.emu,
            base,
            repo,
            found,
            text=need_str(body, "body"),
            sender=sender.login,
            acting=None,
            pending=pending,
        )
        await self._send(pending, body)
        return 200, _answer(pending, id=found.id, body=found.body)
