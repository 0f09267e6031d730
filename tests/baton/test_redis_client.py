"""REDIS_URL through Sentinel: the URL's parts, and clients that follow a real failover.

The topologies are real redis-server processes (tests/redis_topology.py): a primary, replicas and
three Sentinels on loopback, the primary killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis

from baton import redis_client, settings
from baton.errors import ConfigError
from tests.redis_topology import SERVICE, Security, make_certs, topology


@pytest.mark.parametrize(
    ("url", "sentinels", "service", "db"),
    [
        ("redis+sentinel://10.0.0.1:26379/mymaster", (("10.0.0.1", 26379),), "mymaster", 0),
        ("redis+sentinel://a:1,b:2,[::1]:3/svc/4", (("a", 1), ("b", 2), ("::1", 3)), "svc", 4),
        ("rediss+sentinel://u:p@s.example:26380/prod-redis/0", (("s.example", 26380),), "prod-redis", 0),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_service_and_the_db(
    url: str, sentinels: tuple[tuple[str, int], ...], service: str, db: int
) -> None:
    target = redis_client.parse_sentinel(url)
    assert (target.sentinels, target.service, target.db) == (sentinels, service, db)


def test_the_login_is_the_data_nodes_and_the_sentinels_have_their_own() -> None:
    target = redis_client.parse_sentinel(
        "rediss+sentinel://baton:p%40ss@h:1/svc?sentinel_password=sp&ssl_ca_certs=/etc/ca.pem"
    )
    assert (target.username, target.password) == ("baton", "p@ss")
    assert (target.sentinel_username, target.sentinel_password) == (None, "sp")
    assert target.tls
    assert target.tls_options == {"ssl_ca_certs": "/etc/ca.pem"}
    bare = redis_client.parse_sentinel("redis+sentinel://secret@h:1/svc")  # as redis:// reads "secret@"
    assert (bare.username, bare.password) == (None, "secret")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:1", "must name the service"),
        ("redis+sentinel://h:1/svc/0/extra", "must name the service"),
        ("redis+sentinel://h/svc", "not host:port"),
        ("redis+sentinel://h:99999/svc", "not host:port"),
        ("redis+sentinel://h:1,/svc", "not host:port"),
        ("redis+sentinel://h:1/my%20master", "service name"),
        ("redis+sentinel://h:1/svc/zero", "db must be a number"),
        ("redis+sentinel://h:1/svc?timeout=3", "query field 'timeout'"),
        ("redis+sentinel://h:1/svc?ssl_ca_certs=/ca.pem", "rediss+sentinel:// for TLS"),
        ("memcached://h:1", "REDIS_URL must start with"),
    ],
)
def test_a_bad_url_stops_start_up_naming_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings.load({"REDIS_URL": url})
    assert caught.value.code == "bad-setting"
    assert says in caught.value.message


def test_the_sentinel_urls_passwords_are_never_shown() -> None:
    url = "redis+sentinel://baton:hunter2-secret@a:1,b:2/svc?sentinel_password=other-secret"
    loaded = settings.load({"REDIS_URL": url})
    assert loaded.redis_url == url
    for shown in (repr(loaded), settings.redact_url(url), redis_client.describe(url)):
        assert "hunter2-secret" not in shown
        assert "other-secret" not in shown
    assert redis_client.describe(url) == "Sentinel service 'svc' (db 0) via a:1,b:2"


def test_replicas_and_the_failover_wait_are_settings_with_bounds() -> None:
    loaded = settings.load({"BATON_REDIS_REPLICAS": "1", "BATON_REDIS_FAILOVER_WAIT": "15"})
    assert (loaded.redis_replicas, loaded.redis_failover_wait) == (1, 15.0)
    assert (settings.load({}).redis_replicas, settings.load({}).redis_failover_wait) == (0, 60.0)
    with pytest.raises(ConfigError, match="BATON_REDIS_REPLICAS must be between 0 and 16"):
        settings.load({"BATON_REDIS_REPLICAS": "-1"})


@pytest.mark.drill
def test_a_client_follows_the_primary_through_a_failover_and_back(tmp_path: Path) -> None:
    with topology(tmp_path, replicas=2, security=Security(password="pw-0123456789")) as topo:
        client = redis_client.connect(topo.url, timeout=1.0, failover_wait=30, name="baton-test")
        client.set("before", "1")
        redis_client.await_replicas(client, 2, 2.0, "the first write")
        old = topo.primary()

        old.kill()
        started = time.monotonic()
        client.set("during", "2")  # blocks until Sentinel has promoted a replica, then lands there
        took = time.monotonic() - started
        new = topo.wait_failover(old)
        assert new is not old
        assert new.client().get("during") == b"2"
        assert client.get("before") == b"1", "a write confirmed by the replicas survives the failover"
        assert took < 30

        # The old primary comes back: Sentinel makes it a replica of the new one, and a client that
        # still had a connection to it is not fooled (its writes would be READONLY there).
        old.start()
        topo.wait_for(lambda: old.role() == "slave", 30, "the old primary to come back as a replica")

        # Its full sync comes first: under load that takes longer than a write does. And under CI's load
        # Sentinel (down-after 1 s here) may fail over once more meanwhile, taking an unreplicated write
        # with it (asynchronous replication: what BATON_REDIS_REPLICAS is for), so the write is made again
        # until the old primary holds it.
        def replicated() -> bool:
            client.set("after", "3")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if old.client().get("after") == b"3":
                    return True
                time.sleep(0.1)
            return False

        topo.wait_for(replicated, 60, "the old primary to replicate")
        assert client.client_getname() == "baton-test"
        client.close()


@pytest.mark.drill
def test_no_primary_for_the_failover_wait_is_reported_and_ends_the_wait(tmp_path: Path) -> None:
    with topology(tmp_path, replicas=0, sentinels=1) as topo:
        client = redis_client.connect(topo.url, timeout=0.5, failover_wait=2.0)
        client.set("k", "v")
        topo.primary().kill()  # nothing to promote
        started = time.monotonic()
        with pytest.raises(redis_client.NoPrimary) as caught:
            client.get("k")
        assert 2.0 <= time.monotonic() - started < 10
        assert caught.value.code == "redis-no-primary"
        assert f"Sentinel service '{SERVICE}'" in caught.value.message
        assert "BATON_REDIS_FAILOVER_WAIT" in caught.value.message
        assert not isinstance(caught.value, redis.RedisError), "code that shrugs off Redis errors must not"
        assert redis_client.gave_up(topo.url) is caught.value
        assert redis_client.gave_up("redis://127.0.0.1:9/0") is None  # another Redis: not this one


@pytest.mark.drill
def test_acl_users_a_sentinel_password_and_tls_work_through_sentinel(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    security = Security(user="baton", password="pw-data-0123", sentinel_password="pw-sentinel-45", tls=certs)
    with topology(tmp_path / "redis", replicas=1, security=security) as topo:
        assert topo.url.startswith("rediss+sentinel://baton:")
        client = redis_client.connect(topo.url, timeout=2.0, failover_wait=10)
        client.set("k", "v")
        assert client.acl_whoami() == "baton"
        redis_client.await_replicas(client, 1, 2.0, "a write over TLS")

        async def read() -> bytes | None:
            aclient = redis_client.connect_async(topo.url, timeout=2.0, name="baton-serve")
            try:
                value: bytes | None = await aclient.get("k")
                return value
            finally:
                await aclient.aclose()

        assert asyncio.run(read()) == b"v"
        client.close()
        wrong = topo.url.replace("sentinel_password=pw-sentinel-45", "sentinel_password=wrong")
        with pytest.raises(redis.RedisError, match="No master found"):
            redis_client.connect(wrong, timeout=1.0).ping()


@pytest.mark.drill
def test_await_replicas_says_how_many_confirmed(tmp_path: Path) -> None:
    with topology(tmp_path, replicas=1, sentinels=1) as topo:
        client = redis_client.connect(topo.url, timeout=2.0)
        client.set("k", "v")
        redis_client.await_replicas(client, 1, 1.0, "a delivery")
        redis_client.await_replicas(client, 0, 1.0, "nothing asked")
        started = time.monotonic()
        with pytest.raises(redis_client.NotReplicated) as caught:
            redis_client.await_replicas(client, 2, 0.3, "a delivery")
        assert time.monotonic() - started < 3
        assert caught.value.code == "redis-not-replicated"
        assert "a delivery: 1 of the 2 Redis replicas" in caught.value.message
