"""The Starlette application: GitHub's REST paths plus the ``/_emulator`` admin API.

Every GitHub-path request goes through :func:`_dispatch`, in GitHub's order:
injected faults, the ``X-GitHub-Api-Version`` header, authentication, primary
rate limit, the handler; then the answer gets GitHub's headers, one line in the
request log, a state dump if anything may have changed, and its webhooks are
sent after the response.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from emulator import (
    admin,
    githttp,
    routes_apps,
    routes_checks,
    routes_hooks,
    routes_issues,
    routes_pulls,
    routes_repos,
    routes_users,
)
from emulator.auth import authenticate
from emulator.core import ApiRequest, Emulator, Handler, RawBody, Reply, RouteSpec
from emulator.errors import ApiError, not_found
from emulator.faults import fault_error
from emulator.ratelimit import headers as rate_headers
from emulator.requestlog import parse_body
from emulator.state import Delivery

API_ROUTES: list[RouteSpec] = [
    *routes_apps.ROUTES,
    *routes_hooks.ROUTES,
    *routes_repos.ROUTES,
    *routes_issues.ROUTES,
    *routes_pulls.ROUTES,
    *routes_checks.ROUTES,
    *routes_users.ROUTES,
]
_log = logging.getLogger("emulator")
_PRIMARY_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
#: REST API versions GitHub answers (newest first); a request may also name none.
API_VERSIONS = ("2026-03-10", "2022-11-28")
DEFAULT_API_VERSION = "2022-11-28"


def check_api_version(requested: str | None) -> None:
    """GitHub answers 400 to an ``X-GitHub-Api-Version`` it does not support."""
    if requested is None or requested in API_VERSIONS:
        return
    supported = ", ".join(f'"{v}"' + (" (most recent)" if i == 0 else "") for i, v in enumerate(API_VERSIONS))
    raise ApiError(
        400,
        f'The version you specified in the "X-GitHub-Api-Version" request header, "{requested}", '
        f"is not a supported version. The following versions are currently supported: {supported}.",
        documentation_url="https://docs.github.com/rest/about-the-rest-api/api-versions",
    )


def _query(request: Request) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in out:
            previous = out[key]
            out[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            out[key] = value
    return out


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _selected_version(request: Request) -> str:
    requested = request.headers.get("x-github-api-version")
    return requested if requested in API_VERSIONS else DEFAULT_API_VERSION


def _request_id() -> str:
    return uuid.uuid4().hex[:20].upper()


@dataclass
class _Call:
    """One API request in flight: what the dispatcher collects around the handler."""

    request: Request
    raw: bytes
    body: Any
    request_id: str = field(default_factory=_request_id)
    headers: dict[str, str] = field(default_factory=dict)
    pending: list[Delivery] = field(default_factory=list)


async def _dispatch(emu: Emulator, request: Request, handler: Handler | None) -> Response:
    raw = await request.body()
    call = _Call(request=request, raw=raw, body=parse_body(raw))
    try:
        reply = await _answer(emu, call, handler)
    except ApiError as exc:
        reply = Reply(exc.body(), status=exc.status, headers=exc.headers)
    except Exception:  # an emulator bug: answer as GitHub's 500 does, keep the trace for whoever debugs
        _log.exception("emulator failed on %s %s", request.method, request.url.path)
        reply = Reply(ApiError(500, "Server Error").body(), status=500)
    headers = {
        "x-github-request-id": call.request_id,
        "x-github-media-type": "github.v3; format=json",
        "x-github-api-version-selected": _selected_version(request),
        **call.headers,
        **reply.headers,
    }
    emu.requests.record(request.method, request.url.path, _query(request), call.body, reply.status)
    if request.method != "GET":
        emu.save()
    task = BackgroundTask(emu.schedule, call.pending) if call.pending else None
    if reply.status == 204:
        return Response(status_code=204, headers=headers, background=task)
    if isinstance(reply.body, RawBody):
        return Response(
            reply.body.data,
            status_code=reply.status,
            headers=headers,
            media_type=reply.body.media_type,
            background=task,
        )
    return JSONResponse(reply.body, status_code=reply.status, headers=headers, background=task)


async def _answer(emu: Emulator, call: _Call, handler: Handler | None) -> Reply:
    """GitHub's order: faults (GitHub's own failures), API version, auth, rate limit, handler."""
    request = call.request
    fault = emu.faults.take(request.method, request.url.path)
    if fault is not None:
        if fault.latency_ms:
            await asyncio.sleep(fault.latency_ms / 1000)
        if fault.kind != "latency":
            raise fault_error(fault, call.request_id)
    check_api_version(request.headers.get("x-github-api-version"))
    caller = authenticate(emu.state, request.headers.get("authorization"))
    window = emu.rate.hit(caller.rate_key, emu.state.settings.rate_limit)
    call.headers.update(rate_headers(window))
    if window.used > window.limit:
        raise ApiError(
            403,
            f"API rate limit exceeded for {caller.rate_key.replace(':', ' ID ')}.",
            documentation_url=_PRIMARY_DOCS,
        )
    if handler is None:
        raise not_found()
    if call.raw.strip() and call.body is None and request.method in {"POST", "PATCH", "PUT"}:
        raise ApiError(400, "Problems parsing JSON")
    req = ApiRequest(
        emu=emu, request=request, caller=caller, body=call.body, base=_base_url(request), pending=call.pending
    )
    return await handler(req)


def _endpoint(emu: Emulator, handler: Handler | None) -> Any:
    async def endpoint(request: Request) -> Response:
        return await _dispatch(emu, request, handler)

    return endpoint


def create_app(directory: Path, *, token_ttl_seconds: float | None = None) -> Starlette:
    """An emulator rooted at ``directory`` (state, repos and request log live there)."""
    emu = Emulator(directory, token_ttl_seconds=token_ttl_seconds)
    routes: list[BaseRoute] = [*admin.routes(emu), *githttp.routes(emu)]
    for method, path, handler in API_ROUTES:
        routes.append(Route(path, _endpoint(emu, handler), methods=[method]))
    # Unknown paths and methods: GitHub answers 404 (logged like any API call).
    all_methods = ["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"]
    routes.append(Route("/{rest:path}", _endpoint(emu, None), methods=all_methods))
    app = Starlette(routes=routes)
    app.state.emulator = emu
    return app
