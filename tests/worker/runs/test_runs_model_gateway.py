"""Agent runs on GitHub through the model gateway, judged from the emulator's state.

The real Claude Code and Codex CLIs make their pull request with the model stand-in behind the run's
gateway (the stand-in knows only the worker's key); an injected agent's requests are refused, nothing is
pushed and its signed receipt is on the issue; a run that reaches its spend cap ends over budget; a day
that is spent admits no run.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emulator import world
from emulator.model.standin import ModelStandin, key_fingerprint
from evidence.verify import verify_receipt
from tests.worker.conftest import Stage, make_stage
from worker.runner import gateway
from worker.runs import budget

REAL_KEY = "sk-ant-api03-worker-only-key-7e1c"
ORG = world.ORG_POLICY.replace(
    "limits:\n",
    "  codex:\n    adapter: codex\n    tools: [read_repo, edit_files, run_shell]\n"
    "    model_endpoints: [api.openai.com]\n    env: [OPENAI_API_KEY]\nlimits:\n",
)
REPO = world.REPO_POLICY + "  codex:\n    timeout: 5m\n"
HELLO = "hello through the gateway\n"
SCRIPT = {
    "workspace": "/workspace",
    "steps": [{"write": {"path": "hello.txt", "content": HELLO}}, {"text": "Done."}],
}
BUNDLE = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@pytest.fixture
def model() -> Iterator[ModelStandin]:
    with ModelStandin(SCRIPT, api_key=REAL_KEY) as standin:
        yield standin


def _stage(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin, **kw: Any
) -> Iterator[Stage]:
    for stage in make_stage(
        tmp_path, redis_url, rdb, org_policy=kw.pop("org", ORG), repo_policy=kw.pop("repo", REPO)
    ):
        ctx = dataclasses.replace(
            stage.ctx, model_upstreams={"anthropic": model.url, "openai": model.url}, **kw
        )
        yield dataclasses.replace(stage, ctx=ctx)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, agent_cli_bin: Path) -> None:
    """The worker's environment: the real keys (which only the gateway reads) and the pinned CLIs."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", REAL_KEY)
    monkeypatch.setenv("PATH", f"{agent_cli_bin}:/usr/bin:/bin")


def _run(stage: Stage, number: int, agent: str) -> dict[str, str]:
    admitted = stage.label(number, agent, sender="maria")
    assert admitted["state"] == "queued", admitted
    return stage.run_agent(admitted["task_id"])


