"""Drill: the Redis primary is SIGKILLed in the middle of a flood of labels; Sentinel promotes a
replica; nothing GitHub was told is lost, stuck or doubled.

The deployment is the one `docs/deploy.md` draws for more than one machine, all real processes on
this machine: a primary with two replicas and three Sentinels (``tests.redis_topology``), two
`baton serve` processes behind one address (``tests.balancer``), `baton worker` processes for the
control queue on two hosts (``tests.hosts``: a network namespace, data directory and process group
each, the Redis nodes and Sentinels known by the bridge's address; where namespaces cannot be made,
processes here with data directories of their own) and one for merge gates and agent runs here
(they fetch and push over git, which Baton allows in plain http only to this machine). Every
process reaches Redis through the Sentinels (``REDIS_URL=redis+sentinel://...``) with
``BATON_REDIS_REPLICAS=1``: a delivery is answered 2xx only once a replica holds it, and nothing is
published on GitHub before a replica holds what it says.

Labels stream in (``N_LABELS``, one every ``SEND_EVERY_S``; every ``RUN_EVERY``-th a ``script``
agent run that opens a pull request, the others refused by the capability gate); after
``KILL_AFTER`` of them the primary is killed with SIGKILL. In the second variant it is started
again once a replica has taken over, and Sentinel turns it into a replica of the new primary.

What must hold (the issue's accounting):

1. every delivery answered 2xx is a task that reaches exactly one terminal state with one status
   comment; every delivery answered 503 during the switch was redelivered by the workers'
   recovery pass and became a task (``tests.drills.accounting``, which also checks that no check
   run is left in progress, no branch has two pull requests, and every published receipt is its
   log's entry under the root its checkpoint signed: no fork);
2. the workers keep running through the failover: none exits, none is restarted;
3. the audit chain verifies (`baton audit verify`).

The time from the kill to the first task finished on the new primary is printed with the figures.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import redis

from baton import queues, redis_client
from baton.redis_server import free_port
from emulator import world
from tests import hosts
from tests.balancer import Balancer, balancer
from tests.conftest import EvidenceKeys
from tests.drills import accounting, known_bugs
from tests.drills.procs import registered, wait_for, worker_env, worker_pool
from tests.hosts import Network
from tests.redis_topology import Node, Security, Topology
from tests.worker.conftest import Stage, Workers, make_stage
from worker import lifecycle

pytestmark = pytest.mark.drill

N_LABELS = 36
SEND_EVERY_S = 0.25
RUN_EVERY = 9
KILL_AFTER = 10
SETTLE_S = 180.0
#: What the hosts serve: admission, where the flood goes. Merge gates and agent runs fetch and push
#: over git, which Baton allows in plain http only to this machine: they run here.
HOST_QUEUES = queues.CONTROL.name
LOCAL_QUEUES = f"{queues.GATES.name},{queues.AGENTS.name}"
HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}
HOSTS = ("host-a", "host-b")
AGENT_HOST = "local"
#: What every process of the deployment is told about Redis.
REDIS_ENV = {"BATON_REDIS_REPLICAS": "1", "BATON_REDIS_FAILOVER_WAIT": "45", "BATON_REDIS_TIMEOUT": "2"}


@dataclass
class Deployment:
    topo: Topology
    stage: Stage
    pool: Workers
    front: Balancer
    keys: EvidenceKeys
    tmp_path: Path
    net: Network | None
    serves: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start_serve(self, port: int) -> None:
        w = self.stage.world
        env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") and k != "REDIS_URL"}
        env.update(self.keys.env())
        env.update(REDIS_ENV)
        env.update({"REDIS_URL": self.topo.url, "WEBHOOK_SECRET": w.webhook_secret, "APP_ID": str(w.app_id),
                    "PRIVATE_KEY": w.private_key, "GITHUB_API_URL": self.stage.server.url,
                    "HOST": "127.0.0.1", "PORT": str(port), "LOG_LEVEL": "WARNING",
                    "XDG_CACHE_HOME": str(self.tmp_path / f"serve-{port}")})  # fmt: skip
        with (self.tmp_path / f"serve-{port}.log").open("ab") as out:
            self.serves.append(subprocess.Popen([sys.executable, "-m", "baton", "serve"], env=env,
                                                stdout=out, stderr=out))  # fmt: skip
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(base + "/readyz", timeout=1).status_code == 200
            return False

        wait_for(ready, 30, f"baton serve on {port}", self.log)

    def start_workers(self) -> None:
        """A `baton worker` for the control queue per host: in a network namespace of its own where
        the machine allows (``tests.hosts``), else a process group and data directory of its own
        here; and one for merge gates and agent runs here (``LOCAL_QUEUES``)."""
        env = {**worker_env(AGENT_HOST), **REDIS_ENV, "BATON_REDELIVERY_INTERVAL": "1"}
        self.workers[AGENT_HOST] = self.pool.start(AGENT_HOST, queues=LOCAL_QUEUES, env=env)
        for i, host in enumerate(HOSTS):
            env = {**worker_env(host), **REDIS_ENV, "BATON_REDELIVERY_INTERVAL": "1"}
            if self.net is None:
                self.workers[host] = self.pool.start(host, queues=HOST_QUEUES, env=env)
                continue
            w = self.stage.world
            env.update(self.keys.env())
            github = self.net.reach(self.stage.server.url)
            env.update({"REDIS_URL": self.topo.url, "APP_ID": str(w.app_id), "PRIVATE_KEY": w.private_key,
                        "GITHUB_API_URL": github, "LOG_LEVEL": "WARNING"})  # fmt: skip
            argv = [sys.executable, "-m", "baton", "worker", "--queues", HOST_QUEUES]
            self.workers[host] = self.net.hosts[i].start(argv, env, "worker.log")

    def exited(self) -> list[str]:
        return [f"{host} exited {p.returncode}" for host, p in self.workers.items() if p.poll() is not None]

    def log(self) -> str:
        serves = "".join(p.read_text(errors="replace")[-2000:] for p in self.tmp_path.glob("serve-*.log"))
        hosts = self.net.logs() if self.net is not None else ""
        return f"{serves}\n{self.pool.log()}{hosts}"


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Network | None]:
    """The hosts the workers run on, or None where network namespaces cannot be made here."""
    if hosts.why_not() is not None:
        yield None
        return
    with Network(len(HOSTS), tmp_path / "hosts") as made:
        try:
            yield made
        finally:
            for host in made.hosts:  # the drill is over: no graceful stop to wait for
                host.kill()


@pytest.fixture
def topo(tmp_path: Path, net: Network | None) -> Iterator[Topology]:
    """Known to the hosts by the bridge's address where there are hosts."""
    address = net.gateway if net is not None else "127.0.0.1"
    security = Security(password="drill-pw-0123456")
    setup = Topology(tmp_path / "redis", replicas=2, sentinels=3, security=security, address=address)
    try:
        yield setup.start()
    finally:
        setup.stop()


