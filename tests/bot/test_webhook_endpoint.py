"""POST /api/github/webhooks against a real Redis, in-process and over loopback HTTP."""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
import redis
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer
from starlette.testclient import TestClient

from baton import queues, records
from baton.logs import DeliveryLog
from baton.settings import Settings
from bot.app import WEBHOOK_PATH, create_app
from bot.signature import sign
from tests.conftest import SECRET, delivery_headers, example, labeled, serve_app
from worker import lifecycle


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"webhook_secrets": (SECRET,), "redis_timeout": 2.0}
    return Settings(**{**base, **overrides})


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings(), redis_url)) as c:
        yield c


def fresh(agent: str = "claude-code") -> dict[str, Any]:
    """A labeled delivery whose body no other delivery has (bodies, like ids, are stored once)."""
    payload = labeled(agent)
    payload["issue"]["body"] = f"a distinct issue body {uuid.uuid4()}"
    return payload


def post(client: TestClient, payload: object, event: str = "issues", **kw: Any) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = delivery_headers(body, event, **kw)
    return client.post(WEBHOOK_PATH, content=body, headers=headers)


def queued_ids(rdb: redis.Redis, spec: queues.QueueSpec) -> list[str]:
    return [x.decode() for x in rdb.lrange(Queue.redis_queue_namespace_prefix + spec.name, 0, -1)]


def all_queued(rdb: redis.Redis) -> list[str]:
    return [job for spec in queues.ALL for job in queued_ids(rdb, spec)]


# -- signature -------------------------------------------------------------------


def test_githubs_documented_vector() -> None:
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(b"It's a Secret to Everybody", b"Hello, World!") == expected


def test_accepted_delivery_is_an_rq_job_a_worker_can_read(client: TestClient, rdb: redis.Redis) -> None:
    delivery = str(uuid.uuid4())
    r = post(client, labeled("claude-code"), delivery=delivery)
    assert r.status_code == 202
    assert r.json() == {"status": "queued", "task_id": delivery, "kind": "agent_run"}
    assert queued_ids(rdb, queues.CONTROL) == [delivery]

    job = Job.fetch(delivery, connection=rdb, serializer=JSONSerializer)
    assert job.func_name == queues.JOB_FUNCTION
    assert job.get_status() == "queued"
    assert job.origin == queues.CONTROL.name
    task = job.args[0]
    assert task["kind"] == "agent_run"
    assert task["agent"] == "claude-code"
    assert task["delivery_id"] == delivery
    assert task["installation_id"] == 4242
    assert task["repository"]["full_name"] == "Codertocat/Hello-World"
    assert task["sender"] == {"login": "Codertocat", "type": "User"}
    assert len(task["payload_sha256"]) == 64
    assert task["untrusted"]["title"] == "Spelling error in the README file"
    assert rdb.sismember(Queue.redis_queues_keys, Queue.redis_queue_namespace_prefix + queues.CONTROL.name)


def test_rotation_accepts_every_configured_secret(redis_url: str) -> None:
    app = create_app(settings(webhook_secrets=(b"old", SECRET)), redis_url)
    with TestClient(app) as c:
        assert post(c, fresh(), secret=b"old").status_code == 202
        assert post(c, fresh(), secret=SECRET).status_code == 202
        assert post(c, fresh(), secret=b"other").status_code == 401


# -- bad input: clear error, nothing stored --------------------------------------


