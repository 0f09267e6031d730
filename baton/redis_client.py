"""How every Baton process reaches Redis: one URL, plain or through Sentinel, and one way to connect.

``REDIS_URL`` names either one server (``redis://``, ``rediss://``, ``unix://``, as redis-py reads
them) or a Sentinel set and the name of the service it watches::

    redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]
    rediss+sentinel://...   (TLS to the Sentinels and to the data nodes)

The user and password are the data nodes' (an ACL user, or only a password); Sentinels that need a
login of their own take ``?sentinel_username=...&sentinel_password=...``. TLS options redis-py knows
(``ssl_ca_certs``, ``ssl_cert_reqs``, ``ssl_certfile``, ``ssl_keyfile``) may follow as query fields.

A client made here finds the current primary when it connects and finds it again after a failover:
a connection to a primary that died, or that came back as a replica (``READONLY``), is dropped and
the next attempt asks the Sentinels. Waiting is always bounded. ``connect`` (workers and the CLI)
retries a failed command with back-off for up to ``failover_wait`` seconds, long enough for
Sentinel to promote a replica; past that it raises, and the process says so and exits for its
platform to restart it. ``connect_async`` (the web side) never retries on its own: a webhook that
cannot be stored within ``BATON_REDIS_TIMEOUT`` gets a 503, GitHub records the failure, and the
redelivery pass asks for it again.

``await_replicas`` is the other half of a failover that loses nothing: Redis replicates
asynchronously, so a write Baton acknowledges (a delivery's 2xx, a publication, a log entry) is
first confirmed by ``BATON_REDIS_REPLICAS`` replicas (``WAIT``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.connection
import redis.sentinel
from redis.asyncio.connection import AbstractConnection as AsyncAbstractConnection
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError, ReadOnlyError, TimeoutError
from redis.retry import Retry

from baton import keys
from baton.errors import RedisUnavailable

log = logging.getLogger("baton.redis")
T = TypeVar("T")

SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_FORM = "redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]"
EXAMPLE = "redis+sentinel://:PASSWORD@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0"
#: Query fields a Sentinel URL may carry: the Sentinels' own login, and redis-py's TLS options.
SENTINEL_QUERY = ("sentinel_username", "sentinel_password", "ssl_ca_certs", "ssl_cert_reqs",
                  "ssl_certfile", "ssl_keyfile")  # fmt: skip
#: A service name as Sentinel's `sentinel monitor` accepts it, kept to what reads plainly in a URL.
_SERVICE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
#: Back-off between attempts while a failover runs: from 50 ms, doubling, to at most one second.
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0
#: How much sooner than the client's read timeout a WAIT is told to give up.
WAIT_MARGIN_S = 0.25


@dataclass(frozen=True)
class SentinelTarget:
    """A Sentinel URL, taken apart."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_options: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """Where this URL points, without secrets: for logs, `baton doctor` and errors."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"Sentinel service {self.service!r} (db {self.db}) via {hosts}" + (
            " over TLS" if self.tls else ""
        )


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def check_url(url: str) -> None:
    """ValueError naming what is wrong with ``url`` and the form to write, unless Baton can use it."""
    if not url.lower().startswith(SCHEMES):
        raise ValueError(
            "REDIS_URL must start with redis://, rediss://, unix://, redis+sentinel:// or rediss+sentinel://"
        )
    if is_sentinel(url):
        parse_sentinel(url)


