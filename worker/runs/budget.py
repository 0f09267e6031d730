"""The run budget: whether a run may start, decided before any agent does.

Three things can stop a run: the issue already has one (its run lock is held),
a scope has as many runs in progress as it allows, or a scope has spent its
runs, agent minutes or model dollars for the UTC day. A scope is one repository or one whole
installation; a run counts against every scope it is given, so one repository
cannot use up the installation's shared budget unnoticed.

``judge`` is the pure decision. ``reserve`` reads usage, judges and records the
reservation in one optimistic Redis transaction (WATCH / MULTI, retried on a
conflict), so two workers racing for the last slot cannot both win. Its reads (``read``) and
writes (``count``, and a release's ``uncount``) are also offered on their own, for a transaction
that does more: a run's end and the start of the next waiting in its repository's line
(``worker.runs.line``), in one. A run refused only because no slot is free waits in that line.

Keys: ``baton:budget:<scope key>:<YYYY-MM-DD>`` is a hash of the day's ``runs``,
``agent_seconds`` and ``model_usd`` plus a ``task:<id>`` marker per counted task
(so a retried reservation counts once); it expires after three days.
``baton:active:<scope key>`` is a sorted set of task ids scored by when their
lease runs out: only entries still in their lease count as in progress, so a
dead worker's run stops counting once its lease lapses, with no sweeper.

Times and days are Redis's (``worker.clock``) unless a caller fixes ``now``: the workers that
count a day's runs and renew the slots run on machines whose clocks differ.

Agent time is recorded when a run is released, so runs in flight are not yet in
``agent_seconds``; ``Verdict.seconds_left`` is what the caller clamps the
agent's timeout to. Model dollars are counted as each call ends, by the run's
model gateway (``SpendLedger``), so runs in flight share the day's cap live: the
gateway asks before each call and refuses the call once a scope has reached it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

import redis
from redis.client import Pipeline

from baton import keys, records
from worker import clock
from worker.runner.gateway.spend import Left, usd

BUDGET_PREFIX = keys.BUDGET_PREFIX
ACTIVE_PREFIX = keys.ACTIVE_PREFIX
#: Long enough to read yesterday's totals after midnight; the keys then clean themselves up.
BUDGET_TTL_S = 3 * 24 * 3600

BUSY = "busy"
CONCURRENT_RUNS = "concurrent-runs"
RUNS_PER_DAY = "runs-per-day"
AGENT_MINUTES_PER_DAY = "agent-minutes-per-day"
MODEL_SPEND_PER_DAY = "model-spend-per-day"


@dataclass(frozen=True)
class Scope:
    """What a budget counts: one repository (``repo:<id>``) or one installation (``installation:<id>``).

    A ``None`` limit is no cap in this scope.
    """

    key: str
    label: str
    max_runs_per_day: int | None
    max_agent_minutes_per_day: int | None
    max_concurrent_runs: int | None
    max_model_spend_per_day: float | None = None

    def __post_init__(self) -> None:
        if not self.key or any(c.isspace() for c in self.key):
            raise ValueError(f"scope key {self.key!r} must be non-empty with no spaces, like 'repo:123'")
        for name in ("max_runs_per_day", "max_agent_minutes_per_day", "max_concurrent_runs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"scope {self.label}: {name} must be at least 1 or None, got {value}")
        spend = self.max_model_spend_per_day
        if spend is not None and not (spend > 0 and math.isfinite(spend)):
            raise ValueError(
                f"scope {self.label}: max_model_spend_per_day must be above 0 or None, got {spend}"
            )

    @property
    def is_installation(self) -> bool:
        return self.key.startswith("installation:")


@dataclass(frozen=True)
class Usage:
    """A scope's usage now: runs counted today, agent seconds recorded today, runs in their lease, and
    the model dollars its runs' gateways counted today."""

    runs_today: int
    agent_seconds_today: float
    active: int
    model_usd_today: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """Whether a run may start, and if not, which limit of which scope said no.

    ``used`` is runs, runs in progress, agent minutes or model dollars, matching ``code``;
    ``setting`` is the baton.yml field that sets the limit that refused.
    """

    allowed: bool
    code: str | None = None
    scope: str | None = None
    used: float | None = None
    limit: float | None = None
    resets_at: str | None = None
    holder: str | None = None
    seconds_left: float | None = None
    setting: str | None = None

    def lines(self) -> list[str]:
        """Plain English for the issue: what stopped the run, and where the limit is set."""
        if self.allowed:
            return []
        if self.code == BUSY:
            return [
                f"Another run (task {self.holder}) is already working on this issue; this one was not "
                "started. Wait for that run to finish, then ask again."
            ]
        used = 0 if self.used is None else math.floor(self.used)
        if self.code == CONCURRENT_RUNS:
            first = (
                f"{self.scope} already has {used} of its {self.limit} concurrent runs in progress; "
                "this one waits in line for a free slot."
            )
        elif self.code == RUNS_PER_DAY:
            first = (
                f"{self.scope} has used {used} of its {self.limit} runs today (UTC); "
                f"the budget resets at {self.resets_at}."
            )
        elif self.code == MODEL_SPEND_PER_DAY:
            first = (
                f"{self.scope} has spent {usd(self.used or 0.0)} of its {usd(float(self.limit or 0))} "
                f"of model calls today (UTC); the budget resets at {self.resets_at}."
            )
        else:
            first = (
                f"{self.scope} has used {used} of its {self.limit} agent minutes today (UTC); "
                f"the budget resets at {self.resets_at}."
            )
        return [first, f"The limit is `{self.setting}`: {WHO_SETS}"]


