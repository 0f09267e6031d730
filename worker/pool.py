"""`baton worker`: RQ workers over Baton's queues, one process per pool.

Agent runs, merge gates and control tasks are served by different
processes, so a long agent run never delays a gate, and a gate's commands
(up to an hour) never delay a label's admission. The supervisor forwards
SIGTERM/SIGINT to every child (RQ then finishes the current job: a warm
shutdown) and exits when they have; if one child dies, the rest are stopped
and the supervisor exits non-zero so the platform restarts the whole group.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from rq import Queue
from rq.exceptions import StopRequested
from rq.serializers import JSONSerializer

from baton import queues, redis_client
from worker import context
from worker.rqworker import BatonWorker, InProcessWorker

log = logging.getLogger("baton.worker")

SHORT_QUEUES = (queues.GATES.name, queues.CONTROL.name)
#: What `baton worker --burst` alone serves, in the order one worker looks at them after each job:
#: admission first, so a task that queues another (a label admits an agent run) is drained too.
BURST_QUEUES = (queues.CONTROL.name, queues.GATES.name, queues.AGENTS.name)
STOP_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class Pool:
    queues: tuple[str, ...]
    processes: int


def default_pools(agent_workers: int) -> list[Pool]:
    pools = [Pool((queues.CONTROL.name,), 1), Pool((queues.GATES.name,), 1)]
    if agent_workers > 0:
        pools.append(Pool((queues.AGENTS.name,), agent_workers))
    return pools


def parse_queues(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in queues.BY_NAME]
    if not names or unknown:
        from baton.errors import ConfigError  # noqa: PLC0415

        raise ConfigError(
            "bad-queues",
            f"--queues must name Baton queues ({', '.join(queues.BY_NAME)}), got {text!r}",
        )
    return names


def worker_class(queue_names: Sequence[str]) -> type[BatonWorker]:
    """Short queues alone run jobs in-process; a worker that may take an agent run forks for each job."""
    return InProcessWorker if set(queue_names) <= set(SHORT_QUEUES) else BatonWorker


def work(
    redis_url: str, queue_names: Sequence[str], *, burst: bool = False, failover_wait: float = 60.0
) -> int:
    """Run one RQ worker in this process until told to stop (or, in burst mode, until idle).

    Its connection follows a Redis failover for up to ``failover_wait`` seconds; a worker whose
    primary stays lost past that has said so in its log, and exits 1 for its platform to restart it."""
    context.configure(redis_url)
    # No socket timeout of ours: RQ sets one just longer than its blocking dequeue.
    connection = redis_client.connect(redis_url, failover_wait=failover_wait)
    try:
        rq_queues = [Queue(name, connection=connection, serializer=JSONSerializer) for name in queue_names]
        worker = worker_class(queue_names)(rq_queues, connection=connection, serializer=JSONSerializer)
        worker.work(
            burst=burst, with_scheduler=False, logging_level=logging.getLevelName(log.getEffectiveLevel())
        )
    except redis_client.NoPrimary:
        pass  # already said, in the log line that gave up (RQ's own farewell needs Redis too)
    except StopRequested:
        pass  # told to stop while RQ's farewell was still waiting for Redis
    return 1 if redis_client.gave_up(redis_url) is not None else 0


def supervise(redis_url: str, pools: Sequence[Pool], log_level: str) -> int:
    """Start each pool's processes and keep them until a signal or a death."""
    env = {**os.environ, "REDIS_URL": redis_url, "LOG_LEVEL": log_level}
    children: list[subprocess.Popen[bytes]] = []
    stopping = False
    lost = False  # a child ended without being asked to: the group must be restarted

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for pool in pools:
            for _ in range(pool.processes):
                argv = [sys.executable, "-m", "baton", "worker", "--queues", ",".join(pool.queues)]
                children.append(subprocess.Popen(argv, env=env))  # noqa: S603 - our own argv
        log.info("workers started", extra={"pools": [[*p.queues, p.processes] for p in pools]})
        while not stopping:
            dead = [c for c in children if c.poll() is not None]
            if dead:
                log.error("a worker process exited; stopping the rest", extra={"code": dead[0].returncode})
                lost = True
                stop(signal.SIGTERM, None)
                break
            time.sleep(0.2)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        codes = [c.returncode for c in children]
        return 1 if lost or dead_codes(codes) else 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def dead_codes(codes: Sequence[int]) -> list[int]:
    """Exit codes that mean a child failed (signals we sent are not failures)."""
    ok = {0, -signal.SIGTERM, -signal.SIGINT}
    return [c for c in codes if c not in ok]
