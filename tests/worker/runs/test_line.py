"""The line of runs waiting for a free run slot: the pure decisions, then the line in real Redis
with the GitHub emulator (admissions and runs in this process, as `baton worker` runs them)."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from rq.job import Job
from rq.queue import Queue
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from baton import keys, queues, records
from baton.errors import BatonError
from baton.tasks import Task
from emulator import world
from tests.worker.conftest import Stage, make_stage
from tests.worker.runs.test_runs_on_github import HELLO, _get, _lock, _pulls, _status
from worker import clock, jobs, lifecycle, requeue, rqworker
from worker.context import Context
from worker.lifecycle import State
from worker.runs import admit, budget, line, report
from worker.runs import cancel as stopping
from worker.runs.budget import Scope, Usage
from worker.status import Status

NOW = datetime(2026, 11, 30, 16, 45, 12, tzinfo=UTC)
REPO = Scope(
    "repo:7", "acme/widgets", max_runs_per_day=3, max_agent_minutes_per_day=None, max_concurrent_runs=1
)
INST = Scope("installation:42", "installation 42", None, None, max_concurrent_runs=2)
CANCEL = stopping.Cancel("2026-11-30T16:00:00Z", "t-9", "maria", "command")


def _use(runs: int = 0, active: int = 0) -> Usage:
    return Usage(runs_today=runs, agent_seconds_today=0.0, active=active)


def _decide(repo: Usage, inst: Usage, **kw: Any) -> line.Decision:
    given: dict[str, Any] = {"waiting": True, "cancelled": None, "lock": "t-1", **kw}
    return line.decide("t-1", scopes=[(REPO, repo), (INST, inst)], now=NOW, **given)


# -- pure -----------------------------------------------------------------------------------------


def test_a_run_that_is_not_waiting_only_leaves_then_a_cancel_then_a_taken_issue_end_it() -> None:
    full = _use(active=1)
    assert _decide(full, _use(), waiting=False, cancelled=CANCEL, lock="t-2").turn is line.Turn.GONE
    assert _decide(full, _use(), cancelled=CANCEL, lock="t-2").turn is line.Turn.CANCEL
    busy = _decide(full, _use(), lock="t-2")
    assert (busy.turn, busy.holder) == (line.Turn.BUSY, "t-2")
    assert _decide(_use(), _use(), lock=None).turn is line.Turn.START  # a lapsed lock is taken again


@pytest.mark.parametrize(
    ("repo", "inst", "turn", "setting"),
    [
        (_use(), _use(), line.Turn.START, None),
        (_use(active=1), _use(), line.Turn.WAIT, "limits.max_concurrent_runs"),
        (_use(), _use(active=2), line.Turn.WAIT, "limits.installation.max_concurrent_runs"),
        (_use(runs=3), _use(), line.Turn.REFUSE, "limits.max_runs_per_day"),
        # a full slot first: the daily budgets are judged when its turn comes
        (_use(runs=3, active=1), _use(), line.Turn.WAIT, "limits.max_concurrent_runs"),
    ],
)
def test_only_a_full_slot_keeps_a_run_waiting(
    repo: Usage, inst: Usage, turn: line.Turn, setting: str | None
) -> None:
    found = _decide(repo, inst)
    assert found.turn is turn
    assert found.verdict is not None
    assert found.verdict.setting == setting


def test_places_in_the_line_oldest_first() -> None:
    before = ["a", "b", "c"]
    assert [line.ahead(before, t) for t in ("a", "b", "c", "d")] == [0, 1, 2, None]
    assert line.moved_places(before, ["a", "b", "c", "d"]) == [("d", 3)]  # one joins: only it is told
    assert line.moved_places(before, ["c"]) == [("c", 0)]  # a started, b cancelled: c moves up
    assert line.moved_places(before, ["b", "c"]) == [("b", 0), ("c", 1)]
    assert line.moved_places(before, before) == []


def test_the_limit_that_holds_the_line_is_named() -> None:
    held = budget.Verdict(False, budget.CONCURRENT_RUNS, "installation 42", 2, 2,
                          setting="limits.installation.max_concurrent_runs")  # fmt: skip
    assert line.why(held) == (
        "limits.installation.max_concurrent_runs",
        "installation 42 has 2 of its 2 concurrent runs in progress.",
    )


def test_an_entry_reads_back_as_it_was_written() -> None:
    task = Task.from_dict(
        {
            "id": "t-1",
            "kind": "agent_run",
            "delivery_id": "t-1",
            "event": "issues",
            "action": "labeled",
            "installation_id": 42,
            "repository": {"id": 7, "full_name": "acme/widgets", "private": True},
            "number": 12,
            "head_sha": None,
            "sender": {"login": "maria", "type": "User"},
            "received_at": "2026-11-30T16:00:00Z",
            "payload_sha256": "0" * 64,
            "agent": "script",
            "command": None,
            "check": None,
            "untrusted": {"title": "Hi"},
            "schema": 1,
        }
    )
    queued = report.queued("t-1", "script", offline=False, context=("policy: x",), notices=("n",))
    entry = line.Entry(task, (REPO, INST), queued)
    assert line.Entry.from_json(entry.to_json()) == entry


def test_a_waiting_status_says_its_place_the_limit_and_how_to_leave() -> None:
    queued = report.queued("t-1", "script", offline=False, context=("policy: x",))
    said = report.waiting(queued, waiting=1, running=1, limit="limits.max_concurrent_runs",
                          why="acme/widgets has 1 of its 1 concurrent runs in progress.")  # fmt: skip
    assert isinstance(said, Status)
    assert said.state is State.QUEUED
    assert said.headline == "⏳ Waiting for a free run slot"
    assert "waiting: 2 ahead (1 run in progress, 1 waiting before it)" in said.summary
    assert said.details[0].startswith("The limit is `limits.max_concurrent_runs`: acme/widgets has 1 of")
    assert "policy: x" in said.details
    assert any("`/baton cancel`" in step for step in said.next_steps)


# -- in real Redis, with the emulator -----------------------------------------------------------------


def _labels(stage: Stage, n: int) -> list[tuple[int, str]]:
    """``n`` issues labelled in turn, each admitted (queued, or waiting in line)."""
    found = []
    for i in range(n):
        number = stage.issue_with(HELLO, title=f"Say hello {i}")
        admitted = stage.label(number, "script", sender="maria")
        assert admitted["state"] == "queued", admitted
        found.append((number, admitted["task_id"]))
    return found


def _line(stage: Stage) -> list[str]:
    repo_id = _repo_id(stage)
    return [records.text(m) for m in stage.rdb.zrange(keys.line(repo_id), 0, -1)]


def _repo_id(stage: Stage) -> int:
    return int(_get(stage, "")["id"])


def _jobs(stage: Stage) -> list[str]:
    return Queue(queues.AGENTS.name, connection=stage.rdb, serializer=JSONSerializer).get_job_ids()


def _task(stage: Stage, task_id: str) -> Task:
    found = line._entry(stage.rdb, task_id)
    assert found is not None
    return found.task


def test_runs_over_the_concurrent_limit_wait_in_line_and_start_one_after_another(one_slot: Stage) -> None:
    stage = one_slot
    (first, a), (second, b), (third, c) = _labels(stage, 3)
    assert _jobs(stage) == [admit.job_id(a, 1)]  # only the first has a run job; the others wait for one
    assert _line(stage) == [b, c]
    assert "waiting: 1 ahead (1 run in progress, 0 waiting before it)" in _status(stage, second)
    assert "waiting: 2 ahead (1 run in progress, 1 waiting before it)" in _status(stage, third)
    assert "`limits.max_concurrent_runs`: acme/widgets has 1 of its 1" in _status(stage, third)
    assert "Queued" in _status(stage, first)
    for task_id in (b, c):  # waiting: queued with no job, holding its issue, counted nowhere
        assert lifecycle.current(stage.rdb, task_id) is State.QUEUED
    assert _lock(stage, second) == b.encode()
    scopes = admit.scopes(_task(stage, b), None)
    assert budget.usage(stage.rdb, scopes[0]).runs_today == 1
    assert budget.usage(stage.rdb, scopes[0]).active == 1
    # A second request on a waiting run's issue is told "busy", as for a running one.
    again = stage.comment(second, "/baton run script", user="ada")
    assert (again["state"], again["detail"]) == ("refused", f"busy: run {b} holds #{second}")

    assert stage.run_agent(a)["state"] == "pr_opened"  # its end starts the next, in the same transaction
    assert _jobs(stage)[-1] == admit.job_id(b, 1)
    assert lifecycle.field(stage.rdb, b, admit.JOB) == admit.job_id(b, 1)
    assert _line(stage) == [c]
    assert "Queued" in _status(stage, second)
    assert "waiting: 1 ahead (1 run in progress, 0 waiting before it)" in _status(stage, third)
    assert budget.usage(stage.rdb, scopes[0]).runs_today == 2

    assert stage.run_agent(b)["state"] == "pr_opened"
    assert _line(stage) == []
    assert stage.run_agent(c)["state"] == "pr_opened"
    for number in (first, second, third):
        assert len(_pulls(stage, number)) == 1
        assert "Pull request opened" in _status(stage, number)
        assert _lock(stage, number) is None
    assert budget.usage(stage.rdb, scopes[0]).active == 0
    assert not stage.rdb.exists(keys.LINES_KEY)


def test_nobody_overtakes_the_line_even_past_a_free_slot(one_slot: Stage) -> None:
    stage = one_slot
    (_, a), (_, b) = _labels(stage, 2)
    scopes = admit.scopes(_task(stage, b), None)
    stage.rdb.zadd(budget.active_key(scopes[0]), {a: 1.0})  # the first run's slot lapsed (a dead worker)
    ((third, c),) = _labels(stage, 1)
    # The newcomer went behind the one waiting, and the transaction it joined in started that one.
    assert lifecycle.field(stage.rdb, b, admit.JOB) == admit.job_id(b, 1)
    assert _jobs(stage)[-1] == admit.job_id(b, 1)
    assert _line(stage) == [c]
    assert "waiting: 1 ahead (1 run in progress, 0 waiting before it)" in _status(stage, third)


def test_a_waiting_run_over_the_days_runs_when_its_turn_comes_is_refused(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    policy = world.REPO_POLICY + "limits:\n  max_concurrent_runs: 1\n  max_runs_per_day: 2\n"
    for stage in make_stage(tmp_path, redis_url, rdb, repo_policy=policy):
        (_, a), (_, b), (third, c) = _labels(stage, 3)  # the third was not refused: it waits
        assert stage.run_agent(a)["state"] == "pr_opened"
        assert stage.run_agent(b)["state"] == "pr_opened"  # its end found the day's two runs used
        assert lifecycle.current(rdb, c) is State.REFUSED
        assert "over-budget at its turn: runs-per-day" in (lifecycle.field(rdb, c, "detail") or "")
        status = _status(stage, third)
        assert "Over budget" in status
        assert "It waited in this repository's line for a free run slot" in status
        assert "2 of its 2 runs today" in status
        assert _lock(stage, third) is None
        assert _line(stage) == []
        assert admit.job_id(c, 1) not in _jobs(stage)


@pytest.mark.parametrize("how", ["command", "unlabeled", "closed"])
def test_a_waiting_run_cancelled_leaves_the_line_and_the_next_moves_up(one_slot: Stage, how: str) -> None:
    stage = one_slot
    (_, a), (second, b), (third, c) = _labels(stage, 3)
    if how == "command":
        stage.comment(second, "/baton cancel", user="maria")
    elif how == "unlabeled":
        stage.run(stage.admin.unlabel(world.REPO, second, "agent:script", sender="maria")["deliveries"][-1])
    else:
        stage.run(stage.admin.close_issue(world.REPO, second, sender="maria")["deliveries"][-1])
    assert lifecycle.current(stage.rdb, b) is State.CANCELLED
    status = _status(stage, second)
    assert "Cancelled" in status
    assert "`maria` cancelled it" in status
    assert "No agent was started" in status
    assert _lock(stage, second) is None
    assert _line(stage) == [c]
    assert "waiting: 1 ahead (1 run in progress, 0 waiting before it)" in _status(stage, third)
    assert stage.run_agent(a)["state"] == "pr_opened"
    assert stage.run_agent(c)["state"] == "pr_opened"  # the next still runs
    assert admit.job_id(b, 1) not in _jobs(stage)


def test_a_cancel_the_line_did_not_hear_of_still_ends_the_run_at_its_turn(one_slot: Stage) -> None:
    stage = one_slot
    (_, a), (second, b), (_, c) = _labels(stage, 3)
    # Recorded, but the cancelling task died before it told the line: the turn sees it.
    stopping.request(stage.rdb, _repo_id(stage), second,
                     stopping.Cancel("2999-01-01T00:00:00Z", "t-x", "maria", "command"))  # fmt: skip
    assert stage.run_agent(a)["state"] == "pr_opened"
    assert lifecycle.current(stage.rdb, b) is State.CANCELLED
    assert "`maria` cancelled it" in _status(stage, second)
    assert _jobs(stage)[-1] == admit.job_id(c, 1)  # and the next started in its place


def _race(redis_url: str, repo_id: int, contenders: int) -> list[int]:
    """``contenders`` workers move the line at once, each on its own connection: how many each started."""
    barrier = threading.Barrier(contenders)
    started: list[int] = []

    def one() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            barrier.wait(timeout=10)
            started.append(len(line.advance(Context(client, None, None), repo_id, publish=False).started))
        finally:
            client.close()

    threads = [threading.Thread(target=one) for _ in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return sorted(started)


def test_two_workers_racing_to_start_the_same_head_start_it_once(one_slot: Stage, redis_url: str) -> None:
    stage = one_slot
    labelled = [t for _, t in _labels(stage, 4)]
    scopes = admit.scopes(_task(stage, labelled[1]), None)
    for running, head in itertools.pairwise(labelled):
        # The running run's slot lapses with no release (its worker died): workers race to fill it.
        stage.rdb.zadd(budget.active_key(scopes[0]), {running: 1.0})
        assert _race(redis_url, _repo_id(stage), 4) == [0, 0, 0, 1]
        assert lifecycle.field(stage.rdb, head, admit.JOB) == admit.job_id(head, 1)
        assert budget.usage(stage.rdb, scopes[0]).active == 1
    ids = _jobs(stage)
    assert ids == [admit.job_id(t, 1) for t in labelled]  # each run's job once, in the line's order
    assert budget.usage(stage.rdb, scopes[0]).runs_today == 4  # each run counted once


def test_the_sweeps_leave_a_waiting_run_alone(one_slot: Stage) -> None:
    stage = one_slot
    (_, _a), (_, b) = _labels(stage, 2)
    later = clock.now(stage.rdb) + lifecycle.LEASE_S + 1
    # No job to put back: twice, LOST_S apart, as the sweep would look.
    assert requeue.lost_jobs(stage.rdb, now=later) == []
    assert requeue.lost_jobs(stage.rdb, now=later + requeue.LOST_S + 1) == []
    # Its admission job, found silent in the started registry (its worker died as RQ finished it).
    started = StartedJobRegistry(queues.CONTROL.name, connection=stage.rdb, serializer=JSONSerializer)
    stage.rdb.zadd(started.key, {f"{b}:an-execution": 1.0})
    assert [t for t, _, _ in rqworker._never_started(stage.ctx)] == [b]
    assert rqworker.run(stage.ctx, [rqworker.SWEEP], publish=False) == (0, 0)
    lost = BatonError("worker-lost", "its worker stopped")
    assert not jobs.end_abnormally(stage.ctx, b, _task(stage, b).to_dict(), lost, job_id=b)
    assert lifecycle.current(stage.rdb, b) is State.QUEUED
    assert _line(stage) == [b]


def test_the_line_duty_starts_a_head_whose_slot_freed_in_another_repository(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    org = world.ORG_POLICY.replace("limits:\n  max_concurrent_runs: 8\n",
                                   "limits:\n  installation: {max_concurrent_runs: 1}\n")  # fmt: skip
    assert org != world.ORG_POLICY
    for stage in make_stage(tmp_path, redis_url, rdb, org_policy=org):
        gadgets = f"{world.OWNER}/gadgets"
        policy = "version: 1\nagents:\n  script:\n    adapter: script\n    tools: [read_repo, edit_files]\n"
        stage.admin.create_repo(world.OWNER, "gadgets", private=True,
                                files={"README.md": "# gadgets\n", ".github/baton.yml": policy})  # fmt: skip
        stage.admin.set_role(gadgets, "maria", "maintain")
        ((_, a),) = _labels(stage, 1)  # widgets takes the installation's one slot
        number = int(stage.admin.create_issue(gadgets, title="Hi", user="maria", body=_recipe())["number"])
        waits = stage.run(
            stage.admin.label(gadgets, number, ["agent:script"], sender="maria")["deliveries"][-1]
        )
        assert waits["state"] == "queued"
        [comment] = [
            c for c in stage.admin.comments() if c["repository"] == gadgets and c["issue_number"] == number
        ]
        assert "`limits.installation.max_concurrent_runs`: installation" in comment["body"]
        assert stage.run_agent(a)["state"] == "pr_opened"  # widgets' line is empty: gadgets' still waits
        assert lifecycle.field(rdb, waits["task_id"], admit.JOB) == admit.job_id(waits["task_id"], 1)
        assert admit.job_id(waits["task_id"], 1) not in _jobs(stage)
        rqworker.run(stage.ctx, [rqworker.LINE], publish=True)  # the periodic duty, once
        assert _jobs(stage)[-1] == admit.job_id(waits["task_id"], 1)
        [comment] = [
            c for c in stage.admin.comments() if c["repository"] == gadgets and c["issue_number"] == number
        ]
        assert "Queued" in comment["body"]
        assert not rdb.exists(keys.LINES_KEY)


def _recipe() -> str:
    return f"```baton-recipe\n{orjson.dumps(HELLO).decode()}\n```\n"


def test_the_line_duty_frees_a_slot_a_run_that_ended_still_holds(one_slot: Stage) -> None:
    stage = one_slot
    (_, a), (_, b) = _labels(stage, 2)
    # The first run ended, and its worker died before its release: its slot is held for hours.
    lifecycle.move(stage.rdb, a, State.RUNNING, "run started")
    lifecycle.move(stage.rdb, a, State.FAILED, "its worker died as it ended")
    assert line.advance(stage.ctx, _repo_id(stage)).started == []  # a plain move finds the slot full
    rqworker.run(stage.ctx, [rqworker.LINE], publish=True)
    assert _jobs(stage)[-1] == admit.job_id(b, 1)
    assert budget.usage(stage.rdb, admit.scopes(_task_of_job(stage, b), None)[0]).active == 1


def _task_of_job(stage: Stage, task_id: str) -> Task:
    job = Job.fetch(admit.job_id(task_id, 1), connection=stage.rdb, serializer=JSONSerializer)
    return Task.from_dict(job.args[0])


def test_a_waiting_run_whose_issue_another_run_took_is_told_busy_at_its_turn(one_slot: Stage) -> None:
    stage = one_slot
    (_, a), (second, b), (_, c) = _labels(stage, 3)
    # Its lock lapsed while it waited (hours), and another run took the issue meanwhile.
    stage.rdb.set(admit.lock_key(_task(stage, b)), "another-run")
    assert stage.run_agent(a)["state"] == "pr_opened"
    assert lifecycle.current(stage.rdb, b) is State.REFUSED
    assert "A run is already in progress" in _status(stage, second)
    assert _lock(stage, second) == b"another-run"  # not this run's to free
    assert _jobs(stage)[-1] == admit.job_id(c, 1)
