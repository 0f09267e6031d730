"""No task stays `running`: jobs that fail or whose worker died end `failed`, on the issue too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from bot import queues
from emulator import world
from tests.worker.conftest import Stage
from worker import context, lifecycle


@pytest.fixture
def worker_env(stage: Stage, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process configured as a `baton worker` for the stage's App."""
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
    registry = StartedJobRegistry(queues.AGENTS.name, connection=stage.rdb, serializer=JSONSerializer)
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
    assert stage.run(delivery)["state"] == "accepted"
    job = Job.fetch(delivery["guid"], connection=stage.rdb, serializer=JSONSerializer)
    from worker.jobs import on_failure

    on_failure(job, stage.rdb, RuntimeError, RuntimeError("late"), None)
    assert lifecycle.current(stage.rdb, delivery["guid"]) == lifecycle.State.ACCEPTED
    assert "Accepted" in stage.baton_comments(number)[0]["body"]