def _raw(client: TestClient, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return client.post(WEBHOOK_PATH, content=body, headers=headers)


BODY = json.dumps(labeled()).encode()


@pytest.mark.parametrize(
    ("mutate", "status", "code"),
    [
        (lambda h: h.pop("X-Hub-Signature-256"), 401, "missing-signature"),
        (lambda h: h.update({"X-Hub-Signature-256": "sha256=" + "0" * 64}), 401, "invalid-signature"),
        # The right HMAC without the sha256= prefix, and a SHA-1 header alone, are unsigned.
        (lambda h: h.update({"X-Hub-Signature-256": sign(SECRET, BODY)[7:]}), 401, "invalid-signature"),
        (
            lambda h: (h.pop("X-Hub-Signature-256"), h.update({"X-Hub-Signature": "sha1=" + "0" * 40})),
            401,
            "missing-signature",
        ),
        (lambda h: h.pop("X-GitHub-Event"), 400, "missing-event"),
        (lambda h: h.pop("X-GitHub-Delivery"), 400, "missing-delivery"),
        (lambda h: h.update({"X-GitHub-Delivery": "../../etc"}), 400, "bad-delivery-id"),
    ],
)
def test_bad_headers_are_refused_and_store_nothing(
    client: TestClient, rdb: redis.Redis, mutate: Any, status: int, code: str
) -> None:
    headers = delivery_headers(BODY, "issues")
    mutate(headers)
    r = _raw(client, BODY, headers)
    assert r.status_code == status
    assert r.json()["error"] == code
    assert r.json()["message"]
    assert all_queued(rdb) == []
    assert rdb.dbsize() == 0


@pytest.mark.parametrize(
    "delivery",
    [
        "d-1",  # letters, digits and dashes, but no GUID
        "another-id",
        "72d3162ecc7811e381ab4c9367dc0958",  # GitHub's GUID without its dashes
        "72d3162e-cc78-11e3-81ab-4c9367dc095",  # one digit short
        "{72d3162e-cc78-11e3-81ab-4c9367dc0958}",
        "72d3162g-cc78-11e3-81ab-4c9367dc0958",  # not hex
    ],
)
def test_a_delivery_id_that_is_not_a_guid_is_400_and_stores_nothing(
    client: TestClient, rdb: redis.Redis, delivery: str
) -> None:
    """GitHub's X-GitHub-Delivery is a GUID (its docs' example: 72d3162e-cc78-11e3-81ab-4c9367dc0958);
    anything else did not come from GitHub, and the README's table answers it 400."""
    body = json.dumps(labeled()).encode()
    r = _raw(client, body, delivery_headers(body, "issues", delivery=delivery))
    assert (r.status_code, r.json()["error"]) == (400, "bad-delivery-id")
    assert "GUID" in r.json()["message"]
    assert rdb.dbsize() == 0


@pytest.mark.parametrize(
    "delivery", ["72d3162e-cc78-11e3-81ab-4c9367dc0958", "72D3162E-CC78-11E3-81AB-4C9367DC0958"]
)
def test_githubs_guid_is_a_delivery_id(client: TestClient, rdb: redis.Redis, delivery: str) -> None:
    r = post(client, labeled(), delivery=delivery)
    assert (r.status_code, r.json()["task_id"]) == (202, delivery)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "bad-json"),
        (b"[1, 2]", "bad-json"),
        (b'"a string"', "bad-json"),
        (b'{"action": "labeled", "label": {"name": "agent:x"}}', "bad-payload"),
    ],
)
def test_bodies_that_are_not_a_payload_are_refused(
    client: TestClient, rdb: redis.Redis, body: bytes, code: str
) -> None:
    r = _raw(client, body, delivery_headers(body, "issues"))
    assert r.status_code == 400
    assert r.json()["error"] == code
    assert rdb.dbsize() == 0


def test_oversized_body_is_413_by_content_length(redis_url: str, rdb: redis.Redis) -> None:
    with TestClient(create_app(settings(max_body_bytes=1000), redis_url)) as c:
        body = json.dumps(labeled()).encode()
        assert len(body) > 1000
        r = _raw(c, body, delivery_headers(body, "issues"))
        assert r.status_code == 413
        assert r.json()["error"] == "too-large"
    assert rdb.dbsize() == 0