def parse_sentinel(url: str) -> SentinelTarget:
    """``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]`` -> its parts."""
    form = f"expected {SENTINEL_FORM}, e.g. {EXAMPLE}"
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SENTINEL_SCHEMES:
        raise ValueError(f"REDIS_URL is not a Sentinel URL; {form}")
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
        if password is None and username is not None:  # "secret@host": a bare password, as redis:// reads it
            username, password = None, username
    sentinels = []
    for item in hostlist.split(","):
        host, colon, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"REDIS_URL names Sentinel {item.strip()!r}, which is not host:port; {form}")
        sentinels.append((host, int(port)))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError(f"REDIS_URL must name the service Sentinel watches, and optionally a db; {form}")
    service = path[0]
    if not set(service) <= _SERVICE_CHARS:
        raise ValueError(
            f"REDIS_URL's service name {service!r} may hold only letters, digits and ._-; {form}"
        )
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise ValueError(f"REDIS_URL's db must be a number, got {path[1]!r}; {form}")
        db = int(path[1])
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(SENTINEL_QUERY))
    if unknown:
        raise ValueError(
            f"REDIS_URL has query field {unknown[0]!r}, which a Sentinel URL does not take "
            f"(it takes {', '.join(SENTINEL_QUERY)})"
        )
    if parts.fragment:
        raise ValueError(f"REDIS_URL may not have a #fragment; {form}")
    tls = scheme == "rediss+sentinel"
    tls_options = {k: v for k, v in query.items() if k.startswith("ssl_")}
    if tls_options and not tls:
        raise ValueError("REDIS_URL sets TLS options on redis+sentinel://; write rediss+sentinel:// for TLS")
    return SentinelTarget(tuple(sentinels), service, db, username, password, query.get("sentinel_username"),
                          query.get("sentinel_password"), tls, tls_options)  # fmt: skip


def describe(url: str) -> str:
    """What ``url`` points at, without secrets (the Sentinel set, or the redacted URL)."""
    if is_sentinel(url):
        return parse_sentinel(url).describe()
    from baton.settings import redact_url  # noqa: PLC0415 - settings imports this module

    return redact_url(url)


class FailoverRetry(Retry):
    """redis-py's retry, bounded by time rather than by count: a command that fails to reach the
    primary is tried again with back-off until ``failover_wait`` seconds have passed since its first
    failure, then ``NoPrimary`` is raised (not a ``redis.RedisError``: code that shrugs off a lost
    Redis write must not shrug this off, the process is to exit and be restarted)."""

    def __init__(self, failover_wait: float, where: str) -> None:
        super().__init__(ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), -1)
        self.failover_wait = failover_wait
        self.where = where

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        self._backoff.reset()  # type: ignore[no-untyped-call]
        failures = 0
        first: float | None = None
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if is_retryable is not None and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                now = time.monotonic()
                first = now if first is None else first
                left = first + self.failover_wait - now
                if left <= 0:
                    raise _gave_up(self.where, self.failover_wait, error) from error
                time.sleep(min(self._backoff.compute(failures), left))


class NoPrimary(RedisUnavailable):
    """No Redis primary answered for ``BATON_REDIS_FAILOVER_WAIT`` seconds (code ``redis-no-primary``)."""


#: Where (``describe(url)``) a client of this process gave up finding a primary, and why.
_gave_up_with: dict[str, NoPrimary] = {}


def _gave_up(where: str, waited: float, error: BaseException) -> NoPrimary:
    found = NoPrimary(
        "redis-no-primary",
        f"no Redis primary answered at {where} for {waited:g}s (BATON_REDIS_FAILOVER_WAIT); last error: "
        f"{str(error).rstrip('.')}. This process exits so that its platform starts it again.",
    )
    log.error(found.message)
    _gave_up_with[where] = found
    return found


def gave_up(url: str | None) -> NoPrimary | None:
    """Did a client of this process give up on finding ``url``'s primary? The worker then exits
    non-zero (and skips RQ's farewell, which is Redis writes)."""
    return _gave_up_with.get(describe(url)) if url is not None else None


