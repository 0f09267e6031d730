"""Drill: everyone who may not start a run tries, through GitHub, against real `baton worker`s.

A reader, a triager and an admin bot label an issue; a reader opens an issue through a form that
applies the label; someone who is no collaborator comments `/baton run`; a writer's pull request
edits `.github/baton.yml` to widen what agents may do; a collaborator's fork opens a pull request,
and a reader clicks its "Approve run" button. Every delivery goes emulator -> Baton's endpoint ->
Redis -> the workers, as GitHub would send it.

What must hold: no agent process starts (no run is admitted, no branch or pull request of Baton's);
each refusal is said once on its issue, as a refusal; the widened policy does not judge its own pull
request (its merge gate fails on the protected path); the fork's gate waits for approval, and the
reader's click changes nothing; and the accounting holds (every delivery a finished task or ignored,
nothing left running, every check run completed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from baton import queues, records
from emulator import world
from tests.conftest import EvidenceKeys
from tests.drills import accounting
from tests.drills.procs import registered, wait_for, worker_pool
from tests.worker.conftest import Stage, Workers, make_stage
from tests.worker.test_merge_gate import GATED
from worker import lifecycle
from worker.gates import evaluate
from worker.lifecycle import State

pytestmark = pytest.mark.drill

EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"
SETTLE_S = 90.0
#: What a policy edit asks for: every agent may fetch from the web (the ceiling forbids widening).
WIDER = GATED.replace("tools: [read_repo, edit_files]", "tools: [read_repo, edit_files, web_fetch]")


@pytest.fixture
def stage(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=GATED)


@pytest.fixture
def workers(stage: Stage, redis_url: str, tmp_path: Path, evidence_keys: EvidenceKeys) -> Iterator[Workers]:
    with worker_pool(stage, redis_url, tmp_path, evidence_keys) as pool:
        yield pool


def _guid(result: dict[str, Any], event: str) -> str:
    return str(next(d for d in result["deliveries"] if d["event"] == event)["guid"])


def _gate_runs(stage: Stage, head: str) -> list[dict[str, Any]]:
    return [c for c in stage.admin.check_runs() if c["name"] == evaluate.CHECK and c["head_sha"] == head]


def test_nobody_below_the_policy_starts_a_run_or_makes_baton_speak_for_them(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    procs = [workers.start(name, queues=EVERY_QUEUE) for name in ("a", "b")]
    wait_for(lambda: registered(rdb, {p.pid for p in procs}), 60, "the workers to start", workers.log)
    admin = stage.admin
    admin.create_user("helper-bot[bot]", type="Bot")
    admin.set_role(world.REPO, "helper-bot[bot]", "admin")
    admin.create_user("nobody")
    admin.create_user("mallory")
    admin.set_role(world.REPO, "mallory", "write")

    labels: dict[str, int] = {}  # delivery -> issue, for each label that must be refused
    for sender in ("rita", "tia", "helper-bot[bot]"):
        number = stage.issue(f"Labelled by {sender}")
        labels[_guid(admin.label(world.REPO, number, ["agent:claude-code"], sender=sender), "issues")] = (
            number
        )
    form = admin.create_issue(world.REPO, title="From a form", user="rita", labels=["agent:claude-code"])
    form_deliveries = [str(d["guid"]) for d in form["deliveries"]]
    stranger = stage.issue("A stranger's command")
    command = _guid(
        admin.comment(world.REPO, stranger, "/baton run claude-code", user="nobody"), "issue_comment"
    )

    policy_head = admin.commit(world.REPO, "wider", {".github/baton.yml": WIDER}, base="main")
    policy_pr = _guid(
        admin.open_pull(world.REPO, head="wider", user="wes", title="Let agents fetch"), "pull_request"
    )
    fork = admin.fork(world.REPO, "mallory")["full_name"]
    fork_head = admin.commit(fork, "helpful", {"src/widgets.py": "def spin():\n    return 44\n"}, base="main")
    fork_pr = _guid(admin.open_pull(world.REPO, head="mallory:helpful", user="mallory", title="Helpful"),
                    "pull_request")  # fmt: skip

    sent = [*labels, *form_deliveries, command, policy_pr, fork_pr]
    accounting.wait_settled(rdb, _tasks(rdb, sent), SETTLE_S, log=workers.log())
    [waiting] = _gate_runs(stage, fork_head)
    assert waiting["conclusion"] == "action_required", waiting["output"]["summary"]
    click = admin.call("POST", f"/check-runs/{waiting['id']}/requested-action",
                       {"sender": "rita", "identifier": "approve"})["deliveries"][-1]["guid"]  # fmt: skip
    sent.append(str(click))
    accounting.wait_settled(rdb, _tasks(rdb, sent), SETTLE_S, log=workers.log())

    # Nothing ran: no run admitted or spawned, no branch or pull request of Baton's.
    for guid, number in labels.items():
        assert lifecycle.current(rdb, guid) is State.REFUSED, (guid, lifecycle.field(rdb, guid, "detail"))
        [said] = stage.baton_comments(number)
        assert "Refused" in said["body"] or "refused" in said["body"], said["body"]
    assert lifecycle.current(rdb, command) is State.REFUSED
    assert lifecycle.current(rdb, str(click)) is State.REFUSED
    for number in {*labels.values(), stranger, int(form["number"])}:
        for said in stage.baton_comments(number):
            assert "Queued" not in said["body"], said["body"]
            assert "Working" not in said["body"], said["body"]
    assert not any(pr["head"].startswith("baton/") for pr in _pulls(stage)), _pulls(stage)

    # The widening did not judge itself: its pull request fails on the protected path.
    [judged] = _gate_runs(stage, policy_head)
    assert judged["conclusion"] == "failure", judged["output"]["summary"]
    assert ".github/baton.yml" in judged["output"]["summary"]
    # The fork still waits: the reader's click approved nothing and ran nothing.
    assert [r["conclusion"] for r in _gate_runs(stage, fork_head)] == ["action_required"]

    report = accounting.account(admin, rdb, _tasks(rdb, sent))  # the others were ignored: no task
    print(report.summary())
    assert report.counts()[State.REFUSED.value] >= len(labels) + 2


def _tasks(rdb: redis.Redis, sent: list[str]) -> list[str]:
    """The deliveries that became tasks (Baton's endpoint ignores some, e.g. ``issues.opened``)."""
    return [guid for guid in sent if rdb.exists(records.TASK_PREFIX + guid)]


def _pulls(stage: Stage) -> list[dict[str, Any]]:
    return [
        {"head": p["head_ref"], "number": p["number"]} for p in stage.admin.call("GET", "/state")["pulls"]
    ]
