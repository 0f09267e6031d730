"""The leased lock: only the token that holds it may release, renew or hand it on (a real Redis)."""

from __future__ import annotations

import redis

from worker import locks

KEY = "test:lock"


def test_take_is_exclusive_and_names_its_holder(rdb: redis.Redis) -> None:
    assert locks.holder(rdb, KEY) is None
    assert locks.take(rdb, KEY, "a", 10_000)
    assert not locks.take(rdb, KEY, "b", 10_000)
    assert locks.holder(rdb, KEY) == "a"
    assert 0 < rdb.pttl(KEY) <= 10_000


def test_release_frees_only_its_own_lock(rdb: redis.Redis) -> None:
    assert locks.take(rdb, KEY, "a", 10_000)
    assert not locks.release(rdb, KEY, "b")
    assert locks.holder(rdb, KEY) == "a"
    assert locks.release(rdb, KEY, "a")
    assert locks.holder(rdb, KEY) is None
    assert not locks.release(rdb, KEY, "a")  # already free: nothing to do, no error


def test_a_lapsed_holder_cannot_free_the_next_one(rdb: redis.Redis) -> None:
    assert locks.take(rdb, KEY, "a", 10_000)
    rdb.delete(KEY)  # a's lease lapsed
    assert locks.take(rdb, KEY, "b", 10_000)
    assert not locks.release(rdb, KEY, "a")
    assert not locks.renew(rdb, KEY, "a", 60_000)
    assert locks.holder(rdb, KEY) == "b"
    assert rdb.pttl(KEY) <= 10_000


def test_renew_starts_a_fresh_lease_for_the_holder(rdb: redis.Redis) -> None:
    assert locks.take(rdb, KEY, "a", 1_000)
    assert locks.renew(rdb, KEY, "a", 60_000)
    assert 1_000 < rdb.pttl(KEY) <= 60_000
    rdb.delete(KEY)
    assert not locks.renew(rdb, KEY, "a", 60_000)  # gone: renewing does not take it again
    assert locks.holder(rdb, KEY) is None


def test_take_over_only_from_the_holder_named(rdb: redis.Redis) -> None:
    assert locks.take(rdb, KEY, "dead", 10_000)
    assert not locks.take_over(rdb, KEY, "someone-else", "b", 20_000)
    assert locks.holder(rdb, KEY) == "dead"
    assert locks.take_over(rdb, KEY, "dead", "b", 20_000)
    assert locks.holder(rdb, KEY) == "b"
    assert 10_000 < rdb.pttl(KEY) <= 20_000
    assert not locks.take_over(rdb, KEY, "dead", "c", 20_000)  # b got there first
    assert locks.holder(rdb, KEY) == "b"