def connect(
    url: str,
    *,
    timeout: float | None = None,
    failover_wait: float = 0.0,
    name: str | None = None,
    decode_responses: bool = False,
) -> redis.Redis:
    """A client for the current primary. ``timeout`` bounds each connect and each reply (None: no
    bound, for RQ's blocking dequeue, whose own wait is bounded); a connection error is retried
    with back-off for up to ``failover_wait`` seconds, then raised. ``name`` is sent as
    `CLIENT SETNAME`; where the server refuses `CLIENT` (managed services do), it is left out."""
    # No wait: one attempt, and the caller sees redis-py's own error (the web side answers 503 on it).
    retry = FailoverRetry(failover_wait, describe(url)) if failover_wait > 0 else Retry(NoBackoff(), 0)
    common: dict[str, Any] = {
        "socket_connect_timeout": timeout if timeout is not None else 5.0,
        "socket_timeout": timeout,
        "retry": retry,
        "retry_on_error": [ConnectionError, TimeoutError, ReadOnlyError],
        "decode_responses": decode_responses,
    }
    if name is not None and client_name_allowed(url, timeout):
        common["client_name"] = name
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **common)
    target = parse_sentinel(url)
    manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, timeout), **_node_kwargs(target)
    )
    following = _FollowingSSLConnection if target.tls else _FollowingConnection
    client: _SentinelClient = manager.master_for(  # type: ignore[no-untyped-call]
        target.service, redis_class=_SentinelClient, connection_class=following, **common
    )
    client.sentinel_manager = manager
    return client


def connect_async(url: str, *, timeout: float, name: str | None = None) -> aioredis.Redis:
    """A client for the web side: every wait bounded by ``timeout``, no retries of its own (the
    caller answers 503 and GitHub's redelivery does the retrying)."""
    common: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "retry_on_timeout": False,
        "retry": None,
    }
    if name is not None and client_name_allowed(url, timeout):
        common["client_name"] = name
    if not is_sentinel(url):
        return aioredis.Redis.from_url(url, **common)
    target = parse_sentinel(url)
    manager = aiosentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=_sentinel_kwargs(target, timeout), **_node_kwargs(target)
    )
    following = _AsyncFollowingSSLConnection if target.tls else _AsyncFollowingConnection
    client: _AsyncSentinelClient = manager.master_for(
        target.service, redis_class=_AsyncSentinelClient, connection_class=following, **common
    )
    client.sentinel_manager = manager
    return client


class _FollowingConnection(redis.sentinel.SentinelManagedConnection):
    """A connection to the primary that asks the Sentinels where it is every time it (re)connects.

    redis-py's Sentinel connection looks the primary up only in ``connect()``, but since redis-py 8
    a dropped connection reconnects through ``connect_check_health`` when its next command is sent
    (and so within the client's own retries), which goes back to the address it had: the dead
    primary, refused until the retries run out. Looking it up there too is what lets a worker
    follow a failover."""

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if getattr(self, "_sock", None) is not None:  # connected already
            return
        if self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        AbstractConnection.connect_check_health(self, check_health, retry_socket_connect=False)

    def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        AbstractConnection.connect_check_health(self, self.connection_pool.check_connection, False)


class _FollowingSSLConnection(_FollowingConnection, redis.connection.SSLConnection):
    pass


class _AsyncFollowingConnection(aiosentinel.SentinelManagedConnection):
    """The same for the web side's asyncio connections."""

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self.is_connected:
            return
        if self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await AsyncAbstractConnection.connect_check_health(self, check_health, retry_socket_connect=False)

    async def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        await AsyncAbstractConnection.connect_check_health(self, self.connection_pool.check_connection, False)


class _AsyncFollowingSSLConnection(_AsyncFollowingConnection, aioredis.SSLConnection):
    pass


class _SentinelClient(redis.Redis):
    """A primary's client that also closes its connections to the Sentinels when it is closed."""

    sentinel_manager: redis.sentinel.Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.sentinel_manager is not None:
            self.sentinel_manager.close()


class _AsyncSentinelClient(aioredis.Redis):
    """The same for the web side's asyncio client."""

    sentinel_manager: aiosentinel.Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel_manager is not None:
            await self.sentinel_manager.aclose()


def _node_kwargs(target: SentinelTarget) -> dict[str, Any]:
    """How to log in to the data nodes (primary and replicas)."""
    found: dict[str, Any] = {"db": target.db}
    if target.username is not None:
        found["username"] = target.username
    if target.password is not None:
        found["password"] = target.password
    if target.tls:
        found["ssl"] = True
        found.update(target.tls_options)
    return found


