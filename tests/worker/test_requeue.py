"""A job that a dead worker took from its queue is queued again, once, and only when it is lost.

The sweep's clock is passed in (``now``), as the lease sweep's is: the drill
``test_a_job_taken_by_a_worker_that_died_before_starting_it_is_run`` plays the same story with a
real worker SIGKILLed after its ``BLPOP`` and the real wait.
"""

from __future__ import annotations

import time
import uuid

import redis
from rq.queue import Queue
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from baton import queues, records
from emulator import world
from tests.worker.conftest import Stage
from worker import lifecycle, requeue
from worker.jobs import Dropped, execute
from worker.lifecycle import State

CONTROL = Queue(queues.CONTROL.name, connection=redis.Redis(), serializer=JSONSerializer)  # for its key names
WAITED = lifecycle.LEASE_S + 1


def _labelled(stage: Stage) -> str:
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task_id: str = delivery["guid"]
    assert lifecycle.current(stage.rdb, task_id) is State.QUEUED
    return task_id


def _queued(stage: Stage) -> list[str]:
    return [records.text(j) for j in stage.rdb.lrange(CONTROL.key, 0, -1)]


def test_a_job_a_dead_worker_took_is_put_back_at_the_front_after_two_sweeps(stage: Stage) -> None:
    waiting = _labelled(stage)
    taken = _labelled(stage)
    assert _queued(stage) == [waiting, taken]  # served from the left
    stage.rdb.lrem(CONTROL.key, 0, taken)  # a worker's BLPOP took it, then the worker died
    now = time.time() + WAITED

    assert requeue.lost_jobs(stage.rdb, now) == []  # first seen lost: maybe a live worker's gap
    assert requeue.lost_jobs(stage.rdb, now + requeue.LOST_S - 1) == []
    assert requeue.lost_jobs(stage.rdb, now + requeue.LOST_S) == [taken]
    assert _queued(stage) == [taken, waiting]  # it has waited longest
    assert requeue.lost_jobs(stage.rdb, now + 3 * requeue.LOST_S) == []  # in its queue: not lost
    assert _queued(stage) == [taken, waiting]
    assert stage.rdb.zcard(requeue.LOST_JOBS) == 0


def test_a_job_in_its_queue_or_started_by_a_worker_is_never_put_back(stage: Stage) -> None:
    in_queue = _labelled(stage)
    started = _labelled(stage)
    stage.rdb.lrem(CONTROL.key, 0, started)
    registry = StartedJobRegistry(queues.CONTROL.name, connection=stage.rdb, serializer=JSONSerializer)
    stage.rdb.zadd(registry.key, {f"{started}:{uuid.uuid4().hex}": time.time() + 60})  # job_id:execution_id
    now = time.time() + WAITED

    for later in (0, requeue.LOST_S, 10 * requeue.LOST_S):
        assert requeue.lost_jobs(stage.rdb, now + later) == []
    assert _queued(stage) == [in_queue]


def test_a_job_left_in_an_intermediate_list_is_moved_back_to_its_queue(stage: Stage) -> None:
    task_id = _labelled(stage)
    intermediate = CONTROL.intermediate_queue_key
    assert stage.rdb.lmove(CONTROL.key, intermediate) == task_id.encode()  # a one-queue worker's BLMOVE
    now = time.time() + WAITED

    assert requeue.lost_jobs(stage.rdb, now) == []
    assert requeue.lost_jobs(stage.rdb, now + requeue.LOST_S) == [task_id]
    assert _queued(stage) == [task_id]
    assert stage.rdb.llen(intermediate) == 0


def test_a_task_queued_for_less_than_a_lease_is_not_looked_at(stage: Stage) -> None:
    task_id = _labelled(stage)
    stage.rdb.lrem(CONTROL.key, 0, task_id)
    soon = time.time() + lifecycle.LEASE_S / 2

    assert requeue.lost_jobs(stage.rdb, soon) == []
    assert requeue.lost_jobs(stage.rdb, soon + requeue.LOST_S) == []
    assert stage.rdb.zcard(requeue.LOST_JOBS) == 0
    assert requeue.lost_jobs(stage.rdb, soon + lifecycle.LEASE_S) == []  # now it is: first sighting


