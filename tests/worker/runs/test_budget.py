"""The run budget: the pure judgement, and reserving, renewing and releasing in real Redis."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
import redis

from worker.runs.budget import (
    AGENT_MINUTES_PER_DAY,
    BUDGET_TTL_S,
    BUSY,
    CONCURRENT_RUNS,
    MODEL_SPEND_PER_DAY,
    MODEL_USD,
    RUNS_PER_DAY,
    Scope,
    SpendLedger,
    Usage,
    Verdict,
    active_key,
    budget_key,
    day,
    judge,
    release,
    renew,
    reserve,
    usage,
)

NOW = datetime(2026, 11, 30, 16, 45, 12, tzinfo=UTC)
RESETS = "2026-12-01T00:00:00Z"
REPO = Scope(
    "repo:7", "acme/widgets", max_runs_per_day=3, max_agent_minutes_per_day=10, max_concurrent_runs=2
)
INST = Scope("installation:42", "installation 42", max_runs_per_day=5, max_agent_minutes_per_day=None,
             max_concurrent_runs=None)  # fmt: skip
OPEN = Scope("repo:8", "acme/open", None, None, None)
LOCK = ("baton:run-lock:7:12", 60_000)


def _use(runs: int = 0, seconds: float = 0.0, active: int = 0) -> Usage:
    return Usage(runs_today=runs, agent_seconds_today=seconds, active=active)


# --- judge: pure -----------------------------------------------------------------------------------


def test_day_is_the_utc_date() -> None:
    assert day(NOW) == "2026-11-30"
    late_in_new_york = datetime(2026, 11, 30, 21, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert day(late_in_new_york) == "2026-12-01"


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        day(datetime(2026, 11, 30, 12, 0))  # naive: the point of the test


@pytest.mark.parametrize(
    ("repo", "inst", "expected"),
    [
        (_use(), _use(), (None, None, None, None)),
        (_use(active=2), _use(), (CONCURRENT_RUNS, "acme/widgets", 2, 2)),
        (_use(runs=3), _use(), (RUNS_PER_DAY, "acme/widgets", 3, 3)),
        (_use(seconds=600.0), _use(), (AGENT_MINUTES_PER_DAY, "acme/widgets", 10.0, 10)),
        (_use(seconds=599.0), _use(), (None, None, None, None)),
        (_use(runs=2), _use(runs=5), (RUNS_PER_DAY, "installation 42", 5, 5)),
        # order within a scope: concurrency, then runs, then minutes
        (_use(runs=3, seconds=900.0, active=2), _use(), (CONCURRENT_RUNS, "acme/widgets", 2, 2)),
        (_use(runs=3, seconds=900.0), _use(), (RUNS_PER_DAY, "acme/widgets", 3, 3)),
        # order across scopes: the first scope's limits before the second's
        (_use(seconds=900.0), _use(runs=5), (AGENT_MINUTES_PER_DAY, "acme/widgets", 15.0, 10)),
        # the installation has no concurrency or minutes cap
        (_use(), _use(runs=4, seconds=10**9, active=99), (None, None, None, None)),
    ],
)
def test_judge_table(
    repo: Usage, inst: Usage, expected: tuple[str | None, str | None, float | None, int | None]
) -> None:
    """``expected``: code, scope, used, limit; scopes are judged repository first."""
    verdict = judge([(REPO, repo), (INST, inst)], NOW)
    assert (verdict.code, verdict.scope, verdict.used, verdict.limit) == expected
    assert verdict.allowed == (expected[0] is None)
    daily = expected[0] in (RUNS_PER_DAY, AGENT_MINUTES_PER_DAY)
    assert verdict.resets_at == (RESETS if daily else None)
    assert verdict.holder is None


def test_resets_at_is_the_next_utc_midnight_even_just_after_one() -> None:
    just_after = datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)
    assert judge([(REPO, _use(runs=3))], just_after).resets_at == "2026-12-02T00:00:00Z"
    just_before = datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    assert judge([(REPO, _use(runs=3))], just_before).resets_at == RESETS


def test_seconds_left_is_the_minimum_over_capped_scopes() -> None:
    other = Scope("installation:1", "installation 1", None, 20, None)
    verdict = judge([(REPO, _use(seconds=120.0)), (other, _use(seconds=1000.0)), (OPEN, _use())], NOW)
    assert verdict.allowed
    assert verdict.seconds_left == 200.0  # installation: 1200 - 1000, below the repo's 600 - 120
    assert judge([(OPEN, _use(seconds=10**6))], NOW).seconds_left is None
    assert judge([], NOW) == Verdict(True)
    assert judge([(REPO, _use(seconds=900.0))], NOW).seconds_left == 0.0  # never negative


def test_lines_say_who_what_and_when_it_resets() -> None:
    assert judge([(REPO, _use())], NOW).lines() == []
    runs = judge([(REPO, _use(runs=3))], NOW)
    assert runs.lines() == [
        f"acme/widgets has used 3 of its 3 runs today (UTC); the budget resets at {RESETS}.",
        "The limit is `limits.max_runs_per_day`: the org's policy sets it, a repository's may lower it.",
    ]
    minutes = judge([(OPEN, _use()), (Scope("installation:42", "installation 42", None, 60, None),
                                      _use(seconds=3629.5))], NOW)  # fmt: skip
    assert minutes.lines() == [
        f"installation 42 has used 60 of its 60 agent minutes today (UTC); the budget resets at {RESETS}.",
        "The limit is `limits.installation.max_agent_minutes_per_day`: "
        "the org's policy sets it, a repository's may lower it.",
    ]
    busy = judge([(REPO, _use(active=2))], NOW).lines()
    assert busy[0].startswith("acme/widgets already has 2 of its 2 concurrent runs in progress;")
    assert busy[1] == (
        "The limit is `limits.max_concurrent_runs`: the org's policy sets it, a repository's may lower it."
    )
    held = Verdict(False, BUSY, holder="t-1").lines()
    assert held == [
        "Another run (task t-1) is already working on this issue; this one was not started. "
        "Wait for that run to finish, then ask again."
    ]


def test_bad_scopes_are_refused() -> None:
    with pytest.raises(ValueError, match="max_runs_per_day must be at least 1"):
        Scope("repo:1", "a/b", 0, None, None)
    with pytest.raises(ValueError, match="scope key"):
        Scope("repo 1", "a/b", None, None, None)


# --- Redis -----------------------------------------------------------------------------------------


def _take(
    rdb: redis.Redis,
    task: str,
    *,
    now: datetime = NOW,
    lease_s: float = 60.0,
    lock: tuple[str, int] | None = None,
    scopes: tuple[Scope, ...] = (REPO, INST),
) -> Verdict:
    return reserve(rdb, scopes, task_id=task, now=now, lease_s=lease_s, lock=lock)


def _keys(rdb: redis.Redis) -> set[str]:
    return {k.decode() if isinstance(k, bytes) else k for k in rdb.keys("*")}


def test_reserve_counts_the_run_in_every_scope(rdb: redis.Redis) -> None:
    verdict = _take(rdb, "t-1", lock=LOCK)
    assert verdict == Verdict(True, seconds_left=600.0)
    assert usage(rdb, REPO, NOW) == _use(runs=1, active=1)
    assert usage(rdb, INST, NOW) == _use(runs=1, active=1)
    assert rdb.get(LOCK[0]) == b"t-1"
    assert 0 < rdb.pttl(LOCK[0]) <= LOCK[1]
    assert 0 < rdb.ttl(budget_key(REPO, "2026-11-30")) <= BUDGET_TTL_S
    assert rdb.zscore(active_key(INST), "t-1") == NOW.timestamp() + 60


def test_reserve_renew_release_across_two_scopes(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1", lock=LOCK).allowed
    later = NOW + timedelta(seconds=50)
    assert renew(rdb, (REPO, INST), task_id="t-1", now=later, lease_s=60.0, lock=(LOCK[0], 120_000))
    assert rdb.zscore(active_key(REPO), "t-1") == later.timestamp() + 60
    assert rdb.pttl(LOCK[0]) > 60_000
    # after the first lease would have lapsed, the renewed run still counts
    assert usage(rdb, REPO, NOW + timedelta(seconds=90)).active == 1
    release(rdb, (REPO, INST), task_id="t-1", day="2026-11-30", agent_seconds=125.5,
            lock_key=LOCK[0])  # fmt: skip
    assert usage(rdb, REPO, later) == _use(runs=1, seconds=125.5, active=0)
    assert usage(rdb, INST, later) == _use(runs=1, seconds=125.5, active=0)
    assert rdb.get(LOCK[0]) is None
    # the next reservation sees the recorded minutes
    assert _take(rdb, "t-2", now=later).seconds_left == 600 - 125.5


def test_release_counts_on_the_day_the_run_started(rdb: redis.Redis) -> None:
    before_midnight = datetime(2026, 11, 30, 23, 50, tzinfo=UTC)
    assert _take(rdb, "t-1", now=before_midnight).allowed
    release(rdb, (REPO,), task_id="t-1", day=day(before_midnight), agent_seconds=1200.0)
    assert usage(rdb, REPO, before_midnight).agent_seconds_today == 1200.0
    assert usage(rdb, REPO, before_midnight + timedelta(hours=1)) == _use()


def test_over_budget_refusal_writes_nothing(rdb: redis.Redis) -> None:
    for n in range(3):  # one at a time: each lease lapses before the next run starts
        assert _take(rdb, f"t-{n}", now=NOW + timedelta(seconds=2 * n), lease_s=1.0).allowed
    before = {k: rdb.dump(k) for k in _keys(rdb)}
    later = NOW + timedelta(seconds=10)  # leases lapsed: only the daily run count stops t-4
    verdict = _take(rdb, "t-4", now=later, lock=LOCK)
    assert (verdict.allowed, verdict.code, verdict.scope, verdict.used, verdict.limit) == (
        False, RUNS_PER_DAY, "acme/widgets", 3, 3,
    )  # fmt: skip
    assert verdict.resets_at == RESETS
    assert {k: rdb.dump(k) for k in _keys(rdb)} == before  # no lock, no count, no slot, no trim
    # the installation refuses too once its own total is reached, from another repository
    other = Scope("repo:9", "acme/other", None, None, None)
    assert _take(rdb, "t-5", scopes=(other, INST)).allowed
    assert _take(rdb, "t-6", scopes=(other, INST)).allowed
    refused = _take(rdb, "t-7", scopes=(other, INST))
    assert (refused.code, refused.scope) == (RUNS_PER_DAY, "installation 42")


def test_agent_minutes_refuse_after_release(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1").allowed
    release(rdb, (REPO, INST), task_id="t-1", day=day(NOW), agent_seconds=600.0)
    verdict = _take(rdb, "t-2")
    assert (verdict.code, verdict.used, verdict.limit, verdict.seconds_left) == (
        AGENT_MINUTES_PER_DAY, 10.0, 10, 0.0,
    )  # fmt: skip


def test_busy_lock_refuses_and_writes_nothing(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1", lock=LOCK).allowed
    before = {k: rdb.dump(k) for k in _keys(rdb)}
    verdict = _take(rdb, "t-2", lock=LOCK)
    assert verdict == Verdict(False, BUSY, holder="t-1")
    assert {k: rdb.dump(k) for k in _keys(rdb)} == before
    # another issue in the same repository is not busy
    assert _take(rdb, "t-3", lock=("baton:run-lock:7:13", 60_000)).allowed


def test_busy_comes_before_budgets(rdb: redis.Redis) -> None:
    rdb.set(LOCK[0], "t-0")
    tight = Scope("repo:7", "acme/widgets", 1, None, None)
    rdb.hset(budget_key(tight, day(NOW)), "runs", 1)
    assert _take(rdb, "t-1", lock=LOCK, scopes=(tight,)).code == BUSY


def test_reserving_twice_counts_once(rdb: redis.Redis) -> None:
    """A retried admission of the same task: one run, one slot, the lock kept, not refused by itself."""
    single = Scope("repo:7", "acme/widgets", 1, None, 1)
    assert _take(rdb, "t-1", lock=LOCK, scopes=(single, INST)).allowed
    again = _take(rdb, "t-1", lock=LOCK, scopes=(single, INST), now=NOW + timedelta(seconds=10))
    assert again.allowed, again
    assert usage(rdb, single, NOW) == _use(runs=1, active=1)
    assert usage(rdb, INST, NOW) == _use(runs=1, active=1)
    assert rdb.zscore(active_key(single), "t-1") == NOW.timestamp() + 70  # lease from the retry
    assert rdb.get(LOCK[0]) == b"t-1"
    assert _take(rdb, "t-2", scopes=(single,)).code == CONCURRENT_RUNS


def test_concurrency_is_released_by_lease_expiry(rdb: redis.Redis) -> None:
    """A dead worker never releases; its run stops counting when the lease lapses."""
    assert _take(rdb, "t-1", lease_s=30.0).allowed
    assert _take(rdb, "t-2", lease_s=30.0).allowed
    assert _take(rdb, "t-3", now=NOW + timedelta(seconds=29)).code == CONCURRENT_RUNS
    lapsed = NOW + timedelta(seconds=30)
    assert usage(rdb, REPO, lapsed).active == 0
    assert _take(rdb, "t-3", now=lapsed).allowed
    assert rdb.zrange(active_key(REPO), 0, -1) == [b"t-3"]  # lapsed entries trimmed on the way
    # the dead runs' leases cannot be renewed without the lock: their entries are gone
    assert not renew(rdb, (REPO,), task_id="t-1", now=lapsed, lease_s=30.0)


def test_renew_fails_once_the_lock_is_someone_elses(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1", lock=LOCK).allowed
    rdb.set(LOCK[0], "t-9")  # t-1's lock lapsed and t-9 took the issue
    before = rdb.zscore(active_key(REPO), "t-1")
    assert not renew(rdb, (REPO, INST), task_id="t-1", now=NOW + timedelta(seconds=30), lease_s=60.0,
                     lock=LOCK)  # fmt: skip
    assert rdb.zscore(active_key(REPO), "t-1") == before  # nothing extended
    release(rdb, (REPO, INST), task_id="t-1", day=day(NOW), agent_seconds=1.0,
            lock_key=LOCK[0])  # fmt: skip
    assert rdb.get(LOCK[0]) == b"t-9"  # compare-and-delete: not ours, not deleted
    assert rdb.zscore(active_key(REPO), "t-1") is None


def test_renew_with_the_lock_restores_a_trimmed_entry(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1", lock=LOCK, lease_s=10.0).allowed
    late = NOW + timedelta(seconds=20)
    assert _take(rdb, "t-2", now=late).allowed  # trims t-1's lapsed entry
    assert rdb.zscore(active_key(REPO), "t-1") is None
    assert renew(rdb, (REPO, INST), task_id="t-1", now=late, lease_s=60.0, lock=LOCK)
    assert usage(rdb, REPO, late).active == 2


def test_bad_arguments_are_refused(rdb: redis.Redis) -> None:
    with pytest.raises(ValueError, match="lease_s"):
        _take(rdb, "t-1", lease_s=0)
    with pytest.raises(ValueError, match="ttl_ms"):
        _take(rdb, "t-1", lock=("k", 0))
    with pytest.raises(ValueError, match="agent_seconds"):
        release(rdb, (REPO,), task_id="t-1", day="2026-11-30", agent_seconds=-1.0)
    with pytest.raises(ValueError, match="does not match format"):
        release(rdb, (REPO,), task_id="t-1", day="30/11/2026", agent_seconds=1.0)
    assert _keys(rdb) == set()


def test_no_scopes_and_no_lock_is_allowed_and_writes_nothing(rdb: redis.Redis) -> None:
    assert _take(rdb, "t-1", scopes=()) == Verdict(True)
    assert _keys(rdb) == set()


def _race(rdb: redis.Redis, scope: Scope, contenders: int, tag: str) -> list[Verdict]:
    """``contenders`` threads reserve at once, each on its own connection."""
    barrier = threading.Barrier(contenders)
    verdicts: list[Verdict] = []
    guard = threading.Lock()

    def contend(n: int) -> None:
        client = redis.Redis(connection_pool=rdb.connection_pool)
        barrier.wait()
        got = reserve(client, (scope,), task_id=f"{tag}-{n}", now=NOW, lease_s=60.0)
        with guard:
            verdicts.append(got)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return verdicts


@pytest.mark.parametrize("contenders", [2, 8])
@pytest.mark.parametrize(
    ("scope", "code"),
    [
        (Scope("repo:1", "acme/last", None, None, 3), CONCURRENT_RUNS),
        (Scope("repo:1", "acme/last", 3, None, None), RUNS_PER_DAY),
    ],
)
def test_racing_for_the_last_slot_exactly_one_wins(
    rdb: redis.Redis, scope: Scope, code: str, contenders: int
) -> None:
    """WATCH makes the losers of a race re-read and be refused: the last slot or daily run goes once."""
    for round_ in range(5):
        rdb.flushdb()
        for task in ("a", "b"):
            assert _take(rdb, task, scopes=(scope,)).allowed
        verdicts = _race(rdb, scope, contenders, f"r{round_}")
        assert len(verdicts) == contenders
        assert sum(v.allowed for v in verdicts) == 1, verdicts
        assert {v.code for v in verdicts if not v.allowed} == {code}
        assert usage(rdb, scope, NOW) == _use(runs=3, active=3)


# --- model spend: the day's dollars, counted live by the runs' gateways ----------------------------

SPENDY = Scope("repo:7", "acme/widgets", None, None, None, max_model_spend_per_day=5.0)
ORG_SPEND = Scope("installation:42", "installation 42", None, None, None, max_model_spend_per_day=20.0)


def test_a_day_over_its_model_spend_admits_no_run() -> None:
    verdict = judge([(SPENDY, Usage(0, 0.0, 0, model_usd_today=5.0))], NOW)
    assert (verdict.allowed, verdict.code, verdict.used, verdict.limit) == (
        False,
        MODEL_SPEND_PER_DAY,
        5.0,
        5.0,
    )
    assert verdict.setting == "limits.max_model_spend_per_day"
    assert verdict.lines()[0] == (
        "acme/widgets has spent $5.00 of its $5.00 of model calls today (UTC); "
        f"the budget resets at {RESETS}."
    )
    assert judge([(SPENDY, Usage(0, 0.0, 0, model_usd_today=4.99))], NOW).allowed


def test_the_ledger_charges_every_scope_and_says_what_is_left_in_the_tightest(rdb: redis.Redis) -> None:
    ledger = SpendLedger(rdb, [SPENDY, ORG_SPEND, OPEN])
    assert ledger.left() is not None
    assert ledger.left().usd == 5.0
    ledger.charge(1.25)
    ledger.charge(0.5)
    left = ledger.left()
    assert left is not None
    assert (left.usd, left.limit, left.scope, left.setting) == (3.25, 5.0, "acme/widgets",
                                                                "limits.max_model_spend_per_day")  # fmt: skip
    today = day(datetime.now(UTC))
    for scope in (SPENDY, ORG_SPEND, OPEN):  # counted where there is no cap too (the record of the day)
        assert float(rdb.hget(budget_key(scope, today), MODEL_USD) or 0) == 1.75
        assert 0 < rdb.ttl(budget_key(scope, today)) <= BUDGET_TTL_S
    assert SpendLedger(rdb, [OPEN]).left() is None  # no day cap anywhere
    with pytest.raises(ValueError, match="finite number"):
        ledger.charge(float("nan"))


def test_reserve_refuses_once_the_gateways_have_spent_the_day(rdb: redis.Redis) -> None:
    now = datetime.now(UTC)
    assert reserve(rdb, [SPENDY], task_id="t-1", now=now, lease_s=1.0).allowed
    SpendLedger(rdb, [SPENDY]).charge(5.0)
    refused = reserve(rdb, [SPENDY], task_id="t-2", now=now, lease_s=1.0)
    assert (refused.allowed, refused.code, refused.used) == (False, MODEL_SPEND_PER_DAY, 5.0)
    assert usage(rdb, SPENDY, now).model_usd_today == 5.0
