"""Task states: the table of legal moves, applied atomically with the registries."""

from __future__ import annotations

import threading

import pytest
import redis

from worker import lifecycle
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
    assert lifecycle.renew_lease(rdb, "t5")  # its worker is alive after all
    assert not lifecycle.claim_expired(rdb, "t5")
    assert lifecycle.claim_expired(rdb, "t5", now=later + lifecycle.LEASE_S + 60)
    assert not lifecycle.claim_expired(rdb, "t5", now=later + lifecycle.LEASE_S + 60)
    assert not lifecycle.renew_lease(rdb, "t5")  # a reaped task's lease is never revived
