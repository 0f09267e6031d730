"""`POST /api/github/webhooks`: verify, route, store, answer. In that order.

A plain ASGI endpoint because this is the hot path: it reads the few headers
it needs, never buffers more than the size limit, and answers 2xx only after
Redis confirmed the task (or that the delivery id was already stored).
Checks run cheapest first, and nothing is stored unless every check passed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import orjson

from baton.errors import RedisUnavailable
from baton.logs import DeliveryLog, timestamp
from bot import signature
from bot.enqueue import Enqueuer, prepare
from bot.metrics import Metrics
from bot.routing import Ignored, PayloadError, task_for
from bot.types import Receive, Scope, Send

#: GitHub's delivery ids are GUIDs, 8-4-4-4-12 hex digits (its docs' example:
#: 72d3162e-cc78-11e3-81ab-4c9367dc0958); anything else did not come from GitHub. A GUID is also a
#: safe RQ job id and Redis key (letters, digits and '-' only).
DELIVERY_ID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")

_SIGNATURE = b"x-hub-signature-256"
_EVENT = b"x-github-event"
_DELIVERY = b"x-github-delivery"
_LENGTH = b"content-length"
_WANTED = frozenset({_SIGNATURE, _EVENT, _DELIVERY, _LENGTH})


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    outcome: str  # the metrics/log label: queued, duplicate, ignored, ping, or an error code
    body: dict[str, object]
    detail: str | None = None  # for the log line only, never the answer (e.g. Redis's own error text)


def _error(status: int, code: str, message: str, detail: str | None = None) -> Answer:
    return Answer(status, code, {"error": code, "message": message}, detail)


#: What the sender is told when Redis did not store a task, by RedisUnavailable code; the
#: error's own text (hosts, ports, Redis's words) goes to the log line only.
_NOT_STORED: dict[str, tuple[str, str]] = {
    # No answer in time: the script may have run. A redelivery is then `duplicate`, so nothing is lost.
    "redis-timeout": (
        "redis-timeout",
        "Redis did not confirm the write in time: the delivery may not be stored; redeliver it",
    ),
    "redis-unreachable": (
        "redis-unavailable",
        "Redis could not be reached or dropped the connection: the delivery may not be stored; redeliver it",
    ),
    "redis-refused": (
        "redis-unavailable",
        "Redis refused the write: the delivery was not stored; redeliver it",
    ),
    # Stored on the primary (now, or by an earlier delivery), but a failover could still lose it.
    "redis-not-replicated": (
        "redis-not-replicated",
        "Redis stored the delivery, but fewer of its replicas than Baton requires (BATON_REDIS_REPLICAS) "
        "confirmed it in time, so a failover could lose it; redeliver it",
    ),
}


class TooLarge(Exception):
    pass


class WebhookEndpoint:
    def __init__(
        self,
        *,
        secrets: tuple[bytes, ...],
        max_body_bytes: int,
        app_id: int | None,
        enqueuer: Enqueuer | None,
        metrics: Metrics,
        log: DeliveryLog,
        app_slug: str | None = None,
    ) -> None:
        self.secrets = secrets
        self.max_body_bytes = max_body_bytes
        self.app_id = app_id
        self.app_slug = app_slug
        self.enqueuer = enqueuer
        self.metrics = metrics
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in _WANTED:
                headers[name] = value
        event = headers.get(_EVENT, b"").decode("latin-1")
        delivery = headers.get(_DELIVERY, b"").decode("latin-1")
        answer, action = await self._handle(headers, event, delivery, receive)

        self.metrics.deliveries[answer.outcome] += 1
        body = orjson.dumps(answer.body)
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})
        line: dict[str, object] = {
            "delivery": delivery[:100] or None,
            "event": event[:100] or None,
            "action": action[:100] if action else None,
            "outcome": answer.outcome,
            "status": answer.status,
            "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        if answer.detail is not None:
            line["detail"] = answer.detail
        self.log.write(line)

    async def _handle(
        self, headers: dict[bytes, bytes], event: str, delivery: str, receive: Receive
    ) -> tuple[Answer, str | None]:
        enqueuer = self.enqueuer
        if not self.secrets or enqueuer is None:
            return _error(
                503, "setup-mode", "Baton has no WEBHOOK_SECRET yet, so it cannot verify deliveries"
            ), None
        length = headers.get(_LENGTH)
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return self._too_large(), None
        header = headers.get(_SIGNATURE)
        if header is None:
            return _error(401, "missing-signature", "X-Hub-Signature-256 header is required"), None
        try:
            raw = await self._read_body(receive)
        except TooLarge:
            return self._too_large(), None
        if not signature.verify(self.secrets, raw, header.decode("latin-1")):
            return _error(
                401, "invalid-signature", "X-Hub-Signature-256 does not match the body under any secret"
            ), None
        if not event:
            return _error(400, "missing-event", "X-GitHub-Event header is required"), None
        if not delivery:
            return _error(400, "missing-delivery", "X-GitHub-Delivery header is required"), None
        if not DELIVERY_ID.fullmatch(delivery):
            return _error(
                400,
                "bad-delivery-id",
                "X-GitHub-Delivery must be a GUID as GitHub sends (8-4-4-4-12 hex digits, e.g. "
                "72d3162e-cc78-11e3-81ab-4c9367dc0958); a replayed or hand-made delivery needs one too",
            ), None
        if event == "ping":
            return Answer(200, "ping", {"status": "pong"}), None
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, "bad-json", "body is not valid JSON"), None
        if not isinstance(payload, dict):
            return _error(400, "bad-json", "body is not a JSON object"), None
        action = payload.get("action")
        action = action if isinstance(action, str) else None
        return await self._route_and_store(
            enqueuer, event=event, delivery=delivery, payload=payload, raw=raw
        ), action

    async def _route_and_store(
        self,
        enqueuer: Enqueuer,
        *,
        event: str,
        delivery: str,
        payload: dict[str, object],
        raw: bytes,
    ) -> Answer:
        now = time.time()  # one clock reading: received_at, the record's updated_at and its score
        try:
            task = task_for(event, delivery, payload, raw=raw, received_at=timestamp(now), app_id=self.app_id,
                            app_slug=self.app_slug)  # fmt: skip
        except PayloadError as exc:
            return _error(400, "bad-payload", f"{event}: {exc}")
        if isinstance(task, Ignored):
            return Answer(202, "ignored", {"status": "ignored", "reason": task.reason})
        started = time.perf_counter()
        try:
            existing = await enqueuer.submit(prepare(task, now))
        except RedisUnavailable as exc:
            code, message = _NOT_STORED.get(exc.code, _NOT_STORED["redis-unreachable"])
            return _error(503, code, message, detail=exc.message)
        self.metrics.enqueue_latency.observe(time.perf_counter() - started)
        if existing is not None:  # a redelivery, or this body under another id: nothing written
            return Answer(200, "duplicate", {"status": "duplicate", "task_id": existing})
        return Answer(202, "queued", {"status": "queued", "task_id": task.id, "kind": task.kind.value})

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _too_large(self) -> Answer:
        return _error(413, "too-large", f"body exceeds the {self.max_body_bytes}-byte limit")
