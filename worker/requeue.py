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

RQ's own registries of started jobs are kept by each worker's clock: a job's entry is scored by
its worker's time plus a TTL, and RQ's cleanup compares that with the cleaning worker's time, so a
worker whose clock runs a minute fast would fail every other worker's running job as abandoned.
Here they are read by Redis's clock instead: an execution is silent, or abandoned, by the Redis
TTL of its key, which every heartbeat sets (``silent_jobs``, ``clean_registries``).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from rq.job import Job
from rq.queue import Queue
from rq.registry import DeferredJobRegistry, FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer

from baton import keys, queues, records
from worker import clock, lifecycle
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
#: lost-jobs set. ARGV: job id, queue name, now (Redis's, read once per sweep), LOST_S.
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
    """Queue again the jobs of queued tasks that a dead worker took; returns their ids. ``now``:
    Redis's unless given."""
    now = clock.now(client) if now is None else now
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


# -- RQ's started registries, by Redis's clock ---------------------------------------------------------

#: RQ's key of one execution (``rq.executions.Execution.key``) is this + "<job id>:<execution id>",
#: the member of the started registry.
EXECUTION_PREFIX = "rq:execution:"

#: KEYS: a started registry. ARGV: EXECUTION_PREFIX, LEASE_S. The members whose worker's last heartbeat
#: is LEASE_S or more ago by Redis: each heartbeat sets the execution key's TTL and adds the same TTL
#: to the member's score (both from the worker's clock, so their difference is not), so the TTL it
#: set, less what is left of it, is the time since; an expired key is silent too.
_SILENT = """
local found = {}
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local key = ARGV[1] .. entries[i]
  local left = redis.call('PTTL', key)
  if left == -2 then
    table.insert(found, entries[i])
  elseif left >= 0 then
    local beat = tonumber(redis.call('HGET', key, 'last_heartbeat') or '')
    local score = tonumber(entries[i + 1])
    if beat and score and score < math.huge and (score - beat) - left / 1000 >= tonumber(ARGV[2]) then
      table.insert(found, entries[i])
    end
  end
end
return found
"""

#: KEYS: a started registry. ARGV: EXECUTION_PREFIX. Scores 0 every member whose execution key has
#: expired (its worker stopped heartbeating, by Redis's TTL), for RQ's cleanup to take as abandoned.
_ABANDONED = """
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. member) == 0 then redis.call('ZADD', KEYS[1], 0, member) end
end
return 1
"""


def silent_jobs(client: redis.Redis, queue_name: str) -> list[str]:
    """Ids of the jobs in ``queue_name``'s started registry whose worker has not sent a heartbeat for
    ``lifecycle.LEASE_S`` or more, by Redis's clock."""
    registry = StartedJobRegistry(queue_name, connection=client, serializer=JSONSerializer)
    found = client.register_script(_SILENT)(keys=[registry.key], args=[EXECUTION_PREFIX, lifecycle.LEASE_S])
    return [records.text(member).rsplit(":", 1)[0] for member in found]


def clean_registries(queue: Queue, exception_handlers: list[Any], now: float) -> None:
    """``rq.registry.clean_registries`` by Redis's clock (``now``): the finished, failed and deferred
    entries past ``now``, and as abandoned only the started executions whose key expired."""
    common: dict[str, Any] = {"connection": queue.connection, "job_class": queue.job_class,
                              "serializer": queue.serializer}  # fmt: skip
    FinishedJobRegistry(queue.name, **common).cleanup(timestamp=now)
    started = StartedJobRegistry(queue.name, **common)
    queue.connection.register_script(_ABANDONED)(keys=[started.key], args=[EXECUTION_PREFIX])
    started.cleanup(timestamp=0, exception_handlers=exception_handlers)  # the entries scored 0 just now
    FailedJobRegistry(queue.name, **common).cleanup(timestamp=now)
    DeferredJobRegistry(queue.name, **common).cleanup(timestamp=now)
