"""A failover that loses sealed audit entries leaves a gap `baton audit verify` names, never a fork.

Real processes: a primary, one replica and three Sentinels. The replica is cut off (the primary
changes its password and drops the replica's link, so the replica cannot log in again) while the
worker seals more entries, so only the primary has them; the primary is then killed and Sentinel
promotes the replica. The worker that sealed the lost entries seals again on the new primary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from baton import redis_client
from evidence import audit as chain
from evidence.audit import AuditChain, derive_key
from tests.conftest import EvidenceKeys
from tests.redis_topology import Security, topology
from worker import audit

pytestmark = pytest.mark.drill
INSTALLATION = 7


def _capture(client: object, count: int, what: str) -> None:
    for n in range(count):
        chain.record(client, INSTALLATION, {"event": what, "n": n})  # type: ignore[arg-type]


def test_entries_lost_with_the_primary_are_a_named_gap(tmp_path: Path, evidence_keys: EvidenceKeys) -> None:
    secret = evidence_keys.audit_secret.encode()
    with topology(
        tmp_path / "redis", replicas=1, sentinels=3, security=Security(password="pw-01234567")
    ) as topo:
        client = redis_client.connect(topo.url, timeout=2.0, failover_wait=30)
        _capture(client, 10, "before")
        assert audit.seal(client, secret) == 10
        redis_client.await_replicas(client, 1, 5.0, "the first ten entries")

        old = topo.primary()
        direct = old.client()
        direct.config_set("requirepass", "another-password")  # the replica cannot log in again...
        direct.client_kill_filter(_type="replica")  # ...once its link is dropped
        direct.close()
        _capture(client, 5, "only-on-the-old-primary")
        assert audit.seal(client, secret) == 5  # entries 10..14, never replicated
        old.kill()
        topo.wait_failover(old)

        _capture(client, 2, "after")
        assert audit.seal(client, secret) == 2
        found = AuditChain(client, INSTALLATION, derive_key(secret, INSTALLATION))
        survey = found.survey()
        assert survey.broken is None
        assert survey.gaps == (chain.Gap(10, 14, 15),)
        assert found.head() is not None
        assert found.head()[0] == 17  # type: ignore[index]
        client.close()

        env = {**{k: v for k, v in os.environ.items() if not k.startswith("BATON_")}, **evidence_keys.env(),
               "REDIS_URL": topo.url}  # fmt: skip
        verified = subprocess.run([sys.executable, "-m", "baton", "audit", "verify"], env=env, text=True,
                                  capture_output=True, timeout=60, check=False)  # fmt: skip
        assert verified.returncode == 0, verified.stderr
        assert f"installation {INSTALLATION}: 13 entries intact" in verified.stdout  # 10, the gap, 2
        gap = "gap: entries 10 to 14 lost with a Redis primary (named by entry 15)"
        assert f"installation {INSTALLATION}: {gap}" in verified.stdout
