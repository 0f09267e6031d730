"""A small synchronous client for the ``/_emulator`` admin API (tests and the demo use it).

Each method is one admin call; a non-2xx answer raises :class:`AdminCallFailed`
with the emulator's message, so set-up mistakes surface where they are made.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

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
        """``repositories=None`` installs on all of ``account``'s repositories."""
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
    ) -> dict[str, Any]:
        """A bare repository with one initial commit of ``files``; the answer has ``head_sha``."""
        body = {"owner": owner, "name": name, "private": private, "default_branch": default_branch}
        result: dict[str, Any] = self.call("POST", "/repos", {**body, "files": files or {}})
        return result

    def commit(
        self, full_name: str, branch: str, files: dict[str, str | None], *, base: str | None = None
    ) -> str:
        """Commit ``files`` (None deletes) onto ``branch``; returns the new commit's sha."""
        body: dict[str, Any] = {"branch": branch, "files": files}
        if base is not None:
            body["base"] = base
        sha: str = self.call("POST", f"/repos/{full_name}/commits", body)["sha"]
        return sha

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

    def open_pull(
        self, full_name: str, *, head: str, user: str, title: str = "Change", base: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"head": head, "user": user, "title": title}
        if base is not None:
            body["base"] = base
        result: dict[str, Any] = self.call("POST", f"/repos/{full_name}/pulls", body)
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

    # -- faults, settings, inspection ----------------------------------------------
    def add_fault(self, path: str, *, kind: str = "status", count: int = 1, **options: Any) -> dict[str, Any]:
        """kind: status | secondary_rate_limit | primary_rate_limit | latency (see emulator.faults)."""
        result: dict[str, Any] = self.call(
            "POST", "/faults", {"path": path, "kind": kind, "count": count, **options}
        )
        return result

    def clear_faults(self) -> None:
        self.call("DELETE", "/faults")

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
