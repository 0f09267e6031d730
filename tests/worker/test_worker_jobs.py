"""The worker side: a real RQ worker (forking) runs what the endpoint stored."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from baton import queues
from baton.settings import Settings
from baton.tasks import Kind, Repository, Sender, Task, Untrusted
from bot.app import WEBHOOK_PATH, create_app
from tests.conftest import SECRET, EvidenceKeys, closed_issue, delivery_headers, example, labeled
from worker import lifecycle


def _task(**overrides: object) -> Task:
    base: dict[str, object] = {
        "id": "d-1", "kind": Kind.AGENT_RUN, "delivery_id": "d-1", "event": "issues", "action": "labeled",
        "installation_id": 1, "repository": Repository(1, "o/r", True), "number": 3, "head_sha": None,
        "sender": Sender("alice", "User"), "received_at": "2026-11-30T00:00:00.000Z",
        "payload_sha256": "0" * 64, "agent": "aider",
    }  # fmt: skip
    return Task(**{**base, **overrides})  # type: ignore[arg-type]


def test_a_task_from_another_schema_version_is_refused() -> None:
    data = _task().to_dict()
    data["schema"] = 99
    with pytest.raises(ValueError, match="schema 99"):
        Task.from_dict(data)


def test_task_round_trips_through_its_dict() -> None:
    task = _task(untrusted=Untrusted("t", "b", "c"))
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_rq_worker_runs_stored_jobs_to_a_visible_terminal_state(
    redis_url: str, rdb: redis.Redis, tmp_path: Path, evidence_keys: EvidenceKeys
) -> None:
    """No App credentials: tasks that need GitHub end `failed` saying so; the rest finish."""
    deliveries: dict[str, str] = {}
    closed = closed_issue(tmp_path / "github")
    installation = example("installation", "created")
    with TestClient(create_app(Settings(webhook_secrets=(SECRET,)), redis_url)) as c:
        for name, event, payload in (
            ("agent", "issues", labeled()),
            ("cancel", "issues", closed),
            ("install", "installation", installation),
        ):
            body = json.dumps(payload).encode()
            delivery = str(uuid.uuid4())
            assert (
                c.post(
                    WEBHOOK_PATH, content=body, headers=delivery_headers(body, event, delivery)
                ).status_code
                == 202
            )
            deliveries[name] = delivery

    names = ",".join(q.name for q in queues.ALL)
    env = {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin", **evidence_keys.env()}
    done = subprocess.run(
        [sys.executable, "-m", "baton", "worker", "--queues", names, "--burst"],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]

    def record(name: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in rdb.hgetall(lifecycle.PREFIX + deliveries[name]).items()}

    assert record("agent")["state"] == "failed"
    assert "no-app-credentials" in record("agent")["detail"]
    # A cancel is authorised like a run, against GitHub: without credentials it cannot be.
    assert record("cancel")["state"] == "failed"
    assert "no-app-credentials" in record("cancel")["detail"]
    assert record("install")["state"] == "done"
    assert [e["to"] for e in lifecycle.history(rdb, deliveries["agent"])] == ["queued", "running", "failed"]
    assert rdb.zscore(lifecycle.REGISTRY + "failed", deliveries["agent"]) is not None
    assert rdb.zscore(lifecycle.REGISTRY + "running", deliveries["agent"]) is None
    for spec in queues.ALL:
        assert rdb.llen("rq:queue:" + spec.name) == 0
