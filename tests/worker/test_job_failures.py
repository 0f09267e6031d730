"""No task stays `running`: jobs that fail or whose worker died end `failed`, on the issue too."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from baton import queues
from emulator import world
from tests.conftest import EvidenceKeys
from tests.worker.conftest import Stage
from worker import context, lifecycle
from worker.jobs import on_failure


@pytest.fixture
def worker_env(
    stage: Stage, redis_url: str, monkeypatch: pytest.MonkeyPatch, evidence_keys: EvidenceKeys
) -> Iterator[None]:
    """This process configured as a `baton worker` for the stage's App."""
    for name, value in evidence_keys.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("APP_ID", str(stage.world.app_id))
    monkeypatch.setenv("PRIVATE_KEY", stage.world.private_key)
    monkeypatch.setenv("GITHUB_API_URL", stage.server.url)
    context.configure(redis_url)
    context.build.cache_clear()
    yield
    context.configure(None)
    context.build.cache_clear()


def test_a_task_whose_worker_died_ends_failed_and_says_so(stage: Stage, worker_env: None) -> None:
    number = stage.issue()
    delivery = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1]
    task_id = delivery["guid"]
    job = Job.fetch(task_id, connection=stage.rdb, serializer=JSONSerializer)
    assert job.failure_callback is not None  # every Baton job carries the hook

    # A worker took the job, marked the task running, and was SIGKILLed.
    lifecycle.move(stage.rdb, task_id, lifecycle.State.RUNNING, "agent_run started")
    registry = StartedJobRegistry(queues.CONTROL.name, connection=stage.rdb, serializer=JSONSerializer)
    stage.rdb.zadd(registry.key, {f"{task_id}:{uuid.uuid4().hex}": time.time() + 60})  # job_id:execution_id

    # RQ's own cleanup, once the dead worker's heartbeat has expired.
    registry.cleanup(timestamp=time.time() + 3600)

    assert lifecycle.current(stage.rdb, task_id) == lifecycle.State.FAILED
    assert "worker-lost" in (stage.rdb.hget(lifecycle.PREFIX + task_id, "detail") or b"").decode()
    [comment] = stage.baton_comments(number)
    assert "Failed" in comment["body"]
    assert "stopped before it finished" in comment["body"]
    assert Job.fetch(task_id, connection=stage.rdb, serializer=JSONSerializer).get_status() == "failed"


def test_a_task_that_already_ended_is_left_as_it_is(stage: Stage, worker_env: None) -> None:
    number = stage.issue()
    delivery = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1]
    assert stage.run(delivery)["state"] == "queued"
    job = Job.fetch(delivery["guid"], connection=stage.rdb, serializer=JSONSerializer)
    # The admission job's late failure: the run it handed over is the task's job now.
    on_failure(job, stage.rdb, RuntimeError, RuntimeError("late"), None)
    assert lifecycle.current(stage.rdb, delivery["guid"]) == lifecycle.State.QUEUED
    assert "Queued" in stage.baton_comments(number)[0]["body"]


def test_a_job_timeout_is_recorded_as_timed_out_and_said_so(
    stage: Stage, redis_url: str, evidence_keys: EvidenceKeys
) -> None:
    """A real RQ worker stops a job that runs past its timeout: `timed-out`, not internal-error."""
    stage.admin.add_fault(f"/repos/{world.REPO}/collaborators/*/permission", kind="latency",
                          latency_ms=15_000, count=1)  # fmt: skip
    number = stage.issue()
    task_id = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1][
        "guid"
    ]
    stage.rdb.hset(Job.redis_job_namespace_prefix + task_id, "timeout", 2)  # the queue allows minutes
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REDIS_URL": redis_url, "LOG_LEVEL": "WARNING",
           "APP_ID": str(stage.world.app_id), "PRIVATE_KEY": stage.world.private_key,
           "GITHUB_API_URL": stage.server.url, **evidence_keys.env()}  # fmt: skip
    argv = [sys.executable, "-m", "baton", "worker", "--queues", queues.CONTROL.name, "--burst"]
    done = subprocess.run(argv,
                          env=env, capture_output=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert lifecycle.current(stage.rdb, task_id) == lifecycle.State.TIMED_OUT
    assert "timed-out" in (lifecycle.field(stage.rdb, task_id, "detail") or "")
    [comment] = stage.baton_comments(number)
    assert "Timed out" in comment["body"]
    assert "ran longer than its queue allows" in comment["body"]


def test_a_failed_job_whose_task_cannot_be_read_still_ends(stage: Stage, worker_env: None) -> None:
    """A task stored by another Baton version (schema change): the record still reaches a terminal state."""
    number = stage.issue()
    delivery = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1]
    job = Job.fetch(delivery["guid"], connection=stage.rdb, serializer=JSONSerializer)
    job.args[0]["schema"] = 99
    on_failure(job, stage.rdb, AbandonedJobError, AbandonedJobError("lost"), None)
    assert lifecycle.current(stage.rdb, delivery["guid"]) == lifecycle.State.FAILED
    assert "task-undecodable" in (lifecycle.field(stage.rdb, delivery["guid"], "detail") or "")


def test_failure_messages_never_carry_exception_text(stage: Stage) -> None:
    """GitHub's failure text (paths, statuses, library internals) stays in the log."""
    stage.admin.add_fault(f"/repos/{world.REPO}/branches/*", kind="status", status=500, count=50)
    number = stage.issue()
    result = stage.label(number, "claude-code", sender="maria")
    assert result["state"] == "failed"
    assert "500" in result["detail"]  # the record (for operators) keeps the detail
    [comment] = stage.baton_comments(number)
    body = comment["body"].split("<sub>")[0]  # the footer holds the task id, a random GUID
    assert "GitHub did not answer a call Baton needed" in body
    for leak in ("/repos/", "500", "Error", "branches"):
        assert leak not in body, leak
