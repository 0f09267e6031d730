"""The job function every Baton queue runs: ``run_task(task)``.

``plan(task)`` is the decision: a pure function of the task. ``run_task`` is
the edge: it reads the task RQ handed over, calls ``plan``, and records the
outcome in Redis. Later issues give each kind real work (authorise, load
policy, decide, run, gate, report); the shape stays: decide purely, then act.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from rq import get_current_job

from bot.tasks import Kind, Task

RECORD_PREFIX = "baton:task:"
#: Task records outlive the RQ job hash so operators can look a delivery up later.
RECORD_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Outcome:
    task_id: str
    kind: str
    state: str
    summary: str

    def to_dict(self) -> dict[str, str]:
        return {"task_id": self.task_id, "kind": self.kind, "state": self.state, "summary": self.summary}


def _where(task: Task) -> str:
    repo = task.repository.full_name if task.repository else f"installation {task.installation_id}"
    return f"{repo}#{task.number}" if task.number is not None else repo


def plan(task: Task) -> Outcome:
    """What Baton does with a task. Pure: same task, same outcome, same bytes."""
    where = _where(task)
    summaries: dict[Kind, str] = {
        Kind.AGENT_RUN: f"agent run of {task.agent!r} for {where} recorded",
        Kind.CANCEL: f"cancel for {where} recorded",
        Kind.COMMAND: f"command {task.command.name if task.command else '?'} for {where} recorded",
        Kind.MERGE_GATE: f"merge gate for {where} at {task.head_sha} recorded",
        Kind.GATE_RERUN: f"merge-gate rerun for {where} at {task.head_sha} recorded",
        Kind.CHECK_ACTION: f"check-run action for {where} recorded",
        Kind.INSTALLATION_SYNC: f"installation sync for {where} recorded",
    }
    return Outcome(task_id=task.id, kind=task.kind.value, state="done", summary=summaries[task.kind])


def record(connection: redis.Redis, outcome: Outcome) -> None:
    key = RECORD_PREFIX + outcome.task_id
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    with connection.pipeline() as pipe:
        pipe.hset(key, mapping={**outcome.to_dict(), "finished_at": stamp})  # type: ignore[dict-item]
        pipe.expire(key, RECORD_TTL_S)
        pipe.execute()


def run_task(data: dict[str, Any]) -> dict[str, str]:
    """RQ entry point (named in bot.queues.JOB_FUNCTION)."""
    task = Task.from_dict(data)
    outcome = plan(task)
    job = get_current_job()
    if job is None:
        raise RuntimeError("run_task runs only inside an RQ worker")
    record(job.connection, outcome)
    return outcome.to_dict()