def _sentinel_kwargs(target: SentinelTarget, timeout: float | None) -> dict[str, Any]:
    """How to talk to the Sentinels: their own login, the same TLS, a bounded wait per Sentinel."""
    bound = min(timeout, 2.0) if timeout is not None else 2.0
    found: dict[str, Any] = {"socket_connect_timeout": bound, "socket_timeout": bound}
    if target.sentinel_username is not None:
        found["username"] = target.sentinel_username
    if target.sentinel_password is not None:
        found["password"] = target.sentinel_password
    if target.tls:
        found["ssl"] = True
        found.update(target.tls_options)
    return found


_CLIENT_NAME_ALLOWED: dict[str, bool] = {}


def client_name_allowed(url: str, timeout: float | None) -> bool:
    """Does the server let us name our connections (`CLIENT SETNAME`)? Managed services often refuse
    `CLIENT`, and redis-py would then fail every connection it names. Asked once per URL and
    process; a server that cannot be asked now is assumed to allow it (the name is a courtesy to
    operators reading `CLIENT LIST`, and the first connection will report why Redis is unreachable)."""
    if url in _CLIENT_NAME_ALLOWED:
        return _CLIENT_NAME_ALLOWED[url]
    probe = connect(url, timeout=timeout or 2.0)
    try:
        probe.client_setname("baton-probe")
        allowed = True
    except redis.ResponseError:
        allowed = False
    except redis.RedisError:
        return True
    finally:
        probe.close()
    _CLIENT_NAME_ALLOWED[url] = allowed
    return allowed


class NotReplicated(RedisUnavailable):
    """Fewer replicas than ``BATON_REDIS_REPLICAS`` confirmed a write within the timeout."""


@dataclass(frozen=True, slots=True)
class Replication:
    """What ``BATON_REDIS_REPLICAS`` asks of a write Baton acknowledges: ``required`` replicas within
    ``timeout`` seconds (``BATON_REDIS_TIMEOUT``). ``required`` 0 asks nothing and costs nothing."""

    required: int = 0
    timeout: float = 2.0

    def confirm(self, client: redis.Redis, what: str) -> None:
        """Return once enough replicas hold everything written so far; else raise NotReplicated."""
        await_replicas(client, self.required, self.timeout, what)


NO_REPLICAS = Replication()


def await_replicas(client: redis.Redis, required: int, timeout: float, what: str) -> None:
    """Return once ``required`` replicas hold every write this primary had taken before the call;
    raise NotReplicated (code ``redis-not-replicated``) if fewer confirm within ``timeout``.

    `WAIT` counts the writes of the connection it runs on, and a pool hands out any connection,
    so the call makes a write of its own on the same connection first (a counter in
    ``keys.REPLICATION_MARK_KEY``): replicas apply the stream in order, so a replica that has that
    write has everything the primary took before it, the caller's writes included."""
    if required <= 0:
        return
    # WAIT must give up before the client's own read does, or a slow replica reads as a dead Redis;
    # Redis ends a WAIT on its timer tick (every 100 ms at the default hz), so leave it room.
    bound = client.connection_pool.connection_kwargs.get("socket_timeout")
    if isinstance(bound, int | float) and bound > 0:
        timeout = min(timeout, bound - WAIT_MARGIN_S)
    with client.pipeline(transaction=False) as pipe:
        pipe.incr(keys.REPLICATION_MARK_KEY)
        pipe.execute_command("WAIT", required, max(1, int(timeout * 1000)))  # type: ignore[no-untyped-call]
        _, acknowledged = pipe.execute()
    if int(acknowledged) < required:
        raise NotReplicated(
            "redis-not-replicated",
            f"{what}: {acknowledged} of the {required} Redis replicas BATON_REDIS_REPLICAS asks for "
            f"confirmed it within {timeout:g}s; check the replicas (`INFO replication` on the primary)",
        )
