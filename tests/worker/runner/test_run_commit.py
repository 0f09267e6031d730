"""The runner as the worker calls it: its commit made as asked, cancelled by ``stop``, cost and start time.

Real git repository, real box, real proxy; the agents are the script agent and, for a cost, a stand-in
``claude`` executable found on the request's search path (the seam the runner looks agents up on).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.worker.runner.conftest import git
from worker.policy import Policy, merge, org_policy, parse
from worker.runner import box
from worker.runner import inspect as ins
from worker.runner import run as runner
from worker.runner.probe import host

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)

ORG = """\
version: 1
agents:
  scripted:
    adapter: script
    tools: [read_repo, edit_files]
    timeout: 60s
  claude:
    adapter: claude-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
"""

#: A stand-in for Claude Code: answers --version, writes a file, reports a result with a cost.
FAKE_CLAUDE = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.1.197 (Claude Code)"; exit 0; fi
cat >/dev/null
echo hello >hello.txt
printf '%s\\n' '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"Done.",\
"total_cost_usd":0.0421,"usage":{"input_tokens":10,"output_tokens":5}}'
"""


@pytest.fixture
def policy() -> Policy:
    return merge(org_policy(parse(ORG, "org.yml")), None).policy


def issue(steps: list[dict[str, Any]]) -> runner.Issue:
    recipe = json.dumps({"version": 1, "steps": steps})
    return runner.Issue("Add a greeting", f"Please.\n\n```baton-recipe\n{recipe}\n```\n")


def request(repo: Path, policy: Policy, steps: list[dict[str, Any]], **kwargs: Any) -> runner.RunRequest:
    base = runner.resolve_base(repo)
    return runner.RunRequest(agent="scripted", repo=repo, base=base, issue=issue(steps), policy=policy,
                             repo_private=True, **kwargs)  # fmt: skip


WRITE_HELLO = [{"op": "write", "path": "hello.txt", "content": "hello\n"}]


def test_a_commit_spec_gives_the_commit_its_branch_parents_people_and_message(
    repo: Path, policy: Policy
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "pr")  # the PR branch as an earlier run left it
    (repo / "earlier.txt").write_text("earlier\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "earlier run")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    message = "Add a greeting\n\nFixes #7\n\nCo-authored-by: Alice <alice@example.com>\n"
    how = runner.CommitSpec(branch="baton/task-7", message=message, author=("Alice", "alice@example.com"),
                            committer=("Baton", "baton@example.com"), parents=(tip, base))  # fmt: skip
    record = runner.run(request(repo, policy, WRITE_HELLO, commit=how))
    assert record.outcome == "done", record.reason
    assert (record.branch, git(repo, "rev-parse", "baton/task-7")) == ("baton/task-7", record.commit)
    assert git(repo, "rev-list", "--parents", "-n", "1", "baton/task-7").split() == [record.commit, tip, base]
    # The inspected tree: the base plus the agent's change (not the PR branch's own files).
    assert git(repo, "diff-tree", "-r", "--name-status", base, "baton/task-7") == "A\thello.txt"
    shown = git(repo, "log", "-1", "--format=%an|%ae|%cn|%ce|%at|%ct", "baton/task-7").split("|")
    base_date = git(repo, "log", "-1", "--format=%ct", base)
    assert shown == ["Alice", "alice@example.com", "Baton", "baton@example.com", base_date, base_date]
    assert git(repo, "log", "-1", "--format=%B", "baton/task-7") == message.strip()
    assert (git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "pr")) == (base, tip)
    assert git(repo, "branch", "--list", "baton/run-*") == ""


def test_without_a_commit_spec_the_run_commits_as_baton_run_does(repo: Path, policy: Policy) -> None:
    base = git(repo, "rev-parse", "HEAD")
    before = datetime.now(UTC).replace(microsecond=0)
    record = runner.run(request(repo, policy, WRITE_HELLO))
    assert record.outcome == "done", record.reason
    assert record.branch == f"baton/run-{record.run_id}"
    assert git(repo, "rev-list", "--parents", "-n", "1", record.branch).split() == [record.commit, base]
    assert git(repo, "log", "-1", "--format=%an|%cn", record.branch) == "Baton|Baton"
    assert record.cost_usd is None  # the script agent reports no cost
    started = datetime.fromisoformat(record.started_at)
    assert started.utcoffset() == timedelta(0)
    assert before <= started <= datetime.now(UTC)


