"""What Redis may hold of the App's credentials: never the JWT, installation tokens only sealed.

Redis is shared by every Baton process and reachable by more than Baton; the App's JWT can
mint a token with all the App's permissions, so it stays in process memory. Installation
tokens are cached in Redis encrypted under a key derived from the App's private key, which
Redis does not hold; an entry that does not decrypt is a cache miss.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import redis

from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from tests.worker.conftest import FAST, Stage
from worker.github import api
from worker.github.client import CACHE_PREFIX, AppCredentials, GitHubApp

_JWT = re.compile(rb"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def redis_contents(rdb: redis.Redis) -> list[bytes]:
    """Every key and every value (of every type) in Redis, as bytes."""
    blobs: list[bytes] = []
    for key in rdb.scan_iter(count=1000):
        blobs.append(key)
        kind = rdb.type(key).decode()
        if kind == "string":
            blobs.append(rdb.get(key) or b"")
        elif kind == "hash":
            for field, value in rdb.hgetall(key).items():
                blobs += [field, value]
        elif kind == "list":
            blobs += rdb.lrange(key, 0, -1)
        elif kind == "set":
            blobs += list(rdb.smembers(key))
        elif kind == "zset":
            blobs += [member for member, _ in rdb.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _, entry in rdb.xrange(key):
                for field, value in entry.items():
                    blobs += [field, value]
        else:
            raise AssertionError(f"{key!r} has a type this scan does not read: {kind}")
    return blobs


def app_jwts(blob: bytes, app_id: int) -> list[str]:
    """JWTs in ``blob`` that GitHub would take as issued by the App."""
    found = []
    for match in _JWT.finditer(blob):
        candidate = match.group().decode()
        try:
            claims = jwt.decode(candidate, options={"verify_signature": False})
        except jwt.PyJWTError:
            continue
        if str(claims.get("iss")) == str(app_id):
            found.append(candidate)
    return found


def issued_tokens(admin: AdminClient) -> list[str]:
    return [str(t["token"]) for t in admin.call("GET", "/state")["tokens"]]


def token_requests(admin: AdminClient) -> list[dict[str, Any]]:
    return [r for r in admin.requests() if r["method"] == "POST" and r["path"].endswith("/access_tokens")]


def read_repo(app: GitHubApp, stage: Stage, access: str = "read") -> api.RepoHead:
    return api.repo_head(app.for_repository(stage.world.installation_id, world.REPO, access), world.REPO)


def cached_token_keys(rdb: redis.Redis) -> list[bytes]:
    return sorted(rdb.scan_iter(match=f"{CACHE_PREFIX}:*installation:*"))


def test_the_scan_would_see_a_jwt_or_token_in_redis(stage: Stage) -> None:
    """The check below means something: the same scan finds what it looks for when it is there."""
    now = datetime.now(UTC)
    claims = {"iss": str(stage.world.app_id), "iat": now, "exp": now + timedelta(minutes=9)}
    minted = jwt.encode(claims, stage.world.private_key, algorithm="RS256")
    stage.rdb.hset("probe", "job", f'{{"auth": "Bearer {minted}", "t": "ghs_probe"}}')
    blobs = redis_contents(stage.rdb)
    assert [j for b in blobs for j in app_jwts(b, stage.world.app_id)] == [minted]
    assert any(b"ghs_probe" in b for b in blobs)


def test_redis_holds_neither_the_jwt_nor_a_plain_installation_token(stage: Stage) -> None:
    app = stage.ctx.github
    assert app is not None
    read_repo(app, stage)
    api.request(app.app, "GET", "/app/installations")  # a JWT call as well
    [token] = issued_tokens(stage.admin)
    assert len(token_requests(stage.admin)) == 1
    assert cached_token_keys(stage.rdb)  # the token is shared through Redis...
    for blob in redis_contents(stage.rdb):  # ...but nothing in Redis can be used as it is
        assert not app_jwts(blob, stage.world.app_id)
        assert token.encode() not in blob


def test_another_worker_with_the_same_key_reuses_the_sealed_token(stage: Stage) -> None:
    assert stage.ctx.github is not None
    read_repo(stage.ctx.github, stage)
    creds = AppCredentials(str(stage.world.app_id), stage.world.private_key, stage.server.url)
    other = GitHubApp(creds, redis.Redis(connection_pool=stage.rdb.connection_pool), timeout=5, retry=FAST)
    read_repo(other, stage)
    assert len(token_requests(stage.admin)) == 1


def test_an_app_with_another_private_key_mints_its_own_token(stage: Stage, tmp_path: Path) -> None:
    """A rotated key: the same App and installation ids (a second GitHub that knows only the new
    key), the same Redis. Reusing the first token would be refused there."""
    assert stage.ctx.github is not None
    read_repo(stage.ctx.github, stage)
    with EmulatorServer(tmp_path / "rotated") as server, AdminClient(server.url) as admin:
        rotated = world.build(admin, server.url)
        assert (rotated.app_id, rotated.installation_id) == (stage.world.app_id, stage.world.installation_id)
        creds = AppCredentials(str(rotated.app_id), rotated.private_key, server.url)
        other = GitHubApp(creds, stage.rdb, timeout=5, retry=FAST)
        assert read_repo(other, stage).private is True
        assert len(token_requests(admin)) == 1
    read_repo(stage.ctx.github, stage)  # the first key's token is still there for its holders
    assert len(token_requests(stage.admin)) == 1


def test_a_tampered_token_is_a_cache_miss(stage: Stage) -> None:
    app = stage.ctx.github
    assert app is not None
    read_repo(app, stage)
    [key] = cached_token_keys(stage.rdb)
    sealed = stage.rdb.get(key)
    assert sealed is not None
    middle = len(sealed) // 2
    flipped = sealed[:middle] + (b"A" if sealed[middle : middle + 1] != b"A" else b"B") + sealed[middle + 1 :]
    stage.rdb.set(key, flipped, keepttl=True)
    read_repo(app, stage)
    assert len(token_requests(stage.admin)) == 2
    stage.rdb.set(key, b"not even base64 \xff", keepttl=True)
    read_repo(app, stage)
    assert len(token_requests(stage.admin)) == 3


def test_a_sealed_token_only_opens_under_its_own_key(stage: Stage) -> None:
    """Moving a wider token (report: issues and checks write) to a narrower entry (read) does not
    hand it out: each entry is sealed to its own Redis key."""
    app = stage.ctx.github
    assert app is not None
    read_repo(app, stage, "read")
    read_repo(app, stage, "report")
    assert len(token_requests(stage.admin)) == 2
    read_key, report_key = sorted(cached_token_keys(stage.rdb), key=lambda k: b"issues" in k)
    assert b"issues" in report_key
    stage.rdb.set(read_key, stage.rdb.get(report_key) or b"", keepttl=True)
    read_repo(app, stage, "read")
    [*_, asked] = token_requests(stage.admin)
    assert len(token_requests(stage.admin)) == 3
    assert asked["body"]["permissions"] == {"metadata": "read", "contents": "read"}
