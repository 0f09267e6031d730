"""Store a task in Redis, exactly once per delivery id and per body, before anyone answers 2xx.

One Lua script does the whole thing atomically. It first checks three keys:
the delivery id, the sha256 of the body, and the task's record. If any
exists, the delivery is a redelivery (same id) or a replay (the HMAC covers
the body, not `X-GitHub-Delivery`, so a captured body re-sent under a fresh
id is the same delivery) and nothing is written. Otherwise it sets the id and
body keys (7 days each), writes the task's record in state ``queued`` (its
history entry and the ``queued`` registry: the shapes ``worker.lifecycle``
writes for later moves), the RQ job hash, pushes the job id onto its queue
and registers the queue, and captures the task's first audit event ("accepted",
``evidence.audit``) for the worker to seal. Racing requests with the same id or the
same body therefore make exactly one job, and a refused one leaves no trace.

Concurrent requests are batched: whatever arrives while a round trip is in
flight goes out together in the next pipeline, so one connection carries
thousands of deliveries a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError, NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq.job import Callback, Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer

from baton import keys, queues, records
from baton.errors import RedisUnavailable
from baton.redis_client import NotReplicated
from baton.tasks import Task
from evidence import audit

_NUMKEYS = 10
ENQUEUE_SCRIPT = f"""
-- KEYS: 1 delivery id, 2 body sha256, 3 task record, 4 its history, 5 RQ job hash,
--       6 RQ queue, 7 RQ's set of queues, 8 the {records.QUEUED} registry,
--       9 the installation's pending audit events, 10 the audit chain's installations
-- ARGV: 1 task id, 2 dedupe TTL, 3 record TTL, 4 updated_at, 5 registry score,
--       6 detail, 7 history entry, 8 audit event, 9 installation, 10.. the job hash's fields and values
local seen = redis.call('GET', KEYS[1]) or redis.call('GET', KEYS[2])
if seen then return seen end
if redis.call('EXISTS', KEYS[3]) == 1 then return ARGV[1] end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
local now = redis.call('TIME')
redis.call('HSET', KEYS[3], 'state', '{records.QUEUED}', 'detail', ARGV[6], 'updated_at', ARGV[4],
           '{records.QUEUED_AT}', now[1] .. '.' .. string.format('%06d', now[2]))
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('RPUSH', KEYS[4], ARGV[7])
redis.call('LTRIM', KEYS[4], -{records.HISTORY_LIMIT}, -1)
redis.call('EXPIRE', KEYS[4], ARGV[3])
redis.call('ZADD', KEYS[8], ARGV[5], ARGV[1])
redis.call('HSET', KEYS[5], unpack(ARGV, 10))
redis.call('RPUSH', KEYS[6], ARGV[1])
redis.call('SADD', KEYS[7], KEYS[6])
redis.call('RPUSH', KEYS[9], ARGV[8])
redis.call('SADD', KEYS[10], ARGV[9])
return 1
"""

#: Most deliveries one pipeline carries; bounds memory and latency under load.
MAX_BATCH = 256
#: Tasks smaller than this are stored plain: setting up zlib costs more than it saves.
COMPRESS_OVER = 4096


@dataclass(frozen=True, slots=True)
class Prepared:
    """One task as the tail of an EVALSHA command, RESP-encoded before touching Redis.

    Encoding here (static fields once per queue, see ``_layout``) rather than
    in redis-py's generic packer is what keeps a delivery at a few microseconds:
    the generic packer spent ~100 µs on the ~40 arguments of a job hash.
    """

    job_id: str
    argc: int  # arguments after EVALSHA, sha, numkeys
    tail: bytes


def _bulk(value: str | bytes | int) -> bytes:
    raw = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%b\r\n" % (len(raw), raw)


_AUDIT_INSTALLATIONS = _bulk(audit.INSTALLATIONS)


def prepare(task: Task, now: float) -> Prepared:
    """The script call that stores this task, as the tail of an EVALSHA command.

    RQ owns the job hash's format: the static fields come from a job RQ itself
    created (see ``_layout``); per task we set only what RQ sets per job. The
    task's ``received_at`` (``now`` as ``baton.logs.timestamp`` writes it) doubles
    as RQ's created/enqueued time and as the record's ``updated_at``; ``now`` is
    the task's score in the ``queued`` registry.
    """
    spec = queues.QUEUE_FOR[task.kind]
    layout = _layout(spec.name)
    # RQ's JSON serializer reads this back (orjson writes plain JSON; it knows
    # dataclasses and enums natively, ~20x faster than asdict + json).
    data = orjson.dumps([queues.JOB_FUNCTION, None, [task], {}])
    if len(data) > COMPRESS_OVER:  # RQ reads compressed and plain data alike
        data = zlib.compress(data, 1)
    repo = task.repository.full_name if task.repository else "-"
    description = f"{task.kind} {repo} #{task.number or '-'} delivery {task.delivery_id}"
    detail, detail_bulk = _detail(task.kind, spec.name)
    # The entry worker.lifecycle.move writes, for the move from nothing to queued.
    entry = orjson.dumps({"at": task.received_at, "from": None, "to": records.QUEUED, "detail": detail})
    stamp = _bulk(task.received_at)
    record = records.TASK_PREFIX + task.id
    # The audit chain's first event for this task, captured with the task itself (evidence.audit).
    installation = task.installation_id or 0
    event = {"at": task.received_at, "task": task.id, "event": "accepted", "kind": str(task.kind),
             "queue": spec.name}  # fmt: skip
    accepted = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    return Prepared(
        job_id=task.id,
        argc=layout.argc,
        tail=b"".join(
            (
                _bulk(queues.DEDUPE_PREFIX + task.id),
                _bulk(queues.BODY_PREFIX + task.payload_sha256),
                _bulk(record),
                _bulk(record + records.HISTORY_SUFFIX),
                _bulk(Job.redis_job_namespace_prefix + task.id),
                layout.after_job_key,
                _bulk(audit.pending_key(installation)),
                _AUDIT_INSTALLATIONS,
                _bulk(task.id),
                layout.after_task_id,
                stamp,
                _bulk(b"%.6f" % now),  # seconds, as the worker scores its registries
                detail_bulk,
                _bulk(entry),
                _bulk(accepted),
                _bulk(installation),
                layout.after_history,
                stamp,
                layout.after_created,
                stamp,
                layout.after_enqueued,
                _bulk(description),
                layout.after_description,
                _bulk(data),
            )
        ),
    )


@functools.cache
def _detail(kind: str, queue_name: str) -> tuple[str, bytes]:
    detail = f"{kind} queued on {queue_name}"
    return detail, _bulk(detail)


@dataclass(frozen=True, slots=True)
class _Layout:
    """The constant RESP pieces of one queue's script call, between the per-task ones."""

    argc: int
    after_job_key: bytes  # the queue, RQ's set of queues, the queued registry (KEYS[6..8])
    after_task_id: bytes  # the dedupe and record TTLs
    after_history: bytes  # RQ's static job fields, then the name "created_at"
    after_created: bytes
    after_enqueued: bytes
    after_description: bytes