def test_oversized_chunked_body_is_cut_off_at_the_limit(redis_url: str, rdb: redis.Redis) -> None:
    """Without Content-Length the endpoint stops reading once the limit is passed."""
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(1000):  # would be 1 MB; the limit is 4 KB
            sent += 1024
            yield b"x" * 1024

    with TestClient(create_app(settings(max_body_bytes=4096), redis_url)) as c:
        headers = delivery_headers(b"", "issues")
        r = c.post(WEBHOOK_PATH, content=chunks(), headers=headers)
    assert r.status_code == 413
    assert rdb.dbsize() == 0


def test_setup_mode_refuses_every_webhook(redis_url: str, rdb: redis.Redis) -> None:
    with TestClient(create_app(settings(webhook_secrets=()), redis_url)) as c:
        r = post(c, labeled())
        assert r.status_code == 503
        assert r.json()["error"] == "setup-mode"
        assert c.get("/healthz").json() == {"status": "ok", "setup_mode": True}
    assert rdb.dbsize() == 0


def test_ping_is_200_and_unhandled_events_are_202_ignored(client: TestClient, rdb: redis.Redis) -> None:
    ping = post(client, {"zen": "Keep it logically awesome.", "hook_id": 1}, event="ping")
    assert (ping.status_code, ping.json()) == (200, {"status": "pong"})
    star = post(client, {"action": "created", "sender": {"login": "a", "type": "User"}}, event="star")
    assert star.status_code == 202
    assert star.json()["status"] == "ignored"
    other_label = example("issues", "labeled")  # label "bug": not an agent label
    r = post(client, other_label)
    assert (r.status_code, r.json()["status"]) == (202, "ignored")
    assert rdb.dbsize() == 0


def test_get_is_not_allowed(client: TestClient) -> None:
    assert client.get(WEBHOOK_PATH).status_code == 405


# -- idempotency ---------------------------------------------------------------------


def test_redelivery_is_a_duplicate_and_makes_no_second_job(client: TestClient, rdb: redis.Redis) -> None:
    delivery = str(uuid.uuid4())
    first = post(client, labeled(), delivery=delivery)
    again = post(client, labeled(), delivery=delivery)
    assert first.status_code == 202
    assert (again.status_code, again.json()) == (200, {"status": "duplicate", "task_id": delivery})
    assert queued_ids(rdb, queues.CONTROL) == [delivery]
    ttl = rdb.ttl(queues.DEDUPE_PREFIX + delivery)
    assert 7 * 24 * 3600 - 60 < ttl <= 7 * 24 * 3600


@pytest.fixture
def live_url(redis_url: str) -> Iterator[str]:
    """The app served by uvicorn on a loopback port, as `baton serve` runs it."""
    with serve_app(create_app(settings(), redis_url)) as url:
        yield url


def test_concurrent_redeliveries_of_one_id_make_exactly_one_job(live_url: str, rdb: redis.Redis) -> None:
    delivery = str(uuid.uuid4())
    body = json.dumps(labeled()).encode()
    headers = delivery_headers(body, "issues", delivery=delivery)

    def send(_: int) -> int:
        with httpx.Client(timeout=10) as c:
            return c.post(live_url + WEBHOOK_PATH, content=body, headers=headers).status_code

    with ThreadPoolExecutor(max_workers=32) as pool:
        codes = list(pool.map(send, range(64)))
    assert sorted(codes).count(202) == 1
    assert codes.count(200) == 63
    assert all_queued(rdb) == [delivery]
    assert rdb.exists("rq:job:" + delivery)


# -- replays: the signature covers the body, not the delivery id -------------------------------


def test_an_old_body_under_a_fresh_delivery_id_is_a_duplicate_and_writes_nothing(
    client: TestClient, rdb: redis.Redis
) -> None:
    """A captured signed body re-sent with a made-up X-GitHub-Delivery is not a new task."""
    body = json.dumps(fresh()).encode()
    original, replay = str(uuid.uuid4()), str(uuid.uuid4())
    assert _raw(client, body, delivery_headers(body, "issues", original)).status_code == 202
    keys_before = sorted(rdb.keys("*"))

    r = _raw(client, body, delivery_headers(body, "issues", replay))
    assert (r.status_code, r.json()) == (200, {"status": "duplicate", "task_id": original})
    # No half state: not the new id's dedupe key, job, record or history.
    assert sorted(rdb.keys("*")) == keys_before
    assert all_queued(rdb) == [original]
    digest = hashlib.sha256(body).hexdigest()
    assert 7 * 24 * 3600 - 60 < rdb.ttl(queues.BODY_PREFIX + digest) <= 7 * 24 * 3600


