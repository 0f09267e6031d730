"""RQ's workers, plus what Baton needs when processes die.

Agent runs fork a job process per job (``BatonWorker``): a run is long, holds a
worktree and child processes, and must be killable without killing its worker.
The short queues (control, gates) run their jobs in the worker's own process
(``InProcessWorker``): a fork per job costs ~90 ms of a ~100 ms task (a new
Python heap to fault in, new Redis and GitHub connections, caches rebuilt), and
a job process cannot keep a connection pool for the next job. A job that kills
its in-process worker is handled like any dead worker (its lease runs out).

RQ alone notices a dead worker late: a job process killed by SIGKILL (as the
OOM killer does) is marked failed without its failure callback, and when the
whole worker dies its started jobs are failed only after the heartbeat TTL
plus the next registry cleanup (~815 s measured). Baton's worker closes both
gaps:

- a job process that dies is ended at once through ``jobs.end_abnormally``
  (``handle_work_horse_killed``), and it is killed if its worker dies
  (``PR_SET_PDEATHSIG``), so no orphan keeps working on an ended task;
- a job a worker took from its queue and died before starting is found by the sweep and
  queued again (``worker.requeue``);
- every running task holds a lease (``lifecycle.LEASES``), renewed by the
  worker that runs it while it monitors the job (never gated: it is per job);
- the periodic duties (``DUTIES``) run at most once per interval across the deployment, however
  many hosts and processes there are: every worker, busy or idle, offers to take them every
  ``RENEW_EVERY_S`` (``tick``), and one Redis script hands each duty to the first worker that asks
  once its previous holder's claim (``SET NX PX``) has lapsed, timed by Redis's clock. The duties:
  the sweep (tasks whose lease ran out, jobs never started, jobs lost on the way:
  ``worker.requeue``), sealing captured audit events (``worker.audit``), starting the runs waiting
  in a repository's line that a freed slot let start (``worker.runs.line``), and for idle workers only,
  draining the publishing outbox (``worker.outbox``) and the check for a redelivery pass
  (``worker.redeliver``, which also keeps its own schedule). Each run is counted in
  ``baton:counters`` (``duty_<name>``, in /metrics). Correctness never rests on the claim: each duty
  is safe to run twice at once (its own per-task claims and scripts). The claim is about load, so
  an outbox drain that finds a full batch due frees it, and idle workers drain a backlog together;
- a lease that ran out is ended at the first tick of any worker after it did, not only by the
  sweep's holder (the claim script also says whether one has: the same round trip), so a dead
  worker's task is terminal within ``LEASE_S`` plus one tick.

The tick during a job touches only Redis, so a slow GitHub can never delay a
lease renewal into a false "worker lost". An idle tick's GitHub calls (the
outbox, redeliveries, publishing for a dead worker's task) share one deadline,
``SWEEP_GITHUB_S``, and the next tick is due an interval after this one ended: a
task that arrives while GitHub does not answer waits for one short tick at most,
not for one call's every retry, twice.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import redis
from rq import Worker, worker_registration
from rq.exceptions import NoSuchJobError, StopRequested
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.utils import now
from rq.worker import WorkerStatus

from baton import keys, queues, records, redis_client
from baton.errors import BatonError
from worker import clock, context, jobs, keepalive, lifecycle, locks, outbox, redeliver, requeue
from worker.context import Context
from worker.github import deadline
from worker.lifecycle import State
from worker.publish import publisher
from worker.runner import box
from worker.runs import admit, line

log = logging.getLogger("baton.worker")

#: How often a busy worker renews its job's lease (and ticks), and an idle one wakes up (and ticks).
RENEW_EVERY_S = 5
#: RQ's "worker is alive" key lives this long; its dequeue wait is 15 s shorter (so: 5 s).
WORKER_TTL_S = 20
#: RQ's own registry cleanup (its default interval).
RQ_CLEAN_EVERY_S = 600.0
#: Publications one outbox drain attempts; a drain that finds this many due frees its duty's claim.
OUTBOX_BATCH = 50


@dataclass(frozen=True, slots=True)
class Duty:
    """A periodic duty of the workers, run at most once per ``every_s`` across the deployment."""

    name: str
    every_s: float
    idle_only: bool  # talks to GitHub: never from a busy worker's tick

    @property
    def key(self) -> str:
        return keys.DUTY_PREFIX + self.name

    @property
    def counter(self) -> str:
        """Its runs, in ``baton:counters`` (``baton_worker_events_total{event=...}``)."""
        return "duty_" + self.name


#: Leases that ran out, jobs a worker took and died before starting, jobs lost on the way (Redis only).
SWEEP = Duty("sweep", RENEW_EVERY_S, idle_only=False)
#: Captured audit events sealed into their chains (Redis only).
AUDIT = Duty("audit", RENEW_EVERY_S, idle_only=False)
#: The publishing outbox drained (GitHub).
OUTBOX = Duty("outbox", RENEW_EVERY_S, idle_only=True)
#: Whether a redelivery pass is due, and if so the pass (GitHub; the pass keeps its own lock and schedule).
REDELIVERY = Duty("redelivery", RENEW_EVERY_S, idle_only=True)
#: Every repository's line of waiting runs moved once (``worker.runs.line``): the head starts if a slot
#: freed with no run ending to start it (a lapsed lease, another repository's run, a crash). Redis
#: only from a busy worker; an idle one also updates the waiting runs' statuses.
LINE = Duty("line", RENEW_EVERY_S, idle_only=False)
DUTIES = (SWEEP, AUDIT, OUTBOX, REDELIVERY, LINE)
#: Counted when a redelivery check found a pass due and ran it.
REDELIVERY_RAN = "redelivery_pass"

#: KEYS: the counters hash, the leases set, then each duty's key. ARGV: the holder, now (empty:
#: Redis's, the clock the leases are scored by), then for each duty its interval in ms and its counter.
#: Returns {whether a lease ran out, {the 1-based positions of the duties won}}.
_CLAIM = (
    clock.LUA_NOW
    + """