_PER_JOB_FIELDS = ("created_at", "enqueued_at", "description", "data")


@functools.cache
def _layout(queue_name: str) -> _Layout:
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
        on_failure=Callback(queues.FAILURE_CALLBACK),
    )
    static: list[str | bytes | int] = []
    for key, value in job.to_dict().items():
        if key not in _PER_JOB_FIELDS:
            static += [key, value.value if isinstance(value, JobStatus) else value]
    head = 9  # ARGV[1..9]: task id, two TTLs, updated_at, score, detail, history entry, audit event, inst
    return _Layout(
        argc=_NUMKEYS + head + len(static) + 2 * len(_PER_JOB_FIELDS),
        after_job_key=b"".join(
            map(
                _bulk,
                (
                    Queue.redis_queue_namespace_prefix + spec.name,
                    Queue.redis_queues_keys,
                    records.REGISTRY_PREFIX + records.QUEUED,
                ),
            )
        ),
        after_task_id=_bulk(queues.DEDUPE_TTL_S) + _bulk(records.RECORD_TTL_S),
        after_history=b"".join(map(_bulk, static)) + _bulk("created_at"),
        after_created=_bulk("enqueued_at"),
        after_enqueued=_bulk("description"),
        after_description=_bulk("data"),
    )


#: How late Redis may answer a `WAIT` that timed out: it checks those timeouts on its clock
#: tick (`hz`, 10 a second by default), so `WAIT 1 300` answers after 300 to 400 ms.
WAIT_LATE_S = 0.1


async def _reply(conn: aioredis.Connection) -> object:
    """The next reply; an error reply is returned, not raised (the ones after it still follow)."""
    try:
        return await conn.read_response()
    except ResponseError as exc:
        return exc