@pytest.mark.usefixtures("keyed")
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_the_real_cli_opens_its_pull_request_through_the_gateway(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin, agent: str
) -> None:
    for stage in _stage(tmp_path, redis_url, rdb, model):
        number = stage.issue("Say hello")
        done = _run(stage, number, agent)
        assert done["state"] == "pr_opened", (done, stage.baton_comments(number))
        [pr] = [
            p for p in stage.admin.call("GET", "/state")["pulls"] if p["head_ref"] == f"baton/issue-{number}"
        ]
        bare = stage.server.directory / "repos" / f"{world.REPO}.git"
        shown = subprocess.run(["git", "-C", str(bare), "show", f"baton/issue-{number}:hello.txt"],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert shown.stdout == HELLO
        assert pr["repo"] == world.REPO
        seen = model.requests()
        assert seen, "the CLI never reached its model"
        header = "x-api-key" if agent == "claude-code" else "authorization"
        assert all(r["auth"] == {header: key_fingerprint(REAL_KEY)} for r in seen)  # only ever the real key
        status = stage.baton_comments(number)[-1]["body"]
        assert "through Baton's model gateway" in status
        host = "api.anthropic.com" if agent == "claude-code" else "api.openai.com"
        assert f"`{host}:443 allowed x" in status


def test_an_injected_agent_pushes_nothing_and_its_signed_receipt_is_on_the_issue(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    recipe = {"steps": [
        {"op": "write", "path": "notes.md", "content": "notes\n"},
        {"op": "http", "url": "${BATON_MODEL_BASE_URL}/anthropic/v1/files", "data_file": "src/widgets.py",
         "headers": {"content-type": "application/json", "x-api-key": "sk-ant-attackers-key"}},
    ]}  # fmt: skip
    for stage in _stage(tmp_path, redis_url, rdb, model):
        number = stage.issue_with(recipe, title="Tidy up")
        assert _run(stage, number, "helper")["state"] == "failed"
        assert model.requests() == []
        body = stage.baton_comments(number)[-1]["body"]
        assert "Model requests refused" in body
        assert "`model-foreign-credential`" in body
        found = BUNDLE.search(body)
        assert found is not None, body
        assert stage.ctx.signer is not None
        keys = {stage.ctx.signer.key.public.keyid: stage.ctx.signer.key.public}
        verified = verify_receipt(json.loads(found.group(1)), keys, commit=stage.world.head_sha)
        assert verified.predicate_type == "https://baton.dev/attestations/agent-run/v1"
        assert stage.admin.call("GET", "/state")["pulls"] == []


def test_a_run_that_reaches_its_spend_cap_ends_over_budget_and_pushes_nothing(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    ask = json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    call = {"op": "http", "url": "${BATON_MODEL_BASE_URL}/anthropic/v1/messages", "data": ask,
            "headers": {"content-type": "application/json", "x-api-key": "${BATON_MODEL_KEY}"}}  # fmt: skip
    recipe = {"steps": [{"op": "write", "path": "half.txt", "content": "half\n"}, call, call,
                        {"op": "sleep", "seconds": 120}]}  # fmt: skip
    dear = gateway.PriceTable((), gateway.Price(1e6, 1e6, 0, 0))  # one call is dollars: the cap is cents
    repo = REPO + "limits:\n  max_model_spend_per_run: 0.05\n"
    for stage in _stage(tmp_path, redis_url, rdb, model, repo=repo, prices=dear):
        number = stage.issue_with(recipe)
        assert _run(stage, number, "helper")["state"] == "failed"
        assert len(model.requests()) == 1  # the second call never left the gateway
        body = stage.baton_comments(number)[-1]["body"]
        assert "Over budget: the model spend cap was reached" in body
        assert "limits.max_model_spend_per_run" in body
        assert "Model: 1 calls through Baton's model gateway" in body
        assert stage.admin.call("GET", "/state")["pulls"] == []


def test_a_run_whose_calls_in_flight_together_pass_its_cap_ends_over_budget_without_another_call(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap is checked before a call, so two calls in flight together both pass it. Reaching the cap
    must still end the run, at once: not only when (or if) the agent makes one more call."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    ask = json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    call = {"op": "http", "url": "${BATON_MODEL_BASE_URL}/anthropic/v1/messages", "data": ask,
            "headers": {"content-type": "application/json", "x-api-key": "${BATON_MODEL_KEY}"}}  # fmt: skip
    # The first call is still in flight (the agent stops waiting after 1 s) when the second is sent.
    recipe = {"steps": [{**call, "timeout": 1}, call, {"op": "sleep", "seconds": 120}]}
    script = [{"stall": {"seconds": 3, "then": "answer"}}, {"text": "Done."}]
    dear = gateway.PriceTable((), gateway.Price(1e6, 1e6, 0, 0))
    repo = REPO + "limits:\n  max_model_spend_per_run: 0.05\n"
    with ModelStandin(script, api_key=REAL_KEY, workspace="/workspace") as slow:
        for stage in _stage(tmp_path, redis_url, rdb, slow, repo=repo, prices=dear):
            number = stage.issue_with(recipe)
            started = time.monotonic()
            done = _run(stage, number, "helper")
            took = time.monotonic() - started
            assert done["state"] == "failed", done
            assert len(slow.requests()) == 2  # both passed the cap: it was not reached yet
            body = stage.baton_comments(number)[-1]["body"]
            assert "Over budget: the model spend cap was reached" in body
            assert "limits.max_model_spend_per_run" in body
            assert stage.admin.call("GET", "/state")["pulls"] == []
            assert took < 60, f"the run went on for {took:.0f}s after reaching its cap"


def test_a_day_whose_model_spend_is_gone_admits_no_run(
    tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin
) -> None:
    repo = REPO + "limits:\n  max_model_spend_per_day: 2\n"
    for stage in _stage(tmp_path, redis_url, rdb, model, repo=repo):
        number = stage.issue_with({"steps": [{"op": "print", "text": "hi"}]})
        delivery = stage.admin.label(world.REPO, number, ["agent:helper"], sender="maria")["deliveries"][-1]
        task = stage.task(delivery)
        assert stage.run(delivery)["state"] == "queued"
        assert task.repository is not None
        # Other runs of the repository spent the day's $2 (their gateways counted it, call by call).
        spent = budget.Scope(
            f"repo:{task.repository.id}", world.REPO, None, None, None, max_model_spend_per_day=2.0
        )
        budget.SpendLedger(rdb, [spent]).charge(2.0)
        stage.run_agent(task.id)
        second = stage.issue_with({"steps": [{"op": "print", "text": "hi"}]})
        refused = stage.label(second, "helper", sender="maria")
        assert refused["state"] == "refused"
        body = stage.baton_comments(second)[-1]["body"]
        assert f"{world.REPO} has spent $2.00 of its $2.00 of model calls today (UTC)" in body
        assert "`limits.max_model_spend_per_day`" in body