#: Who can change a limit: the org ceiling bounds it, a repository may only lower it.
WHO_SETS = "the org's policy sets it, a repository's may lower it."


def _utc(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (budgets count UTC days); use datetime.now(UTC)")
    return now.astimezone(UTC)


def day(now: datetime) -> str:
    """``YYYY-MM-DD`` of ``now`` in UTC: the day whose budget a run started at ``now`` counts in."""
    return _utc(now).date().isoformat()


def resets_at(now: datetime) -> str:
    """The next UTC midnight, ISO 8601 with ``Z``."""
    midnight = datetime.combine(_utc(now).date() + timedelta(days=1), time(0), UTC)
    return midnight.strftime("%Y-%m-%dT%H:%M:%SZ")


def _setting(scope: Scope, name: str) -> str:
    return f"limits.installation.{name}" if scope.is_installation else f"limits.{name}"


def judge(scopes: Sequence[tuple[Scope, Usage]], now: datetime) -> Verdict:
    """The first limit reached, checking each scope in order: concurrency, runs, then minutes.

    Concurrency first because it frees up within minutes, so it is the more useful
    thing to tell someone whose run was refused for several reasons.
    """
    left = [
        max(0.0, s.max_agent_minutes_per_day * 60 - u.agent_seconds_today)
        for s, u in scopes
        if s.max_agent_minutes_per_day is not None
    ]
    seconds_left = min(left) if left else None
    for scope, use in scopes:
        cap = scope.max_concurrent_runs
        if cap is not None and use.active >= cap:
            return Verdict(
                False, CONCURRENT_RUNS, scope.label, use.active, cap,
                seconds_left=seconds_left, setting=_setting(scope, "max_concurrent_runs"),
            )  # fmt: skip
        cap = scope.max_runs_per_day
        if cap is not None and use.runs_today >= cap:
            return Verdict(
                False, RUNS_PER_DAY, scope.label, use.runs_today, cap, resets_at(now),
                seconds_left=seconds_left, setting=_setting(scope, "max_runs_per_day"),
            )  # fmt: skip
        cap = scope.max_agent_minutes_per_day
        if cap is not None and use.agent_seconds_today >= cap * 60:
            return Verdict(
                False, AGENT_MINUTES_PER_DAY, scope.label, use.agent_seconds_today / 60, cap, resets_at(now),
                seconds_left=seconds_left, setting=_setting(scope, "max_agent_minutes_per_day"),
            )  # fmt: skip
        spend = scope.max_model_spend_per_day
        if spend is not None and use.model_usd_today >= spend:
            return Verdict(
                False, MODEL_SPEND_PER_DAY, scope.label, use.model_usd_today, spend, resets_at(now),
                seconds_left=seconds_left, setting=_setting(scope, "max_model_spend_per_day"),
            )  # fmt: skip
    return Verdict(True, seconds_left=seconds_left)


# --- Redis ---------------------------------------------------------------------------------------


#: The budget hash's field for model dollars, counted live by the runs' gateways.
MODEL_USD = "model_usd"


def budget_key(scope: Scope, on: str) -> str:
    return f"{BUDGET_PREFIX}{scope.key}:{on}"


def active_key(scope: Scope) -> str:
    return f"{ACTIVE_PREFIX}{scope.key}"


def _text(raw: object) -> str | None:
    if raw is None:
        return None
    return records.text(raw)


def _number(raw: object) -> float:
    text = _text(raw)
    return float(text) if text else 0.0


def _score(value: float) -> str:
    """A timestamp as Redis (and Lua's tonumber) read it back exactly enough: never exponent form."""
    return f"{value:.6f}"


def _task_marker(task_id: str) -> str:
    return f"task:{task_id}"


def _check_task(task_id: str, lease_s: float | None = None, lock: tuple[str, int] | None = None) -> None:
    if not task_id:
        raise ValueError("task_id must not be empty")
    if lease_s is not None and not (lease_s > 0 and math.isfinite(lease_s)):
        raise ValueError(f"lease_s must be a positive number of seconds, got {lease_s}")
    if lock is not None and (not lock[0] or lock[1] < 1):
        raise ValueError(f"lock must be (key, ttl_ms) with a key and ttl_ms at least 1, got {lock!r}")


def usage(client: redis.Redis, scope: Scope, now: datetime | None = None) -> Usage:
    """What ``scope`` has used today (Redis's, unless ``now`` is given), as ``reserve`` would count it."""
    now = clock.utc(client) if now is None else now
    runs, seconds, spent = client.hmget(budget_key(scope, day(now)), ["runs", "agent_seconds", MODEL_USD])
    active = client.zcount(active_key(scope), f"({_score(now.timestamp())}", "+inf")
    return Usage(int(_number(runs)), _number(seconds), int(active), _number(spent))


def watched(scopes: Sequence[Scope], on: str) -> list[str]:
    """The keys a transaction that reads or counts ``scopes`` on day ``on`` must WATCH."""
    return [*(budget_key(s, on) for s in scopes), *(active_key(s) for s in scopes)]


def read(pipe: Pipeline, scopes: Sequence[Scope], *, task_id: str, now: datetime) -> list[tuple[Usage, bool]]:
    """Each scope's usage as a reservation for ``task_id`` at ``now`` counts it, and whether the task
    is counted there today already; read in a transaction's watch phase (its ``watched`` keys).

    A task counted today is not counted against itself, nor is its own slot (a retry's)."""
    on, stamp, marker = day(now), now.timestamp(), _task_marker(task_id)
    found = []
    for scope in scopes:
        runs, seconds, spent, mine = pipe.hmget(
            budget_key(scope, on), ["runs", "agent_seconds", MODEL_USD, marker]
        )
        live = int(pipe.zcount(active_key(scope), f"({_score(stamp)}", "+inf"))
        own = pipe.zscore(active_key(scope), task_id)
        if own is not None and float(own) > stamp:
            live -= 1  # a retry's own slot is not someone else's run
        counted = mine is not None
        found.append((Usage(int(_number(runs)) - counted, _number(seconds), live, _number(spent)), counted))
    return found


def count(
    pipe: Pipeline, scopes: Sequence[Scope], *, task_id: str, now: datetime, lease_s: float,
    counted: Sequence[bool],
) -> None:  # fmt: skip
    """Queue a reservation's writes (in a transaction's MULTI): the run counted in every scope where
    it is not yet (``counted``, from ``read``), and its slot held for ``lease_s``."""
    on, stamp, marker = day(now), now.timestamp(), _task_marker(task_id)
    for scope, already in zip(scopes, counted, strict=True):
        budget, active = budget_key(scope, on), active_key(scope)
        if not already:
            pipe.hincrby(budget, "runs", 1)
            pipe.hset(budget, marker, on)
        pipe.expire(budget, BUDGET_TTL_S)
        pipe.zremrangebyscore(active, "-inf", _score(stamp))  # lapsed leases: dead runs
        pipe.zadd(active, {task_id: stamp + lease_s})


def uncount(pipe: Pipeline, scopes: Sequence[Scope], *, task_id: str, on: str, agent_seconds: float) -> None:
    """Queue a release's writes (in a transaction's MULTI): the run's agent time on ``on``, the day
    it started, and its slots freed. The lock is the caller's: only while it is still the task's."""
    _check_task(task_id)
    if not (agent_seconds >= 0 and math.isfinite(agent_seconds)):
        raise ValueError(f"agent_seconds must be a finite number at least 0, got {agent_seconds}")
    datetime.strptime(on, "%Y-%m-%d")  # only checks the spelling: ValueError if it is not a day
    for scope in scopes:
        pipe.hincrbyfloat(budget_key(scope, on), "agent_seconds", round(agent_seconds, 3))
        pipe.expire(budget_key(scope, on), BUDGET_TTL_S)
        pipe.zrem(active_key(scope), task_id)


def behind(verdict: Verdict, waiting: int) -> Verdict:
    """A run that could start while ``waiting`` runs wait in its repository's line waits behind them
    (``worker.runs.line``): nobody overtakes, so it is told concurrent-runs like them."""
    if verdict.allowed and waiting > 0:
        return Verdict(False, CONCURRENT_RUNS, seconds_left=verdict.seconds_left)
    return verdict


def reserve(
    client: redis.Redis,
    scopes: Sequence[Scope],
    *,
    task_id: str,
    now: datetime | None = None,
    lease_s: float,
    lock: tuple[str, int] | None = None,
    line: str | None = None,
) -> Verdict:
    """Judge and, if allowed, count the run in every scope and take the issue's lock, atomically.

    ``lock`` is ``(key, ttl_ms)``: held by another task, the verdict is ``busy`` and
    nothing is written; held by ``task_id`` (a retry), it is taken again. A task
    counted today is not counted twice, and its own entries do not count against it.
    ``line``: the repository's line of waiting runs (a sorted set); while anyone waits there the
    run waits too (``behind``), and a concurrent-runs verdict takes the lock and counts nothing:
    the run waits in the line holding its issue. ``now``: Redis's, read once before the transaction
    (its day names the keys it watches).
    """
    _check_task(task_id, lease_s, lock)
    now = clock.utc(client) if now is None else now
    watch = [*watched(scopes, day(now)), *([lock[0]] if lock is not None else []), *([line] if line else [])]
    if not watch:
        return Verdict(True)  # no scope and no lock: nothing to count or to hold
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(*watch)  # type: ignore[no-untyped-call]
                if lock is not None:
                    holder = _text(pipe.get(lock[0]))
                    if holder is not None and holder != task_id:
                        return Verdict(False, BUSY, holder=holder)
                found = read(pipe, scopes, task_id=task_id, now=now)
                verdict = judge([(s, u) for s, (u, _) in zip(scopes, found, strict=True)], now)
                if line is not None:
                    verdict = behind(verdict, int(pipe.zcard(line)))
                    if verdict.code == CONCURRENT_RUNS:
                        pipe.multi()
                        if lock is not None:
                            pipe.set(lock[0], task_id, px=lock[1])
                        pipe.execute()
                        return verdict
                if not verdict.allowed:
                    return verdict
                pipe.multi()
                count(pipe, scopes, task_id=task_id, now=now, lease_s=lease_s, counted=[c for _, c in found])
                if lock is not None:
                    pipe.set(lock[0], task_id, px=lock[1])
                pipe.execute()
                return verdict
            except redis.WatchError:
                continue


#: KEYS: the scopes' active sets, then the lock if any. ARGV: task id, lease_s, how many scopes, the
#: lock's ttl_ms, now (empty: Redis's).
_RENEW = (
    clock.LUA_NOW
    + """
local n = tonumber(ARGV[3])
local locked = #KEYS > n
if locked and redis.call('GET', KEYS[n + 1]) ~= ARGV[1] then return 0 end
local kept = 1
local till = string.format('%.6f', now_or(ARGV[5]) + tonumber(ARGV[2]))
for i = 1, n do
  if locked or redis.call('ZSCORE', KEYS[i], ARGV[1]) then
    redis.call('ZADD', KEYS[i], till, ARGV[1])
  else
    kept = 0
  end
end
if locked then redis.call('PEXPIRE', KEYS[n + 1], ARGV[4]) end
return kept
"""
)


def renew(
    client: redis.Redis,
    scopes: Sequence[Scope],
    *,
    task_id: str,
    now: datetime | None = None,
    lease_s: float,
    lock: tuple[str, int] | None = None,
) -> bool:
    """Extend the run's lease in every scope and its issue lock, atomically (by Redis's clock unless
    ``now`` is given).

    With ``lock``: False, and nothing extended, if the lock is no longer ours (the
    caller should stop the agent); while it is ours the run is live (``release``
    removes the entries and the lock together), so an entry trimmed after a late
    renewal is put back. Without ``lock``: only existing entries are extended, and
    False says one was gone (the run was released, or its lapsed lease trimmed).
    """
    _check_task(task_id, lease_s, lock)
    keys = [active_key(s) for s in scopes] + ([lock[0]] if lock is not None else [])
    at = clock.arg(None if now is None else now.timestamp())
    args: list[str | int] = [task_id, _score(lease_s), len(scopes), lock[1] if lock else 0, at]
    return bool(client.register_script(_RENEW)(keys=keys, args=args))


def release(
    client: redis.Redis,
    scopes: Sequence[Scope],
    *,
    task_id: str,
    day: str,
    agent_seconds: float,
    lock_key: str | None = None,
) -> None:
    """Record the run's agent time on ``day``, the day it started, and end it (its model dollars were
    counted as its calls ended: ``SpendLedger``).

    Not idempotent on purpose: each call reports time an agent really ran, so a
    retried run's second attempt counts too. The lock is deleted only if it is
    still ``task_id``'s (a lapsed lock may already be another run's). The run's repository's
    line is not moved here: ``worker.runs.line.release`` frees the slots and starts the next.
    """
    _check_task(task_id)
    with client.pipeline() as pipe:
        while True:
            try:
                mine = False
                if lock_key is not None:
                    pipe.watch(lock_key)  # type: ignore[no-untyped-call]
                    mine = _text(pipe.get(lock_key)) == task_id
                pipe.multi()
                uncount(pipe, scopes, task_id=task_id, on=day, agent_seconds=agent_seconds)
                if mine and lock_key is not None:
                    pipe.delete(lock_key)
                pipe.execute()
                return
            except redis.WatchError:
                continue


class SpendLedger:
    """A run's share of its scopes' day budgets for model dollars, for its model gateway
    (``worker.runner.gateway.spend.Ledger``): read before each call, charged after it, on the UTC
    day of the call by Redis's clock."""

    def __init__(self, client: redis.Redis, scopes: Sequence[Scope]) -> None:
        self.client = client
        self.scopes = list(scopes)

    def left(self) -> Left | None:
        capped = [s for s in self.scopes if s.max_model_spend_per_day is not None]
        if not capped:
            return None
        on = day(clock.utc(self.client))
        with self.client.pipeline(transaction=False) as pipe:
            for scope in capped:
                pipe.hget(budget_key(scope, on), MODEL_USD)
            spent = [_number(v) for v in pipe.execute()]
        return _tightest(zip(capped, spent, strict=True))

    def charge(self, usd: float) -> Left | None:
        """Count ``usd`` in every scope, and say what that left in the tightest capped one (the
        totals the increments return: no second read)."""
        if not (usd >= 0 and math.isfinite(usd)):
            raise ValueError(f"usd must be a finite number at least 0, got {usd}")
        on = day(clock.utc(self.client))
        with self.client.pipeline(transaction=True) as pipe:
            for scope in self.scopes:
                pipe.hincrbyfloat(budget_key(scope, on), MODEL_USD, usd)
                pipe.expire(budget_key(scope, on), BUDGET_TTL_S)
            totals = [_number(v) for v in pipe.execute()[::2]]
        return _tightest(zip(self.scopes, totals, strict=True))


def _tightest(spent: Iterable[tuple[Scope, float]]) -> Left | None:
    """The capped scope with the least left of its model dollars today (None: no scope is capped)."""
    found = []
    for scope, used in spent:
        if scope.max_model_spend_per_day is not None:
            cap = float(scope.max_model_spend_per_day)
            found.append(Left(cap - used, cap, scope.label, _setting(scope, "max_model_spend_per_day")))
    return min(found, key=lambda left: left.usd) if found else None
