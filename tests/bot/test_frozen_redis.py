"""A frozen Redis (a real redis-server stopped with SIGSTOP: it holds its connections and never
answers) costs a webhook delivery at most ``BATON_REDIS_TIMEOUT``: 503, so GitHub's redelivery
brings it back once Redis answers again, as one task.

Unlike a listening socket that never replies (``test_webhook_endpoint``), the server here has
already answered on the connection the endpoint keeps, and it takes what is sent to it while
stopped: the write it held may land once it runs again, which the redelivery must find.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import redis

from baton import queues
from baton.redis_server import EmbeddedRedis
from baton.settings import Settings
from bot.app import WEBHOOK_PATH, create_app
from tests.conftest import SECRET, delivery_headers, labeled, serve_app

#: BATON_REDIS_TIMEOUT for the endpoint under test.
TIMEOUT = 0.5
#: What a loaded machine may add to it (the HTTP round trip on loopback, the event loop's turn).
SLACK = 1.0


def _post(http: httpx.Client, delivery: str, issue: int) -> httpx.Response:
    payload = labeled()
    payload["issue"]["number"] = issue
    body = json.dumps(payload).encode()
    return http.post(WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues", delivery))


def test_a_stopped_redis_is_503_within_the_timeout_and_its_redelivery_is_one_task(tmp_path: Path) -> None:
    settings = Settings(webhook_secrets=(SECRET,), redis_timeout=TIMEOUT)
    with EmbeddedRedis(data_dir=tmp_path / "redis", durable=False) as server:
        assert server.pid is not None
        rdb = redis.Redis.from_url(server.url)
        with (
            serve_app(create_app(settings, server.url)) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            warm = _post(http, str(uuid.uuid4()), 1)  # the endpoint's connection to Redis, open
            assert warm.status_code == 202, warm.text
            frozen = str(uuid.uuid4())
            os.kill(server.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                answer = _post(http, frozen, 2)
                took = time.monotonic() - started
                ready = http.get("/readyz")
                ready_took = time.monotonic() - started - took
            finally:
                os.kill(server.pid, signal.SIGCONT)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "redis-timeout"
            assert "redeliver" in answer.json()["message"]
            assert TIMEOUT * 0.9 <= took < TIMEOUT + SLACK
            assert ready.status_code == 503
            assert ready_took < TIMEOUT + SLACK

            # GitHub's redelivery, once Redis runs again: one task, whether or not the held write landed.
            deadline = time.monotonic() + 10
            again = _post(http, frozen, 2)
            while again.status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.1)
                again = _post(http, frozen, 2)
            assert again.status_code in (200, 202), again.text
            assert again.json()["status"] in ("queued", "duplicate")
            assert again.json()["task_id"] == frozen
            jobs = [j.decode() for j in rdb.lrange("rq:queue:" + queues.CONTROL.name, 0, -1)]
            assert jobs.count(frozen) == 1
            assert rdb.exists(queues.DEDUPE_PREFIX + frozen)
        rdb.close()