_SCRIPT_LOAD = b"*3\r\n" + _bulk(b"SCRIPT") + _bulk(b"LOAD") + _bulk(ENQUEUE_SCRIPT)
_MARK = b"*2\r\n" + _bulk(b"INCR") + _bulk(keys.REPLICATION_MARK_KEY)


class Enqueuer:
    """Owns one Redis connection and the batching loop.

    One connection, one batch in flight: whatever arrives during a round trip
    is written in the next one. Each delivery has its own deadline, so a hung
    Redis costs a caller at most ``timeout`` seconds.

    With ``replicas`` > 0 (BATON_REDIS_REPLICAS) each batch is followed, in the same
    write on the same connection, by an `INCR` of ``keys.REPLICATION_MARK_KEY`` and
    `WAIT replicas ms`. `WAIT` counts the writes of its own connection, and a batch of
    duplicates writes nothing, yet a duplicate's original (written by another request,
    perhaps on a connection since dropped) may be the write no replica has: the mark is
    a write after all of them, and replicas apply the stream in order. Fewer replicas
    than asked for: every delivery of the batch, new or duplicate, is NotReplicated;
    so is one whose deadline passes after Redis stored it, while `WAIT` still waits.
    """

    def __init__(self, client: aioredis.Redis, timeout: float, replicas: int = 0) -> None:
        self._client = client
        self._conn: aioredis.Connection | None = None
        self._timeout = timeout
        self._replicas = replicas
        self._pending: list[tuple[Prepared, asyncio.Future[str | None], float]] = []
        self._wakeup = asyncio.Event()
        self._sha: bytes | None = None
        self._runner: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Deliveries Redis has stored (or had stored) whose batch's `WAIT` has not answered yet.
        self._replicating: set[asyncio.Future[str | None]] = set()

    async def submit(self, item: Prepared) -> str | None:
        """None if the task was stored now; else the id of the task already stored
        for this delivery id or this body (a redelivery or a replay), and nothing was written.

        Raises RedisUnavailable if Redis refused the write, or did not confirm it
        within the timeout (code ``redis-timeout``: then it may have landed), and
        NotReplicated (``redis-not-replicated``) if fewer replicas than required hold it.
        """
        loop = self._loop
        if loop is None or self._runner is None or self._runner.done():
            # Kept: asking for the running loop is a getpid(2) each time (CPython's fork check).
            loop = self._loop = asyncio.get_running_loop()
            self._runner = loop.create_task(self._run())
        future: asyncio.Future[str | None] = loop.create_future()
        self._pending.append((item, future, loop.time() + self._timeout))
        self._wakeup.set()
        expiry = loop.call_later(self._timeout, self._expire, future)
        try:
            return await future
        finally:
            expiry.cancel()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                live = [entry for entry in batch if not entry[1].done()]
                if live:
                    await self._flush([(item, fut) for item, fut, _ in live], min(d for _, _, d in live))

    async def _flush(self, batch: list[tuple[Prepared, asyncio.Future[str | None]]], deadline: float) -> None:
        try:
            try:
                results, acknowledged = await self._execute(batch, deadline)
            except (ConnectionError, OSError):
                # A dropped connection (Redis restarted, a failover, idle timeout): once more on
                # a fresh one. Safe because the script is idempotent per delivery id
                # (one that landed before the drop is then answered as a duplicate).
                await self._reset()
                results, acknowledged = await self._execute(batch, deadline)
        except (RedisError, OSError) as exc:
            await self._reset()
            error = RedisUnavailable(
                "redis-unreachable", f"Redis could not be reached or dropped the write: {exc}"
            )
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        finally:
            self._replicating.clear()
        unreplicated = None
        if self._replicas and (not isinstance(acknowledged, int) or acknowledged < self._replicas):
            unreplicated = self._not_replicated(acknowledged)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):  # e.g. OOM: refused before its first write
                future.set_exception(RedisUnavailable("redis-refused", f"Redis refused the write: {result}"))
            elif unreplicated is not None:  # stored, or stored before: either may be lost in a failover
                future.set_exception(unreplicated)
            elif result == 1:
                future.set_result(None)
            else:  # the id of the task already stored for this delivery id or body
                future.set_result(records.text(result))

    def _not_replicated(self, acknowledged: object) -> NotReplicated:
        """``acknowledged``: WAIT's count, its or the mark's error, or None (the deadline came first)."""
        asked = f"the {self._replicas} Redis replica(s) BATON_REDIS_REPLICAS asks for"
        within = f"within the {self._timeout:g}s BATON_REDIS_TIMEOUT"
        if isinstance(acknowledged, int):
            said = f"{acknowledged} of {asked} confirmed the write {within}"
        elif isinstance(acknowledged, Exception):
            said = f"Redis could not say whether {asked} hold the write ({acknowledged})"
        else:
            said = f"{asked} did not confirm the write {within}"
        return NotReplicated(
            "redis-not-replicated", f"{said}; check the replicas (`INFO replication` on the primary)"
        )

    def _expire(self, future: asyncio.Future[str | None]) -> None:
        if future.done():
            return
        if future in self._replicating:  # stored; only the replicas' word is missing
            future.set_exception(self._not_replicated(None))
        else:
            future.set_exception(
                RedisUnavailable("redis-timeout", f"Redis did not answer within {self._timeout:g}s")
            )

    async def _execute(
        self, batch: list[tuple[Prepared, asyncio.Future[str | None]]], deadline: float
    ) -> tuple[list[object], object]:
        """Each item's script reply, and the last `WAIT`'s (None when no replica is required):
        it follows every write this connection made, so it speaks for all of them."""
        if self._sha is None:
            self._sha = await self._load_script()
        results, acknowledged = await self._send(self._sha, batch, deadline)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:  # a restarted or new primary: its script cache is empty, nothing of these ran
            self._sha = await self._load_script()
            again, acknowledged = await self._send(self._sha, [batch[i] for i in missing], deadline)
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        return results, acknowledged

    async def _connection(self) -> aioredis.Connection:
        """The connection, connected. Through `connect()`: a Sentinel-managed connection asks
        the Sentinels for the primary there (an implicit connect on send would not). Its sends
        and reads have no bound of their own (redis-py's is a timer, and a task for each send):
        ``_bounded`` bounds a whole exchange instead."""
        if self._conn is None:
            self._conn = self._client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
            self._conn.socket_timeout = None  # connecting stays bounded: socket_connect_timeout
        if not self._conn.is_connected:
            await self._conn.connect()
        return self._conn

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[None]:
        """At most ``timeout`` for one exchange; past it, the connection is dropped (a read or
        send cut short leaves it out of step) and redis-py's TimeoutError raised."""
        try:
            async with asyncio.timeout(self._timeout):
                yield
        except TimeoutError:
            await self._reset()
            raise RedisTimeoutError(f"Redis did not answer within {self._timeout:g}s") from None

    async def _load_script(self) -> bytes:
        """SCRIPT LOAD on our own connection: the server that answers is the one that runs it."""
        async with self._bounded():
            conn = await self._connection()
            await conn.send_packed_command(_SCRIPT_LOAD, check_health=False)
            sha: object = await conn.read_response()
        return sha if isinstance(sha, bytes) else str(sha).encode()

    async def _send(
        self, sha: bytes, batch: list[tuple[Prepared, asyncio.Future[str | None]]], deadline: float
    ) -> tuple[list[object], object]:
        head = _bulk(b"EVALSHA") + _bulk(sha) + _bulk(_NUMKEYS)
        packed = b"".join(b"*%d\r\n%b%b" % (item.argc + 3, head, item.tail) for item, _ in batch)
        if self._replicas:
            # What is left of the batch's first deadline, less the lateness of WAIT's own timeout.
            left = deadline - asyncio.get_running_loop().time() - WAIT_LATE_S
            wait_ms = max(1, int(left * 1000))
            packed += _MARK + b"*3\r\n$4\r\nWAIT\r\n%b%b" % (_bulk(self._replicas), _bulk(wait_ms))
        results: list[object] = []
        replies: list[object] = []
        async with self._bounded():
            conn = await self._connection()
            await conn.send_packed_command(packed, check_health=False)
            for _ in batch:
                results.append(await _reply(conn))
            if self._replicas:
                for (_, future), result in zip(batch, results, strict=True):
                    if not isinstance(result, Exception):
                        self._replicating.add(future)
                replies = [await _reply(conn), await _reply(conn)]
        if not self._replicas:
            return results, None
        mark, acknowledged = replies
        # A refused mark (OOM) leaves nothing to wait for that covers a duplicate: not confirmed.
        return results, mark if isinstance(mark, Exception) else acknowledged

    async def _reset(self) -> None:
        """Drop the connection: after an error its reply stream may be out of step."""
        if self._conn is not None:
            await self._conn.disconnect()

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        if self._conn is not None:
            await self._conn.disconnect()
        await self._client.aclose()  # a Sentinel client closes its Sentinels' connections too
