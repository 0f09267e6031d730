"""A small synchronous client for the ``/_emulator`` admin API (tests and the demo use it).

Each method is one admin call; a non-2xx answer raises :class:`AdminCallFailed`
with the emulator's message, so set-up mistakes surface where they are made.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

TIMEOUT_SECONDS = 15.0


class AdminCallFailed(Exception):
    """The emulator refused an admin call; ``status`` and ``body`` say why."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} /_emulator{path} -> {status}: {body}")
        self.status = status
        self.body = body


class AdminClient:
    def __init__(self, base_url: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/_emulator", timeout=timeout, trust_env=False
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self._http.request(method, path, json=body)
        data = response.json() if response.content else None
        if response.status_code >= 300:
            raise AdminCallFailed(method, path, response.status_code, data)
        return data

    # -- world set-up -----------------------------------------------------------
    def create_user(self, login: str, *, type: str = "User") -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", "/users", {"login": login, "type": type})
        return result

    def create_app(
        self,
        *,
        name: str,
        public_key_pem: str,
        slug: str | None = None,
        owner: str = "emulator",
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        permissions: dict[str, str] | None = None,
        events: list[str] | None = None,
        app_id: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "public_key_pem": public_key_pem,
            "owner": owner,
            "webhook_url": webhook_url,
            "webhook_secret": webhook_secret,
            "permissions": permissions or {},
            "events": events or [],
        }
        if slug is not None:
            body["slug"] = slug
        if app_id is not None:
            body["id"] = app_id
        result: dict[str, Any] = self.call("POST", "/apps", body)
        return result

    def update_app(self, app_id: int, **fields: Any) -> dict[str, Any]:
        """Change ``webhook_url``, ``webhook_secret`` or ``events`` (e.g. once Baton's port is known)."""
        result: dict[str, Any] = self.call("PATCH", f"/apps/{app_id}", fields)
        return result

    def create_installation(
        self,
        *,
        app_id: int,
        account: str,
        permissions: dict[str, str],
        repositories: list[str] | None = None,
        installation_id: int | None = None,
    ) -> dict[str, Any]:
        """``repositories=None`` installs on all of ``account``'s repositories; a list (names or
        ``owner/name``) makes a ``selected`` installation of just those."""
        body: dict[str, Any] = {
            "app_id": app_id,
            "account": account,
            "permissions": permissions,
            "repository_selection": "all" if repositories is None else "selected",
            "repositories": repositories or [],
        }
        if installation_id is not None:
            body["id"] = installation_id
        result: dict[str, Any] = self.call("POST", "/installations", body)
        return result

    def create_repo(
        self,
        owner: str,
        name: str,
        *,
        files: dict[str, str] | None = None,
        private: bool = False,
        default_branch: str = "main",
        custom_properties: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A bare repository with one initial commit of ``files``; the answer has ``head_sha``."""
        body: dict[str, Any] = {
            "owner": owner,
            "name": name,
            "private": private,
            "default_branch": default_branch,
        }
        if custom_properties is not None:
            body["custom_properties"] = custom_properties
        result: dict[str, Any] = self.call("POST", "/repos", {**body, "files": files or {}})
        return result

    def delete_repo(self, full_name: str, *, sender: str | None = None) -> dict[str, Any]:
        """Delete a repository (``repository.deleted``); afterwards GitHub answers 404 for it."""
        body = {"sender": sender} if sender is not None else {}
        result: dict[str, Any] = self.call("DELETE", f"/repos/{full_name}", body)
        return result

    def add_installation_repositories(
        self, installation_id: int, repositories: list[str], *, sender: str | None = None
    ) -> dict[str, Any]:
        """Add repositories to a selected installation (``installation_repositories.added``)."""
        return self._installation_repositories(installation_id, "added", repositories, sender)

    def remove_installation_repositories(
        self, installation_id: int, repositories: list[str], *, sender: str | None = None
    ) -> dict[str, Any]:
        """Remove repositories (``installation_repositories.removed``); ``all`` becomes ``selected``."""
        return self._installation_repositories(installation_id, "removed", repositories, sender)

    def _installation_repositories(
        self, installation_id: int, action: str, repositories: list[str], sender: str | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"repositories": repositories}
        if sender is not None:
            body["sender"] = sender
        result: dict[str, Any] = self.call(
            "POST", f"/installations/{installation_id}/repositories/{action}", body
        )
        return result

    def commit(
        self,
        full_name: str,
        branch: str,
        files: dict[str, str | None],
        *,
        base: str | None = None,
        sender: str | None = None,
        message: str | None = None,
    ) -> str:
        """Commit ``files`` (None deletes) onto ``branch``; returns the new commit's sha.

        Onto an open pull request's head branch (a fork's too) it is ``sender``'s push:
        ``push`` and ``pull_request.synchronize`` are delivered before this returns.
        ``message`` is the commit's (default ``Update <paths>``).
        """
        body: dict[str, Any] = {"branch": branch, "files": files}
        extra = {"base": base, "sender": sender, "message": message}
        body |= {key: value for key, value in extra.items() if value is not None}
        sha: str = self.call("POST", f"/repos/{full_name}/commits", body)["sha"]
        return sha

    def fork(
        self, full_name: str, owner: str, name: str | None = None, *, sender: str | None = None
    ) -> dict[str, Any]:
        """Fork ``full_name`` into ``owner`` (an existing account); sends ``fork`` to the parent's Apps.

        The answer has ``full_name``, ``clone_url``, ``head_sha``, ``repository`` (GitHub's
        full repository, with ``parent`` and ``source``) and ``deliveries``.
        """
        body: dict[str, Any] = {"owner": owner}
        if name is not None:
            body["name"] = name
        if sender is not None:
            body["sender"] = sender
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/forks", body)
        return result

    def set_role(self, full_name: str, login: str, role: str) -> None:
        """admin | maintain | write | triage | read | none (creates the user if needed)."""
        self.call("PUT", f"/repos/{full_name}/collaborators/{login}", {"role": role})

    # -- acting as people (webhooks are delivered before these return) -----------
    def create_issue(
        self, full_name: str, *, title: str, user: str, body: str = "", labels: list[str] | None = None
    ) -> dict[str, Any]:
        payload = {"title": title, "user": user, "body": body, "labels": labels or []}
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/issues", payload)
        return result

    def label(self, full_name: str, number: int, labels: list[str], *, sender: str) -> dict[str, Any]:
        body = {"labels": labels, "sender": sender}
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/issues/{number}/labels", body)
        return result

    def comment(self, full_name: str, number: int, body: str, *, user: str) -> dict[str, Any]:
        payload = {"body": body, "user": user}
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/issues/{number}/comments", payload)
        return result

    def unlabel(self, full_name: str, number: int, label: str, *, sender: str) -> dict[str, Any]:
        """A person removes one label (``issues.unlabeled``, or ``pull_request.unlabeled`` on a pull)."""
        path = f"/repos/{full_name}/issues/{number}/labels/{quote(label, safe='')}"
        result: dict[str, Any] = self.call("DELETE", path, {"sender": sender})
        return result

    def close_issue(
        self, full_name: str, number: int, *, sender: str, state_reason: str = "completed"
    ) -> dict[str, Any]:
        """``issues.closed`` (``state_reason`` completed or not_planned); a pull's number closes the pull."""
        body = {"sender": sender, "state_reason": state_reason}
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/issues/{number}/close", body)
        return result

    def reopen_issue(self, full_name: str, number: int, *, sender: str) -> dict[str, Any]:
        """``issues.reopened`` (``state_reason`` becomes reopened)."""
        result: dict[str, Any] = self.call(
            "POST", f"/repos/{full_name}/issues/{number}/reopen", {"sender": sender}
        )
        return result

    def add_sub_issue(
        self, full_name: str, number: int, sub_issue: int | str, *, sender: str, replace_parent: bool = False
    ) -> dict[str, Any]:
        """A person makes ``sub_issue`` (a number in ``full_name``, or ``"owner/repo#number"``) the
        last sub-issue of issue ``number``: ``sub_issues.sub_issue_added`` then ``parent_issue_added``
        (after the two ``…_removed`` when ``replace_parent`` moves it). The person needs triage or more.
        Answers ``sub_issues`` ({id, number, repo} in order), ``sub_issues_summary``, ``deliveries``."""
        body = {"sender": sender, "sub_issue": sub_issue, "replace_parent": replace_parent}
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/issues/{number}/sub_issues", body)
        return result

    def remove_sub_issue(
        self, full_name: str, number: int, sub_issue: int | str, *, sender: str
    ) -> dict[str, Any]:
        """A person takes ``sub_issue`` off issue ``number``: ``sub_issue_removed``, then
        ``parent_issue_removed``."""
        body = {"sender": sender, "sub_issue": sub_issue}
        result: dict[str, Any] = self.call("DELETE", f"/repos/{full_name}/issues/{number}/sub_issue", body)
        return result

    def reprioritize_sub_issue(
        self,
        full_name: str,
        number: int,
        sub_issue: int | str,
        *,
        sender: str,
        after: int | str | None = None,
        before: int | str | None = None,
    ) -> dict[str, Any]:
        """A person moves ``sub_issue`` just after ``after`` or just before ``before`` (no webhook)."""
        body: dict[str, Any] = {"sender": sender, "sub_issue": sub_issue}
        body |= {k: v for k, v in (("after", after), ("before", before)) if v is not None}
        result: dict[str, Any] = self.call(
            "PATCH", f"/repos/{full_name}/issues/{number}/sub_issues/priority", body
        )
        return result

    def open_pull(
        self,
        full_name: str,
        *,
        head: str,
        user: str,
        title: str = "Change",
        base: str | None = None,
        draft: bool = False,
        head_repo: str | None = None,
        body: str | None = None,
    ) -> dict[str, Any]:
        """``head`` is ``branch`` or ``owner:branch`` (a branch of a fork of ``full_name``);
        ``head_repo`` names the fork when its owner has several in the network; ``body`` is the
        pull's description."""
        call: dict[str, Any] = {"head": head, "user": user, "title": title}
        if body is not None:
            call["body"] = body
        if base is not None:
            call["base"] = base
        if draft:
            call["draft"] = True
        if head_repo is not None:
            call["head_repo"] = head_repo
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/pulls", call)
        return result

    def _pull_action(self, full_name: str, number: int, action: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/pulls/{number}/{action}", body)
        return result

    def close_pull(self, full_name: str, number: int, *, sender: str) -> dict[str, Any]:
        """``pull_request.closed`` (not merged)."""
        return self._pull_action(full_name, number, "close", {"sender": sender})

    def reopen_pull(self, full_name: str, number: int, *, sender: str) -> dict[str, Any]:
        """``pull_request.reopened``; 422 if the head branch is gone or another pull is open on it."""
        return self._pull_action(full_name, number, "reopen", {"sender": sender})

    def ready_for_review(self, full_name: str, number: int, *, sender: str) -> dict[str, Any]:
        """A draft pull becomes ready: ``pull_request.ready_for_review``."""
        return self._pull_action(full_name, number, "ready_for_review", {"sender": sender})

    def convert_to_draft(self, full_name: str, number: int, *, sender: str) -> dict[str, Any]:
        """``pull_request.converted_to_draft``."""
        return self._pull_action(full_name, number, "convert_to_draft", {"sender": sender})

    def push_to_pull(
        self,
        full_name: str,
        number: int,
        files: dict[str, str | None],
        *,
        sender: str,
        message: str | None = None,
    ) -> dict[str, Any]:
        """One commit onto the pull's head branch: ``push`` and ``pull_request.synchronize``.

        The answer has ``sha`` (= ``after``), ``before``, ``branch`` and ``deliveries``.
        """
        body: dict[str, Any] = {"files": files, "sender": sender}
        if message is not None:
            body["message"] = message
        result: dict[str, Any] = self._pull_action(full_name, number, "push", body)
        return result

    def merge_pull(
        self,
        full_name: str,
        number: int,
        *,
        sender: str,
        method: str = "merge",
        commit_title: str | None = None,
        commit_message: str | None = None,
        sha: str | None = None,
    ) -> dict[str, Any]:
        """``sender`` (write or more) merges the pull by ``method`` (merge, squash or rebase):
        ``push`` to the base, ``pull_request.closed`` (``merged: true``), then ``issues.closed`` for
        the issues its closing keywords name (a merge into the default branch). GitHub's 405/409
        refusals raise :class:`AdminCallFailed`. Answers ``sha`` (the base's new tip), ``merged``,
        ``message``, ``deliveries``."""
        body: dict[str, Any] = {"sender": sender, "method": method}
        extra = {"commit_title": commit_title, "commit_message": commit_message, "sha": sha}
        body |= {key: value for key, value in extra.items() if value is not None}
        return self._pull_action(full_name, number, "merge", body)

    def review(
        self,
        full_name: str,
        number: int,
        *,
        user: str,
        body: str | None = None,
        event: str | None = "COMMENT",
        comments: list[dict[str, Any]] | None = None,
        commit_id: str | None = None,
    ) -> dict[str, Any]:
        """``user`` reviews pull ``number``: ``event`` APPROVE, REQUEST_CHANGES or COMMENT (None: the
        review stays PENDING, no webhook); ``comments`` are ``{"path", "line", "body"}`` (``side``
        LEFT/RIGHT, ``start_line`` optional), each on a line of the pull's diff (else 422).

        Sends ``pull_request_review.submitted``, then ``pull_request_review_comment.created`` per
        comment. The answer has ``id``, ``state``, ``comments`` (their ids) and ``deliveries``.
        """
        payload: dict[str, Any] = {"user": user, "comments": comments or []}
        for key, value in (("body", body), ("event", event), ("commit_id", commit_id)):
            if value is not None:
                payload[key] = value
        return self._pull_action(full_name, number, "reviews", payload)

    def review_comment(
        self,
        full_name: str,
        number: int,
        *,
        user: str,
        path: str,
        line: int,
        body: str,
        side: str = "RIGHT",
        start_line: int | None = None,
        commit_id: str | None = None,
    ) -> dict[str, Any]:
        """A single line comment (a review of its own, as on GitHub): ``pull_request_review.submitted``
        then ``pull_request_review_comment.created``. The answer has ``id``, ``review_id``, ``deliveries``."""
        payload: dict[str, Any] = {"user": user, "path": path, "line": line, "body": body, "side": side}
        if start_line is not None:
            payload["start_line"] = start_line
        if commit_id is not None:
            payload["commit_id"] = commit_id
        return self._pull_action(full_name, number, "comments", payload)

    def reply_review_comment(
        self, full_name: str, number: int, comment_id: int, *, user: str, body: str
    ) -> dict[str, Any]:
        """A reply in the thread of review comment ``comment_id`` (the thread's first comment; a reply
        to a reply is refused, 422): ``pull_request_review.submitted`` then
        ``pull_request_review_comment.created`` with ``in_reply_to_id``. Answers ``id``, ``deliveries``."""
        return self._pull_action(
            full_name, number, f"comments/{comment_id}/replies", {"user": user, "body": body}
        )

    def edit_comment(
        self, full_name: str, comment_id: int, *, body: str, sender: str | None = None
    ) -> dict[str, Any]:
        """Edit an issue or pull request comment: ``issue_comment.edited`` (``changes.body.from``) when
        the body changes; ``sender`` (the editor) defaults to the comment's author."""
        payload: dict[str, Any] = {"body": body} | ({"sender": sender} if sender is not None else {})
        result: dict[str, Any] = self.call(
            "PATCH", f"/repos/{full_name}/issues/comments/{comment_id}", payload
        )
        return result

    def edit_review_comment(
        self, full_name: str, comment_id: int, *, body: str, sender: str | None = None
    ) -> dict[str, Any]:
        """Edit a review comment: ``pull_request_review_comment.edited`` when the body changes."""
        payload: dict[str, Any] = {"body": body} | ({"sender": sender} if sender is not None else {})
        result: dict[str, Any] = self.call(
            "PATCH", f"/repos/{full_name}/pulls/comments/{comment_id}", payload
        )
        return result

    def rerequest_check_suite(self, suite_id: int, *, sender: str) -> dict[str, Any]:
        """A person re-runs all checks: ``check_suite.rerequested`` to the suite's App."""
        result: dict[str, Any] = self.call("POST", f"/check-suites/{suite_id}/rerequest", {"sender": sender})
        return result

    def send_event(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        app_id: int | None = None,
        delivery_id: str | None = None,
    ) -> dict[str, Any]:
        """Sign and deliver any body (e.g. GitHub's example payloads); answers the delivery record."""
        body: dict[str, Any] = {"event": event, "payload": payload}
        if app_id is not None:
            body["app_id"] = app_id
        if delivery_id is not None:
            body["delivery_id"] = delivery_id
        result: dict[str, Any] = self.call("POST", "/webhooks", body)
        return result

    def redeliver(self, delivery_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", f"/deliveries/{delivery_id}/redeliver", {})
        return result

    def set_delivered_at(self, delivery_id: int, delivered_at: float) -> dict[str, Any]:
        """Move an attempt in time (epoch seconds), e.g. past GitHub's 3-day retention."""
        result: dict[str, Any] = self.call(
            "PATCH", f"/deliveries/{delivery_id}", {"delivered_at": delivered_at}
        )
        return result

    # -- faults, settings, inspection ----------------------------------------------
    def add_fault(self, path: str, *, kind: str = "status", count: int = 1, **options: Any) -> dict[str, Any]:
        """kind: status | secondary_rate_limit | primary_rate_limit | latency | late_answer | freeze
        (see emulator.faults)."""
        result: dict[str, Any] = self.call(
            "POST", "/faults", {"path": path, "kind": kind, "count": count, **options}
        )
        return result

    def clear_faults(self) -> None:
        self.call("DELETE", "/faults")

    def faults(self) -> list[dict[str, Any]]:
        """The active rules with their ``hits`` so far: a fault has met its request once it has a hit."""
        result: list[dict[str, Any]] = self.call("GET", "/faults")
        return result

    def settings(self, **fields: Any) -> dict[str, Any]:
        """``token_ttl_seconds`` and/or ``rate_limit``."""
        result: dict[str, Any] = self.call("PATCH", "/settings", fields)
        return result

    def deliveries(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("GET", "/deliveries")
        return result

    def check_runs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("GET", "/check-runs")
        return result

    def comments(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("GET", "/comments")
        return result

    def requests(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("GET", "/requests")
        return result

    def flush(self) -> None:
        """Have the emulator write ``state.json`` now (it otherwise does so within 200 ms)."""
        self.call("POST", "/flush")
