"""`baton demo` end to end: real processes, the emulator, every scenario as expected."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from demo import harness, scenarios
from evidence import statement
from evidence.keys import PublicKey


def test_demo_plays_every_scenario_and_writes_its_evidence(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "WEBHOOK_SECRET", "APP_ID", "PRIVATE_KEY")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "baton", "demo", "--out", "demo", "--agents", "all"],  # relative, as in README
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=480, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    count = len(scenarios.issue_scenarios(tuple(scenarios.REAL_AGENTS))) + len(scenarios.PULL_SCENARIOS) + 3
    assert f"{count}/{count} scenarios as expected" in done.stdout

    summary = json.loads((out / "summary.json").read_text())
    assert [s["passed"] for s in summary] == [True] * count
    assert {"name", "expected", "observed", "passed", "seconds"} <= set(summary[0])
    # CI installs the pinned CLIs before the tests: there every real-CLI scenario must run, one PR each.
    for executable, name in scenarios.REAL_AGENTS.values():
        [played] = [s for s in summary if s["name"].startswith(f"the real {name}")]
        assert ("skipped" in played["observed"]) == (harness.find_cli(executable) is None), played

    checks = json.loads((out / "checks.json").read_text())
    concluded = {(c["name"], c["conclusion"]) for c in checks}
    gate = {("baton/merge-gate", c) for c in ("success", "failure", "neutral", "action_required")}
    assert concluded == {("baton/trifecta", "success"), ("baton/agent", "success"), *gate}
    assert all(c["status"] == "completed" for c in checks)  # nothing left in progress

    comments = json.loads((out / "comments.json").read_text())
    ours = [c for c in comments if c.get("performed_via_github_app")]
    assert ours
    assert all(c["body"].startswith("<!-- baton:status v1 -->") for c in ours)
    # One status comment per issue, however many tasks touched it.
    assert len({(c["repository"], c["issue_number"]) for c in ours}) == len(ours)

    _every_receipt_is_accepted_by_independent_verifiers(out, checks)

    lines = (out / "github-requests.jsonl").read_text().splitlines()
    assert lines
    for line in lines:
        keys = {"method", "path", "query", "body", "status", "duration_ms", "counted", "client_port"}
        assert set(json.loads(line)) == keys
    # The worker never asked GitHub for a token wider than one repository.
    tokens = [json.loads(x) for x in lines if json.loads(x)["path"].endswith("/access_tokens")]
    assert tokens
    assert all(len(t["body"]["repositories"]) == 1 for t in tokens)


def _every_receipt_is_accepted_by_independent_verifiers(out: Path, checks: list[dict[str, Any]]) -> None:
    """securesystemslib verifies each envelope the demo saved, with the key it saved; in-toto's own
    parsers accept each Statement (and the merge gate's test-result predicate, unknown fields refused)."""
    [pem] = (out / "keys").glob("*.pub.pem")
    public = PublicKey.from_pem(pem.read_bytes(), str(pem))
    key = SSlibKey.from_crypto(public.crypto, keyid=public.keyid)
    envelopes = sorted((out / "receipts" / "envelopes").glob("*.json"))
    assert len(envelopes) == len(checks)  # one receipt for every completed check run
    for path in envelopes:
        envelope = json.loads(path.read_text())
        parsed = Envelope.from_dict(copy.deepcopy(envelope))
        assert public.keyid in parsed.verify([key], 1)
        payload = parsed.payload
        Statement.copy_from_pb(json_format.Parse(payload.decode(), statement_pb2.Statement())).validate()
        found = json.loads(payload)
        if found["predicateType"] == statement.TEST_RESULT:
            json_format.Parse(json.dumps(found["predicate"]), test_result_pb2.TestResult())
    checkpoint = json.loads((out / "checkpoint.json").read_text())
    assert checkpoint["treeSize"] >= len(envelopes)


def test_demo_out_over_a_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    """`--out` that names a file, or a directory holding a file where the demo writes a folder of its
    own, is the user's mistake: argparse's usage error (exit 2), not a FileExistsError traceback."""
    (tmp_path / "taken").write_text("mine\n")
    (tmp_path / "reused").mkdir()
    (tmp_path / "reused" / "keys").write_text("not a folder\n")
    for out, named in (("taken", "taken"), ("reused", "keys")):
        done = subprocess.run(
            [sys.executable, "-m", "baton", "demo", "--out", out],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert "usage: baton demo" in done.stderr
        assert named in done.stderr
        assert "not a directory" in done.stderr
