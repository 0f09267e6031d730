"""Admitting an allowed run (control queue): the issue's lock and the budgets, then the hand-off.

The gate has allowed the run. Before anything starts, one Redis transaction
(``worker.runs.budget.reserve``) checks that no other run holds the issue and that
the repository and the installation are within their daily runs, agent minutes and
concurrent runs, and if so takes the issue's lock and counts the run. The task then
moves back to ``queued`` and its run job is put on the agents queue in the same
transaction (``hand_off``), so a crash leaves either both or neither. A run refused only because no
run slot is free (or that arrives while others wait for one) waits in its repository's line
instead, holding the issue's lock: ``worker.runs.line`` starts it when its turn comes.

A run whose worker was lost is handed off once more (``retry``), if it can take its lock again.

The lock is held long while the run waits for an agent worker (``QUEUED_LOCK_S``) and
short while it runs (``RUN_LOCK_S``, renewed every second by the run's supervisor),
so a dead worker's lock lapses within a minute and a lost queue entry's within hours.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.client import Pipeline
from rq.job import Callback
from rq.queue import Queue
from rq.serializers import JSONSerializer

from baton import keys, queues, records
from baton.errors import BatonError
from baton.tasks import Kind, Task
from worker import clock, lifecycle
from worker.context import Context
from worker.lifecycle import State
from worker.policy import Policy
from worker.runs import budget
from worker.trigger import where

log = logging.getLogger("baton.runs")

RUN_LOCK_S = 60.0
QUEUED_LOCK_S = 6 * 3600.0
#: A run whose worker was lost is tried once more, then ends failed.
MAX_ATTEMPTS = 2
#: Record fields of an admitted run: what the run job reads back. ``JOB`` names the run job from the
#: moment the run is handed over, to the agents queue or to its repository's line (which enqueues
#: it under that id when its turn comes): the task has moved on from its admission job either way.
AGENT, OFFLINE, ATTEMPT, JOB = "run_agent", "run_offline", "run_attempt", "run_job"
#: Set on an iteration's record before its admission: the issue whose lock and slots it takes (its
#: own task names the pull request), so whatever ends the task frees those.
ISSUE = "run_issue"
#: The kinds whose control task may reserve a run (its lock and slots): whatever ends one releases them.
RUN_KINDS = frozenset({Kind.AGENT_RUN, Kind.COMMAND, Kind.ITERATE})
#: + task id -> the run's record (JSON): the evidence, a retry's memory of its push, provenance.
RECORD_PREFIX = keys.RUN_RECORD_PREFIX


def lock_key(task: Task) -> str:
    if task.repository is None or task.number is None:
        raise BatonError("no-issue", "an agent run needs an issue")
    return keys.run_lock(task.repository.id, task.number)


def scopes(task: Task, policy: Policy | None) -> list[budget.Scope]:
    """The repository's budget and the installation's (from the org file); ``policy`` None: keys only."""
    repo, installation = where(task)
    repo_limits = policy.limits if policy is not None else None
    org = repo_limits.installation if repo_limits is not None else None
    return [
        budget.Scope(
            f"repo:{repo.id}",
            repo.full_name,
            repo_limits.max_runs_per_day if repo_limits else None,
            repo_limits.max_agent_minutes_per_day if repo_limits else None,
            repo_limits.max_concurrent_runs if repo_limits else None,
            repo_limits.max_model_spend_per_day if repo_limits else None,
        ),
        budget.Scope(
            f"installation:{installation}",
            f"installation {installation}",
            org.max_runs_per_day if org else None,
            org.max_agent_minutes_per_day if org else None,
            org.max_concurrent_runs if org else None,
            org.max_model_spend_per_day if org else None,
        ),
    ]


def reserve(ctx: Context, task: Task, policy: Policy) -> budget.Verdict:
    """The lock and the budgets; a concurrent-runs verdict means the run waits in its repository's
    line (``worker.runs.line``), holding the lock, counted nowhere yet."""
    repo, _ = where(task)
    return budget.reserve(
        ctx.redis,
        scopes(task, policy),
        task_id=task.id,
        lease_s=QUEUED_LOCK_S,
        lock=(lock_key(task), int(QUEUED_LOCK_S * 1000)),
        line=keys.line(repo.id),
    )


def seconds_left(ctx: Context, task: Task, policy: Policy) -> float | None:
    """The agent minutes left today in the tightest of the run's budgets (None: no minute limit).

    Asked as the run starts, so runs that ended since its admission count. Runs still going
    are counted only when they end: several at once can overrun the day's minutes by up to
    their timeouts, never by more."""
    now = clock.utc(ctx.redis)
    found = [(scope, budget.usage(ctx.redis, scope, now)) for scope in scopes(task, policy)]
    return budget.judge(found, now).seconds_left


def spend_ledger(ctx: Context, task: Task, policy: Policy) -> budget.SpendLedger:
    """The run's model gateway counts its dollars here, live, in the repository's and the
    installation's day budgets (the caps from ``policy``)."""
    return budget.SpendLedger(ctx.redis, scopes(task, policy))


