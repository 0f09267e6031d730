"""Signed webhook deliveries, sent after the API response the way GitHub's Hookshot does.

Each delivery carries GitHub's headers (``X-GitHub-Event``, ``X-GitHub-Delivery``,
``X-GitHub-Hook-ID``, ``X-Hub-Signature-256``, ``User-Agent: GitHub-Hookshot/…``)
and is recorded (GUID, event, status code) in the state. Like GitHub, a failed
delivery is not retried; a redelivery (REST or admin API) reuses the GUID.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx

from emulator.rest.shapes import account, bot_user, node_id, simple_user, webhook_repository
from emulator.state import App, Delivery, Repo, State, User
from emulator.types import JSONObject

#: GitHub expects an answer within 10 s and gives up after that.
DELIVERY_TIMEOUT_SECONDS = 10.0
#: Idle connections to receivers are dropped after this long: shorter than common servers'
#: keep-alive (gunicorn 2 s, uvicorn and Node 5 s), so a reused one is rarely closed under us.
KEEPALIVE_EXPIRY_SECONDS = 1.0
#: How much of a receiver's answer is kept for ``GET /app/hook/deliveries/{id}``.
MAX_KEPT_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "GitHub-Hookshot/emulator"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def sign(secret: str, body: bytes) -> str:
    """``X-Hub-Signature-256``: HMAC-SHA256 of the raw body, hex, prefixed ``sha256=``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def is_loopback_url(url: str) -> bool:
    """The emulator only ever talks to this machine."""
    parts = urlsplit(url)
    return parts.scheme in {"http", "https"} and (parts.hostname or "") in _LOOPBACK


def organization(base: str, state: State, login: str) -> JSONObject | None:
    """``organization`` as webhooks carry it, when ``login`` is an organization."""
    owner = state.user(login)
    if owner is None or owner.type != "Organization":
        return None
    api = f"{base}/orgs/{owner.login}"
    return {
        "login": owner.login,
        "id": owner.id,
        "node_id": node_id("Organization", owner.id),
        "url": api,
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events",
        "hooks_url": f"{api}/hooks",
        "issues_url": f"{api}/issues",
        "members_url": f"{api}/members{{/member}}",
        "public_members_url": f"{api}/public_members{{/member}}",
        "avatar_url": account(base, state, owner.login)["avatar_url"],
        "description": None,
    }


def envelope(
    base: str,
    state: State,
    app: App,
    repo: Repo,
    *,
    sender: User,
) -> JSONObject:
    """The parts every repository event shares: repository, owner, installation, sender.

    Webhook repositories carry ``custom_properties`` (``{}`` when none are set; see ``webhook_repository``).
    """
    out: JSONObject = {
        "repository": webhook_repository(base, state, repo),
        "sender": simple_user(base, sender),
    }
    org = organization(base, state, repo.owner)
    if org is not None:
        out["organization"] = org
    inst = state.installation_for_repo(app.id, repo)
    if inst is not None:
        out["installation"] = {"id": inst.id, "node_id": node_id("Installation", inst.id)}
    return out


def sender_for(state: State, login: str | None, app: App | None) -> User:
    """Who GitHub names as ``sender``: the acting user, or the App's bot account."""
    if login is not None:
        found = state.user(login)
        if found is not None:
            return found
        return User(id=0, login=login)
    if app is not None:
        return bot_user(state, app)
    return User(id=0, login="ghost")


def subscribers(state: State, repo: Repo, event: str) -> list[App]:
    """Apps installed on ``repo`` that receive ``event`` (no list of events = all)."""
    apps = []
    for app in state.apps.values():
        inst = state.installation_for_repo(app.id, repo)
        if not app.webhook_url or inst is None or inst.suspended_at is not None:
            continue
        if app.events and event not in app.events:
            continue
        apps.append(app)
    return apps


def record(
    state: State,
    app: App,
    event: str,
    payload: JSONObject,
    *,
    guid: str | None = None,
    redelivery: bool = False,
) -> Delivery:
    """Store a delivery before sending it, so it shows up even if sending fails."""
    delivery = Delivery(
        id=state.new_id(),
        guid=guid or str(uuid.uuid4()),
        app_id=app.id,
        event=event,
        action=payload.get("action") if isinstance(payload.get("action"), str) else None,
        payload=payload,
        redelivery=redelivery,
    )
    with state.lock:
        state.deliveries[delivery.id] = delivery
    return delivery


