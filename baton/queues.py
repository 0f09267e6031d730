"""Baton's RQ queues and which task kind goes where.

Agent runs take minutes; merge gates and control tasks (cancel, commands,
installation sync, and the admission of a run) take seconds. They get separate
queues, served by separate worker processes, so a long agent run can never
delay a gate, a cancel, or the answer "a run is already in progress".

A control job's GitHub calls share one deadline (``worker.github.deadline``), so a
GitHub that takes connections and never answers ends the task ``failed`` within it
rather than after each call has spent its own retries; RQ's job timeout stays
above what the deadline allows (each phase of the last request may take what was
left), a backstop for what the deadline does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass

from baton import keys
from baton.tasks import Kind

#: The job function every queue runs; the worker package, imported by name only.
JOB_FUNCTION = "worker.jobs.run_task"
#: What RQ calls when a job fails or is abandoned by a dead worker, so no task stays "running".
FAILURE_CALLBACK = "worker.jobs.on_failure"
#: The agents queue's job: the run itself, handed over by the admission step on the control queue.
RUN_FUNCTION = "worker.jobs.run_agent"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    #: RQ kills a job that runs longer than this (seconds).
    job_timeout: int
    #: Seconds a job's GitHub calls may take in all, or None: each call has only its own bound.
    github_deadline_s: float | None = None


AGENTS = QueueSpec("baton-agents", job_timeout=3 * 3600)
GATES = QueueSpec("baton-gates", job_timeout=3600)
CONTROL = QueueSpec("baton-control", job_timeout=120, github_deadline_s=30.0)
ALL: tuple[QueueSpec, ...] = (AGENTS, GATES, CONTROL)
BY_NAME = {q.name: q for q in ALL}

QUEUE_FOR: dict[Kind, QueueSpec] = {
    # Admission (who, policy, gate, budget, lock) is quick; the run it admits goes to AGENTS.
    Kind.AGENT_RUN: CONTROL,
    Kind.MERGE_GATE: GATES,
    Kind.GATE_RERUN: GATES,
    Kind.CHECK_ACTION: GATES,
    Kind.CANCEL: CONTROL,
    Kind.COMMAND: CONTROL,
    Kind.INSTALLATION_SYNC: CONTROL,
    # Like a label: admitted here, run on AGENTS.
    Kind.ITERATE: CONTROL,
}

#: How long a finished job's result stays readable, and a failed one's record.
RESULT_TTL_S = 7 * 24 * 3600
FAILURE_TTL_S = 30 * 24 * 3600
#: GitHub redeliveries reuse the delivery id; we remember ids this long.
DEDUPE_TTL_S = 7 * 24 * 3600
DEDUPE_PREFIX = keys.DELIVERY_PREFIX
#: + the body's sha256: the signature covers the body but not the delivery id, so a body is
#: stored once too (same retention); a replay under a fresh id is a duplicate.
BODY_PREFIX = keys.PAYLOAD_PREFIX