def renew(ctx: Context, task: Task) -> bool:
    """Keep the run's lock and concurrency slots for another RUN_LOCK_S; False if the lock is not ours."""
    return budget.renew(
        ctx.redis,
        scopes(task, None),
        task_id=task.id,
        lease_s=RUN_LOCK_S,
        lock=(lock_key(task), int(RUN_LOCK_S * 1000)),
    )


def job_id(task_id: str, attempt: int) -> str:
    return f"{task_id}_run{attempt}"


def task_id_of(job_id_: str) -> str:
    """The task a job serves: run jobs are ``<task>_run<n>``, every other job is its task's id."""
    head, dot, tail = job_id_.rpartition("_run")
    return head if dot and tail.isdigit() else job_id_


def enqueue(pipe: Pipeline, client: redis.Redis, task: Task, job: str) -> None:
    """Put ``task``'s run job ``job`` on the agents queue, in the transaction ``pipe`` is in (MULTI)."""
    spec = queues.AGENTS
    Queue(spec.name, connection=client, serializer=JSONSerializer).enqueue_call(
        queues.RUN_FUNCTION,
        args=[task.to_dict()],
        job_id=job,
        timeout=spec.job_timeout,
        result_ttl=queues.RESULT_TTL_S,
        failure_ttl=queues.FAILURE_TTL_S,
        on_failure=Callback(queues.FAILURE_CALLBACK),
        pipeline=pipe,
    )


def hand_off(
    ctx: Context, task: Task, detail: str, *, attempt: int, holder: str | None = None, **fields: str
) -> str:
    """RUNNING -> QUEUED, with the run job on the agents queue, in one transaction. Returns the job id.

    Raises lifecycle.IllegalMove if the task ended meanwhile, or (``holder``: the admitting job's
    hand-off) is not that job's any more; then nothing was enqueued."""
    job = job_id(task.id, attempt)
    with ctx.redis.pipeline() as pipe:
        while True:
            try:
                seen = lifecycle.watch(pipe, task.id)
                # From running only: queued -> queued is a waiting run's turn (worker.runs.line).
                lifecycle.allowed(seen, State.QUEUED, holder=holder, expect=State.RUNNING)
                pipe.multi()
                lifecycle.write(pipe, seen, State.QUEUED, detail, publication=None, holder=holder,
                                **{ATTEMPT: str(attempt), JOB: job, **fields})  # fmt: skip
                enqueue(pipe, ctx.redis, task, job)
                pipe.execute()
                break
            except redis.WatchError:
                continue
    log.info("run handed to the agents queue", extra={"task": task.id, "job": job, "attempt": attempt})
    return job


_RELOCK = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


def relock(ctx: Context, task: Task) -> bool:
    """Hold the issue again for a retry (its lock may have lapsed with its worker); False if
    another task holds it now."""
    held = ctx.redis.register_script(_RELOCK)(
        keys=[lock_key(task)], args=[task.id, int(QUEUED_LOCK_S * 1000)]
    )
    if held:
        budget.renew(
            ctx.redis,
            scopes(task, None),
            task_id=task.id,
            lease_s=QUEUED_LOCK_S,
            lock=(lock_key(task), int(QUEUED_LOCK_S * 1000)),
        )
    return bool(held)


def retry(ctx: Context, task_id: str, data: Any) -> bool:
    """Hand a lost run to the agents queue once more, if it has an attempt left and its lock."""
    attempt = int(lifecycle.field(ctx.redis, task_id, ATTEMPT) or 1)
    if attempt >= MAX_ATTEMPTS:
        return False
    try:
        task = Task.from_dict(data)
    except (ValueError, TypeError, KeyError):
        return False
    if not relock(ctx, task):
        return False  # another run took the issue after this one's lock lapsed
    try:
        hand_off(ctx, task, f"worker lost; attempt {attempt + 1}", attempt=attempt + 1)
    except lifecycle.IllegalMove:
        return False
    ctx.redis.hincrby(records.COUNTERS_KEY, "run_retried", 1)
    log.warning("run retried after its worker was lost", extra={"task": task_id, "attempt": attempt + 1})
    return True
