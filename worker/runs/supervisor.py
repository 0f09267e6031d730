"""The run's supervisor: a thread that keeps the run's claims alive and stops it when it must.

Every second (``TICK_S``) it renews the task's lease, the issue's lock and the concurrency
slots (``worker.runs.admit``), and looks for a cancel asked for after the run was requested
(``worker.runs.cancel``). A cancel (seen by any worker), a lost lock, or Redis out of reach for
``REDIS_GRACE_S`` sets ``stop``, which stops the box (``worker.runner.run``); ``reason`` says why.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from baton.tasks import Task
from worker import lifecycle
from worker.context import Context
from worker.runs import admit, cancel
from worker.trigger import where

log = logging.getLogger("baton.runs")

TICK_S = 1.0
#: Redis unreachable this long: the run cannot prove it still holds the issue, so it stops.
REDIS_GRACE_S = 20.0


class Supervisor:
    """Keeps the run's claims alive and stops the box on a cancel (from any worker) or a lost lock."""

    def __init__(self, ctx: Context, task: Task) -> None:
        self.ctx, self.task = ctx, task
        self.stop = threading.Event()
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"baton-supervisor-{task.id}", daemon=True)
        self._holder = lifecycle.holder()  # here, in the job's thread: RQ keeps the current job per thread

    def __enter__(self) -> Supervisor:
        self.tick()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def halt(self, reason: str) -> None:
        if not self.stop.is_set():
            self.reason = reason
            self.stop.set()
            log.warning("stopping the run", extra={"task": self.task.id, "reason": reason})

    def _loop(self) -> None:
        failing_since: float | None = None
        while not self._done.wait(TICK_S):
            try:
                self.tick()
                failing_since = None
            except redis.RedisError as exc:
                failing_since = failing_since or time.monotonic()
                log.warning(
                    "supervisor could not reach Redis", extra={"task": self.task.id, "error": str(exc)}
                )
                if time.monotonic() - failing_since > REDIS_GRACE_S:
                    self.halt("the worker lost Redis, so it could no longer hold the issue's run lock")

    def tick(self) -> None:
        ctx, task = self.ctx, self.task
        repo, _ = where(task)
        lifecycle.renew_lease(ctx.redis, task.id, self._holder)  # the job stops itself if it is lost
        if not admit.renew(ctx, task):
            self.halt("the run lost the issue's lock")
        found = cancel.applies_to(ctx.redis, repo.id, (task.number, task.pull_request), task.received_at)
        if found is not None:
            self.halt(found.reason())
