"""The status page (`GET /` once configured), against the GitHub emulator and a real Redis."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from baton import records
from baton.settings import Settings
from bot import status_page
from bot.app import WEBHOOK_PATH, create_app
from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from tests.conftest import SECRET, delivery_headers, labeled, listening_socket, serve_app
from worker import lifecycle
from worker.lifecycle import State

TOKEN = "0123456789abcdef0123456789abcdef"


@dataclass(frozen=True)
class Configured:
    base: str
    world: world.World
    github: EmulatorServer


def configured(github: EmulatorServer, **overrides: object) -> tuple[Settings, world.World]:
    with AdminClient(github.url) as admin:
        built = world.build(admin, github.url)
    config = Settings(app_id=str(built.app_id), private_key=built.private_key, webhook_secrets=(SECRET,),
                      github_api_url=github.url, **overrides)  # type: ignore[arg-type]  # fmt: skip
    return config, built


@pytest.fixture
def status(github: EmulatorServer, redis_url: str) -> Iterator[Configured]:
    config, built = configured(github)
    with serve_app(create_app(config, redis_url)) as base:
        yield Configured(base, built, github)


def deliver(base: str, payload: dict[str, object]) -> str:
    body = json.dumps(payload).encode()
    delivery = str(uuid.uuid4())
    r = httpx.post(
        base + WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues", delivery), timeout=10
    )
    assert r.status_code == 202, r.text
    return delivery


def test_the_task_states_are_the_workers() -> None:
    assert tuple(s.value for s in State) == status_page.TASK_STATES


def test_the_status_page_shows_the_app_its_installations_and_the_work(
    status: Configured, rdb: redis.Redis
) -> None:
    hostile = labeled()
    hostile["issue"]["body"] = "SECRET-ISSUE-TEXT <script>alert(1)</script>"
    hostile["repository"]["full_name"] = "acme/widgets"
    opened = deliver(status.base, hostile)
    lifecycle.move(rdb, opened, State.RUNNING, "agent_run started")
    lifecycle.move(
        rdb, opened, State.PR_OPENED, "pull request #7 opened", pull_request="7", head_sha="ab" * 20
    )
    lifecycle.annotate(rdb, opened, check_run_ids="55,56")
    failing = deliver(status.base, labeled("script"))
    lifecycle.move(rdb, failing, State.RUNNING, "agent_run started")
    lifecycle.move(rdb, failing, State.FAILED, "internal-error: RuntimeError: token ghs_leaked in a URL")
    denied = deliver(status.base, labeled("researcher"))
    lifecycle.move(rdb, denied, State.RUNNING, "started")
    lifecycle.move(rdb, denied, State.DENIED, "trifecta: <b>private_data</b>")
    waiting = deliver(status.base, labeled("claude-code", installation=77))

    page = httpx.get(status.base + "/", timeout=10)
    assert page.status_code == 200
    assert page.headers["x-content-type-options"] == "nosniff"
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "form-action 'none'" in policy
    text = page.text
    gh = status.github.url
    assert f'<a href="{gh}/apps/baton">Baton</a>, App id <code>{status.world.app_id}</code>' in text
    assert f"<code>acme</code> (installation {status.world.installation_id}, all repositories)" in text
    assert "<code>baton-control</code> 4" in text  # RQ's list: nothing here ran the jobs
    assert "Workers registered in Redis: 0" in text
    assert "Box probe: unknown" in text  # no worker has started against this Redis

    rdb.hset(records.BOX_PROBES_KEY, mapping={
        "worker-1": orjson.dumps({"network_cutoff": True, "problems": [], "at": "2026-11-30T10:00:00+00:00"}),
        "worker-2": orjson.dumps({"network_cutoff": False, "problems": ["bwrap: <no user namespaces>"],
                                  "at": "2026-11-30T11:00:00+00:00"}),
        "garbled": b"{not json",
    })  # fmt: skip
    probed = httpx.get(status.base + "/", timeout=10).text
    assert "<code>worker-1</code>, started 2026-11-30T10:00:00+00:00: agents' network cut off" in probed
    assert "no network cut-off</span> (bwrap: &lt;no user namespaces&gt;)" in probed
    assert probed.index("worker-2") < probed.index("worker-1")  # newest start first
    assert "garbled" not in probed
    number = hostile["issue"]["number"]  # type: ignore[index]
    assert f'<a href="{gh}/acme/widgets/issues/{number}">acme/widgets#{number}</a>' in text
    assert f'<a href="{gh}/acme/widgets/pull/7">pull request #7</a>' in text
    assert f'<a href="{gh}/acme/widgets/runs/55">check run 55</a>' in text
    assert "pull request #7 opened" in text
    assert "trifecta: &lt;b&gt;private_data&lt;/b&gt;" in text
    assert "<td>internal-error</td>" in text  # a failure shows its code only
    secrets = (status.world.webhook_secret, status.world.private_key.splitlines()[1], SECRET.decode())
    for absent in ("ghs_leaked", "SECRET-ISSUE-TEXT", "<script>", "<b>private_data", *secrets):
        assert absent not in text
    order = [text.index(t) for t in (waiting, denied, failing, opened)]
    assert order == sorted(order)  # newest first


def test_the_status_page_is_private_when_a_token_is_set(github: EmulatorServer, redis_url: str) -> None:
    config, _ = configured(github, metrics_token=TOKEN)
    with serve_app(create_app(config, redis_url)) as base:
        refused = httpx.get(base + "/", timeout=10)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer realm="baton-status"'
        assert "Baton" not in refused.text
        wrong = httpx.get(base + "/", headers={"Authorization": "Bearer " + "x" * 32}, timeout=10)
        assert wrong.status_code == 401
        ok = httpx.get(base + "/", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert ok.status_code == 200
        assert "App id" in ok.text


def _private_task(base: str, rdb: redis.Redis) -> tuple[str, dict[str, object]]:
    payload = labeled("researcher")
    payload["repository"]["full_name"] = "acme/secret-merger"  # type: ignore[index]
    payload["repository"]["private"] = True  # type: ignore[index]
    task_id = deliver(base, payload)
    lifecycle.move(rdb, task_id, State.RUNNING, "agent_run started")
    lifecycle.move(rdb, task_id, State.DENIED, "trifecta: the policy gives acme-bot read_secrets")
    return task_id, payload


def test_a_public_status_page_names_no_private_repository(status: Configured, rdb: redis.Redis) -> None:
    """Without BATON_METRICS_TOKEN the page is for anyone: a private repository's task is shown as
    one (its state and when), never its name, its issue or pull request, or Baton's reason."""
    task_id, _ = _private_task(status.base, rdb)
    text = httpx.get(status.base + "/", timeout=10).text
    assert task_id in text
    assert "a private repository" in text
    for absent in ("secret-merger", "acme-bot", "read_secrets", "/issues/"):
        assert absent not in text
    assert "<td>denied</td><td>trifecta</td>" in text  # the state and the reason's code only