local won = {}
for i = 3, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2 * i - 3]) then
    redis.call('HINCRBY', KEYS[1], ARGV[2 * i - 2], 1)
    won[#won + 1] = i - 2
  end
end
local now = string.format('%.6f', now_or(ARGV[2]))
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1)
return {#expired, won}
"""
)

#: What an idle sweep may spend on GitHub in all (``worker.github.deadline``): a control task that
#: arrives meanwhile waits this at most, then has its own deadline (``baton.queues.CONTROL``).
SWEEP_GITHUB_S = 10.0


class BatonWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("job_monitoring_interval", RENEW_EVERY_S)
        kwargs.setdefault("worker_ttl", WORKER_TTL_S)
        kwargs.setdefault("maintenance_interval", RENEW_EVERY_S)
        super().__init__(*args, **kwargs)
        found = box.probe()  # once, here: every job process forked from this one inherits the answer
        try:  # for the status page: what this machine's box enforces
            self.connection.hset(records.BOX_PROBES_KEY, socket.gethostname(), json.dumps({
                "network_cutoff": found.network_cutoff, "seccomp": found.seccomp,
                "problems": list(found.problems),
                "at": now().isoformat(timespec="seconds")}, sort_keys=True))  # fmt: skip
        except redis.RedisError as exc:  # the worker's own start fails on Redis soon enough
            log.warning("could not record the box probe", extra={"error": str(exc)})
        self._baton: Context | None = None
        self._rq_cleaned = 0.0
        self._stopping = False

    def _set_ip_address(self, connection: redis.Redis) -> None:
        """What RQ does here (name the connection, find its address in `CLIENT LIST`, for `rq info`),
        but a Redis that refuses `CLIENT`, as managed services may, is said once in the log: RQ's
        own ``warnings.warn`` printed its source line from every worker process (and would stop one
        run with warnings as errors). The address is then "unknown"; nothing else depends on it."""
        try:
            connection.client_setname(self.name)
            found = [c["addr"] for c in connection.client_list() if c.get("name") == self.name]
        except redis.ResponseError as exc:
            log.info("Redis refuses CLIENT, so rq info shows this worker's address as unknown",
                     extra={"error": str(exc).split("\n")[0][:200]})  # fmt: skip
            found = []
        self.ip_address = str(found[0]) if found else "unknown"

    # -- the context of this (main) process, never the one jobs use ---------------------------

    @property
    def baton(self) -> Context:
        if self._baton is None:
            url = context.configured_url()
            self._baton = context.fresh(url) if url else Context(self.connection, None, None)
        return self._baton

    # -- a job process that dies, or whose worker dies ------------------------------------------

    def main_work_horse(self, job: Job, queue: Queue) -> None:
        _die_with_parent()
        jobs.in_job_process()
        super().main_work_horse(job, queue)

    def handle_work_horse_killed(self, job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)  # type: ignore[no-untyped-call]
        if ret_val and os.WIFEXITED(ret_val) and os.WEXITSTATUS(ret_val) == jobs.LEASE_LOST_EXIT:
            return  # it stopped itself: its task is another job's now, or ended (worker.jobs)
        how = f"signal {os.WTERMSIG(ret_val)}" if ret_val and os.WIFSIGNALED(ret_val) else f"status {ret_val}"
        error = BatonError("worker-lost", f"the job process died ({how})")
        try:
            data = job.args[0] if job.args else None
            jobs.end_abnormally(self.baton, admit.task_id_of(job.id), data, error, job_id=job.id)
        except Exception:
            log.exception("could not end the task of a killed job process", extra={"task": job.id})

    # -- leases and the outbox ----------------------------------------------------------------

    def maintain_heartbeats(self, job: Job) -> None:
        super().maintain_heartbeats(job)
        # Renewed under the job's name only: the job renews it too, and stops if it is lost (worker.jobs).
        task_id = admit.task_id_of(job.id)
        lifecycle.renew_lease(self.connection, task_id, lifecycle.holder_name(self.name, job.id))
        self._tick(idle=False)

    def run_maintenance_tasks(self) -> None:
        if time.monotonic() - self._rq_cleaned >= RQ_CLEAN_EVERY_S or not self._rq_cleaned:
            with _ends_on_lost_primary():
                super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
            self._rq_cleaned = time.monotonic()
        else:
            self.last_cleaned_at = now()  # type: ignore[assignment]
        self._tick(idle=True)
        # Due again an interval after this tick ended: stamped only before it, a tick slower than
        # the interval made RQ run a second one before it looked at the queue.
        self.last_cleaned_at = now()  # type: ignore[assignment]

    # -- a primary lost for good (baton.redis_client.NoPrimary) ------------------------------------

    def dequeue_job_and_maintain_ttl(self, *args: Any, **kwargs: Any) -> Any:
        with _ends_on_lost_primary():
            return super().dequeue_job_and_maintain_ttl(*args, **kwargs)

    def execute_job(self, job: Job, queue: Queue) -> None:
        with _ends_on_lost_primary():
            super().execute_job(job, queue)

    def check_for_suspension(self, *args: Any, **kwargs: Any) -> None:
        with _ends_on_lost_primary():
            super().check_for_suspension(*args, **kwargs)

    def heartbeat(self, *args: Any, **kwargs: Any) -> None:
        with _ends_on_lost_primary():
            super().heartbeat(*args, **kwargs)

    def teardown(self) -> None:
        if redis_client.gave_up(context.configured_url()) is None:  # RQ's farewell is Redis writes
            super().teardown()  # type: ignore[no-untyped-call]

    def _pubsub_exception_handler(self, exc: Exception, pubsub: Any, pubsub_thread: Any) -> None:
        """RQ's thread that listens for commands (kill a job, stop) must not print a traceback when
        the primary is gone for good (the worker's loop says so once and the process exits), nor when
        RQ itself stopped it and closed its connection mid-read."""
        if isinstance(exc, redis_client.NoPrimary):
            pubsub_thread.stop()
            return
        running = getattr(pubsub_thread, "_running", None)  # redis-py's: cleared by stop()
        if isinstance(exc, OSError) and running is not None and not running.is_set():
            return  # RQ stopped listening and closed the connection under the read: nothing to say
        super()._pubsub_exception_handler(exc, pubsub, pubsub_thread)

    def clean_registries(self) -> None:
        """RQ's, with its times read by Redis's clock (``requeue.clean_registries``): this worker's may
        differ from the clocks that wrote them, and RQ would fail their running jobs as abandoned."""
        at = clock.now(self.connection)
        for queue in self.queues:
            if queue.acquire_maintenance_lock():
                requeue.clean_registries(queue, self._exc_handlers, at)
                worker_registration.clean_worker_registry(queue)
                queue.intermediate_queue.cleanup(self, queue)
                queue.release_maintenance_lock()  # type: ignore[no-untyped-call]
        self.last_cleaned_at = now()  # type: ignore[assignment]

    def _shutdown(self) -> None:
        # RQ raises StopRequested from its signal handler when idle; a sweep in progress could
        # catch it among its failures, so the request is also kept here and honoured after.
        self._stopping = True
        super()._shutdown()  # type: ignore[no-untyped-call]

    def _tick(self, *, idle: bool) -> None:
        try:
            with _ends_on_lost_primary():
                tick(self.baton, idle=idle, stop=lambda: self._stopping)
        except StopRequested:
            raise
        except Exception:
            log.exception("periodic duties failed")
        if self._stopping and self.get_state() != WorkerStatus.BUSY:
            raise StopRequested


class InProcessWorker(BatonWorker):
    """Runs each job in this process (as RQ's ``SimpleWorker``), for the control and gate queues.

    RQ's job timeout still applies (SIGALRM in this, the main, thread). RQ renews a job's
    heartbeats only while it waits on a job process, so a thread renews them here, with
    the task's lease, and ticks (Redis only), as the forking worker's loop does."""

    def execute_job(self, job: Job, queue: Queue) -> None:
        with _ends_on_lost_primary():
            self.prepare_execution(job)
            with keepalive.every(RENEW_EVERY_S, lambda: self._renew(job), name="baton-renew"):
                self.perform_job(job, queue)
            self.set_state(WorkerStatus.IDLE)

    def _renew(self, job: Job) -> bool:
        try:
            self.maintain_heartbeats(job)
        except StopRequested:
            pass  # the main thread honours it once the job is done
        except Exception:
            log.exception("could not renew a running job's lease", extra={"task": job.id})
        return True  # a failed renewal is tried again: the lease may still be saved


@contextlib.contextmanager
def _ends_on_lost_primary() -> Iterator[None]:
    """A primary lost for BATON_REDIS_FAILOVER_WAIT ends RQ's loop the way a stop request does:
    the line that gave up has said why, and the process exits non-zero (``worker.pool.work``)."""
    try:
        yield
    except redis_client.NoPrimary:
        raise StopRequested from None


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one tick's claim gave this worker."""

    won: frozenset[Duty]
    expired: bool  # some lease has run out (whoever holds the sweep)


def holder() -> str:
    """Who claims, as a duty's key shows it: this host and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claim(
    client: redis.Redis, offered: Collection[Duty], *, by: str | None = None, now: float | None = None
) -> Claimed:
    """Claim each of ``offered`` whose previous claim has lapsed, and count it; one round trip.
    ``now``: Redis's (the leases' clock) unless given."""
    duties = list(offered)
    args: list[str | float] = [by or holder(), clock.arg(now)]
    for duty in duties:
        args += [round(duty.every_s * 1000), duty.counter]
    script = client.register_script(_CLAIM)
    expired, won = script(keys=[records.COUNTERS_KEY, lifecycle.LEASES, *(d.key for d in duties)], args=args)
    return Claimed(frozenset(duties[int(i) - 1] for i in won), bool(expired))


def tick(ctx: Context, *, idle: bool, stop: Callable[[], bool] = lambda: False) -> Claimed:
    """One worker's turn at the periodic duties: those it won this interval, and any lease that ran out.

    A busy worker (``idle`` False) is offered only the duties that touch Redis alone."""
    offered = [d for d in DUTIES if idle or not d.idle_only]
    by = holder()
    claimed = claim(ctx.redis, offered, by=by)
    won = set(claimed.won)
    with deadline.within(SWEEP_GITHUB_S):
        if claimed.expired and SWEEP not in won:
            _end_expired(ctx, publish=idle, stop=stop)
        if OUTBOX in won and len(outbox.due(ctx.redis, limit=OUTBOX_BATCH)) >= OUTBOX_BATCH:
            # A backlog (after a GitHub outage): the next idle worker drains the next batch alongside.
            locks.release(ctx.redis, OUTBOX.key, by)
        run(ctx, won, publish=idle, stop=stop)
    return claimed


def sweep(ctx: Context, *, publish: bool, stop: Callable[[], bool] = lambda: False) -> tuple[int, int]:
    """Every duty now, claimed or not (``publish``: the idle worker's too). Returns (ended, published)."""
    with deadline.within(SWEEP_GITHUB_S):
        return run(ctx, [d for d in DUTIES if publish or not d.idle_only], publish=publish, stop=stop)


def run(
    ctx: Context, duties: Collection[Duty], *, publish: bool, stop: Callable[[], bool] = lambda: False
) -> tuple[int, int]:
    """Run each of ``duties`` once, whoever holds its claim. Returns (tasks ended, publications made).

    ``publish``: a task ended here is told on GitHub at once (else the outbox keeps it for an
    idle worker). ``stop`` is asked between tasks: a worker told to stop finishes the one in hand.
    Its GitHub calls end with the caller's deadline (``SWEEP_GITHUB_S``); what is left then waits in
    the outbox, and a redelivery pass for the next tick."""
    ended = published = 0
    if SWEEP in duties:
        ended = _end_expired(ctx, publish=publish, stop=stop)
        for task_id, job_id, data in _never_started(ctx):
            if stop():
                return ended, 0
            error = BatonError("worker-lost", "its worker stopped as the job started, before the task ran")
            ended += jobs.end_abnormally(ctx, task_id, data, error, publish=publish, job_id=job_id)
        requeue.lost_jobs(ctx.redis)
    if LINE in duties and not stop():
        line.sweep(ctx, publish=publish, stop=stop)
    if stop():
        return ended, 0
    if OUTBOX in duties and ctx.github is not None:
        perform = publisher(ctx.github, ctx.redis, ctx.app_id, ctx.replication)
        published = outbox.drain(
            ctx.redis, perform, limit=OUTBOX_BATCH, stop=lambda: stop() or deadline.spent()
        )
    if AUDIT in duties:
        jobs.seal_audit(ctx)
    if REDELIVERY in duties and not deadline.spent() and redeliver.maybe_run(ctx) is not None:
        ctx.redis.hincrby(records.COUNTERS_KEY, REDELIVERY_RAN, 1)
    return ended, published


def _end_expired(ctx: Context, *, publish: bool, stop: Callable[[], bool]) -> int:
    """End the tasks whose lease ran out (each claimed first, so one worker ends it); how many."""
    ended = 0
    for task_id in lifecycle.expired_leases(ctx.redis):
        if stop():
            break
        if not lifecycle.claim_expired(ctx.redis, task_id):
            continue  # renewed meanwhile, or another worker took it
        data = _job_argument(ctx, task_id)
        error = BatonError("worker-lost", "the task's lease ran out: its worker stopped renewing it")
        ended += jobs.end_abnormally(ctx, task_id, data, error, publish=publish)
    return ended


def _never_started(ctx: Context) -> list[tuple[str, str, Any]]:
    """Jobs RQ started whose task never moved to running, and whose heartbeat stopped ``LEASE_S`` ago
    by Redis's clock (``requeue.silent_jobs``): their worker died between taking the job and its first
    line. The task holds no lease yet, so the lease sweep cannot see it, and RQ's own cleanup comes only
    every ``RQ_CLEAN_EVERY_S``."""
    found = []
    for name in queues.BY_NAME:
        for job_id in requeue.silent_jobs(ctx.redis, name):
            task_id = admit.task_id_of(job_id)
            if lifecycle.current(ctx.redis, task_id) is not State.QUEUED:
                continue  # running (its lease covers it), or over
            try:
                job = Job.fetch(job_id, connection=ctx.redis, serializer=JSONSerializer)
            except NoSuchJobError:
                continue  # gone meanwhile
            found.append((task_id, job_id, job.args[0] if job.args else None))
    return found


def _job_argument(ctx: Context, task_id: str) -> Any:
    """The task as its current job holds it: an admitted run's job (``admit.JOB``), whose task may
    differ from the control job's (an iteration's names its issue and pull request), else the task's."""
    job_id = lifecycle.field(ctx.redis, task_id, admit.JOB) or task_id
    try:
        job = Job.fetch(job_id, connection=ctx.redis, serializer=JSONSerializer)
    except NoSuchJobError:
        return None
    return job.args[0] if job.args else None


def _die_with_parent() -> None:
    """In the job process: be killed if the worker dies, even by SIGKILL (Linux only)."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != parent:  # the worker died before the flag was set
            os._exit(1)
