"""Recovering the deliveries GitHub gave up on: failed webhooks found and redelivered.

GitHub never retries a failed delivery by itself. When Baton answered 503 (Redis
restarting, a deploy), that label is gone unless someone clicks "Redeliver". So idle
workers take turns running a pass (one at a time across the deployment: a Redis lock
with a lease, and the time of the next pass in Redis) every ``BATON_REDELIVERY_INTERVAL``:

1. list the App's deliveries with its JWT (``GET /app/hook/deliveries?status=failure``,
   newest first, following the ``Link`` cursor) back to the last pass's checkpoint, or
   GitHub's 3-day retention;
2. ``plan`` (pure) groups the attempts by GUID and picks those Baton never stored (its
   dedupe key is absent) and that never got a 2xx: answers Baton chose (202 ``ignored``)
   are successes, a 4xx (a bad signature) is redelivered only if the operator says so;
3. each is redelivered once per pass (``POST /app/hook/deliveries/{id}/attempts``), oldest
   first, at most ``MAX_PER_PASS``; a GUID gets at most ``MAX_ATTEMPTS`` attempts in all,
   then it is given up (logged with its GUID, counted);
4. if everything the previous pass asked for failed again, the next pass waits twice as
   long (up to an hour): redelivering into an outage only burns attempts.

The redelivery arrives through the normal endpoint, verified, deduplicated and routed
like any other: nothing here goes around the front door.

The time of the next pass is by Redis's clock (``worker.clock``): one worker writes it, all read it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import redis
from githubkit import GitHub
from githubkit.exception import GitHubException

from baton import keys, queues, records
from worker import clock, keepalive, locks
from worker.context import Context
from worker.github.client import github_error

log = logging.getLogger("baton.redeliver")

MAX_ATTEMPTS = 3  # per GUID, GitHub's first attempt included
MAX_PER_PASS = 100
MAX_PAGES = 50  # 5,000 failed attempts listed per pass at most
RETENTION_S = 3 * 24 * 3600  # GitHub keeps deliveries this long
MAX_BACKOFF_S = 3600
LOCK_KEY = keys.REDELIVERY_LOCK_KEY
#: The pass lock's lease, renewed every RENEW_S while the pass runs: a worker that dies mid-pass (or
#: loses Redis) holds it this long at most, not for as long as the longest pass could take.
LOCK_MS = 30_000
RENEW_S = 10.0
STATE_KEY = keys.REDELIVERY_STATE_KEY  # what each key holds: baton/keys.py
REQUESTED_PREFIX = keys.REDELIVERY_GUID_PREFIX
GIVEN_UP_KEY = keys.REDELIVERY_GIVEN_UP_KEY
KEEP_S = RETENTION_S + 24 * 3600


@dataclass(frozen=True)
class Attempt:
    """One attempt of a delivery, as ``GET /app/hook/deliveries`` lists it."""

    id: int
    guid: str
    delivered_at: float
    status_code: int
    event: str
    action: str | None

    @classmethod
    def from_api(cls, item: Mapping[str, Any]) -> Attempt:
        when = datetime.fromisoformat(str(item["delivered_at"]).replace("Z", "+00:00")).timestamp()
        return cls(int(item["id"]), str(item["guid"]), when, int(item.get("status_code") or 0),
                   str(item.get("event") or ""), item.get("action"))  # fmt: skip

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 300


@dataclass
class Plan:
    redeliver: list[Attempt] = field(default_factory=list)  # the newest attempt of each, oldest first
    given_up: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    failed: int = 0  # GUIDs seen that never succeeded and Baton never stored
    deferred: int = 0  # left for the next pass by MAX_PER_PASS


def plan(
    attempts: Iterable[Attempt],
    *,
    stored: set[str],
    requested: Mapping[str, int],
    given_up: set[str],
    include_4xx: bool = False,
    max_per_pass: int = MAX_PER_PASS,
) -> Plan:
    """What one pass does, from what GitHub listed and what Redis holds; no I/O."""
    by_guid: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_guid.setdefault(attempt.guid, []).append(attempt)
    found = Plan()
    candidates: list[Attempt] = []
    for guid, tries in by_guid.items():
        newest = max(tries, key=lambda a: (a.delivered_at, a.id))
        if guid in stored:
            if requested.get(guid):
                found.recovered.append(guid)
            continue
        if any(a.succeeded for a in tries):
            continue  # Baton answered 2xx at some point: stored, ignored, or a duplicate
        if 400 <= newest.status_code < 500 and not include_4xx:
            continue  # a refusal (bad signature, too large): an operator's matter, not an outage
        found.failed += 1
        if max(len(tries), 1 + requested.get(guid, 0)) >= MAX_ATTEMPTS:
            if guid not in given_up:
                found.given_up.append(guid)
            continue
        candidates.append(newest)
    candidates.sort(key=lambda a: (a.delivered_at, a.id))
    found.redeliver = candidates[:max_per_pass]
    found.deferred = len(candidates) - len(found.redeliver)
    return found


def next_wait(interval_s: float, backoff_s: float, *, asked: Sequence[str], recovered: set[str]) -> float:
    """How long until the next pass: doubled (to an hour) when every redelivery the previous
    pass asked for failed again, back to the interval as soon as one gets through."""
    if asked and not recovered & set(asked):
        return min(max(backoff_s, interval_s) * 2, max(MAX_BACKOFF_S, interval_s))
    return interval_s


# -- one pass ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    at: float
    listed: int
    failed: int
    requested: list[str]
    recovered: list[str]
    given_up: list[str]
    deferred: int
    next_in_s: float

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))


def maybe_run(ctx: Context, *, now: float | None = None) -> Summary | None:
    """Run a pass if one is due and no other process runs one; None otherwise."""
    interval_s, include_4xx = ctx.redelivery_interval_s, ctx.redeliver_4xx
    if ctx.github is None or interval_s <= 0:
        return None
    with ctx.redis.pipeline(transaction=False) as pipe:  # Redis's time and the next pass's, one round trip
        pipe.time()
        pipe.hget(STATE_KEY, "next_at")
        reply, due = pipe.execute()
    at = clock.of(reply) if now is None else now
    if due is not None and float(due) > at:
        return None
    token = secrets.token_hex(8)
    if not locks.take(ctx.redis, LOCK_KEY, token, LOCK_MS):
        return None
    try:
        due = ctx.redis.hget(STATE_KEY, "next_at")  # another pass may have finished just now
        if due is not None and float(due) > at:
            return None
        with keepalive.every(RENEW_S, lambda: _renew(ctx, token), name="baton-redelivery-lock"):
            return run_pass(ctx, interval_s, include_4xx=include_4xx, now=at)
    finally:
        locks.release(ctx.redis, LOCK_KEY, token)


def _renew(ctx: Context, token: str) -> bool:
    try:
        return locks.renew(ctx.redis, LOCK_KEY, token, LOCK_MS)
    except redis.RedisError:
        return True  # tried again next time; the lease may still be saved


def run_pass(ctx: Context, interval_s: float, *, include_4xx: bool = False, now: float) -> Summary:
    app = ctx.github
    if app is None:
        raise RuntimeError("run_pass needs the App's credentials")
    state = {records.text(k): records.text(v) for k, v in ctx.redis.hgetall(STATE_KEY).items()}
    checkpoint = int(state.get("checkpoint") or 0)
    listed, newest_id = _list_failed(app.app, since=max(now - RETENTION_S, 0), checkpoint=checkpoint)
    asked_before: list[str] = orjson.loads(state["asked"]) if state.get("asked") else []
    # The last pass's GUIDs too: their redeliveries may have succeeded, and success is not listed.
    guids = sorted({a.guid for a in listed} | set(asked_before))
    stored, requested = _stored_and_requested(ctx.redis, guids)
    given_up = {records.text(g) for g in ctx.redis.smembers(GIVEN_UP_KEY)}
    decided = plan(listed, stored=stored, requested=requested, given_up=given_up, include_4xx=include_4xx)
    recovered_now = set(decided.recovered) | (set(asked_before) & stored)
    asked: list[str] = []
    for attempt in decided.redeliver:
        if _redeliver(app.app, attempt):
            asked.append(attempt.guid)
            ctx.redis.incr(REQUESTED_PREFIX + attempt.guid)
            ctx.redis.expire(REQUESTED_PREFIX + attempt.guid, KEEP_S)
    for guid in decided.given_up:
        log.warning("delivery given up after %d attempts", MAX_ATTEMPTS, extra={"task": guid})
        ctx.redis.sadd(GIVEN_UP_KEY, guid)
    ctx.redis.expire(GIVEN_UP_KEY, KEEP_S)
    wait = next_wait(interval_s, float(state.get("backoff_s") or interval_s), asked=asked_before,
                     recovered=recovered_now | stored)  # fmt: skip
    summary = Summary(now, len(listed), decided.failed, asked, sorted(recovered_now), decided.given_up,
                      decided.deferred, wait)  # fmt: skip
    with ctx.redis.pipeline(transaction=True) as pipe:
        pipe.hset(STATE_KEY, mapping={
            "next_at": now + wait, "backoff_s": wait, "asked": orjson.dumps(asked),
            # Deferred attempts must be listed again: the checkpoint moves only past a finished pass.
            "checkpoint": checkpoint if decided.deferred else max(checkpoint, newest_id),
            "last_pass": summary.to_json(),
        })  # fmt: skip
        for name, count in (("redelivery_failed_seen", decided.failed), ("redelivery_requested", len(asked)),
                            ("redelivery_recovered", len(recovered_now)),
                            ("redelivery_given_up", len(decided.given_up))):  # fmt: skip
            if count:
                pipe.hincrby(records.COUNTERS_KEY, name, count)
        pipe.execute()
    for guid in recovered_now:
        ctx.redis.delete(REQUESTED_PREFIX + guid)
    if asked or decided.given_up or recovered_now:
        log.info("redelivery pass", extra={"task": "-", "detail": summary.to_json().decode()})
    return summary


def last_pass(client: redis.Redis) -> dict[str, Any] | None:
    raw = client.hget(STATE_KEY, "last_pass")
    return orjson.loads(raw) if raw else None


def _stored_and_requested(client: redis.Redis, guids: list[str]) -> tuple[set[str], dict[str, int]]:
    with client.pipeline(transaction=False) as pipe:
        for guid in guids:
            pipe.exists(queues.DEDUPE_PREFIX + guid)
            pipe.get(REQUESTED_PREFIX + guid)
        found = pipe.execute()
    stored = {g for g, exists in zip(guids, found[0::2], strict=True) if exists}
    requested = {g: int(n) for g, n in zip(guids, found[1::2], strict=True) if n}
    return stored, requested


def _list_failed(app_gh: GitHub[Any], *, since: float, checkpoint: int) -> tuple[list[Attempt], int]:
    """Failed attempts, newest first, back to ``checkpoint`` (a delivery id) or ``since``."""
    listed: list[Attempt] = []
    newest = 0
    params: dict[str, str | int] = {"status": "failure", "per_page": 100}
    for _ in range(MAX_PAGES):
        try:
            response = app_gh.request("GET", "/app/hook/deliveries", params=params)
        except GitHubException as exc:
            raise github_error(exc, "GET /app/hook/deliveries failed") from exc
        page = response.json()
        for item in page:
            attempt = Attempt.from_api(item)
            newest = max(newest, attempt.id)
            if attempt.id <= checkpoint or attempt.delivered_at < since:
                return listed, newest
            listed.append(attempt)
        cursor = _next_cursor(response.headers.get("link", ""))
        if not page or cursor is None:
            break
        params = {**params, "cursor": cursor}
    return listed, newest


def _next_cursor(link: str) -> str | None:
    """The ``cursor`` of the ``rel="next"`` URL in a ``Link`` header (GitHub's cursor pagination)."""
    for part in link.split(","):
        url, _, rel = part.partition(";")
        if 'rel="next"' in rel:
            found = parse_qs(urlsplit(url.strip().strip("<>")).query).get("cursor")
            return found[0] if found else None
    return None


def _redeliver(app_gh: GitHub[Any], attempt: Attempt) -> bool:
    """Ask GitHub to send ``attempt`` again (same GUID); False if it refused (logged)."""
    try:
        app_gh.request("POST", f"/app/hook/deliveries/{attempt.id}/attempts")
    except GitHubException as exc:
        error = github_error(exc, f"POST /app/hook/deliveries/{attempt.id}/attempts failed")
        log.warning("redelivery refused", extra={"task": attempt.guid, "error": error.message})
        return False
    return True
