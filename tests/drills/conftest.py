"""The drills' stage (the emulator, its world, Baton's endpoint on loopback) and their pool of real
`baton worker` processes, on the session's Redis; a drill with a Redis of its own overrides both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import EvidenceKeys
from tests.drills.procs import worker_pool
from tests.worker.conftest import Stage, Workers, make_stage


@pytest.fixture
def stage(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, redis_url, rdb)


@pytest.fixture
def workers(stage: Stage, redis_url: str, tmp_path: Path, evidence_keys: EvidenceKeys) -> Iterator[Workers]:
    with worker_pool(stage, redis_url, tmp_path, evidence_keys) as pool:
        yield pool
