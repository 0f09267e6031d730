"""The web application: the webhook endpoint plus health, readiness, metrics and the evidence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from rq.queue import Queue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from baton import queues, records
from baton.logs import DeliveryLog
from baton.redis_client import connect_async
from baton.settings import Settings, bearer_matches
from bot.enqueue import Enqueuer
from bot.evidence import EvidenceEndpoints
from bot.manifest import DEFAULT_MANIFEST
from bot.metrics import Metrics, RedisGauges
from bot.setup_page import SetupPage, new_token
from bot.status_page import StatusPage
from bot.types import ASGIApp, Receive, Scope, Send
from bot.webhooks import WebhookEndpoint

WEBHOOK_PATH = "/api/github/webhooks"
METRICS_PATH = "/metrics"

log = logging.getLogger("baton.app")


#: How `baton serve`'s connections are named in Redis's CLIENT LIST (for operators, and the demo).
CLIENT_NAME = "baton-serve"


def redis_client(url: str, timeout: float) -> aioredis.Redis:
    """A client whose every wait is bounded by ``timeout`` (no unbounded retries), for the current
    primary (``baton.redis_client``: a plain URL or a Sentinel set)."""
    return connect_async(url, timeout=timeout, name=CLIENT_NAME)


async def redis_gauges(client: aioredis.Redis, timeout: float) -> RedisGauges:
    """Queue depths, the worker's counters and the outbox size, in one bounded round trip."""
    try:
        async with client.pipeline(transaction=False) as pipe:
            for spec in queues.ALL:
                pipe.llen(Queue.redis_queue_namespace_prefix + spec.name)
            pipe.hgetall(records.COUNTERS_KEY)
            pipe.zcard(records.OUTBOX_KEY)
            pipe.hgetall(records.GITHUB_REQUESTS_KEY)
            *depths, counters, outbox, calls = await asyncio.wait_for(pipe.execute(), timeout)
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("metrics: Redis did not answer", extra={"error": str(exc) or type(exc).__name__})
        return RedisGauges.unknown(spec.name for spec in queues.ALL)
    return RedisGauges(
        queue_depths={spec.name: int(n) for spec, n in zip(queues.ALL, depths, strict=True)},
        worker_events=_counts(counters),
        outbox_pending=int(outbox),
        github_requests=_counts(calls),
    )


