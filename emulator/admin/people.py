"""Admin API, part two: acting as people (labels, comments, pulls, check-run clicks) and webhooks.

People's actions go through the same functions as the REST API, so they send
the same webhooks, with the person as ``sender``. These deliver before the
admin call answers (unless ``"wait": false``), so a test sees the outcome at once.
"""

from __future__ import annotations

from typing import Any

from emulator import webhooks
from emulator.admin.setup import LOGIN, AdminBase, AdminError, ensure_user, need_str, str_list
from emulator.rest import checks as routes_checks
from emulator.rest import issues as routes_issues
from emulator.rest import pulls as routes_pulls
from emulator.rest import shapes
from emulator.state import App, Delivery


class PeopleAdmin(AdminBase):
    async def create_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        repo = self._repo(params)
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        pending: list[Delivery] = []
        title, text, labels = need_str(body, "title"), body.get("body"), str_list(body, "labels")
        item = routes_issues.open_issue(self.emu, base, repo, title=title, body=text, user=user.login,
                                        pending=pending, acting=None, labels=labels)  # fmt: skip
        await self._send(pending, body)
        return 201, {
            "number": item.number,
            "id": item.id,
            "deliveries": [webhooks.summary(d) for d in pending],
        }

    async def label_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        repo = self._repo(params)
        item = self._issue(repo, params["number"])
        sender = ensure_user(self.emu, need_str(body, "sender", LOGIN))
        names = str_list(body, "labels")
        if not names:
            raise AdminError(422, "'labels' must name at least one label (GitHub refuses an empty list)")
        pending: list[Delivery] = []
        routes_issues.add_labels(
            self.emu,
            base,
            repo,
            item,
            names,
            pending=pending,
            sender=sender.login,
            acting=None,
        )
        await self._send(pending, body)
        return 200, {"labels": item.labels, "deliveries": [webhooks.summary(d) for d in pending]}

    async def comment_issue(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        repo = self._repo(params)
        item = self._issue(repo, params["number"])
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        pending: list[Delivery] = []
        created = routes_issues.create_comment(
            self.emu, base, repo, item, need_str(body, "body"), pending=pending, user=user.login, acting=None
        )
        await self._send(pending, body)
        return 201, {"id": created.id, "deliveries": [webhooks.summary(d) for d in pending]}

    async def open_pull(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        repo = self._repo(params)
        user = ensure_user(self.emu, need_str(body, "user", LOGIN))
        pending: list[Delivery] = []
        pull = routes_pulls.open_pull(
            self.emu,
            base,
            repo,
            title=need_str(body, "title"),
            body=body.get("body"),
            head=need_str(body, "head"),
            base_ref=str(body.get("base") or repo.default_branch),
            draft=bool(body.get("draft", False)),
            user=user.login,
            acting=None,
            pending=pending,
            head_repo_name=need_str(body, "head_repo") if body.get("head_repo") is not None else None,
        )
        await self._send(pending, body)
        return 201, {
            "number": pull.number,
            "id": pull.id,
            "deliveries": [webhooks.summary(d) for d in pending],
        }

    async def check_run_event(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """A person re-runs a check (``rerequest``) or clicks an action button (``requested-action``)."""
        run = self.emu.state.check_runs.get(int(params["run_id"])) if params["run_id"].isdigit() else None
        if run is None:
            raise AdminError(404, "no such check run")
        repo = self.emu.state.repos[run.repo]
        sender = ensure_user(self.emu, need_str(body, "sender", LOGIN))
        pending: list[Delivery] = []
        if params["what"] == "rerequest":
            routes_checks.rerequest(
                self.emu, base, repo, run, pending=pending, sender=sender.login, acting=None
            )
        elif params["what"] == "requested-action":
            identifier = need_str(body, "identifier")
            if identifier not in {a.get("identifier") for a in run.actions}:
                raise AdminError(422, f"the run has no action '{identifier}'")
            routes_checks.requested_action(
                self.emu, base, repo, run, identifier, pending=pending, sender=sender.login
            )
        else:
            raise AdminError(404, "unknown check-run event")
        await self._send(pending, body)
        return 200, {"deliveries": [webhooks.summary(d) for d in pending]}

    async def installation_event(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """``created`` (announce), ``suspend``, ``unsuspend`` or ``deleted``, with the ``installation`` event.

        Suspending blocks the installation's tokens (403) and its webhooks;
        deleting removes it and revokes its tokens (401), as on GitHub.
        """
        state = self.emu.state
        inst = (
            state.installations.get(int(params["installation_id"]))
            if params["installation_id"].isdigit()
            else None
        )
        if inst is None:
            raise AdminError(404, "no such installation")
        action = params["action"]
        if action not in {"created", "suspend", "unsuspend", "deleted"}:
            raise AdminError(404, "action must be created, suspend, unsuspend or deleted")
        sender = ensure_user(self.emu, str(body.get("sender") or inst.account))
        if action == "suspend":
            inst.suspended_at, inst.suspended_by = state.now(), sender.login
        elif action == "unsuspend":
            inst.suspended_at, inst.suspended_by = None, None
        payload: dict[str, Any] = {
            "action": action,
            "installation": shapes.installation(base, state, inst),
            "repositories": [shapes.mini_repository(r) for r in state.installation_repos(inst)],
            "requester": None,
            "sender": shapes.simple_user(base, sender),
        }
        if action == "deleted":
            del state.installations[inst.id]
            for key in [k for k, t in state.tokens.items() if t.installation_id == inst.id]:
                del state.tokens[key]
        app = state.apps[inst.app_id]
        pending = [webhooks.record(state, app, "installation", payload)] if app.webhook_url else []
        await self._send(pending, body)
        return 200, {"deliveries": [webhooks.summary(d) for d in pending]}

    # -- webhooks -------------------------------------------------------------
    def _app_for(self, body: dict[str, Any]) -> App:
        apps = self.emu.state.apps
        app_id = body.get("app_id")
        if app_id is None and len(apps) == 1:
            return next(iter(apps.values()))
        if not isinstance(app_id, int) or app_id not in apps:
            raise AdminError(422, "'app_id' must name an existing app")
        return apps[app_id]

    async def send_event(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        """Sign and send any body (e.g. one of GitHub's example payloads) to an App."""
        app = self._app_for(body)
        event = need_str(body, "event")
        payload = body.get("payload")
        if not isinstance(payload, dict):
            raise AdminError(422, "'payload' must be a JSON object")
        guid = body.get("delivery_id")
        delivery = webhooks.record(
            self.emu.state, app, event, payload, guid=guid if isinstance(guid, str) and guid else None
        )
        await self.emu.deliver([delivery])
        return 200, webhooks.summary(delivery)

    def _delivery(self, params: dict[str, str]) -> Delivery:
        raw = params["delivery_id"]
        found = self.emu.state.deliveries.get(int(raw)) if raw.isdigit() else None
        if found is None:
            raise AdminError(404, "no such delivery")
        return found

    async def redeliver(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """Send a recorded delivery again with the same GUID, as GitHub's redelivery does."""
        again = webhooks.record_redelivery(self.emu.state, self._delivery(params))
        await self.emu.deliver([again])
        return 200, webhooks.summary(again)

    async def deliveries(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        items = sorted(self.emu.state.deliveries.values(), key=lambda d: d.id)
        return 200, [webhooks.summary(d) for d in items]

    async def delivery(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        found = self._delivery(params)
        return 200, {**webhooks.summary(found), "payload": found.payload}

    async def update_delivery(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        """Move an attempt's ``delivered_at`` (epoch seconds), e.g. past GitHub's 3-day retention."""
        found = self._delivery(params)
        when = body.get("delivered_at")
        if not isinstance(when, int | float) or isinstance(when, bool) or when < 0:
            raise AdminError(422, "'delivered_at' must be a time in epoch seconds")
        found.delivered_at = float(when)
        return 200, webhooks.summary(found)

    # -- faults, settings, inspection ------------------------------------------
