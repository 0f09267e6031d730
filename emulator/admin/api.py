"""The ``/_emulator`` admin API: set up the world, act as people, inject faults, inspect.

No GitHub path starts with ``/_``, so these never collide with the REST API.
They are not authenticated (the emulator binds to loopback only), not logged
in ``github-requests.jsonl`` and never hit by faults. Errors are
``{"message": ...}`` with 400/404/409/422. Set-up handlers are in
:mod:`emulator.admin.setup`, people's actions and webhooks in
:mod:`emulator.admin.people` and :mod:`emulator.admin.changes`, forks and
commits in :mod:`emulator.admin.repos`, reviews and comment edits in
:mod:`emulator.admin.reviews`, sub-issues in :mod:`emulator.admin.sub_issues`, merges in
:mod:`emulator.admin.merges`; faults,
settings and inspection are here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from emulator.admin.changes import ChangesAdmin
from emulator.admin.merges import MergesAdmin
from emulator.admin.people import PeopleAdmin
from emulator.admin.repos import ReposAdmin
from emulator.admin.reviews import ReviewsAdmin
from emulator.admin.setup import AdminBase, AdminError, SetupAdmin
from emulator.admin.sub_issues import SubIssuesAdmin
from emulator.core import Emulator
from emulator.errors import ApiError
from emulator.gitrepo import GitError
from emulator.requestlog import parse_body
from emulator.rest import checks as routes_checks
from emulator.rest import shapes_items

PREFIX = "/_emulator"


class InspectAdmin(AdminBase):
    """Faults, settings, and read-only views of the state."""

    async def add_fault(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        try:
            fault = self.emu.faults.add(body)
        except ValueError as exc:
            raise AdminError(422, str(exc)) from exc
        return 201, dataclasses.asdict(fault)

    async def list_faults(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        return 200, self.emu.faults.list()

    async def clear_faults(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        self.emu.faults.clear()
        return 200, []

    async def settings(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        settings = self.emu.state.settings
        if "token_ttl_seconds" in body:
            ttl = body["token_ttl_seconds"]
            if not isinstance(ttl, int | float) or not 0 < ttl <= 3600:
                raise AdminError(422, "'token_ttl_seconds' must be in (0, 3600]")
            settings.token_ttl_seconds = float(ttl)
        if "rate_limit" in body:
            limit = body["rate_limit"]
            if not isinstance(limit, int) or limit < 1:
                raise AdminError(422, "'rate_limit' must be a positive integer")
            settings.rate_limit = limit
            self.emu.rate.reset()
        return 200, dataclasses.asdict(settings)

    async def dump(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        return 200, self.emu.state.to_json()

    async def check_runs(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        """Every check run as the REST API renders it (the demo writes these to checks.json)."""
        state = self.emu.state
        runs = sorted(state.check_runs.values(), key=lambda r: r.id)
        return 200, [routes_checks.render_run(self.emu, base, state.repos[r.repo], r) for r in runs]

    async def comments(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        state = self.emu.state
        items = sorted(state.comments.values(), key=lambda c: c.id)
        return 200, [
            {
                **shapes_items.comment(base, state, state.repos[c.repo], c),
                "issue_number": c.issue_number,
                "repository": c.repo,
            }
            for c in items
        ]

    async def requests(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        return 200, list(self.emu.requests.lines)

    async def flush(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        """Write ``state.json`` now, for whoever reads the file while the server runs."""
        self.emu.flush()
        return 200, {"flushed": True}


AdminHandler = Callable[[dict[str, Any], dict[str, str], str], Awaitable[tuple[int, Any]]]


def _wrap(handler: AdminHandler, *, persist: bool = True) -> Callable[[Request], Awaitable[Response]]:
    """JSON in and out, errors as ``{"message"}``; a non-GET call marks the state changed (``persist``)."""

    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        body = parse_body(raw)
        if raw.strip() and body is None:
            return JSONResponse({"message": "body is not JSON"}, status_code=400)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return JSONResponse({"message": "body must be a JSON object"}, status_code=400)
        base = str(request.base_url).rstrip("/")
        try:
            status, out = await handler(body, dict(request.path_params), base)
        except AdminError as exc:
            return JSONResponse({"message": exc.message}, status_code=exc.status)
        except ApiError as exc:  # a GitHub-side rule (e.g. opening a pull with no commits)
            return JSONResponse(exc.body(), status_code=exc.status)
        except (GitError, ValueError, TypeError) as exc:
            return JSONResponse({"message": f"{type(exc).__name__}: {exc}"}, status_code=422)
        if persist and request.method != "GET":
            request.app.state.emulator.changed()
        return JSONResponse(out, status_code=status)

    return endpoint


def routes(emu: Emulator) -> list[BaseRoute]:
    setup, people, inspect = SetupAdmin(emu), PeopleAdmin(emu), InspectAdmin(emu)
    changes, repos, reviews = ChangesAdmin(emu), ReposAdmin(emu), ReviewsAdmin(emu)
    subs, merges = SubIssuesAdmin(emu), MergesAdmin(emu)
    table: list[tuple[str, str, AdminHandler]] = [
        ("POST", "/users", setup.create_user),
        ("POST", "/apps", setup.create_app),
        ("PATCH", "/apps/{app_id}", setup.update_app),
        ("POST", "/installations", setup.create_installation),
        ("POST", "/installations/{installation_id}/{action}", people.installation_event),
        ("POST", "/installations/{installation_id}/repositories/{action}", changes.installation_repositories),
        ("POST", "/repos", setup.create_repo),
        ("DELETE", "/repos/{owner}/{repo}", changes.delete_repo),
        ("POST", "/repos/{owner}/{repo}/commits", repos.commit),
        ("POST", "/repos/{owner}/{repo}/forks", repos.fork),
        ("PUT", "/repos/{owner}/{repo}/collaborators/{username}", setup.set_collaborator),
        ("POST", "/repos/{owner}/{repo}/issues", people.create_issue),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/labels", people.label_issue),
        ("DELETE", "/repos/{owner}/{repo}/issues/{number}/labels/{name:path}", changes.unlabel_issue),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/close", changes.close_issue),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/reopen", changes.reopen_issue),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/comments", people.comment_issue),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/sub_issues", subs.add),
        ("DELETE", "/repos/{owner}/{repo}/issues/{number}/sub_issue", subs.remove),
        ("PATCH", "/repos/{owner}/{repo}/issues/{number}/sub_issues/priority", subs.reprioritize),
        ("POST", "/repos/{owner}/{repo}/pulls", people.open_pull),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/close", changes.close_pull),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/reopen", changes.reopen_pull),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/ready_for_review", changes.ready_for_review),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/convert_to_draft", changes.convert_to_draft),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/push", changes.push_to_pull),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/merge", merges.merge),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/reviews", reviews.review),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/comments", reviews.comment),
        ("POST", "/repos/{owner}/{repo}/pulls/{number}/comments/{comment_id}/replies", reviews.reply),
        ("PATCH", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", reviews.edit_review_comment),
        ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}", reviews.edit_comment),
        ("POST", "/check-runs/{run_id}/{what}", people.check_run_event),
        ("POST", "/check-suites/{suite_id}/rerequest", changes.rerequest_suite),
        ("POST", "/webhooks", people.send_event),
        ("GET", "/deliveries", people.deliveries),
        ("GET", "/deliveries/{delivery_id}", people.delivery),
        ("PATCH", "/deliveries/{delivery_id}", people.update_delivery),
        ("POST", "/deliveries/{delivery_id}/redeliver", people.redeliver),
        ("POST", "/faults", inspect.add_fault),
        ("GET", "/faults", inspect.list_faults),
        ("DELETE", "/faults", inspect.clear_faults),
        ("PATCH", "/settings", inspect.settings),
        ("GET", "/state", inspect.dump),
        ("GET", "/check-runs", inspect.check_runs),
        ("GET", "/comments", inspect.comments),
        ("GET", "/requests", inspect.requests),
    ]
    out: list[BaseRoute] = [Route(PREFIX + path, _wrap(h), methods=[m]) for m, path, h in table]
    out.append(Route(PREFIX + "/flush", _wrap(inspect.flush, persist=False), methods=["POST"]))
    out.append(Route(PREFIX + "/health", _wrap(_health), methods=["GET"]))
    return out


async def _health(body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
    return 200, {"ok": True}
