"""The job function every Baton queue runs, and how a task ends when its job cannot end it.

``run_task`` has the same shape for every kind: mark the task running (which
takes out its lease), let its handler gather fresh state and decide
(``worker.handlers``), commit the terminal state together with what to
publish, then publish through the outbox. An admitted agent run is the one
task that is not over then: it is handed to the agents queue
(``worker.runs.admit``), where ``run_agent`` takes it through the same steps
with the run itself as its handler (``worker.runs.execute``), and frees the
issue's lock and budget slots once its outcome is published. Errors Baton raises on purpose end
the task ``failed`` with a fixed message for their code; a job timeout ends it
``timed-out``; anything else also ends it ``failed`` and is re-raised so RQ
keeps the traceback. A control job's GitHub calls, its first attempt to publish
included, share its queue's deadline (``baton.queues``): a GitHub that never
answers ends the task ``failed`` (``github-deadline``) within it, and the outbox
publishes the failure once GitHub answers again.

When the job itself dies, ``end_abnormally`` does the same from outside: RQ's
failure callback (``on_failure``), the worker whose job process was killed
(``worker.rqworker``), and any worker that finds an expired lease
(``worker.rqworker``) all end the task through it, completing its check runs
and, once its sender was authorised, saying so on the issue.

While its handler runs, a job renews its task's lease itself (``_lease_kept``). A renewal that
finds the task is not the job's any more (``lifecycle.Lease.LOST``: swept, or its lease lived on
a Redis primary that died before replicating it, and another worker runs the task now) stops the
job: a job process exits at once (``LEASE_LOST_EXIT``, its box with it), an in-process job is
interrupted at its next step (``LeaseLost``); either way it publishes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import threading
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, TypedDict

import redis
from rq import get_current_job
from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.timeouts import BaseTimeoutException

from baton import queues
from baton.errors import BatonError
from baton.tasks import Kind, Task
from evidence.audit import AuditError
from worker import audit, context, keepalive, lifecycle, outbox
from worker.context import Context
from worker.gates import evaluate as gates
from worker.github import deadline, transport
from worker.handlers import HANDLERS, opened_check_runs
from worker.lifecycle import State
from worker.publish import Publication, status_now
from worker.result import Handler, HandOff, Result, failed
from worker.runs import admit, line
from worker.runs.execute import run as execute_run
from worker.trigger import AUTHORISED

log = logging.getLogger("baton.jobs")


class Dropped(StrEnum):
    """What a job returns when it ended nothing: the task is not in this state, the job is."""

    ENDED_ELSEWHERE = "ended-elsewhere"  # the task had ended meanwhile (a sweeper, a cancel): that stands
    STALE_JOB = "stale-job"  # a run job the task has moved on from (it was retried as another job)
    DUPLICATE = "duplicate"  # a second start of a job whose task is running (worker.requeue's race)
    LEASE_LOST = "lease-lost"  # stopped: the task stopped being this job's while it ran (lifecycle.Lease)


class JobReturn(TypedDict):
    """What RQ keeps as the job's result (JSON): the task's state after the job, or why it has none."""

    task_id: str
    kind: str
    state: State | Dropped
    detail: str


def _returned(task: Task, state: State | Dropped, detail: str) -> JobReturn:
    return {"task_id": task.id, "kind": task.kind.value, "state": state, "detail": detail}


def run_task(data: dict[str, Any]) -> JobReturn:
    """RQ entry point (named in baton.queues.JOB_FUNCTION)."""
    return execute(context.current(), Task.from_dict(data))


def run_agent(data: dict[str, Any]) -> JobReturn:
    """RQ entry point of the agents queue (baton.queues.RUN_FUNCTION): an admitted run."""
    ctx, task = context.current(), Task.from_dict(data)
    job = get_current_job()
    if job is not None and lifecycle.field(ctx.redis, task.id, admit.JOB) != job.id:
        return _returned(task, Dropped.STALE_JOB, job.id)
    return execute(ctx, task, handler=execute_run)


def execute(ctx: Context, task: Task, handler: Handler | None = None) -> JobReturn:
    kind = transport.TASK_KIND.set(task.kind.value if handler is None else "run")
    spec = queues.QUEUE_FOR[task.kind] if handler is None else queues.AGENTS
    try:
        holder = lifecycle.holder()
        # Taking the task may wait for a new primary to hold it back (lifecycle.move): before the deadline.
        dropped = _start(ctx, task, handler, holder)
        if dropped is not None:
            return dropped
        with deadline.within(spec.github_deadline_s):  # the control queue's: every call of the job
            return _execute(ctx, task, handler, holder)
    finally:
        transport.TASK_KIND.reset(kind)
        try:
            transport.flush(ctx.redis)
        except redis.RedisError as exc:  # a count lost is not worth failing a task for
            log.warning("could not record GitHub call counts", extra={"task": task.id, "error": str(exc)})


def _start(ctx: Context, task: Task, handler: Handler | None, holder: str | None) -> JobReturn | None:
    """Move the task to running under this job's name; what the job returns if it must not run it."""
    try:
        lifecycle.move(ctx.redis, task.id, State.RUNNING, f"{task.kind} started", holder=holder,
                       kind=task.kind.value, installation=str(task.installation_id or 0))  # fmt: skip
    except lifecycle.IllegalMove:
        state = lifecycle.current(ctx.redis, task.id)
        if state is State.RUNNING:  # another start of this job got there first: it runs, this does not
            return _returned(task, Dropped.DUPLICATE, "not run")
        if handler is None and state is None:
            raise  # no record at all: the failure path ends it visibly
        # Ended while it waited (cancelled, or a lost worker's retry): drop it.
        return _returned(task, Dropped.ENDED_ELSEWHERE, "not run")
    return None


