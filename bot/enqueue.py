"""Store a task in Redis, exactly once per delivery id, before anyone answers 2xx.

One Lua script does the whole thing atomically: `SET NX` the delivery id
(7 days), and only if that succeeded write the RQ job hash, push the job id
onto its queue and register the queue. Two racing requests with the same id
therefore make exactly one job. Concurrent requests are batched: whatever
arrives while a round trip is in flight goes out together in the next
pipeline, so one connection carries thousands of deliveries a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import zlib
from dataclasses import dataclass

import orjson
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.utils import now, utcformat

from bot import queues
from bot.errors import RedisUnavailable
from bot.tasks import Task

ENQUEUE_SCRIPT = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], KEYS[3])
return 1
"""

#: Most deliveries one pipeline carries; bounds memory and latency under load.
MAX_BATCH = 256


@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything the script needs for one task; built before touching Redis."""

    job_id: str
    queue_key: str
    job_key: str
    fields: tuple[str | bytes | int, ...]


def prepare(task: Task) -> Prepared:
    """The job hash RQ would write for this task, built in a few microseconds.

    RQ owns the format: the static fields come from a job RQ itself created
    (see ``_template``); per task we set only what RQ sets per job.
    """
    spec = queues.QUEUE_FOR[task.kind]
    stamp = utcformat(now())
    # RQ's JSON serializer reads this back (orjson writes plain JSON; it knows
    # dataclasses and enums natively, ~20x faster than asdict + json).
    data = zlib.compress(orjson.dumps([queues.JOB_FUNCTION, None, [task], {}]), 1)
    repo = task.repository.full_name if task.repository else "-"
    return Prepared(
        job_id=task.id,
        queue_key=Queue.redis_queue_namespace_prefix + spec.name,
        job_key=Job.redis_job_namespace_prefix + task.id,
        fields=(
            *_template(spec.name),
            "created_at", stamp,
            "enqueued_at", stamp,
            "description", f"{task.kind} {repo} #{task.number or '-'} delivery {task.delivery_id}",
            "data", data,
        ),
    )  # fmt: skip


_PER_JOB_FIELDS = frozenset({"created_at", "enqueued_at", "description", "data"})


@functools.cache
def _template(queue_name: str) -> tuple[str | bytes | int, ...]:
    """Static job-hash fields for a queue, taken from a job RQ built itself."""
    spec = queues.BY_NAME[queue_name]
    job = Job.create(
        queues.JOB_FUNCTION,
        id="template",
        serializer=JSONSerializer,
        # A client that never connects: RQ does not save this job, the script writes its fields.
        connection=redis.Redis(),
        timeout=spec.job_timeout,
        result_ttl=queues.RESULT_TTL_S,
        failure_ttl=queues.FAILURE_TTL_S,
        origin=spec.name,
        status=JobStatus.QUEUED,
    )
    fields: list[str | bytes | int] = []
    for key, value in job.to_dict().items():
        if key not in _PER_JOB_FIELDS:
            fields += [key, value.value if isinstance(value, JobStatus) else value]
    return tuple(fields)


class Enqueuer:
    """Owns one async Redis client and the batching loop."""

    def __init__(self, client: aioredis.Redis, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._pending: list[tuple[Prepared, asyncio.Future[bool]]] = []
        self._wakeup = asyncio.Event()
        self._sha: str | None = None
        self._runner: asyncio.Task[None] | None = None

    async def submit(self, item: Prepared) -> bool:
        """True if stored now, False if the delivery id was seen before.

        Raises RedisUnavailable if Redis did not confirm within the timeout.
        """
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run())
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._wakeup.set()
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._timeout)
        except TimeoutError:
            raise RedisUnavailable(
                "redis-timeout", f"Redis did not answer within {self._timeout:g}s"
            ) from None

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._flush(batch)

    async def _flush(self, batch: list[tuple[Prepared, asyncio.Future[bool]]]) -> None:
        try:
            results = await self._execute([item for item, _ in batch])
        except (RedisError, OSError) as exc:
            error = RedisUnavailable("redis-error", f"Redis refused or dropped the write: {exc}")
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):  # e.g. OOM: this one was not stored
                future.set_exception(RedisUnavailable("redis-error", f"Redis refused the write: {result}"))
            else:
                future.set_result(result == 1)

    async def _execute(self, items: list[Prepared]) -> list[object]:
        if self._sha is None:
            self._sha = await self._client.script_load(ENQUEUE_SCRIPT)
        try:
            return await self._pipeline(self._sha, items)
        except NoScriptError:  # Redis restarted and lost its script cache
            self._sha = await self._client.script_load(ENQUEUE_SCRIPT)
            return await self._pipeline(self._sha, items)

    async def _pipeline(self, sha: str, items: list[Prepared]) -> list[object]:
        async with self._client.pipeline(transaction=False) as pipe:
            for item in items:
                pipe.evalsha(
                    sha,
                    4,
                    queues.DEDUPE_PREFIX + item.job_id,
                    item.job_key,
                    item.queue_key,
                    Queue.redis_queues_keys,
                    item.job_id,
                    queues.DEDUPE_TTL_S,
                    *item.fields,
                )
            results: list[object] = await pipe.execute(raise_on_error=False)
        for result in results:
            if isinstance(result, NoScriptError):
                raise result
        return results

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self._client.aclose()
