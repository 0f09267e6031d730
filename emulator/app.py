"""The Starlette application: GitHub's REST paths plus the ``/_emulator`` admin API.

Every GitHub-path request goes through :func:`_dispatch`, in GitHub's order:
injected faults, the ``X-GitHub-Api-Version`` header, authentication, primary
rate limit, the handler; then the answer gets GitHub's headers (a 200 GET its
``ETag``, and a 304 if ``If-None-Match`` matches it), one line in the request
log, a note that the state may have changed (saved shortly after, see
:mod:`emulator.persist`), and its webhooks are sent after the response.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from emulator import githttp, manifests
from emulator.admin import api as admin
from emulator.auth import authenticate
from emulator.core import ApiRequest, Emulator, Handler, RawBody, Reply, RouteSpec
from emulator.errors import ApiError, not_found
from emulator.faults import fault_error
from emulator.ratelimit import Window
from emulator.ratelimit import headers as rate_headers
from emulator.requestlog import parse_body
from emulator.rest import apps as routes_apps
from emulator.rest import checks as routes_checks
from emulator.rest import hooks as routes_hooks
from emulator.rest import issues as routes_issues
from emulator.rest import merges as routes_merges
from emulator.rest import pulls as routes_pulls
from emulator.rest import repos as routes_repos
from emulator.rest import reviews as routes_reviews
from emulator.rest import sub_issues as routes_sub_issues
from emulator.rest import users as routes_users
from emulator.state import Delivery

API_ROUTES: list[RouteSpec] = [
    *routes_apps.ROUTES,
    *routes_hooks.ROUTES,
    *routes_repos.ROUTES,
    *routes_issues.ROUTES,
    *routes_sub_issues.ROUTES,
    *routes_reviews.ROUTES,
    *routes_pulls.ROUTES,
    *routes_merges.ROUTES,
    *routes_checks.ROUTES,
    *routes_users.ROUTES,
    *manifests.ROUTES,
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
    started: float = field(default_factory=time.perf_counter)
    #: the rate-limit key this request was counted against; None: not counted (or taken back)
    rate_key: str | None = None


async def _dispatch(emu: Emulator, request: Request, handler: Handler | None) -> Response:
    raw = await request.body()
    call = _Call(request=request, raw=raw, body=parse_body(raw))
    reply = await _safe_answer(emu, call, handler)
    headers = {
        "x-github-request-id": call.request_id,
        "x-github-media-type": "github.v3; format=json",
        "x-github-api-version-selected": _selected_version(request),
        **call.headers,
        **reply.headers,
    }
    task = BackgroundTask(emu.schedule, call.pending) if call.pending else None
    response = _response(reply, headers, task)
    reads = request.method in {"GET", "HEAD"}
    if reads and reply.status == 200:
        response = _conditional(emu, call, response)
    duration_ms = round((time.perf_counter() - call.started) * 1000, 2)
    emu.requests.record(request.method, request.url.path, _query(request), call.body, response.status_code,
                        duration_ms=duration_ms, counted=call.rate_key is not None,
                        client_port=request.client.port if request.client else None)  # fmt: skip
    if not reads:
        emu.changed()
    return response


async def _safe_answer(emu: Emulator, call: _Call, handler: Handler | None) -> Reply:
    """The handler's reply, or the error GitHub would answer (an emulator bug: its 500)."""
    try:
        return await _answer(emu, call, handler)
    except ApiError as exc:
        return Reply(exc.body(), status=exc.status, headers=exc.headers)
    except Exception:  # an emulator bug: answer as GitHub's 500 does, keep the trace for whoever debugs
        _log.exception("emulator failed on %s %s", call.request.method, call.request.url.path)
        return Reply(ApiError(500, "Server Error").body(), status=500)


def _response(reply: Reply, headers: dict[str, str], task: BackgroundTask | None) -> Response:
    if reply.status == 204:
        return Response(status_code=204, headers=headers, background=task)
    if isinstance(reply.body, RawBody):
        return Response(reply.body.data, status_code=reply.status, headers=headers,
                        media_type=reply.body.media_type, background=task)  # fmt: skip
    return JSONResponse(reply.body, status_code=reply.status, headers=headers, background=task)


