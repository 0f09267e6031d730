"""The merge gate on real pull requests, judged from the emulator's check runs.

Built-in gates on every PR, the policy's command gates in the box, untrusted code waiting
for a maintainer's approval, and nothing published that was not re-verified against the
pull request and the policy as they are when the result is written.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage, make_stage
from worker import lifecycle
from worker.gates import evaluate
from worker.jobs import execute

GATED = (
    world.REPO_POLICY
    + """\
gates:
  - name: readme
    run: test -f README.md
    timeout: 30s
  - name: lint
    run: "if grep -q 'return 0' src/widgets.py; then echo 'src/widgets.py:2: spin returns 0'; exit 1; fi"
    timeout: 30s
"""
)
SLOW = world.REPO_POLICY + "gates:\n  - name: slow\n    run: sleep 3\n    timeout: 30s\n"


@pytest.fixture
def gated(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=GATED)


@pytest.fixture
def slow(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    """A gate that takes three seconds: time for a push, or a second trigger, while it runs."""
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=SLOW)


def _in_background(stage: Stage, delivery: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run the delivery's task on another thread; return once its check run is posted."""
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(stage.run(delivery)))
    worker.start()
    head = stage.task(delivery).head_sha
    deadline = time.monotonic() + 30
    while not [c for c in stage.admin.check_runs() if c["head_sha"] == head] and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker, outcome


def _open(
    stage: Stage, files: dict[str, str | None], *, user: str = "wes", branch: str = "feature"
) -> dict[str, Any]:
    head = stage.admin.commit(world.REPO, branch, files, base="main")
    opened = stage.admin.open_pull(world.REPO, head=branch, user=user, title="A change")
    delivery = next(d for d in opened["deliveries"] if d["event"] == "pull_request")
    return {"head": head, "delivery": delivery, "number": opened["number"]}


def _runs(stage: Stage, head: str) -> list[dict[str, Any]]:
    return [c for c in stage.admin.check_runs() if c["name"] == evaluate.CHECK and c["head_sha"] == head]


def test_a_pull_request_whose_gates_pass_is_success_with_the_table(gated: Stage) -> None:
    pr = _open(gated, {"src/widgets.py": "def spin():\n    return 43\n"})
    assert gated.run(pr["delivery"])["state"] == "done"
    [run] = _runs(gated, pr["head"])
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    summary = run["output"]["summary"]
    for gate in ("protected-paths", "secrets", "readme", "lint"):
        assert f"| {gate} | pass |" in summary
    created = gated.requests("POST", f"/repos/{world.REPO}/check-runs")
    assert [r["body"]["status"] for r in created] == ["in_progress"]  # posted at once, completed after


def test_a_failing_gate_is_failure_with_annotations_on_the_named_lines(gated: Stage) -> None:
    pr = _open(gated, {"src/widgets.py": "def spin():\n    return 0\n"})
    gated.run(pr["delivery"])
    [run] = _runs(gated, pr["head"])
    assert run["conclusion"] == "failure"
    assert "| lint | FAIL |" in run["output"]["summary"]
    assert "| readme | pass |" in run["output"]["summary"]  # the first failure hides nothing
    notes = gated.requests("PATCH", f"/check-runs/{run['id']}")
    sent = [a for r in notes for a in (r["body"].get("output") or {}).get("annotations", [])]
    assert {(a["path"], a["start_line"]) for a in sent} >= {("src/widgets.py", 2)}


def test_a_secret_added_fails_without_the_secret_in_the_output(gated: Stage) -> None:
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"  # built here, so no token sits in the repository
    pr = _open(gated, {"config/settings.py": f"TOKEN = '{token}'\n"})
    gated.run(pr["delivery"])
    [run] = _runs(gated, pr["head"])
    assert run["conclusion"] == "failure"
    assert "| secrets | FAIL |" in run["output"]["summary"]
    everything = str(gated.admin.requests())
    assert token not in everything
    assert token[-8:] not in everything


