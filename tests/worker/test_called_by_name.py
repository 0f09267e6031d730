"""`@baton <instruction>` on an issue: the policy's default agent runs, for those who may trigger it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage, make_stage
from worker import lifecycle
from worker.runs import admit

HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}
WITH_DEFAULT = world.ORG_POLICY.replace(
    "  min_permission: write\n", "  min_permission: write\n  default_agent: script\n"
)


@pytest.fixture
def called(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    assert WITH_DEFAULT != world.ORG_POLICY
    yield from make_stage(tmp_path, redis_url, rdb, org_policy=WITH_DEFAULT)


def test_a_writer_calling_baton_by_name_runs_the_default_agent(called: Stage) -> None:
    number = called.issue_with(HELLO)
    result = called.comment(number, "@baton please say hello", user="maria")
    assert result["state"] == "queued", result  # admitted, handed to the agents queue
    task_id = result["task_id"]
    assert lifecycle.field(called.rdb, task_id, admit.AGENT) == "script"
    ran = called.run_agent(task_id)
    assert ran["state"] == "pr_opened", ran


def test_a_reader_calling_baton_by_name_gets_nothing(called: Stage) -> None:
    number = called.issue_with(HELLO)
    result = called.comment(number, "@baton please say hello", user="rita")  # a reader
    assert result["state"] == "refused"
    assert called.baton_comments(number) == []


def test_without_a_default_agent_the_call_is_answered_with_how_to_name_one(stage: Stage) -> None:
    number = stage.issue()
    result = stage.comment(number, "@baton fix the spinner", user="maria")
    assert result["state"] == "done"
    [comment] = stage.baton_comments(number)
    assert "names no `trigger.default_agent`" in comment["body"]
    assert "/baton run <name>" in comment["body"]
