"""The App's webhook deliveries: ``GET /app/hook/deliveries[/{id}]`` and ``POST …/{id}/attempts``.

App JWT only, as on GitHub. Every attempt the emulator made is one delivery; a
redelivery is a new one with the same GUID. GitHub keeps them 3 days: older
attempts are neither listed nor shown, and are refused for redelivery. The list
is newest first and pages with an opaque ``cursor`` that only the ``Link``
header's ``rel="next"`` URL hands out. Shapes are the OpenAPI description's
``hook-delivery-item`` and ``hook-delivery`` (``@octokit/openapi`` 23.0.2).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from emulator import webhooks
from emulator.auth import require_app
from emulator.core import ApiRequest, Reply, RouteSpec, per_page
from emulator.errors import ApiError, invalid_request, not_found, validation_failed
from emulator.state import App, Delivery, State
from emulator.types import JSONObject

#: GitHub.com keeps (lists, shows, redelivers) deliveries this long.
RETENTION_SECONDS = 3 * 24 * 3600
#: What GitHub records as ``status_code`` for an attempt that got no HTTP answer.
NO_ANSWER_STATUS_CODE = 502
#: The spec's ``status`` filter classifies attempts by ``status_code`` range.
STATUS_RANGES = {"success": range(200, 400), "failure": range(400, 600)}
_CURSOR_PREFIX = "v1_"
_DOCS = "https://docs.github.com/rest/apps/webhooks"


def outcome(delivery: Delivery) -> tuple[int, str]:
    """``(status_code, status)`` as GitHub reports an attempt: "OK" only for a 2xx."""
    code = delivery.status_code
    if code is None:
        return NO_ANSWER_STATUS_CODE, delivery.failure or "failed to connect to host"
    if 200 <= code < 300:
        return code, "OK"
    return code, f"Invalid HTTP Response: {code}"


def _timestamp(ts: float) -> str:
    """``delivered_at`` with milliseconds, as GitHub's delivery log gives it."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _payload_id(payload: JSONObject, key: str) -> int | None:
    """``installation.id`` / ``repository.id`` of the payload, when it has one."""
    found = payload.get(key)
    value = found.get("id") if isinstance(found, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def item(delivery: Delivery) -> JSONObject:
    """``hook-delivery-item``."""
    code, status = outcome(delivery)
    return {
        "id": delivery.id,
        "guid": delivery.guid,
        "delivered_at": _timestamp(delivery.delivered_at or 0.0),
        "redelivery": delivery.redelivery,
        "duration": round((delivery.duration_ms or 0.0) / 1000, 2),
        "status": status,
        "status_code": code,
        "event": delivery.event,
        "action": delivery.action,
        "installation_id": _payload_id(delivery.payload, "installation"),
        "repository_id": _payload_id(delivery.payload, "repository"),
        "throttled_at": None,
    }


def detail(delivery: Delivery) -> JSONObject:
    """``hook-delivery``: the item plus where it went, what was sent and what came back."""
    return {
        **item(delivery),
        "url": delivery.url or "",
        "request": {"headers": dict(delivery.request_headers), "payload": delivery.payload},
        "response": {"headers": delivery.response_headers, "payload": delivery.response_body},
    }


def _kept(state: State, delivery: Delivery) -> bool:
    """Still in GitHub's log: attempted, and less than 3 days ago."""
    made = delivery.delivered_at
    return made is not None and made >= state.now() - RETENTION_SECONDS


def _attempts(state: State, app: App) -> list[Delivery]:
    """The App's attempts GitHub still lists, newest first."""
    with state.lock:
        mine = [d for d in state.deliveries.values() if d.app_id == app.id]
    return sorted((d for d in mine if _kept(state, d)), key=lambda d: d.id, reverse=True)


def _status_filter(req: ApiRequest) -> range | None:
    value = req.query("status")
    if not value:
        return None
    if value not in STATUS_RANGES:
        raise invalid_request(
            f"For 'status', \"{value}\" is not one of: success, failure.",
            f"{_DOCS}#list-deliveries-for-an-app-webhook",
        )
    return STATUS_RANGES[value]


def _cursor(req: ApiRequest) -> int | None:
    """The id the previous page ended at; a cursor the emulator never handed out is a 400."""
    value = req.query("cursor")
    if not value:
        return None
    digits = value.removeprefix(_CURSOR_PREFIX)
    if not value.startswith(_CURSOR_PREFIX) or not digits.isdigit():
        raise ApiError(400, "Invalid cursor", documentation_url=f"{_DOCS}#list-deliveries-for-an-app-webhook")
    return int(digits)


def _next_link(req: ApiRequest, size: int, last_id: int) -> str:
    """``rel="next"``, keeping the caller's other query parameters (``status``) as GitHub does."""
    kept = [(k, v) for k, v in req.request.query_params.multi_items() if k not in {"cursor", "per_page"}]
    query = urlencode([*kept, ("per_page", str(size)), ("cursor", f"{_CURSOR_PREFIX}{last_id}")])
    return f'<{req.base}{req.request.url.path}?{query}>; rel="next"'


async def list_deliveries(req: ApiRequest) -> Reply:
    app = require_app(req.caller)
    size, wanted, before = per_page(req), _status_filter(req), _cursor(req)
    found = [
        d
        for d in _attempts(req.state, app)
        if (before is None or d.id < before) and (wanted is None or outcome(d)[0] in wanted)
    ]
    page = found[:size]
    headers = {"link": _next_link(req, size, page[-1].id)} if len(found) > size else {}
    return Reply([item(d) for d in page], headers=headers)


def _own_attempt(req: ApiRequest, app: App) -> Delivery:
    """One of this App's attempts, at any age; another App's, an unknown or an unsent one is a 404."""
    found = req.state.deliveries.get(req.int_param("delivery_id"))
    if found is None or found.app_id != app.id or found.delivered_at is None:
        raise not_found(f"{_DOCS}#get-a-delivery-for-an-app-webhook")
    return found


async def get_delivery(req: ApiRequest) -> Reply:
    found = _own_attempt(req, require_app(req.caller))
    if not _kept(req.state, found):
        raise not_found(f"{_DOCS}#get-a-delivery-for-an-app-webhook")
    return Reply(detail(found))


async def redeliver(req: ApiRequest) -> Reply:
    """202 at once; the new attempt (same GUID, ``redelivery: true``) goes out after the response."""
    original = _own_attempt(req, require_app(req.caller))
    if not _kept(req.state, original):
        raise validation_failed(
            [
                {
                    "resource": "Hook::Delivery",
                    "code": "custom",
                    "message": "Deliveries older than 3 days cannot be redelivered.",
                }
            ],
            f"{_DOCS}#redeliver-a-delivery-for-an-app-webhook",
        )
    req.pending.append(webhooks.record_redelivery(req.state, original))
    accepted: dict[str, Any] = {}
    return Reply(accepted, status=202)


ROUTES: list[RouteSpec] = [
    ("GET", "/app/hook/deliveries", list_deliveries),
    ("GET", "/app/hook/deliveries/{delivery_id}", get_delivery),
    ("POST", "/app/hook/deliveries/{delivery_id}/attempts", redeliver),
]
