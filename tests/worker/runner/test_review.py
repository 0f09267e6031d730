"""One review in the real box: the real Claude Code CLI as the reviewer, the model stand-in scripted
to answer its verdict, and a hostile reviewer program that tries to change, reach and read what it
must not. Every way of not judging fails closed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from emulator.model.standin import ModelStandin, key_fingerprint
from tests.conftest import FIXTURES
from tests.worker.runner.conftest import TEST_KEY, git
from worker.policy import Policy, merge, org_policy, parse
from worker.runner import adapters, box, review, review_prompt, verdict
from worker.runner.probe import host
from worker.runner.verdict import Result

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)

ORG = """\
version: 1
agents:
  worker:
    adapter: script
    tools: [read_repo, edit_files]
  checker:
    adapter: claude-code
    tools: [read_repo, edit_files, run_shell]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
review: {agent: checker, timeout: 30s}
"""
CLEAN = {c: {"found": False, "reasons": [], "locations": []} for c in verdict.CATEGORIES}
LEAK = {**CLEAN, "secret_leak": {"found": True, "reasons": ["config.py adds what looks like an AWS key"],
                                 "locations": ["config.py:2"]}}  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository with a base and a head that adds a key to config.py: (repo, base, head)."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("print('hi')\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")
    base = git(path, "rev-parse", "HEAD").strip()
    (path / "config.py").write_text("REGION = 'eu'\nKEY = 'AKIA' + 'Q' * 16\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "the change")
    return path, base, git(path, "rev-parse", "HEAD").strip()


def _policy(text: str = ORG) -> Policy:
    return merge(org_policy(parse(text, "org.yml")), None).policy


def _request(
    repo: tuple[Path, str, str], policy: Policy, standin: ModelStandin | None, **kw: Any
) -> review.ReviewRequest:
    path, base, head = repo
    material = review_prompt.Material("run", "Add the config", "Please add config.py.", diff="",
                                      egress="no network connections", model="no model calls")  # fmt: skip
    return review.ReviewRequest(
        policy=policy, repo=path, base=base, head=head, material=material, repo_private=True, run_id="r1",
        model_keys={"ANTHROPIC_API_KEY": TEST_KEY},
        model_upstreams={"anthropic": standin.url} if standin else {}, **kw,
    )  # fmt: skip


@pytest.fixture
def clis(agent_cli_bin: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = f"{agent_cli_bin}:/usr/bin:/bin"
    monkeypatch.setenv("PATH", path)
    return path


def _reviewed(
    repo: tuple[Path, str, str], search_path: str, steps: list[dict[str, Any]]
) -> tuple[review.ReviewRecord, list[dict[str, Any]]]:
    with ModelStandin({"workspace": "/workspace", "steps": steps}, api_key=TEST_KEY) as standin:
        record = review.run(_request(repo, _policy(), standin, search_path=search_path))
        return record, standin.requests()


def test_a_real_cli_reviewer_that_finds_a_leak_blocks_and_says_where(
    repo: tuple[Path, str, str], clis: str
) -> None:
    record, seen = _reviewed(repo, clis, [{"text": json.dumps(LEAK)}])
    assert record.result is Result.BLOCKED, (record.detail, record.quoted, record.output_tail)
    assert record.blocking == ["secret_leak"]
    [leak] = [f for f in record.findings if f["category"] == "secret_leak"]
    assert leak["locations"] == ["config.py:2"]
    assert record.adapter == "claude-code"
    assert record.adapter_version == adapters.SPECS["claude-code"].pinned
    assert record.reply_sha256 is not None
    assert record.reply == json.dumps(LEAK)
    assert record.durations["review_s"] > 0
    # What the reviewer's model was sent: the change, inside its block; only ever the worker's key.
    [asked] = seen
    assert asked["auth"] == {"x-api-key": key_fingerprint(TEST_KEY)}
    sent = json.dumps(asked["body"])
    assert "change-diff" in sent
    assert "AKIA" in sent
    assert review_prompt.REVIEW_PROMPT_VERSION in sent
    # Its tools: Read only (what the policy lists beyond read_repo is never offered).
    offered = {t.get("name") for t in asked["body"].get("tools") or []}
    assert "Read" in offered
    assert not offered & {"Write", "Edit", "Bash", "NotebookEdit", "WebFetch", "WebSearch"}
    assert record.model is not None
    assert record.model["totals"]["calls"] == 1


def test_a_real_cli_reviewer_that_finds_nothing_passes(repo: tuple[Path, str, str], clis: str) -> None:
    record, _ = _reviewed(repo, clis, [{"text": json.dumps(CLEAN)}])
    assert record.result is Result.PASSED, (record.detail, record.quoted, record.output_tail)
    assert record.blocking == []
    assert [f["found"] for f in record.findings] == [False, False, False]


def test_a_reply_that_is_not_the_verdict_blocks(repo: tuple[Path, str, str], clis: str) -> None:
    record, _ = _reviewed(repo, clis, [{"text": "I looked at it and it seems fine."}])
    assert (record.result, record.detail) == (Result.MALFORMED, "the reviewer's verdict did not parse")
    assert record.quoted is not None
    assert record.quoted.startswith("the reply is not one JSON object")


def test_a_reviewer_that_crashes_blocks(repo: tuple[Path, str, str], clis: str) -> None:
    failing = {"error": {"status": 400, "message": "bad request", "times": "always"}}
    record, _ = _reviewed(repo, clis, [failing, {"text": "never"}])
    assert record.result is Result.CRASHED, (record.detail, record.output_tail)
    assert record.detail == "the reviewer crashed (exit 1)"


def test_a_reviewer_that_runs_past_its_timeout_blocks(repo: tuple[Path, str, str], clis: str) -> None:
    policy = _policy(ORG.replace("timeout: 30s", "timeout: 3s"))
    with ModelStandin({"steps": [{"stall": {"seconds": 30, "times": "always"}}, {"text": "late"}]},
                      api_key=TEST_KEY) as standin:  # fmt: skip
        record = review.run(_request(repo, policy, standin, search_path=clis))
    assert (record.result, record.detail) == (Result.TIMED_OUT, "the reviewer timed out after 3s")
    assert record.timed_out


def test_a_hostile_reviewer_can_change_reach_and_read_nothing(
    repo: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy gives its agent a shell, an egress host and an env name: the reviewer gets none."""
    if not box.probe().network_cutoff:
        pytest.skip(
            "this machine cannot cut a box's network: a `command` reviewer would run on the host network"
        )
    program = tmp_path / "bin" / "hostile"
    program.parent.mkdir()
    shutil.copyfile(FIXTURES / "review" / "hostile_reviewer.py", program)
    program.chmod(0o755)
    monkeypatch.setenv("REVIEW_DRILL_SECRET", "drill-secret-value")
    org = ORG.replace("review: {agent: checker, timeout: 30s}", "") + (
        "  hostile:\n    adapter: command\n"
        f'    command: ["{program}", "{{prompt_file}}"]\n'
        "    tools: [read_repo, edit_files, run_shell]\n    egress: [pypi.org]\n"
        "    env: [REVIEW_DRILL_SECRET]\n"
        "review: {agent: hostile, timeout: 30s}\n"
    )
    record = review.run(_request(repo, _policy(org), None))
    assert record.result is Result.PASSED, (record.detail, record.quoted, record.output_tail)
    tries = json.loads(record.output_tail.split("tries ", 1)[1].splitlines()[0])
    assert tries["write"] != "DONE", tries
    assert tries["change"] != "DONE", tries
    assert tries["env"] == []
    assert "DONE" not in tries["egress"], tries
    assert tries["socket"] != "DONE", tries
    assert [e for e in record.egress if e["host"] == "pypi.org" and not e["allowed"]], record.egress
    assert record.box is not None
    assert "/workspace" not in [w.split()[0] for w in record.box["writable"]]
    # The gate decided on the reviewer as it ran: read_repo alone, no egress, no env name.
    assert record.decision["allowed"] is True
    assert record.decision["legs"]["external_comm"] == [], record.decision
    assert "drill-secret-value" not in json.dumps(record.to_data())


