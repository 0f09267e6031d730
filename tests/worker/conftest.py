"""The worker's stage: the GitHub emulator with the sample world, Baton's endpoint on loopback
receiving its signed webhooks into the test Redis, and a worker context to run the tasks."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from baton import queues
from baton.settings import Settings
from baton.tasks import Task
from bot.app import WEBHOOK_PATH, create_app
from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from evidence.keys import SigningKey
from tests.conftest import EvidenceKeys, listening_socket, serve_app
from worker import lifecycle
from worker.context import Context
from worker.github.client import AppCredentials, GitHubApp
from worker.github.retry import RetryPolicy
from worker.jobs import execute
from worker.receipts import Signer
from worker.runner import box
from worker.runs import admit
from worker.runs.execute import run as execute_run

#: Fast retries so fault tests stay quick; the bounds are what is tested.
FAST = RetryPolicy(max_retries=3, base_delay=0.05, max_delay=0.2, max_wait=3.0)


@dataclass
class Stage:
    server: EmulatorServer
    admin: AdminClient
    world: world.World
    ctx: Context
    rdb: redis.Redis

    def task(self, delivery: dict[str, Any]) -> Task:
        """The task Baton stored for an emulator delivery (it must have been accepted)."""
        assert delivery["status_code"] == 202, delivery
        job = Job.fetch(delivery["guid"], connection=self.rdb, serializer=JSONSerializer)
        return Task.from_dict(job.args[0])

    def run(self, delivery: dict[str, Any]) -> dict[str, str]:
        return execute(self.ctx, self.task(delivery))

    def run_agent(self, task_id: str) -> dict[str, str]:
        """The agents-queue job of an admitted run, as `baton worker` would pick it up."""
        job_id = lifecycle.field(self.rdb, task_id, admit.JOB)
        assert job_id is not None, f"task {task_id} was not handed to the agents queue"
        job = Job.fetch(job_id, connection=self.rdb, serializer=JSONSerializer)
        return execute(self.ctx, Task.from_dict(job.args[0]), handler=execute_run)

    def issue_with(self, recipe: dict[str, Any], title: str = "Say hello", user: str = "maria") -> int:
        """An issue whose body holds a recipe for the script agent (the most obedient agent)."""
        body = f"Please do this.\n\n```baton-recipe\n{orjson.dumps(recipe).decode()}\n```\n"
        return int(self.admin.create_issue(world.REPO, title=title, user=user, body=body)["number"])

    def issue(self, title: str = "Fix the spinner", user: str = "maria") -> int:
        return int(self.admin.create_issue(world.REPO, title=title, user=user)["number"])

    def label(self, number: int, agent: str, sender: str) -> dict[str, str]:
        deliveries = self.admin.label(world.REPO, number, [f"agent:{agent}"], sender=sender)["deliveries"]
        return self.run(deliveries[-1])

    def comment(self, number: int, body: str, user: str) -> dict[str, str]:
        return self.run(self.admin.comment(world.REPO, number, body, user=user)["deliveries"][-1])

    def baton_comments(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.admin.comments() if c["issue_number"] == number
                and (c.get("performed_via_github_app") or {}).get("id") == self.world.app_id]  # fmt: skip

    def requests(self, method: str, path_suffix: str) -> list[dict[str, Any]]:
        return [r for r in self.admin.requests() if r["method"] == method and r["path"].endswith(path_suffix)]


def make_stage(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, *, front_port: int | None = None, **world_kw: Any
) -> Iterator[Stage]:
    """The stage; with ``front_port`` GitHub delivers to that port (`baton serve` processes the
    caller runs behind it), else to Baton's app served here in a thread."""
    sock = listening_socket() if front_port is None else None
    port = front_port if sock is None else sock.getsockname()[1]
    with EmulatorServer(tmp_path / "github") as server, AdminClient(server.url) as admin:
        w = world.build(admin, server.url, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}", **world_kw)
        signer = Signer(SigningKey.generate(), secrets.token_hex(32).encode(), f"http://127.0.0.1:{port}")
        settings = Settings(webhook_secrets=(w.webhook_secret.encode(),), app_id=str(w.app_id),
                            app_slug="baton", signing_key=signer.key, audit_secret=signer.audit_secret,
                            public_url=signer.public_url)  # fmt: skip
        served = (
            serve_app(create_app(settings, redis_url), sock) if sock is not None else contextlib.nullcontext()
        )
        with served:
            app = GitHubApp(
                AppCredentials(str(w.app_id), w.private_key, server.url), rdb, timeout=5, retry=FAST
            )
            ctx = Context(rdb, app, w.app_id, network_cutoff=box.probe().network_cutoff,
                          data_dir=tmp_path / "data", signer=signer)  # fmt: skip
            yield Stage(server, admin, w, ctx, rdb)


@pytest.fixture
def stage(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, redis_url, rdb)


#: What one `baton worker` serves in the real-process tests unless told otherwise.
BOTH_QUEUES = f"{queues.CONTROL.name},{queues.AGENTS.name}"


class Workers:
    def __init__(self, stage: Stage, redis_url: str, tmp_path: Path, keys: EvidenceKeys) -> None:
        self.stage, self.redis_url, self.tmp_path, self.keys = stage, redis_url, tmp_path, keys
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, name: str, *, queues: str = BOTH_QUEUES, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """One `baton worker` (on the control and agents queues unless told), with a data directory
        of its own (as on another machine)."""
        environ = {
            **self.keys.env(),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "REDIS_URL": self.redis_url,
            "APP_ID": str(self.stage.world.app_id),
            "PRIVATE_KEY": self.stage.world.private_key,
            "GITHUB_API_URL": self.stage.server.url,
            "BATON_DATA_DIR": str(self.tmp_path / f"data-{name}"),
            "LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        with (self.tmp_path / f"worker-{name}.log").open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "baton", "worker", "--queues", queues],
                env=environ, stdout=out, stderr=out,
            )  # fmt: skip
        self.started.append(proc)
        return proc

    def log(self) -> str:
        return "".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp_path.glob("worker-*.log"))
        )


@pytest.fixture
def workers(stage: Stage, redis_url: str, tmp_path: Path, evidence_keys: EvidenceKeys) -> Iterator[Workers]:
    pool = Workers(stage, redis_url, tmp_path, evidence_keys)
    yield pool
    for proc in pool.started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


#: The sample world's repository policy, with one run at a time: the others wait in line.
ONE_RUN_SLOT = world.REPO_POLICY + "limits:\n  max_concurrent_runs: 1\n"


@pytest.fixture
def one_slot(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    """The stage, with ``ONE_RUN_SLOT`` as the repository's policy."""
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=ONE_RUN_SLOT)


@pytest.fixture
def one_slot_workers(
    one_slot: Stage, redis_url: str, tmp_path: Path, evidence_keys: EvidenceKeys
) -> Iterator[Workers]:
    pool = Workers(one_slot, redis_url, tmp_path, evidence_keys)
    yield pool
    for proc in pool.started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
