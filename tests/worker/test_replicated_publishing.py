"""With BATON_REDIS_REPLICAS, nothing leaves for GitHub before a replica holds it.

A primary that dies before its replicas have a write takes the write with it. What GitHub was told
must never be that write: a status comment about a final state, or a receipt whose log entry the
new primary no longer has. So a publication waits for the replicas (the outbox tries again later),
and a receipt is handed out only once its log entry is replicated. A real primary and replica;
the replica is frozen with SIGSTOP (it stays connected and acknowledges nothing) and thawed again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from baton import redis_client
from evidence.log import Log
from tests.redis_topology import Topology
from tests.worker.conftest import Stage, make_stage
from worker import lifecycle, outbox, receipts
from worker.publish import publisher

ONE_REPLICA = redis_client.Replication(required=1, timeout=0.3)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Topology]:
    setup = Topology(tmp_path / "redis", replicas=1, sentinels=0)
    try:
        yield setup.start()
    finally:
        setup.stop()


@pytest.fixture
def primary(pair: Topology) -> Iterator[redis.Redis]:
    client = pair.data[0].client()
    yield client
    client.close()


@pytest.fixture
def stage(tmp_path: Path, pair: Topology, primary: redis.Redis) -> Iterator[Stage]:
    url = f"redis://127.0.0.1:{pair.data[0].port}/0"
    for found in make_stage(tmp_path, url, primary):
        yield dataclasses.replace(found, ctx=dataclasses.replace(found.ctx, replication=ONE_REPLICA))


def test_a_final_status_is_not_published_until_a_replica_holds_it(stage: Stage, pair: Topology) -> None:
    replica = pair.data[1]
    replica.freeze()
    try:
        number = stage.issue()
        result = stage.label(number, "researcher", sender="maria")  # denied by the gate: one comment
        task_id = result["task_id"]
        assert result["state"] == "denied"
        assert stage.baton_comments(number) == [], "published before any replica held the final state"
        assert "redis-not-replicated" in (lifecycle.field(stage.rdb, task_id, "publish_error") or "")
        assert stage.rdb.zscore("baton:outbox", task_id) is not None, "kept for another attempt"
    finally:
        replica.thaw()
    assert stage.ctx.github is not None
    act = publisher(stage.ctx.github, stage.rdb, stage.ctx.app_id, ONE_REPLICA)
    due = float(stage.rdb.zscore("baton:outbox", task_id) or 0)
    assert outbox.attempt(stage.rdb, task_id, act, now=due + 0.1) is not None
    [comment] = stage.baton_comments(number)
    assert "capability gate denied" in comment["body"]


def test_a_receipt_is_handed_out_only_once_its_log_entry_is_replicated(stage: Stage, pair: Topology) -> None:
    signer = stage.ctx.signer
    subject = receipts.commit_subject("octo/repo", "a" * 40)
    replica = pair.data[1]
    replica.freeze()
    try:
        with pytest.raises(redis_client.NotReplicated) as caught:
            receipts.attest(signer, stage.rdb, 7, subjects=[subject], predicate_type="https://example.com/p/v1",
                            predicate={"x": 1}, replication=ONE_REPLICA)  # fmt: skip
        assert "the log entry 0 of installation 7" in caught.value.message
    finally:
        replica.thaw()
    signed = receipts.attest(signer, stage.rdb, 7, subjects=[subject], predicate_type="https://example.com/p/v1",
                             predicate={"x": 2}, replication=ONE_REPLICA)  # fmt: skip
    assert signed.index == 1
    on_replica = replica.client()
    try:
        assert Log(on_replica, 7).size() == 2
    finally:
        on_replica.close()