def test_a_redelivery_with_its_own_body_is_still_one_duplicate(client: TestClient, rdb: redis.Redis) -> None:
    delivery = str(uuid.uuid4())
    body = json.dumps(fresh()).encode()
    for expected in (202, 200, 200):
        assert _raw(client, body, delivery_headers(body, "issues", delivery)).status_code == expected
    assert all_queued(rdb) == [delivery]
    assert len(rdb.lrange(records.TASK_PREFIX + delivery + records.HISTORY_SUFFIX, 0, -1)) == 1


def test_concurrent_replays_of_one_body_under_fresh_ids_make_exactly_one_job(
    live_url: str, rdb: redis.Redis
) -> None:
    body = json.dumps(fresh()).encode()

    def send(_: int) -> tuple[int, str]:
        delivery = str(uuid.uuid4())
        with httpx.Client(timeout=10) as c:
            headers = delivery_headers(body, "issues", delivery)
            return c.post(live_url + WEBHOOK_PATH, content=body, headers=headers).status_code, delivery

    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(send, range(64)))
    winners = [delivery for code, delivery in answers if code == 202]
    assert len(winners) == 1
    assert sorted(code for code, _ in answers) == [200] * 63 + [202]
    assert all_queued(rdb) == winners
    assert [k.decode() for k in rdb.keys(queues.DEDUPE_PREFIX + "*")] == [queues.DEDUPE_PREFIX + winners[0]]
    record = records.TASK_PREFIX + winners[0]
    assert sorted(k.decode() for k in rdb.keys(records.TASK_PREFIX + "*")) == [
        record,
        record + records.HISTORY_SUFFIX,
    ]


# -- the queued state is on record from the 2xx on ----------------------------------------------

RFC3339_MILLIS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_a_queued_task_is_on_record_when_github_gets_its_2xx(client: TestClient, rdb: redis.Redis) -> None:
    delivery = str(uuid.uuid4())
    before = time.time()
    assert post(client, fresh(), delivery=delivery).status_code == 202
    after = time.time()

    record = {k.decode(): v.decode() for k, v in rdb.hgetall(records.TASK_PREFIX + delivery).items()}
    assert record["state"] == "queued"
    assert record["detail"]
    assert RFC3339_MILLIS.fullmatch(record["updated_at"])
    task = Job.fetch(delivery, connection=rdb, serializer=JSONSerializer).args[0]
    assert record["updated_at"] == task["received_at"]
    history_key = records.TASK_PREFIX + delivery + records.HISTORY_SUFFIX
    history = [orjson.loads(e) for e in rdb.lrange(history_key, 0, -1)]
    assert history == [{"at": record["updated_at"], "from": None, "to": "queued", "detail": record["detail"]}]
    for key in (records.TASK_PREFIX + delivery, history_key):
        assert records.RECORD_TTL_S - 60 < rdb.ttl(key) <= records.RECORD_TTL_S
    score = rdb.zscore(records.REGISTRY_PREFIX + "queued", delivery)
    assert score is not None
    assert before - 0.01 <= score <= after + 0.01
    assert score != int(score) or before == int(before)  # seconds with a fraction, as the worker scores

    # The worker's first move reads this record as it is (same shapes it writes itself).
    assert lifecycle.current(rdb, delivery) is lifecycle.State.QUEUED
    lifecycle.move(rdb, delivery, lifecycle.State.RUNNING, "agent_run started")
    assert rdb.zscore(records.REGISTRY_PREFIX + "queued", delivery) is None
    assert [e["to"] for e in lifecycle.history(rdb, delivery)] == ["queued", "running"]
    assert set(lifecycle.history(rdb, delivery)[0]) == set(lifecycle.history(rdb, delivery)[1])


