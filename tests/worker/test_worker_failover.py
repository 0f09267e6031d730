"""`baton worker` through Sentinel: it rides out a failover, and a primary lost for longer than
BATON_REDIS_FAILOVER_WAIT ends it with a clear line and a non-zero status, for its platform to
restart it (never a worker that silently stops taking jobs). Real processes throughout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from baton import redis_client
from tests.conftest import EvidenceKeys
from tests.drills.procs import registered, wait_for
from tests.redis_topology import topology

pytestmark = pytest.mark.drill


def _worker(tmp_path: Path, url: str, keys: EvidenceKeys, *args: str, wait: str) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BATON_") and k != "REDIS_URL"},
           **keys.env(), "REDIS_URL": url, "BATON_REDIS_FAILOVER_WAIT": wait, "LOG_LEVEL": "INFO",
           "BATON_DATA_DIR": str(tmp_path / "data"), "BATON_AGENT_WORKERS": "0"}  # fmt: skip
    with (tmp_path / "worker.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "baton", "worker", *args], env=env, stdout=out, stderr=out
        )


@pytest.mark.parametrize("args", [("--queues", "baton-control"), ()], ids=["one-worker", "supervised-pools"])
def test_a_worker_whose_primary_stays_lost_says_so_and_exits_for_a_restart(
    tmp_path: Path, evidence_keys: EvidenceKeys, args: tuple[str, ...]
) -> None:
    with topology(tmp_path / "redis", replicas=0, sentinels=1) as topo:
        rdb = redis_client.connect(topo.url, timeout=2.0)
        worker = _worker(tmp_path, topo.url, evidence_keys, *args, wait="3")
        try:
            log = lambda: (tmp_path / "worker.log").read_text(errors="replace")  # noqa: E731
            wait_for(lambda: registered(rdb, set()) and len(rdb.smembers("rq:workers")) >= 1, 60,
                     "the worker to register", log)  # fmt: skip
            rdb.close()
            topo.primary().kill()  # a lone primary: there is nothing to promote
            killed = time.monotonic()
            code = worker.wait(timeout=90)
            took = time.monotonic() - killed
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert code == 1, log()
    assert 3 <= took < 60, f"exited {took:.1f}s after the primary was lost\n{log()}"
    assert "no Redis primary answered at Sentinel service" in log()
    assert "BATON_REDIS_FAILOVER_WAIT" in log()
    said = "a lost primary is said in one line, not in a traceback"
    assert "Traceback" not in log(), f"{said}:\n{log()[-6000:]}"