@pytest.fixture
def rdb(topo: Topology) -> Iterator[redis.Redis]:
    """The drill's own view of Redis: through the Sentinels, as Baton's is."""
    client = redis_client.connect(topo.url, timeout=2.0, failover_wait=60)
    yield client
    client.close()


@pytest.fixture
def deployment(
    tmp_path: Path, net: Network | None, topo: Topology, rdb: redis.Redis, evidence_keys: EvidenceKeys
) -> Iterator[Deployment]:
    ports = [free_port(), free_port()]
    with balancer(ports) as (front, front_port):
        for stage in make_stage(tmp_path, topo.url, rdb, front_port=front_port):
            with worker_pool(stage, topo.url, tmp_path, evidence_keys) as pool:
                found = Deployment(topo, stage, pool, front, evidence_keys, tmp_path, net)
                try:
                    for port in ports:
                        found.start_serve(port)
                    yield found
                finally:  # the drill is over: its processes are killed, not asked to drain
                    for proc in found.serves:
                        if proc.poll() is None:
                            proc.kill()
                        proc.wait(timeout=20)


@dataclass
class Sent:
    guid: str
    number: int
    status: int | None
    at: float


def unanswered(stage: Stage) -> list[str]:
    """Deliveries of any event (a pull request's too) GitHub has seen fail and not yet seen answered
    2xx: each must be recovered by the workers' redelivery pass."""
    codes: dict[str, list[int | None]] = {}
    for delivery in stage.admin.deliveries():
        codes.setdefault(str(delivery["guid"]), []).append(delivery.get("status_code"))
    return [f"{guid}: delivery answered {found}" for guid, found in codes.items()
            if not any(c is not None and 200 <= c < 300 for c in found)]  # fmt: skip


def _finished_at(rdb: redis.Redis, task_id: str) -> float | None:
    if lifecycle.current(rdb, task_id) not in lifecycle.TERMINAL:
        return None
    at = lifecycle.field(rdb, task_id, "updated_at")
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() if at else None


