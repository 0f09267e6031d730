"""Workers on several hosts share one deployment: each periodic duty runs once per interval in all.

Each host is a network namespace of its own (``tests.hosts``), with its own data directory and
process group, running real ``baton worker`` processes that reach Redis and the GitHub emulator
through the gateway's address, as workers on other machines reach them over the network. The
emulator and ``baton serve`` stay on this machine's loopback (``stage``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from baton import queues, records
from emulator import world
from tests.conftest import EvidenceKeys
from tests.drills.procs import registered
from tests.hosts import Host, Network, network
from tests.worker.conftest import Stage
from worker import lifecycle
from worker.rqworker import DUTIES, RENEW_EVERY_S, SWEEP

HOSTS = 3
#: What each host runs here: a worker for each short queue (as `baton worker` does, agents aside).
PER_HOST = (queues.CONTROL.name, queues.GATES.name)
#: Intervals watched for the once-per-interval count.
INTERVALS = 4
START_S = 60.0


class Deployment:
    """``baton worker`` processes on the network's hosts, all on the stage's Redis and emulator."""

    def __init__(self, stage: Stage, net: Network, redis_url: str, keys: EvidenceKeys) -> None:
        self.stage, self.net, self.keys = stage, net, keys
        self.redis_url = net.reach(redis_url)
        self.github_url = net.reach(stage.server.url)

    def start(self, host: Host, queue: str) -> int:
        env = {
            **self.keys.env(),
            "REDIS_URL": self.redis_url,
            "GITHUB_API_URL": self.github_url,
            "APP_ID": str(self.stage.world.app_id),
            "PRIVATE_KEY": self.stage.world.private_key,
            "LOG_LEVEL": "WARNING",
        }
        argv = [sys.executable, "-m", "baton", "worker", "--queues", queue]
        return host.start(argv, env, f"worker-{queue}.log").pid

    def start_all(self, hosts: list[Host], per_host: tuple[str, ...] = PER_HOST) -> set[int]:
        pids = {self.start(host, queue) for host in hosts for queue in per_host}
        self.wait(lambda: registered(self.stage.rdb, pids), START_S, f"{len(pids)} workers to register")
        return pids

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> float:
        """Poll ``done`` until it holds (bounded); returns how long that took."""
        began = time.monotonic()
        while not done():
            if time.monotonic() - began > timeout:
                pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{self.net.logs()}")
            time.sleep(0.05)
        return time.monotonic() - began


def _runs(rdb: redis.Redis) -> dict[str, int]:
    found = rdb.hgetall(records.COUNTERS_KEY)
    return {d.name: int(found.get(d.counter.encode(), 0)) for d in DUTIES}


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Network]:
    with network(HOSTS, tmp_path / "hosts") as made:
        yield made


@pytest.fixture
def deployment(net: Network, stage: Stage, redis_url: str, evidence_keys: EvidenceKeys) -> Deployment:
    return Deployment(stage, net, redis_url, evidence_keys)


def _sweeps(rdb: redis.Redis) -> tuple[int, float | None]:
    """How many sweeps have been claimed, and when the last was, by Redis's clock (from what is
    left of its claim), read together."""
    with rdb.pipeline(transaction=True) as pipe:
        pipe.hget(records.COUNTERS_KEY, SWEEP.counter)
        pipe.pttl(SWEEP.key)
        pipe.time()
        count, left_ms, (seconds, micros) = pipe.execute()
    at = seconds + micros / 1e6 - (SWEEP.every_s * 1000 - left_ms) / 1000 if left_ms > 0 else None
    return int(count or 0), at


def test_each_duty_runs_once_per_interval_across_hosts_not_once_per_host(
    deployment: Deployment, rdb: redis.Redis
) -> None:
    pids = deployment.start_all(deployment.net.hosts)
    assert len(pids) == HOSTS * len(PER_HOST)  # six workers, each offering to take every duty
    first, _ = _sweeps(rdb)
    deployment.wait(lambda: _sweeps(rdb)[0] > first and _sweeps(rdb)[1] is not None, 3 * RENEW_EVERY_S,
                    "a sweep")  # fmt: skip
    began = time.monotonic()
    first, first_at = _sweeps(rdb)
    before = _runs(rdb)
    deployment.wait(lambda: _sweeps(rdb)[0] >= first + INTERVALS and _sweeps(rdb)[1] is not None,
                    2 * (INTERVALS + 1) * RENEW_EVERY_S, f"{INTERVALS} more sweeps")  # fmt: skip
    last, last_at = _sweeps(rdb)
    watched = time.monotonic() - began
    ran = {name: count - before[name] for name, count in _runs(rdb).items()}
    assert first_at is not None
    assert last_at is not None

    # Each sweep was claimed only once the previous claim had lapsed, whichever of the six asked:
    # six workers each sweeping every interval would have made these sweeps in a sixth of the time.
    assert last_at - first_at >= (last - first) * SWEEP.every_s - 0.01, (last_at - first_at, last - first)
    for duty in DUTIES:  # about once per interval each, in all: not once per host, nor per process
        assert INTERVALS - 2 <= ran[duty.name] <= watched / duty.every_s + 1, (duty.name, watched, ran)


def test_a_deployment_on_three_hosts_labels_comments_and_publishes_once(deployment: Deployment) -> None:
    stage = deployment.stage
    deployment.start_all(deployment.net.hosts)

    number = stage.issue("Through three hosts")
    stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")
    deployment.wait(lambda: bool(stage.baton_comments(number)), 30, "the status comment")
    [comment] = stage.baton_comments(number)
    assert "capability gate denied" in comment["body"]

    # GitHub refuses the next status comment until the fault is cleared: the outbox keeps it, and
    # of the six idle workers on three hosts that drain it, one publishes it, once.
    comments = f"/repos/{world.REPO}/issues/*/comments"
    stage.admin.add_fault(comments, method="POST", kind="status", status=500, count=1000)
    number = stage.issue("Told late")
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task_id = delivery["guid"]
    deployment.wait(lambda: stage.rdb.zscore(records.OUTBOX_KEY, task_id) is not None
                    and lifecycle.field(stage.rdb, task_id, "publish_error") is not None, 60,
                    "the status comment to wait in the outbox")  # fmt: skip
    stage.admin.clear_faults()
    deployment.wait(lambda: bool(stage.baton_comments(number)), 60, "the outbox to publish it")
    deployment.wait(lambda: stage.rdb.zscore(records.OUTBOX_KEY, task_id) is None, 10, "the entry to go")
    [late] = stage.baton_comments(number)
    assert "capability gate denied" in late["body"]
    created = [r for r in stage.requests("POST", f"/issues/{number}/comments") if r["status"] == 201]
    assert len(created) == 1, created
    assert (lifecycle.field(stage.rdb, task_id, "published") or "").startswith("status comment")


def test_a_task_whose_host_was_lost_is_ended_by_a_worker_on_another_host(deployment: Deployment) -> None:
    stage = deployment.stage
    lost, *others = deployment.net.hosts
    deployment.start_all([lost], (queues.CONTROL.name,))
    # GitHub answers the task's first call late, so the lost host's worker is mid-task when it goes.
    permission = f"/repos/{world.REPO}/collaborators/maria/permission"
    stage.admin.add_fault(permission, method="GET", kind="latency", latency_ms=45_000, count=1)
    number = stage.issue("Its host is lost")
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task_id = delivery["guid"]
    deployment.wait(
        lambda: lifecycle.current(stage.rdb, task_id) is lifecycle.State.RUNNING, 30, "the task to run"
    )
    deployment.start_all(others, (queues.CONTROL.name,))

    lost.kill()  # every process of that host at once, as a machine lost whole
    killed = time.monotonic()
    bound = lifecycle.LEASE_S + 2 * RENEW_EVERY_S + 10  # the lease, a tick, and a loaded machine's slack
    deployment.wait(
        lambda: lifecycle.current(stage.rdb, task_id) in lifecycle.TERMINAL, bound, "the task to end"
    )
    assert time.monotonic() - killed >= lifecycle.LEASE_S - RENEW_EVERY_S  # its lease, not a shortcut
    assert lifecycle.current(stage.rdb, task_id) is lifecycle.State.FAILED
    assert "lease ran out" in (lifecycle.field(stage.rdb, task_id, "detail") or "")
    said = lambda: any("stopped before it finished" in c["body"] for c in stage.baton_comments(number))  # noqa: E731
    deployment.wait(said, 2 * RENEW_EVERY_S + 10, "the issue to say the task failed")
