"""Agent runs on GitHub, judged from the emulator's state: label -> box -> branch -> one PR.

Every run here is real: the admission on the control queue, the run job of the
agents queue, Baton's script agent in the bubblewrap box, the mirror fetched and
the branch pushed over git smart HTTP with installation tokens, the PR and its
check runs through the REST API.
"""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer

from baton import queues, records
from baton.errors import BatonError
from emulator import world
from tests.worker.conftest import Stage, make_stage
from worker import jobs, lifecycle
from worker.github import api
from worker.runs import admit, report

HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}


def _get(stage: Stage, path: str, **params: Any) -> Any:
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "pull-request")
    return api.request(gh, "GET", f"/repos/{world.REPO}{path}", params=params or None)


def _pulls(stage: Stage, number: int) -> list[dict[str, Any]]:
    return list(_get(stage, "/pulls", head=f"{world.OWNER}:baton/issue-{number}", state="all"))


def _git(stage: Stage, *args: str) -> str:
    """Read the emulator's own bare repository: what GitHub holds, not what Baton says."""
    bare = stage.server.directory / "repos" / f"{world.REPO}.git"
    return subprocess.run(["git", "-C", str(bare), *args], capture_output=True, text=True, check=True).stdout


def _branch(stage: Stage, number: int) -> str | None:
    out = subprocess.run(
        [
            "git",
            "-C",
            str(stage.server.directory / "repos" / f"{world.REPO}.git"),
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/baton/issue-{number}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


def _status(stage: Stage, number: int) -> str:
    [comment] = stage.baton_comments(number)
    return str(comment["body"])


def _lock(stage: Stage, number: int) -> bytes | None:
    repo_id = _get(stage, "")["id"]
    value = stage.rdb.get(f"{records.RUN_LOCK_PREFIX}{repo_id}:{number}")
    return value if isinstance(value, bytes) else None


def _labelled_run(stage: Stage, recipe: dict[str, Any], who: str = "maria") -> tuple[int, str]:
    number = stage.issue_with(recipe)
    admitted = stage.label(number, "script", sender=who)
    assert admitted["state"] == "queued", admitted
    return number, admitted["task_id"]


def test_a_label_becomes_one_pull_request_with_the_agents_change(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    assert "Queued" in _status(stage, number)
    assert stage.run_agent(task_id)["state"] == "pr_opened"

    [pr] = _pulls(stage, number)
    assert pr["state"] == "open"
    assert pr["head"]["ref"] == f"baton/issue-{number}"
    assert pr["base"]["ref"] == "main"
    assert f"Fixes #{number}" in pr["body"]
    assert pr["title"].startswith("Say hello")
    head = pr["head"]["sha"]
    assert _git(stage, "show", f"{head}:hello.txt") == "hi\n"

    author, email, message = _git(stage, "log", "-1", "--format=%an%x00%ae%x00%B", head).split("\x00")
    assert author == "baton[bot]"
    assert email.endswith("+baton[bot]@users.noreply.github.com")
    assert report.trailer(message) == task_id
    assert "Co-authored-by: maria <" in message
    assert "+maria@users.noreply.github.com>" in message
    [commit] = _get(stage, f"/pulls/{pr['number']}/commits")  # as a reviewer sees it on GitHub
    assert commit["author"]["login"] == "baton[bot]"
    assert commit["author"]["type"] == "Bot"
    parents = _git(stage, "log", "-1", "--format=%P", head).split()
    assert parents == [stage.world.head_sha]  # on today's default branch, nothing else

    runs = {r["name"]: r for r in _get(stage, f"/commits/{head}/check-runs")["check_runs"]}
    assert runs[report.TRIFECTA_CHECK]["status"] == "completed"
    assert runs[report.TRIFECTA_CHECK]["conclusion"] == "success"
    assert runs[report.AGENT_CHECK]["conclusion"] == "success"
    assert "ALLOWED" in runs[report.TRIFECTA_CHECK]["output"]["title"]

    status = _status(stage, number)
    assert "Pull request opened" in status
    assert f"/pull/{pr['number']}" in status
    assert _lock(stage, number) is None  # the issue is free again
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.PR_OPENED


def test_a_retry_adds_a_commit_to_the_same_pull_request(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    stage.run_agent(task_id)
    [first] = _pulls(stage, number)
    retry = stage.comment(number, "/baton retry", user="ada")
    assert retry["state"] == "queued"
    assert stage.run_agent(retry["task_id"])["state"] == "pr_opened"
    [again] = _pulls(stage, number)  # still one pull request
    assert again["number"] == first["number"]
    new_head = again["head"]["sha"]
    assert new_head != first["head"]["sha"]
    assert _git(stage, "log", "-1", "--format=%P", new_head).split()[0] == first["head"]["sha"]  # not forced
    assert "Pull request updated" in _status(stage, number)
    assert report.trailer(_git(stage, "log", "-1", "--format=%B", new_head)) == retry["task_id"]


def test_a_retry_on_an_unchanged_base_says_that_nothing_changed(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    stage.run_agent(task_id)
    retry = stage.comment(number, "/baton retry", user="ada")
    assert stage.run_agent(retry["task_id"])["state"] == "pr_opened"
    [pr] = _pulls(stage, number)
    head = pr["head"]["sha"]
    assert _git(stage, "rev-parse", f"{head}^{{tree}}") == _git(stage, "rev-parse", f"{head}^1^{{tree}}")
    status = _status(stage, number)
    assert "nothing changed" in status
    assert "same files as before" in status


def test_changes_to_a_workflow_are_refused_and_nothing_is_pushed(stage: Stage) -> None:
    recipe = {"steps": [{"op": "write", "path": ".github/workflows/ci.yml", "content": "on: push\n"}]}
    number, task_id = _labelled_run(stage, recipe)
    assert stage.run_agent(task_id)["state"] == "failed"
    assert _branch(stage, number) is None
    assert _pulls(stage, number) == []
    status = _status(stage, number)
    assert "Changes refused" in status
    assert "`.github/workflows/ci.yml`" in status


def test_an_agent_that_changes_nothing_opens_no_pull_request(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, {"steps": [{"op": "print", "text": "nothing to do"}]})
    assert stage.run_agent(task_id)["state"] == "done"
    assert _branch(stage, number) is None
    assert "no changes" in _status(stage, number)


def test_a_failing_agent_shows_its_last_lines_with_secrets_redacted(stage: Stage) -> None:
    leaked = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    recipe = {
        "steps": [
            {"op": "print", "text": f"token={leaked}\n", "stream": "stderr"},
            {"op": "print", "text": "giving up\n", "stream": "stderr"},
            {"op": "exit", "code": 1},
        ]
    }
    number, task_id = _labelled_run(stage, recipe)
    assert stage.run_agent(task_id)["state"] == "failed"
    status = _status(stage, number)
    assert "giving up" in status
    assert leaked not in status
    assert "[redacted]" in status
    assert _branch(stage, number) is None


def test_a_second_request_while_a_run_holds_the_issue_starts_nothing(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    second = stage.comment(number, "/baton run script", user="ada")
    assert second["state"] == "refused"
    assert "busy" in second["detail"]
    status = _status(stage, number)
    assert "A run is already in progress" in status
    assert task_id in status
    agents = Queue(queues.AGENTS.name, connection=stage.rdb)
    assert len(agents.get_job_ids()) == 1  # one run job, the first request's
    # The run's own outcome still replaces the note, though the note's request came later.
    assert stage.run_agent(task_id)["state"] == "pr_opened"
    assert "Pull request opened" in _status(stage, number)


def test_a_run_over_its_daily_budget_is_refused_with_the_counts(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    policy = world.REPO_POLICY + "limits:\n  max_runs_per_day: 1\n"
    for stage in make_stage(tmp_path, redis_url, rdb, repo_policy=policy):
        _, first = _labelled_run(stage, HELLO)
        assert stage.run_agent(first)["state"] == "pr_opened"
        number = stage.issue_with(HELLO)
        refused = stage.label(number, "script", sender="maria")
        assert refused["state"] == "refused"
        assert "over-budget" in refused["detail"]
        status = _status(stage, number)
        assert "Over budget" in status
        assert "1 of its 1 runs today" in status
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d")
        assert f"{tomorrow}T00:00:00Z" in status
        assert _branch(stage, number) is None


def test_cancel_stops_a_running_agent_and_pushes_nothing(stage: Stage) -> None:
    recipe = {"steps": [{"op": "sleep", "seconds": 120}, *HELLO["steps"]]}
    number, task_id = _labelled_run(stage, recipe)
    outcome: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcome.update(stage.run_agent(task_id)))
    runner.start()
    deadline = time.monotonic() + 30
    while "Working on it" not in _status(stage, number) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the agent is in its box, asleep
    asked = time.monotonic()
    assert stage.comment(number, "/baton cancel", user="maria")["state"] == "done"
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert time.monotonic() - asked < 10  # seconds, not the agent's two minutes
    assert outcome["state"] == "cancelled"
    status = _status(stage, number)
    assert "Cancelled" in status
    assert "`maria` cancelled it" in status
    assert _branch(stage, number) is None
    assert _lock(stage, number) is None


def test_closing_the_issue_cancels_a_queued_run_before_it_starts(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    closed = stage.admin.close_issue(world.REPO, number, sender="maria")["deliveries"][-1]
    assert stage.run(closed)["state"] == "done"
    assert stage.run_agent(task_id)["state"] == "cancelled"
    status = _status(stage, number)
    assert "closing the issue" in status
    assert "No agent was started and no box was made; nothing was run or pushed." in status
    # Nothing ran, so there is no adapter, decision, box or time to speak of, and none is made up.
    for said in ("None", "version unknown", "Decision `sha256:…`", "Agent time unknown", "Box:"):
        assert said not in status, status
    assert _branch(stage, number) is None


def test_a_branch_with_someone_elses_commit_is_never_pushed_over(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    stage.run_agent(task_id)
    [pr] = _pulls(stage, number)
    theirs = stage.admin.push_to_pull(world.REPO, pr["number"], {"notes.txt": "mine\n"}, sender="wes")["sha"]
    retry = stage.comment(number, "/baton retry", user="maria")
    assert stage.run_agent(retry["task_id"])["state"] == "failed"
    assert _branch(stage, number) == theirs  # untouched
    assert "Baton did not make" in _status(stage, number)


@pytest.mark.parametrize("who", ["tia", "rita"])
def test_below_write_nothing_is_queued(stage: Stage, who: str) -> None:
    number = stage.issue_with(HELLO)
    assert stage.label(number, "script", sender=who)["state"] == "refused"
    assert Queue(queues.AGENTS.name, connection=stage.rdb).get_job_ids() == []


def test_a_run_whose_worker_is_lost_is_retried_once_then_fails_and_frees_the_issue(stage: Stage) -> None:
    number, task_id = _labelled_run(stage, HELLO)
    first_job = Job.fetch(f"{task_id}_run1", connection=stage.rdb, serializer=JSONSerializer)
    lost = BatonError("worker-lost", "the task's lease ran out")

    lifecycle.move(stage.rdb, task_id, lifecycle.State.RUNNING, "run started")  # a worker took it, then died
    assert not jobs.end_abnormally(stage.ctx, task_id, first_job.args[0], lost)  # retried, not ended
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.QUEUED
    assert lifecycle.field(stage.rdb, task_id, admit.JOB) == f"{task_id}_run2"
    assert Queue(queues.AGENTS.name, connection=stage.rdb).get_job_ids()[-1] == f"{task_id}_run2"
    # RQ's own cleanup of the dead first job, later: the task has moved on, nothing changes.
    jobs.on_failure(first_job, stage.rdb, AbandonedJobError)
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.QUEUED

    lifecycle.move(stage.rdb, task_id, lifecycle.State.RUNNING, "run started again")
    assert jobs.end_abnormally(stage.ctx, task_id, first_job.args[0], lost)
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.FAILED
    assert "stopped before it finished" in _status(stage, number)
    assert _lock(stage, number) is None