def _execute(ctx: Context, task: Task, handler: Handler | None, holder: str | None) -> JobReturn:
    unexpected: BaseException | None = None
    result: Result | HandOff
    try:
        with _lease_kept(ctx, task.id, holder):
            result = (handler or HANDLERS[task.kind])(ctx, task)
    except LeaseLost:
        log.warning("job stopped on its lost lease; nothing published", extra={"task": task.id})
        return _returned(task, Dropped.LEASE_LOST, "stopped; nothing published")
    except BaseTimeoutException as exc:  # before Exception: RQ's JobTimeoutException subclasses it
        unexpected = exc
        result = _failed(ctx, task, BatonError("timed-out", "the job ran past its queue's timeout"))
    except BatonError as exc:
        result = _failed(ctx, task, exc)
    except Exception as exc:  # recorded, then re-raised for RQ
        unexpected = exc
        result = _failed(ctx, task, BatonError("internal-error", f"{type(exc).__name__}: {exc}"))
    if isinstance(result, HandOff):
        return _hand_off(ctx, task, result, holder)
    published = _commit(ctx, task, result, publish=True, holder=holder)
    if published is None:  # another worker ended it meanwhile (its lease had run out): that stands
        log.warning("task was ended elsewhere; dropping this result", extra={"task": task.id})
        return _returned(task, Dropped.ENDED_ELSEWHERE, result.detail)
    seal_audit(ctx)
    # A failure's detail (never published: it may hold exception text) is the operator's to read.
    level = logging.WARNING if result.state in (State.FAILED, State.TIMED_OUT) else logging.INFO
    log.log(level, "task", extra={"task": task.id, "kind": task.kind.value, "state": result.state.value,
                                  "detail": result.detail, "published": published})  # fmt: skip
    if unexpected is not None:
        raise unexpected
    return _returned(task, result.state, result.detail)


# -- a job's own lease: renewed while it runs, and the job stopped when it is lost --------------------

#: A job process's exit status when it stopped itself on a lost lease: its worker must not end the
#: task (``worker.rqworker``), which is another job's now, or already ended.
LEASE_LOST_EXIT = os.EX_TEMPFAIL
_in_job_process = False


class LeaseLost(BaseException):
    """Raised in an in-process job's thread when its task stopped being its own. A BaseException,
    so that no handler's ``except Exception`` takes it for a failure of its own and publishes that."""


def in_job_process() -> None:
    """Said by the job process a forking worker made for one job: a lost lease ends the process."""
    global _in_job_process  # noqa: PLW0603 - one fact per process, set once after the fork
    _in_job_process = True