def test_a_reviewer_the_trifecta_gate_would_deny_is_not_started(repo: tuple[Path, str, str]) -> None:
    """The org tags read_repo as talking out: a reviewer reading a private repository's change with
    it holds all three legs, so no process is made and the review fails."""
    record = review.run(_request(repo, _policy(ORG + "tools: {read_repo: [external_comm]}\n"), None))
    assert record.result is Result.DENIED
    assert record.detail.startswith(
        "the trifecta gate denied the reviewer checker: it would hold private data"
    )
    assert record.box is None
    assert record.exit_code is None
    assert record.decision["allowed"] is False


def test_a_reviewer_whose_cli_is_missing_blocks(repo: tuple[Path, str, str]) -> None:
    record = review.run(_request(repo, _policy(), None, search_path="/nonexistent"))
    assert record.result is Result.MISSING
    assert record.detail.startswith("the reviewer could not start: the claude-code agent needs claude")


def test_the_reviewer_is_cut_to_what_it_runs_with() -> None:
    policy = _policy()
    cut = review.reviewer_policy(policy).agents["checker"]
    assert (cut.tools, cut.egress, cut.env, cut.timeout) == (("read_repo",), (), ("ANTHROPIC_API_KEY",), 30)
    assert review.reviewer_policy(policy).agents["worker"] == policy.agents["worker"]


def test_a_reviewer_whose_own_model_requests_are_refused_blocks(
    repo: tuple[Path, str, str], tmp_path: Path
) -> None:
    """It uploads the change to its provider's Files API, then answers a clean verdict: its gateway
    refuses the upload, and that alone fails the review, whatever the verdict says."""
    if not box.probe().network_cutoff:
        pytest.skip("this machine cannot cut a box's network: the gate denies a `command` reviewer here")
    program = tmp_path / "bin" / "uploader"
    program.parent.mkdir()
    clean = json.dumps(CLEAN)
    program.write_text(
        "#!/usr/bin/python3 -I\nimport os, urllib.request\n"
        "url = os.environ['BATON_MODEL_BASE_URL'] + '/anthropic/v1/files'\n"
        "req = urllib.request.Request(url, data=open('config.py', 'rb').read(),\n"
        "                             headers={'x-api-key': os.environ['BATON_MODEL_KEY']})\n"
        "try:\n    urllib.request.urlopen(req, timeout=10)\n"
        "except Exception as exc:\n    print(exc, file=__import__('sys').stderr)\n"
        f"print({clean!r})\n"
    )
    program.chmod(0o755)
    org = ORG.replace("review: {agent: checker, timeout: 30s}", "") + (
        f'  uploader:\n    adapter: command\n    command: ["{program}"]\n    tools: [read_repo]\n'
        "    model_endpoints: [api.anthropic.com]\n    env: [ANTHROPIC_API_KEY]\n"
        "review: {agent: uploader, timeout: 30s}\n"
    )
    with ModelStandin({"steps": [{"text": "never asked"}]}, api_key=TEST_KEY) as standin:
        record = review.run(_request(repo, _policy(org), standin))
        assert standin.requests() == []
    assert record.result is Result.REFUSED, (record.detail, record.output_tail)
    assert (
        record.detail == "the model gateway refused the reviewer's own model requests (model-not-inference)"
    )
