"""BATON_REDIS_REPLICAS at ingest: no 2xx before that many replicas hold the delivery; and the
enqueue script found again on a Redis that restarted or took over (its script cache is per server).

Real redis-server processes on loopback (tests/redis_topology.py): a primary with a replica, a
replica stopped with SIGSTOP or killed, a primary killed and restarted, a Sentinel failover.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rq.queue import Queue

from baton import keys, queues, records
from baton.logs import timestamp
from baton.redis_client import NotReplicated, connect_async
from baton.settings import Settings
from baton.tasks import Task
from bot.app import WEBHOOK_PATH, create_app
from bot.enqueue import ENQUEUE_SCRIPT, Enqueuer, prepare
from bot.routing import task_for
from tests.conftest import SECRET, delivery_headers, labeled, serve_app
from tests.redis_topology import Node, Topology, topology

TIMEOUT_S = 1.0  # BATON_REDIS_TIMEOUT in these tests
#: What a 503 may take beyond BATON_REDIS_TIMEOUT: the HTTP round trip on a loaded machine.
SLACK_S = 0.5
#: How Redis names the enqueue script in its cache.
SCRIPT_SHA = hashlib.sha1(ENQUEUE_SCRIPT.encode()).hexdigest()
CONTROL = Queue.redis_queue_namespace_prefix + queues.CONTROL.name


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"webhook_secrets": (SECRET,), "redis_timeout": TIMEOUT_S}
    return Settings(**{**base, **overrides})


def url_of(node: Node) -> str:
    return f"redis://127.0.0.1:{node.port}/0"


def delivery() -> tuple[str, bytes]:
    """A new delivery id and a body no other delivery has (bodies, like ids, are stored once)."""
    payload = labeled()
    payload["issue"]["body"] = f"a distinct issue body {uuid.uuid4()}"
    return str(uuid.uuid4()), json.dumps(payload).encode()


def post(base: str, sent: tuple[str, bytes]) -> httpx.Response:
    guid, body = sent
    headers = delivery_headers(body, "issues", delivery=guid)
    return httpx.post(base + WEBHOOK_PATH, content=body, headers=headers, timeout=10)


def stored_on(node: Node, guid: str) -> bool:
    """Is the task there as the worker reads it: its job on the queue, its job hash and its record?"""
    client = node.client()
    try:
        queued = [records.text(x) for x in client.lrange(CONTROL, 0, -1)]
        return guid in queued and bool(client.exists("rq:job:" + guid, records.TASK_PREFIX + guid) == 2)
    finally:
        client.close()


def assert_not_replicated(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["error"] == "redis-not-replicated"
    assert "replicas" in body["message"]
    assert "redeliver" in body["message"]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Topology]:
    """A primary and one replica of it, no Sentinel: Baton talks to the primary directly."""
    with topology(tmp_path / "redis", replicas=1, sentinels=0) as found:
        yield found


def test_a_2xx_means_the_replica_holds_the_delivery(pair: Topology) -> None:
    primary, replica = pair.data
    with serve_app(create_app(settings(redis_replicas=1), url_of(primary))) as base:
        for _ in range(5):
            sent = delivery()
            answer = post(base, sent)
            assert answer.status_code == 202, answer.text
            # Read at once, no polling: WAIT confirmed it before the answer left.
            assert stored_on(replica, sent[0])


def test_a_stopped_replica_is_503_not_replicated_for_new_deliveries_and_duplicates(pair: Topology) -> None:
    primary, replica = pair.data
    with serve_app(create_app(settings(redis_replicas=1), url_of(primary))) as base:
        earlier = delivery()
        assert post(base, earlier).status_code == 202
        replica.freeze()
        try:
            sent = delivery()
            started = time.monotonic()
            assert_not_replicated(post(base, sent))
            assert time.monotonic() - started < TIMEOUT_S + SLACK_S
            # A redelivery too: its original may be a write no replica has yet.
            assert_not_replicated(post(base, earlier))
        finally:
            replica.thaw()
        # The replica is back: the delivery that was refused is now a duplicate (it was stored on
        # the primary), and the replica holds it as soon as that is said.
        again = post(base, sent)
        assert (again.status_code, again.json()["status"]) == (200, "duplicate"), again.text
        assert stored_on(replica, sent[0])
        fresh = delivery()
        assert post(base, fresh).status_code == 202
        assert stored_on(replica, fresh[0])


def test_every_delivery_of_a_batch_is_not_replicated_new_and_duplicate_alike(pair: Topology) -> None:
    """One batch (submitted together, so one pipeline and one WAIT): new deliveries and duplicates of
    a delivery stored before the replica stopped all fail, none is acknowledged."""
    primary, replica = pair.data

    def task(sent: tuple[str, bytes]) -> Task:
        guid, raw = sent
        now = timestamp(time.time())
        found = task_for("issues", guid, json.loads(raw), raw=raw, received_at=now, app_id=None)
        assert isinstance(found, Task)
        return found

    async def submit_together(tasks: list[Task]) -> list[object]:
        enqueuer = Enqueuer(connect_async(url_of(primary), timeout=TIMEOUT_S), TIMEOUT_S, replicas=1)
        try:
            answers = [enqueuer.submit(prepare(t, time.time())) for t in tasks]
            return list(await asyncio.gather(*answers, return_exceptions=True))
        finally:
            await enqueuer.close()

    earlier = task(delivery())
    assert asyncio.run(submit_together([earlier])) == [None]  # stored and replicated
    replica.freeze()
    try:
        batch = [task(delivery()) for _ in range(4)] + [earlier, task(delivery())]
        started = time.monotonic()
        answers = asyncio.run(submit_together(batch))
        assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    finally:
        replica.thaw()
    for answer in answers:
        assert isinstance(answer, NotReplicated), answer
        assert answer.code == "redis-not-replicated"
    # Each was stored on the primary all the same: a redelivery is a duplicate, now replicated.
    assert asyncio.run(submit_together(batch)) == [t.id for t in batch]
    assert all(stored_on(replica, t.id) for t in batch)


def test_a_replica_gone_is_503_and_its_return_is_202_again(pair: Topology) -> None:
    primary, replica = pair.data
    with serve_app(create_app(settings(redis_replicas=1), url_of(primary))) as base:
        assert post(base, delivery()).status_code == 202
        replica.kill()
        started = time.monotonic()
        assert_not_replicated(post(base, delivery()))
        assert time.monotonic() - started < TIMEOUT_S + SLACK_S
        replica.start()  # same port and directory: it syncs from the primary again
        pair.wait_replicas(1)
        sent = delivery()
        assert post(base, sent).status_code == 202
        assert stored_on(replica, sent[0])


def test_with_no_replica_required_a_stopped_replica_changes_nothing(pair: Topology) -> None:
    primary, replica = pair.data
    with serve_app(create_app(settings(redis_replicas=0), url_of(primary))) as base:
        replica.freeze()
        try:
            sent = delivery()
            assert post(base, sent).status_code == 202
            assert stored_on(primary, sent[0])
        finally:
            replica.thaw()
    client = primary.client()
    try:
        assert not client.exists(keys.REPLICATION_MARK_KEY)  # no WAIT was asked for
    finally:
        client.close()


def test_a_restarted_redis_gets_the_script_again_and_loses_no_delivery(tmp_path: Path) -> None:
    """Killed and started again on the same port: Baton's connection is gone and so is the script
    cache (Redis keeps scripts in memory only); the next delivery is still stored, once."""
    with topology(tmp_path / "redis", replicas=0, sentinels=0) as alone:
        primary = alone.data[0]
        with serve_app(create_app(settings(), url_of(primary))) as base:
            assert post(base, delivery()).status_code == 202
            primary.kill()
            primary.start()
            sent = delivery()
            assert post(base, sent).status_code == 202
            assert post(base, sent).status_code == 200
            assert stored_on(primary, sent[0])
            client = primary.client()
            try:
                assert [records.text(x) for x in client.lrange(CONTROL, 0, -1)].count(sent[0]) == 1
            finally:
                client.close()


def test_after_a_failover_the_new_primary_gets_the_script_and_the_delivery(tmp_path: Path) -> None:
    """Through Sentinel: the primary dies, a replica takes over without the script in its cache."""
    with topology(tmp_path / "redis", replicas=1, sentinels=3) as found:
        old = found.primary()
        with serve_app(create_app(settings(), found.url)) as base:
            assert post(base, delivery()).status_code == 202
            old.kill()
            new = found.wait_failover(old)
            client = new.client()
            try:
                assert client.script_exists(SCRIPT_SHA) == [False]  # nothing carried it over
            finally:
                client.close()
            # The Sentinels may still be telling each other (a second or two); until then a delivery
            # may be 503, as GitHub would be told, and is then sent again. It is never lost.
            sent, answers = delivery(), list[httpx.Response]()
            deadline = time.monotonic() + 20
            while not answers or (answers[-1].status_code == 503 and time.monotonic() < deadline):
                answers.append(post(base, sent))
            said = [(a.status_code, a.text) for a in answers]
            assert answers[-1].status_code == 202, said
            assert all(a.json()["error"].startswith("redis-") for a in answers[:-1]), said
            assert stored_on(new, sent[0])
