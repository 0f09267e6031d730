"""Jobs a worker took and died before starting: found by the sweep and queued again.

A worker that serves several queues takes a job with ``BLPOP`` (with one queue, ``BLMOVE`` into
the queue's intermediate list). Until it records an execution in the queue's started registry,
the job is in no list a sweep reads. A worker that dies in that gap (SIGKILL, the OOM killer,
Redis going away under it: the Redis-restart drill found it) leaves a job that only its hash
remembers, and a task ``queued`` until its record expires. RQ's own cleanup finds the
intermediate-list case every 10 minutes and fails the job; the ``BLPOP`` case it never finds.

Every worker's sweep reads the tasks ``queued`` for ``lifecycle.LEASE_S`` or more. Such a task's
job is *lost* when its hash still says ``queued`` but it is in neither its queue's list, nor its
intermediate list, nor its started registry. A live worker's job has that shape too, for the
milliseconds between its ``BLPOP`` and its next write, so a job is only put back when a second
sweep, ``LOST_S`` or more after the first, finds it still lost. It goes to the front of its queue,
since it has waited longest. A worker so slow that it starts the job after all finds the task
already running and drops its copy (``worker.jobs``).
"""

from __future__ import annotations

import logging
import time

import redis
from rq.job import Job
from rq.queue import Queue
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from baton import keys, queues, records
from worker import lifecycle
from worker.lifecycle import State
from worker.runs import admit

log = logging.getLogger("baton.requeue")

#: A job must be found lost by two sweeps this far apart before it is queued again.
LOST_S = 10.0
#: Tasks looked at per sweep, the longest queued first.
BATCH = 100
#: A suspicion older than this is dropped (its task ended some other way).
FORGET_S = 86_400.0
LOST_JOBS = keys.LOST_JOBS_KEY

#: KEYS: the job's hash, its queue's list, the queue's intermediate list, its started registry, the
#: lost-jobs set. ARGV: job id, queue name, now, LOST_S.
#: Returns 0 (not lost), 1 (lost, first seen now or recently), 2 (queued again).
_CHECK = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' or redis.call('HGET', KEYS[1], 'origin') ~= ARGV[2]
   or redis.call('LPOS', KEYS[2], ARGV[1]) then
  redis.call('ZREM', KEYS[5], ARGV[1])
  return 0
end
local prefix = ARGV[1] .. ':'
for _, member in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  if string.sub(member, 1, #prefix) == prefix then
    redis.call('ZREM', KEYS[5], ARGV[1])
    return 0
  end
end
local seen = redis.call('ZSCORE', KEYS[5], ARGV[1])
if not seen then
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
  return 1
end
if tonumber(ARGV[3]) - tonumber(seen) < tonumber(ARGV[4]) then return 1 end
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
return 2
"""


def lost_jobs(client: redis.Redis, now: float | None = None) -> list[str]:
    """Queue again the jobs of queued tasks that a dead worker took; returns their ids."""
    now = time.time() if now is None else now
    client.zremrangebyscore(LOST_JOBS, "-inf", now - FORGET_S)
    waited = client.zrangebyscore(
        lifecycle.REGISTRY + State.QUEUED.value, "-inf", now - lifecycle.LEASE_S, start=0, num=BATCH
    )
    check = client.register_script(_CHECK)
    requeued = []
    for raw in waited:
        task_id = records.text(raw)
        job_id = lifecycle.field(client, task_id, admit.JOB) or task_id
        origin = records.text(client.hget(Job.key_for(job_id), "origin"))
        if origin not in queues.BY_NAME:
            continue  # no job (RQ has forgotten it) or not one of Baton's queues: nothing to put back
        queue = Queue(origin, connection=client, serializer=JSONSerializer)
        started = StartedJobRegistry(origin, connection=client, serializer=JSONSerializer)
        found = check(
            keys=[Job.key_for(job_id), queue.key, queue.intermediate_queue_key, started.key, LOST_JOBS],
            args=[job_id, origin, now, LOST_S],
        )
        if found == 2:
            requeued.append(job_id)
            log.warning(
                "a job taken by a worker that died before starting it was queued again",
                extra={"task": task_id, "job": job_id, "queue": origin},
            )
    return requeued