@contextlib.contextmanager
def _lease_kept(ctx: Context, task_id: str, holder: str | None) -> Iterator[None]:
    """Renew the task's lease every ``lifecycle.RENEW_S`` while the block runs (a job with no name,
    as the tests run one, holds its lease unrenewed). On ``Lease.LOST`` the job stops: a job process
    exits, an in-process job gets ``LeaseLost`` raised in its thread at its next Python step (a call
    to GitHub or Redis in progress finishes first: each is time-bounded)."""
    if holder is None:
        yield
        return
    target = threading.get_ident()
    guard = threading.Lock()
    inside = [True]

    def renew() -> bool:
        try:
            lease = lifecycle.renew_lease(ctx.redis, task_id, holder)
        except Exception as exc:  # tried again next time; the lease may still be saved
            log.warning("could not renew the task's lease", extra={"task": task_id, "error": str(exc)})
            return True
        if lease is not lifecycle.Lease.LOST:
            return lease is lifecycle.Lease.HELD
        log.error("the task is not this job's any more (swept, or its lease was lost with a Redis "
                  "primary); stopping the job, publishing nothing", extra={"task": task_id})  # fmt: skip
        if _in_job_process:
            os._exit(LEASE_LOST_EXIT)
        with guard:
            if inside[0]:
                _raise_in(target, LeaseLost)
        return False

    with keepalive.every(lifecycle.RENEW_S, renew, name="baton-lease"):
        try:
            yield
        finally:
            with guard:
                inside[0] = False
                _raise_in(target, None)  # one raised too late for the block is not raised at all


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in another thread at its next Python step (None: cancel one not yet raised)."""
    pending = None if exc is None else ctypes.py_object(exc)  # None is passed as NULL: cancel
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), pending)


# -- how a task's job ends it: failed, handed off, or committed and published -------------------


def _failed(ctx: Context, task: Task, exc: BatonError) -> Result:
    if exc.code == "internal-error":
        log.error("task failed unexpectedly", exc_info=True, extra={"task": task.id})
    speak = task.kind is Kind.AGENT_RUN or lifecycle.field(ctx.redis, task.id, AUTHORISED) == "1"
    ids, unanswered = opened_check_runs(ctx.redis, task.id)
    result = failed(task, exc, speak=speak, check_run_ids=ids, unanswered=unanswered)
    runs = tuple(gates.signed_failure(ctx, task, end) for end in result.check_runs)
    return dataclasses.replace(result, check_runs=runs)


def _hand_off(ctx: Context, task: Task, result: HandOff, holder: str | None) -> JobReturn:
    """An admitted run: to the agents queue, then ``queued`` on the issue; or, with no run slot free
    (``result.wait``), into its repository's line, which says so on the issue itself."""
    run = result.task or task
    try:
        if result.wait is not None:
            job = line.join(ctx, run, status=result.status, policy=result.wait, detail=result.detail,
                            holder=holder, fields=result.fields)  # fmt: skip
        else:
            job = admit.hand_off(ctx, run, result.detail, attempt=1, holder=holder, **result.fields)
    except lifecycle.IllegalMove:
        if lifecycle.current(ctx.redis, run.id) in lifecycle.TERMINAL:  # ended meanwhile by a sweeper
            line.release(ctx, run, started=None)  # the lock is not needed any more
        # Otherwise the task is another job's now (this one's lease was lost): so are its lock and slots.
        return _returned(task, Dropped.ENDED_ELSEWHERE, result.detail)
    if result.wait is None:
        status_now(ctx, run, result.status)
    state = State.QUEUED
    if result.wait is not None:  # joining the line may have ended it at once (a cancel, a spent day)
        found = lifecycle.current(ctx.redis, run.id)
        state = found if found in lifecycle.TERMINAL and found is not None else State.QUEUED
    log.info("task", extra={"task": task.id, "kind": task.kind.value, "state": state.value, "job": job,
                            "waiting": result.wait is not None})  # fmt: skip
    return _returned(task, state, result.detail)


def _commit(
    ctx: Context, task: Task, result: Result, *, publish: bool, holder: str | None = None
) -> str | None:
    """The terminal move, with what to publish queued in the same transaction; then (``publish``)
    one attempt at once. Returns what was published, or None if the task had already ended, or
    (``holder``: its job's move) was not that job's any more."""
    publication = publication_for(ctx, task, result)
    stored = publication.to_json() if publication else None
    try:
        lifecycle.move(ctx.redis, task.id, result.state, result.detail, publication=stored, also=None,
                       holder=holder, **result.fields)  # fmt: skip
    except lifecycle.IllegalMove:
        return None
    try:
        return _publish(ctx, task, publication, publish=publish)
    finally:
        # After the final status is written, so no newer run can be admitted in between and take
        # the comment over before this run's outcome is on it. The next run waiting in the
        # repository's line starts in the same transaction as the slots are freed.
        if task.kind in admit.RUN_KINDS and task.number is not None and task.repository:
            fields = result.fields
            line.release(ctx, _run_task(ctx, task), started=fields.get("run_started_at"), publish=publish,
                         agent_seconds=float(fields.get("agent_seconds", 0.0)))  # fmt: skip