def test_the_agents_own_cost_is_kept_apart_from_what_the_gateway_metered(
    tmp_path: Path, repo: Path, policy: Policy
) -> None:
    """The CLI's word on its cost is the agent's (hostile) output; the record's cost is the gateway's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(FAKE_CLAUDE)
    (bin_dir / "claude").chmod(0o755)
    base = runner.resolve_base(repo)
    asked = runner.RunRequest(agent="claude", repo=repo, base=base, issue=issue([]), policy=policy,
                              repo_private=True, search_path=f"{bin_dir}:/usr/bin:/bin")  # fmt: skip
    record = runner.run(asked)
    assert record.outcome == "done", (record.reason, record.output_tail)
    assert record.cost_usd == 0.0  # this fake CLI made no model call
    assert record.model is not None
    assert record.model["totals"]["calls"] == 0
    assert (record.agent_result or {}).get("cost_usd") == 0.0421


def test_a_stop_set_before_the_run_starts_no_agent(repo: Path, policy: Policy) -> None:
    stop = threading.Event()
    stop.set()
    record = runner.run(request(repo, policy, WRITE_HELLO), stop=stop)
    assert (record.outcome, record.exit_status) == ("cancelled", 6)
    assert "before the agent started" in record.reason
    assert (record.box, record.adapter_version, record.diff, record.commit) == (None, None, None, None)
    assert git(repo, "branch", "--list", "baton/*") == ""


def test_a_stop_while_the_agent_runs_cancels_it_and_commits_nothing(repo: Path, policy: Policy) -> None:
    steps: list[dict[str, Any]] = [*WRITE_HELLO, {"op": "sleep", "seconds": 120}]
    stop = threading.Event()
    timer = threading.Timer(1.5, stop.set)
    started = time.monotonic()
    timer.start()
    try:
        record = runner.run(request(repo, policy, steps), stop=stop)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 15
    assert (record.outcome, record.exit_status, record.timed_out) == ("cancelled", 6, False)
    assert record.reason == "cancelled while the agent ran; nothing was committed"
    assert record.box is not None  # the box ran, and says what held it
    assert (record.diff, record.changes, record.branch, record.commit) == (None, [], None, None)
    assert git(repo, "branch", "--list", "baton/*") == ""


def test_commit_parents_must_each_be_a_commit_given_once(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with pytest.raises(ins.InspectError) as caught:
        ins.commit(repo, base, tree, branch="b1", message="m", author=("a", "a@x"), parents=("nope", base))
    assert caught.value.code == ins.UNKNOWN_REVISION
    with pytest.raises(ValueError, match="twice"):
        ins.commit(repo, base, tree, branch="b2", message="m", author=("a", "a@x"), parents=(base, "main"))
    assert git(repo, "branch", "--list", "b*") == ""
    made = ins.commit(repo, base, tree, branch="b3", message="m", author=("a", "a@x"), parents=())
    assert git(repo, "rev-list", "--parents", "-n", "1", made).split() == [made, base]


def test_the_agent_sees_every_file_of_the_commit_whatever_its_gitattributes_say(
    repo: Path, policy: Policy
) -> None:
    """``git archive`` would drop export-ignore files from the workspace, and the inspection
    would then read their absence as the agent deleting them."""
    (repo / ".gitattributes").write_text("tests/ export-ignore\nversion.txt export-subst\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_app.py").write_text("assert True\n")
    (repo / "version.txt").write_text("$Format:%H$\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "attributes")
    steps = [{"op": "read", "path": "tests/test_app.py"}, {"op": "read", "path": "version.txt"}]
    record = runner.run(request(repo, policy, steps))
    assert record.outcome == "no-changes", (record.reason, record.changes)


def test_a_run_stops_when_the_days_agent_minutes_run_out(repo: Path, policy: Policy) -> None:
    """The agent's own timeout is 60 s; the budget has 2 s left today, so the box stops it then."""
    began = time.monotonic()
    record = runner.run(
        request(repo, policy, [{"op": "sleep", "seconds": 30}, *WRITE_HELLO], max_seconds=2.7)
    )
    took = time.monotonic() - began
    assert record.outcome == "timed-out", record.reason
    assert record.reason == "the agent ran past its 2s limit (the agent minutes left in today's budget)"
    assert took < 20
    assert record.commit is None
    longer = runner.run(request(repo, policy, WRITE_HELLO, max_seconds=3600))  # the agent's 60 s stands
    assert longer.outcome == "done", longer.reason


def test_the_box_gets_the_effective_memory_and_disk_limits(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The org's sizes, narrowed by the repository's file, are what the agent's box is asked for."""
    org = org_policy(parse(ORG + "limits: {max_agent_memory: 2GiB, max_workspace_bytes: 8GiB}\n", "org.yml"))
    narrowed = merge(org, parse("version: 1\nlimits: {max_workspace_bytes: 3GiB}\n", "r.yml")).policy
    asked: list[box.BoxSpec] = []
    real = box.run

    def recording(spec: box.BoxSpec, **kwargs: Any) -> box.BoxResult:
        if spec.workspace.parent.name.startswith("baton-run-"):  # the agent's box, not the host probe's
            asked.append(spec)
        return real(spec, **kwargs)

    monkeypatch.setattr(box, "run", recording)  # watched at the runner's edge, then run for real
    record = runner.run(request(repo, narrowed, WRITE_HELLO))
    assert record.outcome == "done", record.reason
    assert [(s.memory_bytes, s.max_disk_bytes) for s in asked] == [(2 * 1024**3, 3 * 1024**3)]
    memory = (record.box or {})["memory_limit"]
    assert memory["detail"] != "no memory limit was asked for"  # in force, or why not, on the record


GROW = "held = []\nwhile True:\n    held.append(bytearray(8 << 20))\n"


def test_a_run_that_passes_its_memory_limit_is_stopped_and_commits_nothing(repo: Path) -> None:
    org = org_policy(parse(ORG + "limits: {max_agent_memory: 96MiB}\n", "org.yml"))
    policy = merge(org, None).policy
    steps = [*WRITE_HELLO, {"op": "spawn", "argv": ["/usr/bin/python3", "-c", GROW]}]
    began = time.monotonic()
    record = runner.run(request(repo, policy, steps))
    assert record.outcome == "over-limit", record.reason
    assert record.reason.startswith("the agent was stopped: it passed its memory limit of 96 MiB")
    assert record.reason.endswith("nothing was committed")
    assert record.commit is None
    assert record.over_limit is not None
    assert record.over_limit["kind"] == "memory"
    assert time.monotonic() - began < 45  # the box was stopped at the limit, not at its 60 s timeout