def test_a_pull_request_that_edits_the_policy_fails_and_is_judged_by_the_default_branchs(
    gated: Stage,
) -> None:
    # The PR's own baton.yml drops the lint gate: the default branch's policy is the one that applies.
    pr = _open(
        gated, {".github/baton.yml": world.REPO_POLICY, "src/widgets.py": "def spin():\n    return 0\n"}
    )
    gated.run(pr["delivery"])
    [run] = _runs(gated, pr["head"])
    assert run["conclusion"] == "failure"
    summary = run["output"]["summary"]
    assert "| policy-and-workflows | FAIL |" in summary
    assert "| lint | FAIL |" in summary


def test_an_admins_policy_edit_passes_that_gate(gated: Stage) -> None:
    pr = _open(gated, {".github/baton.yml": GATED + "# tidied\n"}, user="ada")
    gated.run(pr["delivery"])
    [run] = _runs(gated, pr["head"])
    assert "| policy-and-workflows | pass |" in run["output"]["summary"]
    assert run["conclusion"] == "success"


def test_a_push_while_the_gates_run_supersedes_the_old_head(slow: Stage) -> None:
    pr = _open(slow, {"src/widgets.py": "def spin():\n    return 43\n"})
    worker, _ = _in_background(slow, pr["delivery"])
    pushed = slow.admin.push_to_pull(world.REPO, pr["number"], {"notes.txt": "more\n"}, sender="wes")
    worker.join(timeout=60)
    [old] = _runs(slow, pr["head"])
    assert old["conclusion"] == "neutral"
    assert f"superseded by {pushed['sha'][:12]}" in old["output"]["summary"]
    sync = next(d for d in pushed["deliveries"] if d["event"] == "pull_request")
    slow.run(sync)
    [new] = _runs(slow, pushed["sha"])
    assert new["conclusion"] == "success"


def test_an_author_below_write_waits_for_a_maintainers_approval_of_that_head(gated: Stage) -> None:
    pr = _open(gated, {"src/widgets.py": "def spin():\n    return 43\n"}, user="rita")
    gated.run(pr["delivery"])
    [waiting] = _runs(gated, pr["head"])
    assert waiting["conclusion"] == "action_required"
    assert "| readme | waiting |" in waiting["output"]["summary"]
    assert "| secrets | pass |" in waiting["output"]["summary"]  # the built-in gates ran at once
    completed = gated.requests("PATCH", f"/check-runs/{waiting['id']}")
    assert [a["identifier"] for r in completed for a in r["body"].get("actions", [])] == ["approve"]

    ignored = gated.admin.call("POST", f"/check-runs/{waiting['id']}/requested-action",
                               {"sender": "tia", "identifier": "approve"})["deliveries"][-1]  # fmt: skip
    assert gated.run(ignored)["state"] == "refused"
    assert len(_runs(gated, pr["head"])) == 1  # nothing ran, nothing was said

    approved = gated.admin.call("POST", f"/check-runs/{waiting['id']}/requested-action",
                                {"sender": "maria", "identifier": "approve"})["deliveries"][-1]  # fmt: skip
    gated.run(approved)
    latest = max(_runs(gated, pr["head"]), key=lambda r: r["id"])
    assert latest["conclusion"] == "success"
    assert "| readme | pass |" in latest["output"]["summary"]
    assert "approved for this commit by `maria`" in latest["output"]["summary"]


def test_one_evaluation_per_head_and_policy_and_a_rerequest_reuses_it(gated: Stage) -> None:
    pr = _open(gated, {"src/widgets.py": "def spin():\n    return 43\n"})
    gated.run(pr["delivery"])
    [first] = _runs(gated, pr["head"])
    rerun = gated.admin.call("POST", f"/check-runs/{first['id']}/rerequest", {"sender": "maria"})[
        "deliveries"
    ][-1]
    gated.run(rerun)
    again = max(_runs(gated, pr["head"]), key=lambda r: r["id"])
    assert again["id"] != first["id"]
    assert again["conclusion"] == "success"
    assert again["output"]["summary"].startswith("Reused")


