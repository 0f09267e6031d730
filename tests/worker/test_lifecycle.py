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
    lifecycle.move(rdb, "t1", State.RUNNING, "started")
    moved = lifecycle.move(rdb, "t1", State.DENIED, "trifecta", decision_sha256="ab")
    assert (moved.before, moved.after) == (State.RUNNING, State.DENIED)
    assert lifecycle.current(rdb, "t1") == State.DENIED
    assert rdb.hget(lifecycle.PREFIX + "t1", "decision_sha256") == b"ab"
    assert [(e["from"], e["to"]) for e in lifecycle.history(rdb, "t1")] == [
        (None, "running"),
        ("running", "denied"),
    ]
    assert rdb.zscore(lifecycle.REGISTRY + "running", "t1") is None
    assert rdb.zscore(lifecycle.REGISTRY + "denied", "t1") is not None
    assert rdb.ttl(lifecycle.PREFIX + "t1") > 0


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], State.DONE),  # a new task starts queued or running
        ([State.RUNNING, State.DONE], State.RUNNING),  # terminal is terminal
        ([State.RUNNING, State.REFUSED], State.ACCEPTED),
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
    assert len(lifecycle.history(setup, "t3")) == 2
    setup.close()
