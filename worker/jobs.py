"""The job function every Baton queue runs: ``run_task(task)``.

Its shape is the same for every kind: mark the task running, let its handler
gather fresh state and decide (``worker.handlers``), commit the terminal state,
then publish to GitHub. Errors Baton raises on purpose end the task ``failed``
with their message, on the issue where there is one; anything else also ends
it ``failed`` and is re-raised so RQ keeps the traceback.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from rq.job import Job
from rq.timeouts import JobTimeoutException

from bot.errors import BatonError
from bot.tasks import Task
from worker import context, lifecycle
from worker.context import Context
from worker.github import api
from worker.handlers import HANDLERS, Result, failed
from worker.lifecycle import State
from worker.status import is_status_comment, render

log = logging.getLogger("baton.jobs")


def run_task(data: dict[str, Any]) -> dict[str, str]:
    """RQ entry point (named in bot.queues.JOB_FUNCTION)."""
    return execute(context.current(), Task.from_dict(data))


def execute(ctx: Context, task: Task) -> dict[str, str]:
    lifecycle.move(ctx.redis, task.id, State.RUNNING, f"{task.kind} started", kind=task.kind.value)
    unexpected: Exception | None = None
    try:
        result = HANDLERS[task.kind](ctx, task)
    except BatonError as exc:
        result = failed(task, exc)
    except Exception as exc:  # recorded, then re-raised for RQ
        unexpected = exc
        result = failed(task, BatonError("internal-error", f"{type(exc).__name__} (see the worker log)"))
    lifecycle.move(ctx.redis, task.id, result.state, result.detail, **result.fields)
    published = publish(ctx, task, result)
    # Last: the task's side effects are done (readers wait for this, not for the state).
    ctx.redis.hset(lifecycle.PREFIX + task.id, "published", published)
    log.info("task", extra={"task": task.id, "kind": task.kind.value, "state": result.state.value,
                            "detail": result.detail, "published": published})  # fmt: skip
    if unexpected is not None:
        raise unexpected
    return {"task_id": task.id, "kind": task.kind.value, "state": result.state.value, "detail": result.detail}


def on_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException], *_exc: object) -> None:
    """RQ's failure callback: the job failed, timed out, or its worker died (abandoned).

    Whatever happened, the task must not stay `running`: it ends `failed`, saying
    why, on the issue where there is one. A task that already reached a final
    state (``execute`` records its own failures) is left as it is.
    """
    if lifecycle.current(connection, job.id) in lifecycle.TERMINAL:
        return
    task = Task.from_dict(job.args[0])
    if exc_type.__name__ == "AbandonedJobError":
        error = BatonError("worker-lost", "the worker running this task stopped before it finished")
    elif issubclass(exc_type, JobTimeoutException):
        error = BatonError("timed-out", "the task ran longer than its queue allows and was stopped")
    else:
        error = BatonError("job-failed", f"{exc_type.__name__} (see the worker log)")
    result = failed(task, error)
    lifecycle.move(connection, task.id, result.state, result.detail)
    try:
        ctx = context.current()
    except BatonError:
        return
    connection.hset(lifecycle.PREFIX + task.id, "published", publish(ctx, task, result))


def publish(ctx: Context, task: Task, result: Result) -> str:
    """Tell the issue. A failure here is recorded on the task, never hidden."""
    if result.status is None or task.number is None or task.repository is None or ctx.github is None:
        return "nothing to publish"
    if task.installation_id is None:
        return "no installation"
    gh = ctx.github.for_repository(task.installation_id, task.repository.full_name, "report")

    def ours(comment: dict[str, Any]) -> bool:
        via = comment.get("performed_via_github_app")
        return (
            is_status_comment(comment.get("body")) and isinstance(via, dict) and via.get("id") == ctx.app_id
        )

    try:
        comment_id = api.upsert_comment(
            gh, task.repository.full_name, task.number, render(result.status), ours
        )
    except BatonError as exc:
        ctx.redis.hset(lifecycle.PREFIX + task.id, "publish_error", exc.message)
        return f"status comment failed: {exc.message}"
    ctx.redis.hset(lifecycle.PREFIX + task.id, "comment_id", str(comment_id))
    return f"status comment {comment_id}"
