"""Every check run Baton completes carries a signed receipt that verifies offline, and its details
link serves the same receipt with a proof against the log's newest checkpoint.

Judged as a reviewer would: from the check runs the emulator holds and the bundle a plain HTTP GET
returns, checked with the offline verifier and the published key only.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from evidence import audit as chain
from evidence import statement
from evidence.errors import EvidenceError
from evidence.keys import keyring
from evidence.verify import verify_receipt
from tests.worker.conftest import Stage, make_stage
from tests.worker.test_merge_gate import GATED, _open, _runs
from worker import audit, replay
from worker.runs import report

HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}
BUNDLE = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@pytest.fixture
def gated(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Any:
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=GATED)


def _bundle(run: dict[str, Any]) -> dict[str, Any]:
    text = run["output"]["text"]
    assert text, f"check run {run['name']} has no receipt"
    [found] = BUNDLE.findall(text)
    parsed: dict[str, Any] = orjson.loads(found)
    return parsed


def _keys(stage: Stage) -> dict[str, Any]:
    assert stage.ctx.signer is not None
    return keyring([stage.ctx.signer.key.public])


def _check_runs(stage: Stage, head: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in stage.admin.check_runs() if r["head_sha"] == head}


def _agent_pr(stage: Stage) -> tuple[str, str, dict[str, dict[str, Any]]]:
    number = stage.issue_with(HELLO)
    task_id = stage.label(number, "script", sender="maria")["task_id"]
    assert stage.run_agent(task_id)["state"] == "pr_opened"
    [run] = [r for r in stage.admin.check_runs() if r["name"] == report.AGENT_CHECK]
    return task_id, run["head_sha"], _check_runs(stage, run["head_sha"])


def test_an_agent_runs_check_runs_carry_receipts_that_verify_offline(stage: Stage) -> None:
    task_id, head, runs = _agent_pr(stage)
    keys = _keys(stage)
    kinds = {}
    for name in (report.TRIFECTA_CHECK, report.AGENT_CHECK):
        found = verify_receipt(_bundle(runs[name]), keys, commit=head)
        assert found.checked_log
        kinds[name] = found
        predicate = found.statement["predicate"]
        assert isinstance(predicate, dict)
        assert predicate["task"] == task_id
    assert kinds[report.TRIFECTA_CHECK].predicate_type == statement.TRIFECTA_DECISION
    assert kinds[report.AGENT_CHECK].predicate_type == statement.AGENT_RUN
    decision = kinds[report.TRIFECTA_CHECK].statement["predicate"]["decision"]  # type: ignore[index]
    assert decision["allowed"] is True
    agent = kinds[report.AGENT_CHECK].statement["predicate"]
    assert isinstance(agent, dict)
    assert agent["baseCommit"] == stage.world.head_sha
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", agent["startedAt"])
    assert agent["box"]["pidNamespace"]["inForce"] in (True, False)  # the box's own report, camelCased
    # The diff subject is what `git diff --binary --full-index ...` of base..head hashes to.
    digests = [s["digest"] for s in kinds[report.AGENT_CHECK].subjects]
    assert {"gitCommit": head} in digests
    assert any("sha256" in d for d in digests)
    with pytest.raises(EvidenceError) as wrong:
        verify_receipt(_bundle(runs[report.AGENT_CHECK]), keys, commit=stage.world.head_sha)
    assert wrong.value.code == "subject-mismatch"


def test_securesystemslib_accepts_the_envelope_on_the_check_run(stage: Stage) -> None:
    _, _, runs = _agent_pr(stage)
    assert stage.ctx.signer is not None
    public = stage.ctx.signer.key.public
    key = SSlibKey.from_crypto(public.crypto, keyid=public.keyid)
    for name in (report.TRIFECTA_CHECK, report.AGENT_CHECK):
        envelope = _bundle(runs[name])["dsseEnvelope"]
        Envelope.from_dict(copy.deepcopy(envelope)).verify([key], 1)


def test_the_details_link_serves_the_bundle_against_the_newest_checkpoint(stage: Stage) -> None:
    _, head, runs = _agent_pr(stage)
    pr = _open(stage, {"src/widgets.py": "def spin():\n    return 43\n"})  # one more receipt after
    stage.run(pr["delivery"])
    keys = _keys(stage)
    run = runs[report.AGENT_CHECK]
    url = run["details_url"]
    assert url.startswith(f"{stage.ctx.signer.public_url}/.well-known/baton/log/")  # type: ignore[union-attr]
    served = httpx.get(url, timeout=10).json()
    found = verify_receipt(served, keys, commit=head)
    on_run = verify_receipt(_bundle(run), keys, commit=head)
    assert found.log_index == on_run.log_index
    assert (found.tree_size or 0) > (on_run.tree_size or 0) > 0  # proved again against a newer tree
    assert served["dsseEnvelope"] == _bundle(run)["dsseEnvelope"]


def test_merge_gate_receipts_are_in_toto_test_results(gated: Stage) -> None:
    keys = _keys(gated)
    passing = _open(gated, {"src/widgets.py": "def spin():\n    return 43\n"})
    gated.run(passing["delivery"])
    [run] = _runs(gated, passing["head"])
    assert run["details_url"].startswith(f"{gated.ctx.signer.public_url}/.well-known/baton/log/")  # type: ignore[union-attr]
    found = verify_receipt(_bundle(run), keys, commit=passing["head"])
    assert found.predicate_type == statement.TEST_RESULT
    predicate = found.statement["predicate"]
    assert isinstance(predicate, dict)
    assert predicate["result"] == "PASSED"
    assert {"readme", "lint", "secrets"} <= set(predicate["passedTests"])
    names = [c["name"] for c in predicate["configuration"]]
    assert "policy" in names
    assert {"gate:readme", "gate:lint"} <= set(names)

    failing = _open(gated, {"src/widgets.py": "def spin():\n    return 0\n"}, branch="bad")
    gated.run(failing["delivery"])
    [run] = _runs(gated, failing["head"])
    predicate = verify_receipt(_bundle(run), keys, commit=failing["head"]).statement["predicate"]
    assert isinstance(predicate, dict)
    assert (predicate["result"], predicate["failedTests"]) == ("FAILED", ["lint"])


def test_every_decision_replays_byte_identical_and_a_changed_policy_record_is_caught(stage: Stage) -> None:
    task_id, _, _ = _agent_pr(stage)
    assert stage.ctx.signer is not None
    found = replay.replay(stage.rdb, task_id, _keys(stage))
    assert [r.where for r in found] == ["admission", "run"]
    assert all(r.match for r in found), found
    assert found[1].signed is True  # the signed bytes on baton/trifecta are the replayed ones

    recorded = orjson.loads(stage.rdb.get(replay.DECISION_PREFIX + task_id) or b"{}")
    digest = recorded["decision"]["policy_sha256"]
    stage.rdb.set(replay.POLICY_PREFIX + digest, b'{"version": 1}')  # someone edits the kept policy
    [admission, _] = replay.replay(stage.rdb, task_id)
    assert not admission.match
    assert "digest" in (admission.problem or "")


def test_the_audit_chain_holds_the_runs_steps_in_order_and_verifies(stage: Stage) -> None:
    task_id, _, _ = _agent_pr(stage)
    assert stage.ctx.signer is not None
    installation = stage.world.installation_id
    audit.seal(stage.rdb, stage.ctx.signer.audit_secret)
    trail = chain.AuditChain(
        stage.rdb, installation, chain.derive_key(stage.ctx.signer.audit_secret, installation)
    )
    assert trail.verify() is None
    assert trail.pending() == 0
    events = [orjson.loads(e)["event"] for e in stage.rdb.lrange(chain.chain_key(installation), 0, -1)]
    mine = [e for e in events if e.get("task") == task_id]
    steps = [e["event"] if e["event"] != "state" else f"state:{e['to']}" for e in mine]
    for expected in ("accepted", "state:running", "decided", "state:queued", "spawned", "exited", "pushed",
                     "signed", "check-run-posted", "state:pr_opened"):  # fmt: skip
        assert expected in steps, (expected, steps)
    assert steps.index("accepted") < steps.index("decided") < steps.index("spawned") < steps.index("pushed")
    assert steps.index("pushed") < steps.index("signed") < steps.index("state:pr_opened")
    raw = b"".join(stage.rdb.lrange(chain.chain_key(installation), 0, -1))
    assert b"Please do this" not in raw  # steps and digests, never the issue's text


def _baton(stage: Stage, tmp_path: Path, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`baton ARGS` as an operator runs it, against the stage's Redis and keys."""
    assert stage.ctx.signer is not None
    key = tmp_path / "signing.pem"
    key.write_bytes(stage.ctx.signer.key.private_pem())
    secret = stage.ctx.signer.audit_secret.decode()
    env = {"PATH": os.environ["PATH"], "REDIS_URL": redis_url,
           "BATON_SIGNING_KEY_PATH": str(key), "BATON_AUDIT_SECRET": secret}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "baton", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)  # fmt: skip