# -- Redis down ----------------------------------------------------------------------------


def test_redis_down_is_503_within_the_bound_and_nothing_is_claimed(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    with TestClient(create_app(settings(), dead)) as c:
        started = time.monotonic()
        r = post(c, labeled())
        elapsed = time.monotonic() - started
        assert r.status_code == 503
        assert r.json()["error"] == "redis-unavailable"
        assert elapsed <= 2.5
        assert "Connection refused" not in r.text
        ready = c.get("/readyz")
        assert ready.status_code == 503
        # Redis's own error text (host, port, errno) is for the log, not for whoever asks.
        assert ready.json() == {"status": "unavailable", "redis": "not answering"}
    logged = [r for r in caplog.records if r.name == "baton.app" and "readyz" in r.getMessage()]
    assert logged
    dead_port = dead.rsplit(":", 1)[1].split("/", 1)[0]
    assert dead_port in logged[0].error  # type: ignore[attr-defined]


def test_redis_that_accepts_but_never_answers_is_503_within_the_bound() -> None:
    """A black-holed Redis (connection accepted, no reply) must not hang the delivery."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    try:
        with TestClient(create_app(settings(redis_timeout=0.5), url)) as c:
            started = time.monotonic()
            r = post(c, labeled())
            assert r.status_code == 503
            assert time.monotonic() - started < 1.5
            # It may have landed after all: the sender is told to redeliver, which is then `duplicate`.
            assert r.json()["error"] == "redis-timeout"
            assert "may not be stored; redeliver it" in r.json()["message"]
    finally:
        listener.close()


def test_a_write_redis_refuses_is_503_with_its_own_code_and_stores_nothing(
    client: TestClient, rdb: redis.Redis
) -> None:
    rdb.config_set("maxmemory-policy", "noeviction")
    rdb.config_set("maxmemory", "1")  # every write is now refused (OOM)
    try:
        r = post(client, fresh())
    finally:
        rdb.config_set("maxmemory", "0")
    assert r.status_code == 503
    assert r.json()["error"] == "redis-unavailable"
    assert "not stored" in r.json()["message"]
    assert "may not" not in r.json()["message"]
    assert rdb.dbsize() == 0
    assert post(client, fresh()).status_code == 202


# -- operability -----------------------------------------------------------------------------


def test_health_ready_and_metrics(redis_url: str) -> None:
    # Setup mode is about the App's credentials (not the webhook secret): with them, it is off.
    configured = settings(app_id="424242", private_key="-----BEGIN RSA PRIVATE KEY-----\n(unused)\n")
    with TestClient(create_app(configured, redis_url)) as client:
        assert client.get("/healthz").json() == {"status": "ok", "setup_mode": False}
        assert client.get("/readyz").json() == {"status": "ready", "setup_mode": False}
        post(client, labeled())
        post(client, example("issues", "labeled"))
        text = client.get("/metrics").text
    assert 'baton_deliveries_total{outcome="queued"} 1' in text
    assert 'baton_deliveries_total{outcome="ignored"} 1' in text
    assert "baton_enqueue_seconds_count 1" in text
    assert f'baton_queue_depth{{queue="{queues.CONTROL.name}"}} 1' in text
    assert f'baton_queue_depth{{queue="{queues.GATES.name}"}} 0' in text


def test_one_log_line_per_delivery_without_secret_or_body(redis_url: str) -> None:
    stream = io.BytesIO()
    log = DeliveryLog(stream, enabled=True)
    payload = labeled()
    payload["issue"]["body"] = "UNIQUE-BODY-MARKER please leak this"
    delivery = str(uuid.uuid4())
    with TestClient(create_app(settings(), redis_url, log)) as c:
        post(c, payload, delivery=delivery)
        post(c, {"zen": "z"}, event="ping")
        bad = json.dumps(labeled()).encode()
        c.post(
            WEBHOOK_PATH,
            content=bad,
            headers={**delivery_headers(bad, "issues"), "X-Hub-Signature-256": "sha256=" + "0" * 64},
        )
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["outcome"] for line in lines] == ["queued", "ping", "invalid-signature"]
    first = lines[0]
    assert (first["delivery"], first["event"], first["action"], first["status"]) == (
        delivery,
        "issues",
        "labeled",
        202,
    )
    assert first["latency_ms"] >= 0
    assert first["ts"].endswith("Z")
    text = stream.getvalue().decode()
    assert "UNIQUE-BODY-MARKER" not in text
    assert SECRET.decode() not in text
    assert sign(SECRET, bad) not in text


def test_recovers_when_redis_forgets_the_script(client: TestClient, rdb: redis.Redis) -> None:
    """After a Redis restart the script cache is empty: the delivery is still stored once."""
    assert post(client, fresh()).status_code == 202
    rdb.script_flush()
    delivery = str(uuid.uuid4())
    payload = fresh()
    assert post(client, payload, delivery=delivery).status_code == 202
    assert post(client, payload, delivery=delivery).status_code == 200
    assert queued_ids(rdb, queues.CONTROL).count(delivery) == 1


def test_a_dropped_connection_costs_no_delivery(client: TestClient, rdb: redis.Redis) -> None:
    """Redis closed Baton's connection (restart, idle timeout): the next delivery still lands."""
    assert post(client, fresh()).status_code == 202
    killed = rdb.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    r = post(client, fresh())
    assert r.status_code == 202, r.text
    assert len(queued_ids(rdb, queues.CONTROL)) == 2


def test_metrics_show_the_workers_counters_and_the_outbox(client: TestClient, rdb: redis.Redis) -> None:
    rdb.hincrby(records.COUNTERS_KEY, "unauthorised_sender", 3)
    rdb.hincrby(records.COUNTERS_KEY, "publish_gave_up", 1)
    rdb.zadd(records.OUTBOX_KEY, {"t1": 1.0, "t2": 2.0})
    text = client.get("/metrics").text
    assert 'baton_worker_events_total{event="unauthorised_sender"} 3' in text
    assert 'baton_worker_events_total{event="publish_gave_up"} 1' in text
    assert "# TYPE baton_worker_events_total counter" in text
    assert "baton_outbox_pending 2" in text


def test_metrics_with_redis_silent_answer_in_time_and_say_so() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    try:
        with TestClient(create_app(settings(redis_timeout=0.3), url)) as c:
            started = time.monotonic()
            r = c.get("/metrics")
            assert time.monotonic() - started < 1.5
            assert r.status_code == 200
            assert "baton_outbox_pending -1" in r.text
            assert f'baton_queue_depth{{queue="{queues.CONTROL.name}"}} -1' in r.text
            assert "baton_worker_events_total{" not in r.text
            ready = c.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {"status": "unavailable", "redis": "not answering"}
    finally:
        listener.close()


TOKEN = "metrics-token-0123456789abcdef"


def test_metrics_token_is_required_when_set(redis_url: str) -> None:
    with TestClient(create_app(settings(metrics_token=TOKEN), redis_url)) as c:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789abcd"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):  # fmt: skip
            r = c.get("/metrics", headers=headers)
            assert r.status_code == 401, headers
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "baton_" not in r.text
        ok = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert "# TYPE baton_deliveries_total counter" in ok.text
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200


def test_metrics_are_not_on_the_main_port_when_they_have_their_own(redis_url: str) -> None:
    with TestClient(create_app(settings(metrics_port=9091), redis_url)) as c:
        assert c.get("/metrics").status_code == 404
        assert c.get("/healthz").status_code == 200
        assert post(c, fresh()).status_code == 202