def test_a_status_page_behind_its_token_names_private_repositories(
    github: EmulatorServer, redis_url: str, rdb: redis.Redis
) -> None:
    config, _ = configured(github, metrics_token=TOKEN)
    with serve_app(create_app(config, redis_url)) as base:
        _private_task(base, rdb)
        text = httpx.get(base + "/", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).text
    assert "acme/secret-merger#" in text
    assert "the policy gives acme-bot read_secrets" in text


def test_github_is_asked_once_a_while_and_its_silence_is_said(
    github: EmulatorServer, redis_url: str, tmp_path: Path
) -> None:
    config, built = configured(github)
    with serve_app(create_app(config, redis_url)) as base:
        for _ in range(3):
            assert "App id" in httpx.get(base + "/", timeout=10).text
    asked = [r for r in github.emulator.requests.lines if r["path"] == "/app"]
    assert len(asked) == 1  # cached: three views, one question
    # A GitHub that accepts the connection and never answers: the page still comes, bounded.
    silent = listening_socket()
    silent.listen(8)
    try:
        mute = Settings(app_id=str(built.app_id), private_key=built.private_key, webhook_secrets=(SECRET,),
                        github_api_url=f"http://127.0.0.1:{silent.getsockname()[1]}")  # fmt: skip
        with serve_app(create_app(mute, redis_url)) as base:
            started = time.monotonic()
            page = httpx.get(base + "/", timeout=30)
            took = time.monotonic() - started
    finally:
        silent.close()
    assert page.status_code == 200
    assert "GitHub did not answer" in page.text
    assert f"App id <code>{built.app_id}</code>" in page.text
    assert took < status_page.GITHUB_TIMEOUT_S + 3


def test_an_undecodable_or_missing_job_still_lists_its_task(status: Configured, rdb: redis.Redis) -> None:
    delivery = deliver(status.base, labeled())
    rdb.hset("rq:job:" + delivery, "data", b"\x00not json")
    lifecycle.move(rdb, "orphan-task", State.QUEUED, "stored")
    published = {"full_name": "acme/widgets", "number": 3, "check_runs": [{"check_run_id": 9}]}
    rdb.hset(lifecycle.PREFIX + "orphan-task", "publication", orjson.dumps(published))
    rdb.sadd("rq:workers", "rq:worker:alive", "rq:worker:gone")  # "gone" died without deregistering
    rdb.hset("rq:worker:alive", "state", "idle")
    text = httpx.get(status.base + "/", timeout=10).text
    assert "Workers registered in Redis: 1." in text
    assert f"<code>{delivery}</code>" in text
    # The orphan's job is gone, so whether its repository is public is not known: it is not named.
    orphan = text[text.index("<code>orphan-task</code>") :].split("</tr>", 1)[0]
    assert "a private repository" in orphan
    assert "acme/widgets" not in orphan