def test_the_operators_commands_replay_and_verify_and_name_a_broken_link(
    stage: Stage, tmp_path: Path, redis_url: str
) -> None:
    task_id, _, _ = _agent_pr(stage)
    done = _baton(stage, tmp_path, redis_url, "replay", task_id, "--json")
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["identical"] is True
    assert [d["where"] for d in result["tasks"][task_id]] == ["admission", "run"]
    assert _baton(stage, tmp_path, redis_url, "replay", "--all").returncode == 0

    done = _baton(stage, tmp_path, redis_url, "audit", "verify")
    assert done.returncode == 0, done.stderr
    assert f"installation {stage.world.installation_id}:" in done.stdout

    installation = stage.world.installation_id
    key = chain.chain_key(installation)
    entry = orjson.loads(stage.rdb.lindex(key, 3) or b"{}")
    entry["event"]["detail"] = "edited afterwards"
    stage.rdb.lset(key, 3, orjson.dumps(entry, option=orjson.OPT_SORT_KEYS))
    before = stage.rdb.lrange(key, 0, -1)
    done = _baton(stage, tmp_path, redis_url, "audit", "verify", "--installation", str(installation))
    assert done.returncode == 1
    assert "entry 3" in done.stderr, done.stderr
    assert stage.rdb.lrange(key, 0, -1) == before  # verification wrote nothing

    assert _baton(stage, tmp_path, redis_url, "replay", "no-such-task").returncode == 2


