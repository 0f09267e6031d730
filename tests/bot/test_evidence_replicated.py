"""With BATON_REDIS_REPLICAS, the log's tree head is served only once a replica holds it: a primary
that died with it unreplicated would let the next primary sign another tree of that size.

A real primary and replica; the replica frozen with SIGSTOP acknowledges nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from baton.settings import Settings
from bot.app import create_app
from evidence.keys import SigningKey
from evidence.log import Log
from tests.redis_topology import Topology

INSTALLATION = 4242


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Topology]:
    setup = Topology(tmp_path / "redis", replicas=1, sentinels=0)
    try:
        yield setup.start()
    finally:
        setup.stop()


def test_the_checkpoint_is_served_only_once_a_replica_holds_it(pair: Topology) -> None:
    key = SigningKey.generate()
    primary = pair.data[0].client()
    Log(primary, INSTALLATION).append(b'{"entry": 1}', key)
    settings = Settings(signing_key=key, audit_secret=b"s" * 32, redis_replicas=1, redis_timeout=0.3)
    app = create_app(settings, f"redis://127.0.0.1:{pair.data[0].port}/0")
    path = f"/.well-known/baton/log/{INSTALLATION}/checkpoint"
    with TestClient(app) as client:
        assert client.get(path).json()["treeSize"] == 1
        pair.data[1].freeze()
        try:
            Log(primary, INSTALLATION).append(b'{"entry": 2}', key)
            refused = client.get(path)
            assert refused.status_code == 503
            assert refused.json() == {"error": "the transparency log is unavailable: try again shortly"}
        finally:
            pair.data[1].thaw()
        assert client.get(path).json()["treeSize"] == 2
    primary.close()