def record_redelivery(state: State, original: Delivery) -> Delivery:
    """A new attempt of ``original`` (new id, same GUID, event and payload), marked ``redelivery``.

    Shared by the REST API (``POST /app/hook/deliveries/{id}/attempts``) and the
    admin API, so both redeliver the same way; the caller sends it.
    """
    app = state.apps[original.app_id]
    return record(state, app, original.event, original.payload, guid=original.guid, redelivery=True)


def delivery_headers(app: App, delivery: Delivery, body: bytes) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-GitHub-Event": delivery.event,
        "X-GitHub-Delivery": delivery.guid,
        "X-GitHub-Hook-ID": str(app.hook_id),
        "X-GitHub-Hook-Installation-Target-ID": str(app.id),
        "X-GitHub-Hook-Installation-Target-Type": "integration",
    }
    if app.webhook_secret:
        headers["X-Hub-Signature-256"] = sign(app.webhook_secret, body)
        headers["X-Hub-Signature"] = "sha1=" + hmac.new(app.webhook_secret.encode(), body, "sha1").hexdigest()
    return headers


def new_client() -> httpx.AsyncClient:
    """The client deliveries share (per event loop): connections and the SSL context are made once."""
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS)
    return httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_SECONDS, limits=limits, trust_env=False)


async def send(client: httpx.AsyncClient, state: State, delivery: Delivery) -> Delivery:
    """POST one delivery with ``client``; the outcome (status or error) is written back to the record.

    The caller saves the state afterwards (the record changed).
    """
    app = state.apps.get(delivery.app_id)
    if app is None or not app.webhook_url:
        delivery.error = "app has no webhook URL"
        return delivery
    if not is_loopback_url(app.webhook_url):
        delivery.error = "webhook URL is not on this machine"
        return delivery
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    headers = delivery_headers(app, delivery, body)
    delivery.url, delivery.request_headers = app.webhook_url, headers
    started = time.monotonic()
    try:
        response = await client.post(
            app.webhook_url, content=body, headers=headers, timeout=DELIVERY_TIMEOUT_SECONDS
        )
        _answered(delivery, response)
    except httpx.HTTPError as exc:
        _unanswered(delivery, exc)
    delivery.duration_ms = round((time.monotonic() - started) * 1000, 1)
    delivery.delivered_at = time.time()
    return delivery


def _answered(delivery: Delivery, response: httpx.Response) -> None:
    """Keep the receiver's answer (headers as sent, body cut at a bound) for the deliveries API."""
    delivery.status_code, delivery.error, delivery.failure = response.status_code, None, None
    headers: dict[str, str] = {}
    for raw_name, raw_value in response.headers.raw:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    delivery.response_headers = headers
    delivery.response_body = response.content[:MAX_KEPT_RESPONSE_BYTES].decode("utf-8", "replace")


def _unanswered(delivery: Delivery, exc: httpx.HTTPError) -> None:
    """No HTTP answer: keep the error (admin API) and GitHub's word for it (deliveries API)."""
    delivery.status_code = None
    delivery.error = f"{type(exc).__name__}: {exc}"
    delivery.failure = failure_text(exc)
    delivery.response_headers, delivery.response_body = None, None


def failure_text(exc: httpx.HTTPError) -> str:
    """GitHub's status for an attempt with no HTTP answer (its troubleshooting page's words).

    A refused connection is "failed to connect to network", no answer within the
    timeout "timed out", anything else (no such host, a dropped connection)
    "failed to connect to host".
    """
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "failed to connect to network"
        cause = cause.__cause__ or cause.__context__
    return "failed to connect to host"


def summary(delivery: Delivery) -> dict[str, Any]:
    """A delivery without its payload, for listings."""
    return {
        "id": delivery.id,
        "guid": delivery.guid,
        "app_id": delivery.app_id,
        "event": delivery.event,
        "action": delivery.action,
        "status_code": delivery.status_code,
        "error": delivery.error,
        "delivered_at": delivery.delivered_at,
        "duration_ms": delivery.duration_ms,
        "redelivery": delivery.redelivery,
    }