def test_without_a_signing_key_no_check_run_claims_success(gated: Stage) -> None:
    """A worker that cannot sign fails closed: the gate's run ends `failure`, saying why, never `success`."""
    unsigned = dataclasses.replace(gated, ctx=dataclasses.replace(gated.ctx, signer=None))
    pr = _open(unsigned, {"src/widgets.py": "def spin():\n    return 43\n"})
    assert unsigned.run(pr["delivery"])["state"] == "failed"
    [run] = _runs(unsigned, pr["head"])
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert "No receipt" in (run["output"]["text"] or "")
    assert unsigned.rdb.keys("baton:log:*:entries") == []  # nothing signed, nothing logged


def test_a_saved_audit_head_catches_a_cut_tail_that_verify_alone_cannot(
    stage: Stage, tmp_path: Path, redis_url: str
) -> None:
    _agent_pr(stage)
    installation = stage.world.installation_id
    done = _baton(stage, tmp_path, redis_url, "audit", "head")
    assert done.returncode == 0, done.stderr
    saved = tmp_path / "audit-head.json"
    saved.write_text(done.stdout)
    [head] = orjson.loads(done.stdout)["heads"]
    assert head["installation"] == installation
    assert head["seq"] >= 3
    since = ("audit", "verify", "--since", str(saved))
    assert _baton(stage, tmp_path, redis_url, *since).returncode == 0

    stage.rdb.ltrim(chain.chain_key(installation), 0, 1)  # the tail cut off: what is left still verifies
    assert _baton(stage, tmp_path, redis_url, "audit", "verify").returncode == 0
    done = _baton(stage, tmp_path, redis_url, *since)
    assert done.returncode == 1
    assert f"installation {installation}: BROKEN: the chain has 2 entries" in done.stderr, done.stderr

    stage.rdb.delete(chain.chain_key(installation))  # the chain gone altogether, and its listing with it
    stage.rdb.srem(chain.INSTALLATIONS, installation)
    done = _baton(stage, tmp_path, redis_url, *since)
    assert done.returncode == 1
    assert "the chain has 0 entries" in done.stderr, done.stderr
    bad = tmp_path / "not-a-head.json"
    bad.write_text('{"heads": [{"installation": "x"}]}')
    done = _baton(stage, tmp_path, redis_url, "audit", "verify", "--since", str(bad))
    assert done.returncode == 2
    assert "not-a-head.json" in done.stderr
    assert "heads" in done.stderr
