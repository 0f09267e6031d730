"""Drill: Redis restarted under a stream of deliveries, once gracefully and once with SIGKILL.

The drill's own ``redis-server`` (not the session's shared one), durable as production should run
it (``--appendonly yes --appendfsync always``), behind Baton's endpoint (``baton serve``'s app under
uvicorn, receiving the GitHub emulator's signed deliveries) and two ``baton worker`` processes that
run the redelivery pass every second (``BATON_REDELIVERY_INTERVAL=1``). Labels stream in; Redis is
stopped with ``SHUTDOWN`` and started again on the same port and directory, later killed with
SIGKILL and started again, down ``DOWN_S`` seconds each time. A worker that exits meanwhile is
started again, as a platform restarts a crashed process (the drill reports how many did: RQ's loop
quits on a refused connection outside its dequeue wait, so most outages take a worker or two).

Figures, scaled to the suite's budget (the issue's in brackets): ``N_LABELS`` labels, one every
``SEND_EVERY_S`` seconds, every ``RUN_EVERY``-th a ``script`` agent run that opens a pull request,
the rest refused by the capability gate (quick: the drill is about what Redis keeps); two restarts
[a stream of deliveries across a graceful restart and a SIGKILL].

What must hold:

1. right after each restart, every delivery answered 2xx so far is still a task (its dedupe key
   and its record are in Redis): nothing acknowledged to GitHub was lost;
2. every delivery sent while Redis was down was answered 503, and was redelivered by the workers
   and became a task;
3. the accounting (``tests.drills.accounting``): every label a finished task with its status
   comment, nothing left running, no second pull request, no receipt missing.

An outage may land between a worker's ``BLPOP`` and RQ recording the job as started (the job then
is in no list: ``worker.requeue`` puts it back), or between RQ starting a job and the job marking
its task ``running`` (``worker.rqworker``'s sweep ends it); both moments are drilled
deterministically in ``test_worker_sigkill.py``.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from baton import queues
from baton.redis_server import free_port, server_binary
from emulator import world
from tests.conftest import EvidenceKeys
from tests.drills import accounting, known_bugs
from tests.drills.procs import registered, wait_for, worker_env, worker_pool
from tests.worker.conftest import Stage, Workers, make_stage
from worker import lifecycle

pytestmark = pytest.mark.drill

N_LABELS = 30
SEND_EVERY_S = 0.4
RUN_EVERY = 10
#: (seconds into the stream, how Redis is stopped)
OUTAGES = ((3.0, "shutdown"), (8.0, "sigkill"))
DOWN_S = 2.0
SETTLE_S = 120.0
EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"
HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}


class OwnRedis:
    """A durable redis-server of the drill's own, on a fixed loopback port, restartable."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--appendonly", "yes",
                "--appendfsync", "always", "--dir", str(self.directory), "--save", ""]  # fmt: skip
        with (self.directory / "redis.log").open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out)
        self.starts += 1
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=1)
        deadline = time.monotonic() + 20
        try:
            while True:
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if client.ping():
                        return
                assert self.proc.poll() is None, (self.directory / "redis.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "redis-server did not start in 20 s"
                time.sleep(0.05)
        finally:
            client.close()

    def shutdown(self) -> None:
        """``SHUTDOWN``: Redis fsyncs its AOF and exits."""
        client = redis.Redis.from_url(self.url, socket_timeout=5)
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown()
        client.close()
        self._reap()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.wait(timeout=20)
            self.proc = None


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def own_rdb(own_redis: OwnRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own_redis.url)
    yield client
    client.close()


@pytest.fixture
def stage(tmp_path: Path, own_redis: OwnRedis, own_rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, own_redis.url, own_rdb)


@pytest.fixture
def workers(
    stage: Stage, own_redis: OwnRedis, tmp_path: Path, evidence_keys: EvidenceKeys
) -> Iterator[Workers]:
    with worker_pool(stage, own_redis.url, tmp_path, evidence_keys) as pool:
        yield pool


@dataclass
class Sent:
    guid: str
    number: int
    status: int | None
    while_down: bool


@dataclass
class Drill:
    stage: Stage
    pool: Workers
    server: OwnRedis
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    restarts: list[str] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    down: bool = False

    def start(self, name: str) -> None:
        env = {**worker_env(name), "BATON_REDELIVERY_INTERVAL": "1"}
        self.procs[name] = self.pool.start(name, queues=EVERY_QUEUE, env=env)

    def keep_workers(self) -> None:
        """The platform's part: a worker that exited is started again."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                when = "while Redis was down" if self.down else f"{self.server.starts - 1} restart(s) in"
                self.restarts.append(f"{name} exited {proc.returncode}, {when}")
                self.start(name)

    def send(self) -> None:
        i = len(self.sent)
        if i % RUN_EVERY == RUN_EVERY - 1:
            number, agent = self.stage.issue_with(HELLO, title=f"Say hello {i}"), "script"
        else:
            number, agent = self.stage.issue(title=f"Look it up {i}"), "researcher"  # denied: web_fetch
        label = self.stage.admin.label(world.REPO, number, [f"agent:{agent}"], sender="maria")
        [delivery] = label["deliveries"]
        self.sent.append(Sent(delivery["guid"], number, delivery["status_code"], self.down))

    def still_tasks(self) -> list[str]:
        """Deliveries answered 2xx whose task Redis no longer has."""
        rdb = self.stage.rdb
        answered = [s for s in self.sent if s.status is not None and 200 <= s.status < 300]
        kept = [
            bool(rdb.exists(queues.DEDUPE_PREFIX + s.guid) and lifecycle.current(rdb, s.guid))
            for s in answered
        ]
        return [
            f"{s.guid} (#{s.number}, answered {s.status})"
            for s, ok in zip(answered, kept, strict=True)
            if not ok
        ]


def test_redis_restarts_lose_no_delivery_that_was_answered(
    stage: Stage, workers: Workers, own_redis: OwnRedis, own_rdb: redis.Redis
) -> None:
    drill = Drill(stage, workers, own_redis)
    drill.start("a")
    drill.start("b")
    pids = {p.pid for p in drill.procs.values()}
    wait_for(lambda: registered(own_rdb, pids), 60, "the workers to start", workers.log)
    outages = list(OUTAGES)
    started = time.monotonic()
    back_at = 0.0
    checked_after: list[str] = []
    while len(drill.sent) < N_LABELS:
        elapsed = time.monotonic() - started
        if outages and elapsed >= outages[0][0] and not drill.down:
            if outages.pop(0)[1] == "shutdown":
                own_redis.shutdown()
            else:
                own_redis.kill()
            drill.down, back_at = True, elapsed + DOWN_S
        elif drill.down and elapsed >= back_at:
            own_redis.start()
            drill.down = False
            lost = drill.still_tasks()  # 1. before anything could redeliver them
            assert lost == [], f"after a restart, answered deliveries are no longer tasks: {lost}"
            checked_after.append(f"{len(drill.sent)} deliveries checked after restart {own_redis.starts - 1}")
        drill.send()
        drill.keep_workers()
        time.sleep(max(0.0, started + len(drill.sent) * SEND_EVERY_S - time.monotonic()))
    assert not outages
    assert not drill.down

    guids = [s.guid for s in drill.sent]
    deadline = time.monotonic() + SETTLE_S
    while (
        left := accounting.pending(own_rdb, guids) + accounting.unsettled(own_rdb)
    ) and time.monotonic() < deadline:
        drill.keep_workers()
        time.sleep(0.25)
    took = time.monotonic() - started
    during = [s for s in drill.sent if s.while_down]
    figures = (f"{len(drill.sent)} labels, {len(during)} while Redis was down; {took:.0f}s; "
               f"worker restarts: {drill.restarts}; {checked_after}")  # fmt: skip
    print(f"\n{figures}")
    # 2. Sent while down: answered 503, then redelivered and accepted.
    assert len(during) >= len(OUTAGES), figures  # some while each outage lasted
    assert all(s.status == 503 for s in during), [(s.guid, s.status) for s in during]
    attempts: dict[str, list[dict[str, object]]] = {}
    for d in stage.admin.deliveries():
        attempts.setdefault(d["guid"], []).append(d)
    for s in during:
        assert any(a["redelivery"] and a["status_code"] == 202 for a in attempts[s.guid]), attempts[s.guid]
        assert own_rdb.exists(queues.DEDUPE_PREFIX + s.guid), s.guid
    context = f"{figures}\n{workers.log()}"
    assert not left, f"{accounting.describe(own_rdb, left)}\n{context}"
    # 3. The accounting.
    report = known_bugs.check(accounting.collect(stage.admin, own_rdb, guids))
    print(report.summary())