def _counts(found: Mapping[bytes | str, bytes | str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, value in found.items():
        with contextlib.suppress(ValueError):
            counts[records.text(name)] = int(value)
    return counts


def _unauthorised(path: str, realm: str) -> Response:
    return JSONResponse(
        {"error": f"{realm}-unauthorised", "message": f"GET {path} needs Authorization: Bearer <token>"},
        status_code=401,
        headers={"WWW-Authenticate": f'Bearer realm="baton-{realm}"'},
    )


def create_app(
    settings: Settings,
    redis_url: str | None,
    delivery_log: DeliveryLog | None = None,
    *,
    env_dir: Path | None = None,
    manifest_path: Path = DEFAULT_MANIFEST,
    setup_token: str | None = None,
) -> ASGIApp:
    """Build the app. ``redis_url`` None (only in setup mode) means nothing can be stored.

    With ``settings.metrics_port``, `/metrics` is answered only on connections to
    that port (and nothing else is); `baton serve` listens there too. `GET /` is the
    setup page in setup mode (it writes `.env` to ``env_dir``, default the working
    directory, as Probot does), and the status page otherwise. The setup page opens only with
    ``setup_token`` (`baton serve` prints its link); without one, nobody can open it.
    """
    metrics = Metrics()
    client = redis_client(redis_url, settings.redis_timeout) if redis_url else None
    enqueuer = None
    if client is not None:
        enqueuer = Enqueuer(client, settings.redis_timeout, replicas=settings.redis_replicas)
    webhook = WebhookEndpoint(
        secrets=settings.webhook_secrets,
        max_body_bytes=settings.max_body_bytes,
        app_id=int(settings.app_id) if settings.app_id else None,
        app_slug=settings.app_slug,
        # Without a secret nothing can be verified (503 setup-mode); with one, deliveries are
        # stored even before the App's key is there (the worker then says what is missing).
        enqueuer=enqueuer if settings.webhook_secrets else None,
        metrics=metrics,
        log=delivery_log or DeliveryLog(),
    )
    evidence = EvidenceEndpoints(settings, redis_url)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok", "setup_mode": settings.setup_mode})

    async def readyz(_: Request) -> Response:
        if client is None:
            return JSONResponse({"status": "unavailable", "redis": "not configured"}, status_code=503)
        try:
            await asyncio.wait_for(client.ping(), settings.redis_timeout)
        except (RedisError, OSError, TimeoutError) as exc:
            # Redis's own words name hosts and ports: they go to the log, not to whoever asks.
            log.warning("readyz: Redis did not answer", extra={"error": str(exc) or type(exc).__name__})
            return JSONResponse({"status": "unavailable", "redis": "not answering"}, status_code=503)
        return JSONResponse({"status": "ready", "setup_mode": settings.setup_mode})

    async def metrics_endpoint(request: Request) -> Response:
        token = settings.metrics_token
        if token is not None and not bearer_matches(request.headers.get("authorization"), token):
            return _unauthorised(METRICS_PATH, "metrics")
        gauges = await redis_gauges(client, settings.redis_timeout) if client is not None else None
        return PlainTextResponse(metrics.render(gauges), media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if enqueuer is not None:
                await enqueuer.close()
            evidence.close()

    status = StatusPage(settings, client)

    async def status_endpoint(request: Request) -> Response:
        # Read-only, but it names installations and repositories: private exactly as /metrics is.
        token = settings.metrics_token
        if token is not None and not bearer_matches(request.headers.get("authorization"), token):
            return _unauthorised("/", "status")
        return await status(request)

    if settings.setup_mode:
        setup = SetupPage(settings, env_dir=env_dir or Path.cwd(), manifest_path=manifest_path,
                          webhook_path=WEBHOOK_PATH, token=setup_token or new_token())  # fmt: skip
        home = setup.routes()
    else:
        home = [Route("/", status_endpoint, methods=["GET"])]
    routes = [
        Route(WEBHOOK_PATH, webhook, methods=["POST"]),  # reached only by non-POST (405)
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *home,
        *evidence.routes(),
    ]
    metrics_route = Route(METRICS_PATH, metrics_endpoint)
    separate = settings.metrics_port is not None
    app = Starlette(routes=routes if separate else [*routes, metrics_route], lifespan=lifespan)
    app.state.metrics = metrics
    metrics_app = Starlette(routes=[metrics_route]) if separate else None
    return _FastPath(app, webhook, metrics_app, settings.metrics_port)


class _FastPath:
    """Send POST /api/github/webhooks straight to its endpoint, everything else to Starlette.

    Starlette's middleware and router cost ~20 µs a request; at thousands of
    deliveries a second that is a tenth of the budget. The endpoint handles its
    own errors, so it loses nothing by skipping them. A connection to the
    metrics port (the port the server accepted it on) reaches only `/metrics`.
    """

    def __init__(
        self,
        app: Starlette,
        webhook: WebhookEndpoint,
        metrics_app: Starlette | None,
        metrics_port: int | None,
    ) -> None:
        self.app = app
        self.webhook = webhook
        self.metrics_app = metrics_app
        self.metrics_port = metrics_port
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics_app is not None and scope["type"] == "http":
            server = scope.get("server")
            if server is not None and server[1] == self.metrics_port:
                await self.metrics_app(scope, receive, send)
                return
        if scope["type"] == "http" and scope["path"] == WEBHOOK_PATH and scope["method"] == "POST":
            await self.webhook(scope, receive, send)
        else:
            await self.app(scope, receive, send)