@pytest.mark.parametrize("old_primary", ["stays-dead", "comes-back"])
def test_a_primary_killed_mid_flood_loses_no_acknowledged_label(
    deployment: Deployment, topo: Topology, rdb: redis.Redis, old_primary: str
) -> None:
    d = deployment
    stage = d.stage
    d.start_workers()
    pids = {p.pid for p in d.workers.values()}
    wait_for(lambda: registered(rdb, pids), 60, "the workers to register", d.log)

    sent: list[Sent] = []
    killed: Node | None = None
    killed_at = 0.0
    came_back = False
    started = time.monotonic()
    while len(sent) < N_LABELS:
        i = len(sent)
        if i == KILL_AFTER:
            killed = topo.primary()
            killed.kill()
            killed_at = time.time()
        if killed is not None and old_primary == "comes-back" and not came_back and i == KILL_AFTER + 12:
            topo.wait_failover(killed)
            killed.start()  # on its own port and data: Sentinel makes it a replica of the new primary
            came_back = True
        if i % RUN_EVERY == RUN_EVERY - 1:
            number, agent = stage.issue_with(HELLO, title=f"Say hello {i}"), "script"
        else:
            number, agent = stage.issue(title=f"Look it up {i}"), "researcher"  # denied: web_fetch
        [delivery] = stage.admin.label(world.REPO, number, [f"agent:{agent}"], sender="maria")["deliveries"]
        sent.append(Sent(delivery["guid"], number, delivery["status_code"], time.time()))
        time.sleep(max(0.0, started + len(sent) * SEND_EVERY_S - time.monotonic()))
    assert killed is not None
    new = topo.wait_failover(killed)
    if old_primary == "comes-back":
        topo.wait_for(lambda: killed.role() == "slave", 60, "the old primary to come back as a replica")

    guids = [s.guid for s in sent]
    deadline = time.monotonic() + SETTLE_S
    while (
        left := accounting.pending(rdb, guids) + accounting.unsettled(rdb) + unanswered(stage)
    ) and time.monotonic() < deadline:
        time.sleep(0.25)
    answered = [s for s in sent if s.status is not None and 200 <= s.status < 300]
    refused = [s for s in sent if s not in answered]
    after = [t for s in sent if (t := _finished_at(rdb, s.guid)) is not None and t > killed_at]
    first_after = min(after) - killed_at if after else None
    figures = (
        f"{len(sent)} labels: {len(answered)} answered 2xx, {len(refused)} otherwise "
        f"({sorted({s.status for s in refused}, key=str)}); primary {killed.port} killed after "
        f"{KILL_AFTER}, {new.port} promoted; first task finished {first_after:.1f}s after the kill; "
        f"front served {d.front.served}"
        if first_after is not None
        else f"{len(sent)} labels; no task finished after the kill"
    )
    print(f"\n{figures}")
    context = f"{figures}\n{d.log()}"
    assert not left, f"{accounting.describe(rdb, left)}\n{context}"

    # 2. The workers rode through the failover.
    assert d.exited() == [], context
    # 1. Every 503 was asked for again and became a task; then the whole accounting.
    assert all(s.status == 503 for s in refused), context
    attempts: dict[str, list[dict[str, object]]] = {}
    for delivery in stage.admin.deliveries():
        attempts.setdefault(str(delivery["guid"]), []).append(delivery)
    for s in refused:
        assert any(a["redelivery"] and a["status_code"] == 202 for a in attempts[s.guid]), attempts[s.guid]
    report = known_bugs.check(accounting.collect(stage.admin, rdb, guids))
    print(report.summary())
    runs = [s.guid for i, s in enumerate(sent) if i % RUN_EVERY == RUN_EVERY - 1]
    details = {g: lifecycle.field(rdb, g, "detail") for g in runs}
    assert len(report.pulls) == len(runs), f"each script run opens its pull request: {details}\n{context}"
    assert "failed" not in report.counts(), f"{report.counts()}\n{context}"
    assert first_after is not None, context
    # 3. The audit chain.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BATON_")}, **d.keys.env(),
           "REDIS_URL": topo.url}  # fmt: skip
    audited = subprocess.run([sys.executable, "-m", "baton", "audit", "verify"], env=env, capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    assert audited.returncode == 0, f"{audited.stdout}\n{audited.stderr}"
