"""Task states: the table of legal moves, applied atomically with the registries."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from baton import records
from worker import clock, lifecycle
from worker.lifecycle import MOVES, TERMINAL, IllegalMove, State


def test_terminal_states_go_nowhere_and_every_state_is_in_the_table() -> None:
    assert set(MOVES) == set(State)
    for state in TERMINAL:
        assert MOVES[state] == frozenset()
    assert State.RUNNING in MOVES[State.QUEUED]


def test_a_move_updates_record_history_and_registries_together(rdb: redis.Redis) -> None:
    lifecycle.move(rdb, "t1", State.QUEUED, "stored")
    lifecycle.move(rdb, "t1", State.RUNNING, "started")
    assert rdb.zscore(lifecycle.LEASES, "t1") is not None  # running holds a lease
    moved = lifecycle.move(rdb, "t1", State.DENIED, "trifecta", decision_sha256="ab")
    assert (moved.before, moved.after) == (State.RUNNING, State.DENIED)
    assert lifecycle.current(rdb, "t1") == State.DENIED
    assert rdb.hget(lifecycle.PREFIX + "t1", "decision_sha256") == b"ab"
    assert [(e["from"], e["to"]) for e in lifecycle.history(rdb, "t1")] == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "denied"),
    ]
    assert rdb.zscore(lifecycle.LEASES, "t1") is None  # and a terminal move drops it
    assert rdb.zscore(lifecycle.REGISTRY + "running", "t1") is None
    assert rdb.zscore(lifecycle.REGISTRY + "denied", "t1") is not None
    assert rdb.ttl(lifecycle.PREFIX + "t1") > 0


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], State.DONE),  # a task's record is born queued (the enqueue script writes it)
        ([], State.RUNNING),
        ([State.QUEUED, State.RUNNING], State.RUNNING),  # no job is created with retries: never twice
        ([State.QUEUED, State.RUNNING, State.DONE], State.RUNNING),  # terminal is terminal
        ([State.QUEUED, State.RUNNING, State.REFUSED], State.DONE),
        ([State.QUEUED], State.DENIED),  # nothing is decided before it runs
    ],
)
def test_illegal_moves_are_refused_and_change_nothing(
    rdb: redis.Redis, path: list[State], illegal: State
) -> None:
    for state in path:
        lifecycle.move(rdb, "t2", state)
    before = rdb.hgetall(lifecycle.PREFIX + "t2")
    with pytest.raises(IllegalMove):
        lifecycle.move(rdb, "t2", illegal)
    assert rdb.hgetall(lifecycle.PREFIX + "t2") == before


def test_racing_movers_cannot_both_finish_a_task(redis_url: str) -> None:
    """Two workers finishing the same task: exactly one terminal move wins."""
    setup = redis.Redis.from_url(redis_url)
    lifecycle.move(setup, "t3", State.QUEUED)
    lifecycle.move(setup, "t3", State.RUNNING)
    outcomes: list[str] = []

    def finish(state: State) -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            lifecycle.move(client, "t3", state)
            outcomes.append(f"moved {state}")
        except IllegalMove:
            outcomes.append("refused")
        finally:
            client.close()

    threads = [threading.Thread(target=finish, args=(s,)) for s in (State.DONE, State.FAILED) * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sum(o.startswith("moved") for o in outcomes) == 1
    assert outcomes.count("refused") == 15
    assert len(lifecycle.history(setup, "t3")) == 3
    setup.close()


def test_annotations_never_create_a_record(rdb: redis.Redis) -> None:
    """Facts about a task Redis forgot (published, comment ids) are dropped, not made into a record."""
    assert lifecycle.annotate(rdb, "gone", published="status comment 1") is False
    assert not rdb.exists(lifecycle.PREFIX + "gone")
    lifecycle.move(rdb, "t4", State.QUEUED)
    assert lifecycle.annotate(rdb, "t4", published="status comment 1") is True
    assert lifecycle.field(rdb, "t4", "published") == "status comment 1"


def test_only_one_sweeper_claims_an_expired_lease(rdb: redis.Redis) -> None:
    lifecycle.move(rdb, "t5", State.QUEUED)
    lifecycle.move(rdb, "t5", State.RUNNING)
    assert lifecycle.expired_leases(rdb) == []
    later = rdb.zscore(lifecycle.LEASES, "t5") or 0.0
    assert lifecycle.expired_leases(rdb, now=later + 1) == ["t5"]
    assert lifecycle.renew_lease(rdb, "t5") is lifecycle.Lease.HELD  # its worker is alive after all
    assert not lifecycle.claim_expired(rdb, "t5")
    assert lifecycle.claim_expired(rdb, "t5", now=later + lifecycle.LEASE_S + 60)
    assert not lifecycle.claim_expired(rdb, "t5", now=later + lifecycle.LEASE_S + 60)
    assert lifecycle.renew_lease(rdb, "t5") is lifecycle.Lease.LOST  # a reaped lease is never revived


def _start(rdb: redis.Redis, task_id: str, holder: str | None) -> None:
    lifecycle.move(rdb, task_id, State.QUEUED)
    lifecycle.move(rdb, task_id, State.RUNNING, holder=holder)


def test_a_lease_is_renewed_only_for_the_job_that_holds_it(rdb: redis.Redis) -> None:
    _start(rdb, "t6", "worker-a/t6")
    assert lifecycle.renew_lease(rdb, "t6", "worker-a/t6") is lifecycle.Lease.HELD
    assert lifecycle.renew_lease(rdb, "t6", "worker-b/t6") is lifecycle.Lease.LOST  # not extended for it
    lifecycle.move(rdb, "t6", State.DONE, "finished", holder="worker-a/t6")
    assert lifecycle.renew_lease(rdb, "t6", "worker-a/t6") is lifecycle.Lease.RELEASED  # its own move: fine


def test_a_job_whose_task_was_swept_or_taken_finds_its_lease_lost(rdb: redis.Redis) -> None:
    _start(rdb, "t7", "worker-a/t7")
    assert lifecycle.claim_expired(rdb, "t7", now=(rdb.zscore(lifecycle.LEASES, "t7") or 0) + 1)
    lifecycle.move(rdb, "t7", State.FAILED, "worker-lost")  # a sweeper's move: it names no job
    assert lifecycle.renew_lease(rdb, "t7", "worker-a/t7") is lifecycle.Lease.LOST
    # A new primary that lost the move to running: the task is queued, and then another job's.
    lifecycle.move(rdb, "t8", State.QUEUED)
    assert lifecycle.renew_lease(rdb, "t8", "worker-a/t8") is lifecycle.Lease.LOST
    lifecycle.move(rdb, "t8", State.RUNNING, holder="worker-b/t8")
    assert lifecycle.renew_lease(rdb, "t8", "worker-a/t8") is lifecycle.Lease.LOST


def test_a_job_ends_or_hands_off_only_a_task_it_still_holds(rdb: redis.Redis) -> None:
    _start(rdb, "t9", "worker-b/t9")
    with pytest.raises(IllegalMove):
        lifecycle.move(rdb, "t9", State.DONE, "late", holder="worker-a/t9")
    with pytest.raises(IllegalMove):
        lifecycle.move(rdb, "t9", State.QUEUED, "handed off", holder="worker-a/t9")
    lifecycle.move(rdb, "t10", State.QUEUED)
    with pytest.raises(IllegalMove):  # queued is a legal start for FAILED, but this job never held it
        lifecycle.move(rdb, "t10", State.FAILED, "late", holder="worker-a/t10")
    assert lifecycle.current(rdb, "t9") is State.RUNNING
    assert lifecycle.current(rdb, "t10") is State.QUEUED
    lifecycle.move(rdb, "t9", State.DONE, "finished", holder="worker-b/t9")
    assert lifecycle.current(rdb, "t9") is State.DONE


def _primary_since(rdb: redis.Redis, since: float) -> None:
    """Record this server as the primary seen since ``since`` (as a change detected then would)."""
    lifecycle.expired_leases(rdb)  # records its identity
    rdb.hset(clock.PRIMARY_KEY, "since", f"{since:.6f}")


def test_a_new_primary_holds_sweeps_back_for_one_lease(rdb: redis.Redis) -> None:
    _start(rdb, "t11", None)
    rdb.zadd(lifecycle.LEASES, {"t11": 1.0})  # renewed last on the old primary, long ago by this one
    now = clock.now(rdb)
    _primary_since(rdb, now)
    assert lifecycle.expired_leases(rdb) == []
    assert not lifecycle.claim_expired(rdb, "t11")
    assert lifecycle.expired_leases(rdb, now=now + lifecycle.LEASE_S + 1) == ["t11"]
    assert lifecycle.claim_expired(rdb, "t11", now=now + lifecycle.LEASE_S + 1)


def test_a_new_primary_holds_a_task_back_from_running_until_a_lease_has_passed(rdb: redis.Redis) -> None:
    lifecycle.move(rdb, "t12", State.QUEUED)
    since = clock.now(rdb) - lifecycle.LEASE_S + 1.5  # seen new 28.5 s ago...
    rdb.hset(lifecycle.PREFIX + "t12", records.QUEUED_AT, f"{since - 5:.6f}")  # ...and t12 queued before
    _primary_since(rdb, since)
    started = time.monotonic()
    lifecycle.move(rdb, "t12", State.RUNNING)
    assert 1.0 < time.monotonic() - started < 10.0
    started = time.monotonic()
    lifecycle.move(rdb, "t12", State.DONE)  # only taking a lease waits
    assert time.monotonic() - started < 1.0


def test_a_task_queued_on_the_new_primary_is_not_held_back(rdb: redis.Redis) -> None:
    """It can have run on no other primary: only tasks queued before the change wait a lease."""
    _primary_since(rdb, clock.now(rdb))
    lifecycle.move(rdb, "t13", State.QUEUED)  # stamped with Redis's time, after the change
    started = time.monotonic()
    lifecycle.move(rdb, "t13", State.RUNNING)
    assert time.monotonic() - started < 1.0


def test_another_server_is_a_new_primary_and_a_first_sighting_is_not(rdb: redis.Redis) -> None:
    lifecycle.expired_leases(rdb)
    assert (
        float(rdb.hget(clock.PRIMARY_KEY, "since") or -1) == 0
    )  # nothing recorded before: nothing to protect
    rdb.hset(clock.PRIMARY_KEY, "id", "another-server:another-replication-id")
    before = clock.now(rdb)
    lifecycle.expired_leases(rdb)
    assert float(rdb.hget(clock.PRIMARY_KEY, "since") or 0) >= before