def test_two_triggers_for_one_head_make_one_evaluation(slow: Stage) -> None:
    pr = _open(slow, {"src/widgets.py": "def spin():\n    return 43\n"})
    first = slow.task(pr["delivery"])
    worker, _ = _in_background(slow, pr["delivery"])
    # A second worker gets another trigger for the same head while the first evaluates it.
    second = dataclasses.replace(first, id=first.id + "-again", delivery_id=first.id + "-again")
    lifecycle.move(slow.rdb, second.id, lifecycle.State.QUEUED, "stored")
    joined = execute(slow.ctx, second)
    worker.join(timeout=60)
    assert f"joined the evaluation of task {first.id}" in joined["detail"]
    [run] = _runs(slow, pr["head"])  # one check run, the first trigger's
    assert run["conclusion"] == "success"


def test_an_agent_pull_request_with_a_human_commit_on_top_lists_it_in_provenance(gated: Stage) -> None:
    number = gated.issue_with({"steps": [{"op": "write", "path": "docs/hello.md", "content": "hello\n"}]})
    admitted = gated.label(number, "script", sender="maria")
    assert gated.run_agent(admitted["task_id"])["state"] == "pr_opened"
    pulls = gated.admin.call("GET", "/state")["pulls"]
    [pr] = [p for p in pulls if p["head_ref"] == f"baton/issue-{number}"]
    opened = [d for d in gated.admin.deliveries() if d["event"] == "pull_request"]
    gated.run(opened[-1])
    baton_head = _runs(gated, gated.task(opened[-1]).head_sha or "")[0]
    assert "| provenance | pass |" in baton_head["output"]["summary"]
    assert f"Baton, task {admitted['task_id']}" in baton_head["output"]["summary"]

    pushed = gated.admin.push_to_pull(
        world.REPO, pr["number"], {"docs/hello.md": "hello, world\n"}, sender="wes"
    )
    gated.run(next(d for d in pushed["deliveries"] if d["event"] == "pull_request"))
    [run] = _runs(gated, pushed["sha"])
    summary = run["output"]["summary"]
    assert "then 1 commit(s) on top by" in summary
    assert f"{pushed['sha'][:12]}: by " in summary
    assert "not Baton" in summary


def test_a_pull_request_from_a_fork_waits_for_approval_even_from_a_writer(gated: Stage) -> None:
    gated.admin.create_user("mallory")
    fork = gated.admin.fork(world.REPO, "mallory")["full_name"]
    head = gated.admin.commit(
        fork, "helpful", {"src/widgets.py": "def spin():\n    return 44\n"}, base="main"
    )
    gated.admin.set_role(world.REPO, "mallory", "write")  # even a collaborator's fork runs no code unapproved
    opened = gated.admin.open_pull(world.REPO, head="mallory:helpful", user="mallory", title="Helpful")
    gated.run(next(d for d in opened["deliveries"] if d["event"] == "pull_request"))
    [run] = _runs(gated, head)
    assert run["conclusion"] == "action_required"
    assert "| lint | waiting |" in run["output"]["summary"]


def test_a_policy_change_while_the_gates_run_is_not_published_as_success(slow: Stage) -> None:
    pr = _open(slow, {"src/widgets.py": "def spin():\n    return 43\n"})
    worker, outcome = _in_background(slow, pr["delivery"])
    tightened = SLOW + "limits:\n  max_diff_lines: 1000\n"  # a real change (a comment alone is not one)
    slow.admin.commit(world.REPO, "main", {".github/baton.yml": tightened})
    worker.join(timeout=60)
    runs = sorted(_runs(slow, pr["head"]), key=lambda r: r["id"])
    assert [r["conclusion"] for r in runs] == ["neutral", "success"]
    assert "evaluated again" in runs[0]["output"]["summary"]
    assert outcome["state"] == "done"