def test_a_job_that_ran_meanwhile_is_not_put_back(stage: Stage) -> None:
    task_id = _labelled(stage)
    stage.rdb.lrem(CONTROL.key, 0, task_id)
    now = time.time() + WAITED
    assert requeue.lost_jobs(stage.rdb, now) == []
    stage.rdb.hset(f"rq:job:{task_id}", "status", "started")  # the slow worker did start it after all

    assert requeue.lost_jobs(stage.rdb, now + requeue.LOST_S) == []
    assert _queued(stage) == []
    assert stage.rdb.zcard(requeue.LOST_JOBS) == 0


def test_a_second_start_of_a_job_whose_task_is_running_runs_nothing(stage: Stage) -> None:
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    lifecycle.move(stage.rdb, delivery["guid"], State.RUNNING, "agent_run started")  # the first start

    returned = execute(stage.ctx, stage.task(delivery))  # the job put back, started by a second worker

    assert returned["state"] is Dropped.DUPLICATE
    assert lifecycle.current(stage.rdb, delivery["guid"]) is State.RUNNING
    assert stage.baton_comments(number) == []


def _started_by(stage: Stage, task_id: str, *, score: float, ttl_s: int, beat_ago: float) -> str:
    """An execution of ``task_id``'s job in its started registry, as a worker's heartbeat leaves it
    (scored by that worker's clock, its key alive for ``ttl_s`` by Redis's); returns its member."""
    stage.rdb.lrem(CONTROL.key, 0, task_id)
    member = f"{task_id}:{uuid.uuid4().hex}"
    registry = StartedJobRegistry(queues.CONTROL.name, connection=stage.rdb, serializer=JSONSerializer)
    stage.rdb.zadd(registry.key, {member: score})
    key = requeue.EXECUTION_PREFIX + member
    stage.rdb.hset(key, mapping={"last_heartbeat": score - ttl_s, "worker_name": "w"})  # the beat, its clock
    stage.rdb.expire(key, ttl_s - int(beat_ago))  # what is left of the TTL that beat set
    return member


def test_rq_registries_are_read_by_redis_clock_not_by_the_writers(stage: Stage) -> None:
    """A heartbeat scores an execution by its worker's clock: an hour behind here, and still alive by
    the Redis TTL of its key. Neither RQ's cleanup nor the never-started sweep may take it for dead;
    an execution whose key expired (its worker stopped beating) is both."""
    alive, dead = _labelled(stage), _labelled(stage)
    an_hour_ago = time.time() - 3600
    live = _started_by(stage, alive, score=an_hour_ago + 65, ttl_s=65, beat_ago=2)
    gone = _started_by(stage, dead, score=an_hour_ago + 65, ttl_s=65, beat_ago=2)
    stage.rdb.delete(requeue.EXECUTION_PREFIX + gone)  # its TTL ran out
    assert requeue.silent_jobs(stage.rdb, queues.CONTROL.name) == [dead]
    queue = Queue(queues.CONTROL.name, connection=stage.rdb, serializer=JSONSerializer)
    requeue.clean_registries(queue, [], time.time())
    left = [
        records.text(m)
        for m in stage.rdb.zrange(StartedJobRegistry(queue.name, connection=stage.rdb).key, 0, -1)
    ]
    assert left == [live]
    assert lifecycle.current(stage.rdb, dead) is State.FAILED  # abandoned: its failure callback ended it
    assert lifecycle.current(stage.rdb, alive) is State.QUEUED


def test_an_execution_silent_for_a_lease_by_its_key_ttl_is_silent_whatever_its_clock(stage: Stage) -> None:
    quiet = _labelled(stage)
    _started_by(stage, quiet, score=time.time() + 7200, ttl_s=65, beat_ago=lifecycle.LEASE_S + 2)
    assert requeue.silent_jobs(stage.rdb, queues.CONTROL.name) == [quiet]