def _run_task(ctx: Context, task: Task) -> Task:
    """The task whose lock and slots ``task``'s end frees: an iteration's control task admitted its
    issue's run (``admit.ISSUE``), whose lock a failure before the hand-off must not leave held."""
    issue = lifecycle.field(ctx.redis, task.id, admit.ISSUE)
    if task.pull_request is None and issue is not None and issue.isdigit() and int(issue) != task.number:
        return dataclasses.replace(task, number=int(issue), pull_request=task.number)
    return task


def publication_for(ctx: Context, task: Task, result: Result) -> Publication | None:
    """What GitHub should hear about ``result``, as data the outbox can keep; None: nothing."""
    return Publication.about(task, result.status, result.check_runs, result.replies)


def _publish(ctx: Context, task: Task, publication: Publication | None, *, publish: bool) -> str:
    if publication is None:
        lifecycle.annotate(ctx.redis, task.id, published="nothing to publish")
        return "nothing to publish"
    return outbox.publish_now(ctx, task.id) if publish else "kept in the outbox for an idle worker"


def seal_audit(ctx: Context) -> None:
    """Seal captured audit events now (after each task, and on every sweep). Best effort: what is
    not sealed stays captured, and the next try seals it."""
    try:
        audit.seal(ctx.redis, ctx.signer.audit_secret if ctx.signer else None)
    except (redis.RedisError, AuditError) as exc:
        log.warning("could not seal audit events", extra={"task": "-", "error": str(exc)})


# -- when the job itself dies ------------------------------------------------------------------


def end_abnormally(
    ctx: Context,
    task_id: str,
    data: Any,
    error: BatonError,
    *,
    publish: bool = True,
    job_id: str | None = None,
) -> bool:
    """End a task whose job cannot: failed (or timed-out) with ``error``'s fixed message.

    ``data`` is the job's argument (the task as stored); if it cannot be read (a task
    from another schema), the record still ends, with nothing published. ``publish``: try
    GitHub at once (else the outbox keeps it for an idle worker). ``job_id``: the job that
    died, if known; a job the task has moved on from (an admission whose run was handed
    over, a first attempt already retried) ends nothing. An agent run whose worker was lost
    is retried once (``worker.runs.admit.MAX_ATTEMPTS``). Returns False if the task had
    already ended or was retried.
    """
    state = lifecycle.current(ctx.redis, task_id)
    if state in lifecycle.TERMINAL:
        return False
    run_job = lifecycle.field(ctx.redis, task_id, admit.JOB)
    if job_id is not None and run_job is not None and job_id != run_job:
        return False
    if (
        run_job is not None
        and state is State.RUNNING
        and error.code == "worker-lost"
        and admit.retry(ctx, task_id, data)
    ):
        return False
    try:
        task = Task.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # AttributeError: not a dict at all
        log.error("cannot read the task of a dead job", extra={"task": task_id, "error": str(exc)})
        try:
            lifecycle.move(ctx.redis, task_id, State.FAILED, f"task-undecodable ({error.code}): {exc}")
        except lifecycle.IllegalMove:
            return False
        return True
    if _commit(ctx, task, _failed(ctx, task, error), publish=publish) is None:
        return False  # it ended meanwhile, by its own job or another sweeper
    log.warning("task ended by its worker's failure path", extra={"task": task_id, "code": error.code})
    return True


def on_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException], *_exc: object) -> None:
    """RQ's failure callback: the job failed, timed out, or its worker died (abandoned).

    Whatever happened, the task must not stay `running`. A task that already reached a
    final state (``execute`` records its own failures) is left as it is.
    """
    if issubclass(exc_type, AbandonedJobError):
        error = BatonError("worker-lost", "the worker running this task stopped before it finished")
    elif issubclass(exc_type, BaseTimeoutException):
        error = BatonError("timed-out", "the job ran past its queue's timeout and was stopped")
    else:
        error = BatonError("job-failed", f"{exc_type.__name__} (see the worker log)")
    try:
        ctx = context.current()
    except BatonError:
        ctx = Context(connection, None, None)
    data = job.args[0] if job.args else None
    end_abnormally(ctx, admit.task_id_of(job.id), data, error, job_id=job.id)