def etag_of(body: bytes) -> str:
    """GitHub's ETag: weak, a hash of the body exactly as sent."""
    return f'W/"{hashlib.sha256(body).hexdigest()}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """``If-None-Match`` uses weak comparison (RFC 9110 13.1.2): ``W/`` is ignored, ``*`` matches."""
    if not if_none_match:
        return False
    wanted = etag.removeprefix("W/")
    return any(
        tag == "*" or tag.removeprefix("W/") == wanted for tag in map(str.strip, if_none_match.split(","))
    )


def _conditional(emu: Emulator, call: _Call, response: Response) -> Response:
    """Tag a 200 GET; if the caller already has this body, answer 304 without counting the request.

    GitHub: "Making a conditional request and receiving a 304 response does
    not count against your primary rate limit." The 304 has no body and keeps
    every header but the body's own (``content-type``, ``content-length``).
    """
    etag = etag_of(bytes(response.body))
    response.headers["etag"] = etag
    if not etag_matches(call.request.headers.get("if-none-match"), etag):
        return response
    headers = {k: v for k, v in response.headers.items() if k not in {"content-type", "content-length"}}
    window = _uncount(emu, call)
    if window is not None:
        headers.update(rate_headers(window))
    return Response(status_code=304, headers=headers, background=response.background)


def _uncount(emu: Emulator, call: _Call) -> Window | None:
    """Give back the request counted against the caller's limit; the window as it now stands."""
    if call.rate_key is None:
        return None
    window = emu.rate.refund(call.rate_key, emu.state.settings.rate_limit)
    call.rate_key = None
    return window


async def _answer(emu: Emulator, call: _Call, handler: Handler | None) -> Reply:
    """GitHub's order: faults (GitHub's own failures), API version, auth, rate limit, handler."""
    request = call.request
    fault = emu.faults.take(request.method, request.url.path)
    if fault is not None and fault.kind == "late_answer":
        try:
            return await _answer_now(emu, call, handler)
        finally:
            await asyncio.sleep(fault.latency_ms / 1000)  # done (or refused); only the answer is late
    if fault is not None and fault.kind == "freeze":
        until = time.monotonic() + fault.latency_ms / 1000
        while emu.faults.holds(fault.id) and time.monotonic() < until:
            await asyncio.sleep(0.05)  # taken, never answered, nothing done: until thawed
        raise fault_error(fault, call.request_id)
    if fault is not None:
        if fault.latency_ms:
            await asyncio.sleep(fault.latency_ms / 1000)
        if fault.kind != "latency":
            raise fault_error(fault, call.request_id)
    return await _answer_now(emu, call, handler)


async def _answer_now(emu: Emulator, call: _Call, handler: Handler | None) -> Reply:
    request = call.request
    check_api_version(request.headers.get("x-github-api-version"))
    caller = authenticate(emu.state, request.headers.get("authorization"))
    window = emu.rate.hit(caller.rate_key, emu.state.settings.rate_limit)
    call.rate_key = caller.rate_key
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
    """An emulator rooted at ``directory`` (state, repos and request log live there).

    Its lifespan's shutdown closes the webhook client and writes the state:
    run it with lifespan on (``uvicorn.run`` does by default).
    """
    emu = Emulator(directory, token_ttl_seconds=token_ttl_seconds)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await emu.aclose()

    # The manifest flow's web form (a browser's POST, not the API) is the one web page it stands in for.
    routes: list[BaseRoute] = [*admin.routes(emu), *githttp.routes(emu), *manifests.web_routes(emu)]
    for method, path, handler in API_ROUTES:
        routes.append(Route(path, _endpoint(emu, handler), methods=[method]))
    # Unknown paths and methods: GitHub answers 404 (logged like any API call).
    all_methods = ["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"]
    routes.append(Route("/{rest:path}", _endpoint(emu, None), methods=all_methods))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.emulator = emu
    return app
