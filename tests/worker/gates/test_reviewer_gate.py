"""The reviewer as a merge-gate gate (``review.merge_gate: true``): on any pull request, after the
built-in gates, the real Claude Code CLI against the stand-in judges the change; a finding fails the
gate with annotations on the lines of the change it names, and a reviewer that cannot judge fails it
closed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emulator import world
from emulator.model.standin import ModelStandin, key_fingerprint
from tests.worker.conftest import Stage, make_stage
from worker.gates import evaluate
from worker.gates.reviewer import check_of
from worker.runner import review, verdict
from worker.runner.probe import host
from worker.runner.verdict import Result

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)

KEY = "sk-ant-api03-gate-reviewer-key"
ORG = world.ORG_POLICY.replace(
    "limits:\n",
    "  checker:\n    adapter: claude-code\n    tools: [read_repo]\n"
    "    model_endpoints: [api.anthropic.com]\n    env: [ANTHROPIC_API_KEY]\nlimits:\n",
)
REPO = world.REPO_POLICY + "  checker: {}\nreview: {agent: checker, timeout: 60s, merge_gate: true}\n"
CLEAN = {c: {"found": False, "reasons": [], "locations": []} for c in verdict.CATEGORIES}
BACKDOOR = {
    **CLEAN,
    "malicious_change": {"found": True, "reasons": ["spin() accepts a fixed password"],
                         "locations": ["src/widgets.py:2", "README.md:1"]},
}  # fmt: skip


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, agent_cli_bin: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("PATH", f"{agent_cli_bin}:/usr/bin:/bin")


def _stage(tmp_path: Path, redis_url: str, rdb: redis.Redis, model: ModelStandin) -> Iterator[Stage]:
    for stage in make_stage(tmp_path, redis_url, rdb, org_policy=ORG, repo_policy=REPO):
        yield dataclasses.replace(
            stage, ctx=dataclasses.replace(stage.ctx, model_upstreams={"anthropic": model.url})
        )


def _gate(stage: Stage, files: dict[str, str | None]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pull request opened by a maintainer; its merge gate run; (the check run, its annotations)."""
    head = stage.admin.commit(world.REPO, "feature", files, base="main")
    opened = stage.admin.open_pull(world.REPO, head="feature", user="wes", title="Speed up spin()")
    stage.run(next(d for d in opened["deliveries"] if d["event"] == "pull_request"))
    [run] = [c for c in stage.admin.check_runs() if c["name"] == evaluate.CHECK and c["head_sha"] == head]
    patches = stage.requests("PATCH", f"/check-runs/{run['id']}")
    return run, [a for r in patches for a in (r["body"].get("output") or {}).get("annotations", [])]


@pytest.mark.usefixtures("keyed")
def test_a_finding_fails_the_gate_with_annotations_only_on_lines_of_the_change(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    with ModelStandin({"steps": [{"text": json.dumps(BACKDOOR)}]}, api_key=KEY) as model:
        for stage in _stage(tmp_path, redis_url, rdb, model):
            run, notes = _gate(stage, {"src/widgets.py": "def spin(pw):\n    return pw == 'letmein'\n"})
            assert run["conclusion"] == "failure", run["output"]["summary"]
            summary = run["output"]["summary"]
            assert "| reviewer | FAIL |" in summary
            assert "| protected-paths | pass |" in summary  # the built-in gates ran first, and passed
            assert [(a["path"], a["start_line"], a["annotation_level"]) for a in notes] == [
                ("src/widgets.py", 2, "failure")
            ]
            assert notes[0]["message"] == "malicious_change: spin() accepts a fixed password"
            assert "`malicious_change at README.md:1 (outside the change)`" in summary
            # The reviewer read the pull request's title and change as data, with the worker's key.
            [asked] = model.requests()
            assert asked["auth"] == {"x-api-key": key_fingerprint(KEY)}
            sent = json.dumps(asked["body"])
            assert "pull-request-title" in sent
            assert "Speed up spin()" in sent
            assert "letmein" in sent


@pytest.mark.usefixtures("keyed")
def test_a_clean_verdict_passes_the_gate(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> None:
    with ModelStandin({"steps": [{"text": json.dumps(CLEAN)}]}, api_key=KEY) as model:
        for stage in _stage(tmp_path, redis_url, rdb, model):
            run, notes = _gate(stage, {"src/widgets.py": "def spin():\n    return 43\n"})
            assert run["conclusion"] == "success", run["output"]["summary"]
            assert "| reviewer | pass |" in run["output"]["summary"]
            assert notes == []


@pytest.mark.usefixtures("keyed")
def test_a_reviewer_that_cannot_judge_fails_the_gate_closed(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    with ModelStandin({"steps": [{"text": "Approved! Ship it."}]}, api_key=KEY) as model:
        for stage in _stage(tmp_path, redis_url, rdb, model):
            run, _ = _gate(stage, {"src/widgets.py": "def spin():\n    return 43\n"})
            assert run["conclusion"] == "failure"
            summary = run["output"]["summary"]
            said = "`the reviewer could not judge this change: the reviewer's verdict did not parse:"
            assert f"| reviewer | FAIL | {said}" in summary


def test_the_row_of_a_review_pure() -> None:
    done = review.ReviewRecord("checker", Result.TIMED_OUT, "the reviewer timed out after 60s")
    assert (
        check_of(done, {}).detail
        == "the reviewer could not judge this change: the reviewer timed out after 60s"
    )
    assert not check_of(done, {}).passed
    blocked = review.ReviewRecord(
        "checker", Result.BLOCKED, "the reviewer found secret_leak", blocking=["secret_leak"],
        reply_sha256="ab" * 32,
        findings=[{"category": "secret_leak", "found": True, "reasons": ["a key"],
                   "locations": ["a.py:3-4", "a.py:40", "b.py:1"]},
                  {"category": "malicious_change", "found": True, "reasons": ["not blocking here"],
                   "locations": ["a.py:3"]}],
    )  # fmt: skip
    row = check_of(blocked, {"a.py": frozenset({4})})
    assert [(a.path, a.start_line, a.end_line) for a in row.annotations] == [("a.py", 3, 4)]
    assert row.items == ("secret_leak: a key", "secret_leak at a.py:40 (outside the change)",
                         "secret_leak at b.py:1 (outside the change)")  # fmt: skip
    assert row.detail == "the reviewer found secret_leak (verdict sha256:abababababababab…)"
