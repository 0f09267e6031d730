"""One status comment per issue, updated in order, however the tasks for that issue race."""

from __future__ import annotations

import threading
import time
from typing import Any

from bot.tasks import Task
from emulator import world
from tests.worker.conftest import Stage
from worker import outbox
from worker.jobs import execute
from worker.rqworker import sweep


def _two_deliveries(stage: Stage, number: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A label (older) and a `/baton run` (newer) on one issue, as GitHub would send them."""
    older = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1]
    newer = stage.admin.comment(world.REPO, number, "/baton run researcher", user="wes")["deliveries"][-1]
    return older, newer


def test_an_older_task_finishing_last_does_not_overwrite_a_newer_one(stage: Stage) -> None:
    number = stage.issue()
    older, newer = _two_deliveries(stage, number)
    assert stage.run(newer)["state"] == "denied"
    assert stage.run(older)["state"] == "queued"
    [comment] = stage.baton_comments(number)
    assert "Not started: the capability gate denied this run" in comment["body"]
    assert newer["guid"] in comment["body"]


def _race(stage: Stage, tasks: list[Task]) -> None:
    """Run the tasks in threads released together, as two workers would take them."""
    start = threading.Barrier(len(tasks))
    errors: list[BaseException] = []

    def work(task: Task) -> None:
        start.wait(timeout=10)
        try:
            execute(stage.ctx, task)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors


def test_two_workers_racing_on_one_issue_leave_one_comment_showing_the_newest(stage: Stage) -> None:
    for _ in range(4):
        number = stage.issue()
        older, newer = _two_deliveries(stage, number)
        _race(stage, [stage.task(older), stage.task(newer)])
        for _ in range(20):  # a task that found the issue busy tries again a second later
            if not outbox.due(stage.rdb, now=float("inf")):
                break
            time.sleep(0.5)
            sweep(stage.ctx, publish=True)
        [comment] = stage.baton_comments(number)
        assert newer["guid"] in comment["body"], comment["body"]
