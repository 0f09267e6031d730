"""Two `baton serve` processes behind one address, as a platform's proxy puts them (fly.io's, say).

GitHub sends each delivery to the one webhook URL; the balancer (``tests.balancer``) hands each
request to the next `baton serve` process in turn, both on one Redis. A delivery sent again (a
redelivery: the same GUID) reaches the other process: it must be stored once all the same, and
answered as a duplicate by whichever process it reached. One process stopping leaves the address
working.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from baton import keys, records
from baton.redis_server import free_port
from bot.app import WEBHOOK_PATH
from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from tests.balancer import Balancer, balancer
from tests.conftest import EvidenceKeys, delivery_headers

LABELS = 4
START_S = 30.0


@dataclass
class Front:
    """The emulator's world, two serve processes behind a balancer, one control worker."""

    admin: AdminClient
    w: world.World
    balancer: Balancer
    port: int  # where the balancer listens
    serves: list[tuple[subprocess.Popen[bytes], str]]  # (process, its own base URL)
    work: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{WEBHOOK_PATH}"

    def logs(self) -> str:
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.work.glob("*.log")
        )

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{self.logs()}")
            time.sleep(0.05)

    def label(self, title: str) -> dict[str, Any]:
        number = int(self.admin.create_issue(world.REPO, title=title, user="maria")["number"])
        [delivery] = self.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
        return {**delivery, "number": number}

    def comments(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.admin.comments() if c["issue_number"] == number
                and (c.get("performed_via_github_app") or {}).get("id") == self.w.app_id]  # fmt: skip

    def deliveries(self, base: str) -> dict[str, int]:
        """``baton_deliveries_total`` by outcome, from one serve process's own /metrics."""
        text = httpx.get(f"{base}/metrics", timeout=5).text
        return {
            m[0]: int(m[1]) for m in re.findall(r'baton_deliveries_total\{outcome="([^"]+)"\} (\d+)', text)
        }


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "baton", *argv], env=env, stdout=out, stderr=out)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def front(tmp_path: Path, redis_url: str, evidence_keys: EvidenceKeys) -> Iterator[Front]:
    ports = [free_port(), free_port()]
    procs: list[subprocess.Popen[bytes]] = []
    with (
        EmulatorServer(tmp_path / "github") as server,
        AdminClient(server.url) as admin,
        balancer(ports) as (front_door, front_port),
    ):
        w = world.build(admin, server.url, webhook_url=f"http://127.0.0.1:{front_port}{WEBHOOK_PATH}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "GITHUB_"))}
        env.update(evidence_keys.env(), REDIS_URL=redis_url, WEBHOOK_SECRET=w.webhook_secret,
                   APP_ID=str(w.app_id), PRIVATE_KEY=w.private_key, GITHUB_API_URL=server.url,
                   XDG_CACHE_HOME=str(tmp_path / "cache"), BATON_DATA_DIR=str(tmp_path / "data"),
                   LOG_LEVEL="WARNING")  # fmt: skip
        try:
            serves = []
            for i, port in enumerate(ports):
                proc = _start(
                    ["serve", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / f"serve-{i}.log"
                )
                procs.append(proc)
                serves.append((proc, f"http://127.0.0.1:{port}"))
            procs.append(_start(["worker", "--queues", "baton-control"], env, tmp_path / "worker.log"))
            made = Front(admin, w, front_door, front_port, serves, tmp_path)
            for proc, base in serves:
                made.wait(lambda b=base, p=proc: _ready(b, p), START_S, f"baton serve on {base}")
            yield made
        finally:
            for proc in reversed(procs):
                _stop(proc)


def _ready(base: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        pytest.fail(f"baton serve on {base} exited with {proc.returncode}")
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _send_again(front: Front, delivery: dict[str, Any]) -> httpx.Response:
    """The delivery again: the same GUID, its payload signed (the balancer gives each request the
    next process in turn)."""
    payload = front.admin.call("GET", f"/deliveries/{delivery['id']}")["payload"]
    body = json.dumps(payload).encode()
    headers = delivery_headers(body, delivery["event"], delivery["guid"], front.w.webhook_secret.encode())
    with httpx.Client(timeout=10) as client:
        return client.post(front.url, content=body, headers=headers)


def test_deliveries_through_one_address_to_two_serves_are_stored_once(front: Front, rdb: redis.Redis) -> None:
    sent = [front.label(f"Behind one address {i}") for i in range(LABELS)]
    assert [d["status_code"] for d in sent] == [202] * LABELS

    for delivery in sent:
        for _ in range(2):  # two requests in a row: one to each process
            again = _send_again(front, delivery)
            assert again.status_code == 200, again.text
            assert again.json() == {"status": "duplicate", "task_id": delivery["guid"]}
        redelivered = front.admin.redeliver(int(delivery["id"]))  # GitHub's own redelivery, same GUID
        assert redelivered["status_code"] == 200, redelivered

    stored = [
        k.decode()
        for k in rdb.scan_iter(f"{keys.TASK_PREFIX}*")
        if not k.decode().endswith(records.HISTORY_SUFFIX)
    ]
    assert sorted(stored) == sorted(keys.TASK_PREFIX + d["guid"] for d in sent)
    seen = [front.deliveries(base) for _, base in front.serves]
    assert sum(s.get("queued", 0) for s in seen) == LABELS, seen
    assert all(s.get("duplicate", 0) >= LABELS for s in seen), seen  # each process turned copies away
    assert all(n > LABELS for n in front.balancer.served), front.balancer.served

    for delivery in sent:  # and each label was worked once: one status comment per issue
        front.wait(lambda n=delivery["number"]: bool(front.comments(n)), 30, "the status comments")
    assert [len(front.comments(d["number"])) for d in sent] == [1] * LABELS
    metrics = httpx.get(f"{front.serves[0][1]}/metrics", timeout=5).text
    assert 'baton_worker_events_total{event="duty_sweep"}' in metrics  # the worker's duties, in /metrics

    stopped, _ = front.serves[0]
    _stop(stopped)  # one process goes (a deploy, a crash): the address still takes deliveries
    late = front.label("After one process stopped")
    assert late["status_code"] == 202, late
    front.wait(lambda: bool(front.comments(late["number"])), 30, "the last status comment")
