"""Now, by Redis: the one clock every time compared across hosts is read from.

Workers run on several machines whose clocks differ. A lease, a due time or a budget day written
by one worker and read by another must come from one clock, or a worker whose clock runs a minute
fast sees every other worker's lease as run out. That clock is the Redis primary's (``TIME``):

- a Lua script reads it itself (``LUA_NOW``; Redis 7 replicates a script's effects, not the
  script, so ``TIME`` in a script that writes is allowed);
- a WATCH/MULTI transaction reads it once in its watch phase;
- any other operation reads it once (``now``), and passes the reading to what it calls.

Times that are only shown to people (a history entry's ``at``, an audit event's, a log line's) may
stay the worker's own; each such place says so.

Also here: which primary the workers talk to (``LUA_PRIMARY``). After a failover the new primary
may lack the last writes of the old one: a lease taken there, a move to ``running``, RQ's dequeue.
A worker still running such a task learns it at its next lease renewal (``worker.lifecycle``); the
new primary holds every new lease, and every sweep, back for one ``LEASE_S`` after the change, so
that worker has the time to notice and stop before the task is started again or swept.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from baton import keys

#: The primary's identity and since when (by its clock) it has been the one; a hash ``id``, ``since``.
PRIMARY_KEY = keys.PRIMARY_KEY

#: ``redis_now()``: seconds since the epoch, by the Redis server, to the microsecond; and
#: ``now_or(arg)``: ``arg`` as a number if the caller gave one (the tests' fixed times), else that.
LUA_NOW = """
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function now_or(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  return redis_now()
end
"""

#: ``primary_since(key, now)``: since when the server running the script has been the primary, as
#: far as Baton has seen: the time the first script to run on it noticed that its identity (the
#: server's ``run_id`` and its replication id, which a restart or a promotion both change) is not
#: the one recorded; 0 if nothing was recorded before (a new deployment: nothing to protect) or if
#: the server does not say who it is (a service that hides ``INFO``: no failover is ever seen there).
LUA_PRIMARY = """
local function primary_since(key, now)
  local server = redis.pcall('INFO', 'server')
  local replication = redis.pcall('INFO', 'replication')
  if type(server) ~= 'string' or type(replication) ~= 'string' then return 0 end
  local run_id = string.match(server, 'run_id:(%w+)')
  local replid = string.match(replication, 'master_replid:(%w+)')
  if not run_id or not replid then return 0 end
  local id = run_id .. ':' .. replid
  local seen = redis.call('HMGET', key, 'id', 'since')
  if seen[1] == id then return tonumber(seen[2]) or 0 end
  local since = 0
  if seen[1] then since = now end
  redis.call('HSET', key, 'id', id, 'since', string.format('%.6f', since))
  return since
end
"""


def now(client: redis.Redis) -> float:
    """Seconds since the epoch by the Redis server (one round trip)."""
    return of(client.time())


def of(reply: tuple[int, int]) -> float:
    """``TIME``'s reply (seconds, microseconds), read in a pipeline with other commands, as seconds."""
    seconds, micros = reply
    return seconds + micros / 1_000_000


def utc(client: redis.Redis) -> datetime:
    """Now by the Redis server, as an aware UTC datetime (budgets count UTC days)."""
    return datetime.fromtimestamp(now(client), UTC)


def arg(at: float | None) -> str:
    """A time for a script's ``now_or``: empty (the script reads ``TIME``) unless the caller fixed one."""
    return "" if at is None else f"{at:.6f}"


def evalsha(pipe: Pipeline, script: Script, keys: list[str], args: list[Any]) -> Any:
    """Run ``script`` at once on a pipeline in its watch phase, on the pipeline's own connection.

    redis-py's ``script(client=pipe)`` would also make the pipeline ask ``SCRIPT EXISTS`` before its
    ``EXEC`` (a round trip), and on another client it takes a second connection from the pool; here a
    script the server lost (a restart, a failover) is loaded again, on the same connection."""
    try:
        return pipe.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        script.sha = pipe.script_load(script.script)
        return pipe.evalsha(script.sha, len(keys), *keys, *args)
