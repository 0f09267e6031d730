"""One status comment per issue, updated in order, however the tasks for that issue race."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from baton.tasks import Task
from emulator import world
from tests.worker.conftest import Stage
from worker import outbox, publish
from worker.github import api
from worker.jobs import execute
from worker.publish import Publication
from worker.rqworker import sweep
from worker.status import MARKER


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


def _publication(stage: Stage, number: int, body: str) -> Publication:
    repo_id = _repo_id(stage)
    return Publication(f"task-{body}", "2026-11-30T00:00:00.000Z", stage.world.installation_id,
                       world.REPO, repo_id, number, f"{MARKER}\n{body}")  # fmt: skip


def _repo_id(stage: Stage) -> int:
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "read")
    return int(api.request(gh, "GET", f"/repos/{world.REPO}")["id"])


def test_a_create_whose_answer_was_lost_is_found_again_not_duplicated(stage: Stage) -> None:
    """The record marks a create before sending it; the next writer sees the mark and looks first."""
    number = stage.issue("Answer lost")
    first = _publication(stage, number, "first")
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    # The first writer marked its create and GitHub made the comment, but the answer never came back.
    stage.rdb.hset(f"{publish.ISSUE_PREFIX}{first.repo_id}:{number}", "creating", first.task_id)
    api.create_comment(gh, world.REPO, number, first.comment or "")
    before = len(stage.admin.requests())
    second = _publication(stage, number, "second")
    publish.write_status(gh, stage.rdb, second, stage.world.app_id)
    [comment] = stage.baton_comments(number)
    assert comment["body"].endswith("second")  # the lost one, edited; not a second comment
    after = stage.admin.requests()[before:]
    assert any(r["method"] == "GET" and r["path"].endswith(f"/issues/{number}/comments") for r in after)


def test_a_new_issues_first_status_is_created_without_listing_comments(stage: Stage) -> None:
    number = stage.issue("Fresh")
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    publish.write_status(gh, stage.rdb, _publication(stage, number, "only"), stage.world.app_id)
    assert len(stage.baton_comments(number)) == 1
    assert stage.requests("GET", f"/issues/{number}/comments") == []


def test_a_slow_writer_keeps_its_short_lock_for_as_long_as_it_writes(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock lapses soon after a dead writer, so a live one renews it: GitHub slower than the lock's
    whole lifetime still leaves the write done and no other writer let in."""
    monkeypatch.setattr(publish, "LOCK_MS", 400)
    monkeypatch.setattr(publish, "LOCK_RENEW_S", 0.1)
    number = stage.issue("Slow GitHub")
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    stage.admin.add_fault(f"/repos/{world.REPO}/issues/{number}/comments", method="POST", kind="latency",
                          latency_ms=1500, count=1)  # fmt: skip
    lock = f"{publish.LOCK_PREFIX}{_repo_id(stage)}:{number}"
    seen: list[bool] = []
    pub = _publication(stage, number, "slow")
    writer = threading.Thread(target=publish.write_status, args=(gh, stage.rdb, pub, stage.world.app_id))
    writer.start()
    while writer.is_alive():
        seen.append(bool(stage.rdb.exists(lock)))
        time.sleep(0.05)
    writer.join()
    assert len(seen) > 10
    assert all(seen[1:-2])  # held the whole time, well past its 400 ms
    assert not stage.rdb.exists(lock)  # and released at the end
    assert [c["body"].endswith("slow") for c in stage.baton_comments(number)] == [True]


def test_a_create_still_in_flight_is_waited_for_not_duplicated(stage: Stage) -> None:
    """A writer's create is on its way (GitHub slow) when its lock lapses, as a dead writer's does.
    The next writer must not list the issue's comments before that create has landed or never will:
    it would find nothing, create a second comment, and the first would land below it, stale."""
    number = stage.issue("Create in flight")
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    path = f"/repos/{world.REPO}/issues/{number}/comments"
    stage.admin.add_fault(path, method="POST", kind="latency", latency_ms=3000, count=1)  # room to act
    first, second = _publication(stage, number, "first"), _publication(stage, number, "second")
    second = Publication(second.task_id, "2026-11-30T00:00:01.000Z", *dataclasses.astuple(second)[2:])
    errors: list[BaseException] = []

    def write_first() -> None:
        try:
            publish.write_status(gh, stage.rdb, first, stage.world.app_id)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write_first)
    writer.start()
    deadline = time.monotonic() + 10
    while not any(f["hits"] for f in stage.admin.faults()):
        assert time.monotonic() < deadline, "the first create never reached GitHub"
        time.sleep(0.02)
    stage.rdb.delete(f"{publish.LOCK_PREFIX}{first.repo_id}:{number}")  # its lock lapsed
    with pytest.raises(publish.Busy, match="may still land"):
        publish.write_status(gh, stage.rdb, second, stage.world.app_id)
    writer.join(timeout=30)
    assert [type(e) for e in errors] == [publish.Busy]  # the first lost its lock, so recorded nothing
    publish.write_status(gh, stage.rdb, second, stage.world.app_id)  # its create has landed: go on
    [comment] = stage.baton_comments(number)
    assert comment["body"].endswith("second")
