"""Baton on a managed Redis: a label goes to its finished task and status comment when REDIS_URL names
an account that may not run CONFIG, CLIENT, SCRIPT FLUSH and the rest of what providers refuse
(``tests/managed_redis.py`` says which, and on whose word). Baton's endpoint and a real `baton worker`
(the supervisor and its three processes) talk only through that account."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq.queue import Queue
from rq.serializers import JSONSerializer

from baton import queues
from emulator import world
from tests.conftest import EvidenceKeys
from tests.managed_redis import ManagedRedis, managed_redis
from tests.worker.conftest import Stage, make_stage
from tests.worker.runs.test_runs_on_github import HELLO, _pulls, _status
from worker import lifecycle, rqworker

#: What a worker may be refused and carry on without: naming its connections and reading their
#: addresses (RQ does, for `rq info`), both courtesies to operators.
COURTESIES = {"client|setname", "client|list", "client|setinfo"}
POOLS = ["baton-agents", "baton-control", "baton-gates"]


@pytest.fixture(scope="module", params=[False, True], ids=["info-allowed", "info-refused"])
def managed(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ManagedRedis]:
    """Every provider above answers INFO; refused, RQ takes its jobs with BLPOP rather than BLMOVE
    (it reads the server's version there), a path Baton's sweep covers too (worker.requeue)."""
    with managed_redis(tmp_path_factory.mktemp("managed-redis"), refuse_info=request.param) as server:
        yield server


@pytest.fixture
def managed_stage(tmp_path: Path, managed: ManagedRedis) -> Iterator[Stage]:
    managed.reset()
    client = redis.Redis.from_url(managed.url)  # the test reads through the same account
    try:
        yield from make_stage(tmp_path, managed.url, client)
    finally:
        client.close()


def _worker(stage: Stage, url: str, tmp_path: Path, keys: EvidenceKeys) -> subprocess.Popen[bytes]:
    """`baton worker` as deployed: no --queues, so the supervisor starts one process per pool."""
    env = {
        **keys.env(),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "REDIS_URL": url,
        "APP_ID": str(stage.world.app_id),
        "PRIVATE_KEY": stage.world.private_key,
        "GITHUB_API_URL": stage.server.url,
        "BATON_DATA_DIR": str(tmp_path / "data-worker"),
        "BATON_AGENT_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
    }
    with (tmp_path / "worker.log").open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "baton", "worker"], env=env, stdout=out, stderr=out)


def test_a_label_becomes_a_pull_request_on_a_redis_that_refuses_config_client_and_script_flush(
    managed_stage: Stage, managed: ManagedRedis, tmp_path: Path, evidence_keys: EvidenceKeys
) -> None:
    stage = managed_stage
    worker = _worker(stage, managed.url, tmp_path, evidence_keys)
    log = tmp_path / "worker.log"
    try:
        number = stage.issue_with(HELLO)
        delivery = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1]
        assert delivery["status_code"] == 202, delivery  # the endpoint stored it through the account
        task_id = str(delivery["guid"])
        deadline = time.monotonic() + 120
        while lifecycle.current(stage.rdb, task_id) not in lifecycle.TERMINAL:
            assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.PR_OPENED, log.read_text()[-3000:]
        [pr] = _pulls(stage, number)
        assert f"Fixes #{number}" in pr["body"]
        assert "Pull request opened" in _status(stage, number)
        # Every pool registered with RQ, though none could name its connection.
        while len(stage.rdb.smembers("rq:workers")) < len(POOLS) and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = [stage.rdb.hgetall(key) for key in stage.rdb.smembers("rq:workers")]
        assert sorted(w[b"queues"].decode() for w in workers) == POOLS
        assert {w[b"ip_address"] for w in workers} == {b"unknown"}
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    out = log.read_text(errors="replace")
    assert code == 0, out[-3000:]
    refused = managed.refused()
    assert "client|setname" in refused  # the account was refused something: the test is not vacuous
    assert refused <= COURTESIES | {"info"}, refused  # and nothing Baton needs
    assert ("info" in refused) is managed.refuses_info  # RQ asked, and went on without it
    assert "Warning" not in out, out[-3000:]  # RQ's warnings.warn about CLIENT, once per process
    assert "Traceback" not in out, out[-3000:]


def test_a_worker_refused_client_starts_without_a_warning(managed: ManagedRedis, redis_url: str) -> None:
    """RQ names its connection and reads its address back; refused, it warned (an error here, where
    warnings are errors) from every worker process. The address is "unknown", and that is all."""
    managed.reset()
    for url, address in ((managed.url, "unknown"), (redis_url, "127.0.0.1:")):
        client = redis.Redis.from_url(url)
        try:
            queue = Queue(queues.CONTROL.name, connection=client, serializer=JSONSerializer)
            worker = rqworker.InProcessWorker([queue], connection=client, serializer=JSONSerializer)
            assert worker.ip_address.startswith(address), worker.ip_address
        finally:
            client.close()
    assert managed.refused() - {"info"} == {"client|setname"}
