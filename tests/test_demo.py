"""`baton demo` end to end: real processes, the emulator, every scenario as expected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from emulator import demo


def test_demo_plays_every_scenario_and_writes_its_evidence(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "WEBHOOK_SECRET", "APP_ID", "PRIVATE_KEY")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo", "--out", "demo"],  # relative, as the README runs it
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16/16 scenarios as expected" in done.stdout

    summary = json.loads((out / "summary.json").read_text())
    assert [s["passed"] for s in summary] == [True] * 16
    assert {"name", "expected", "observed", "passed", "seconds"} <= set(summary[0])
    # CI installs the pinned claude CLI before the tests: there the real-CLI scenario must run.
    [claude] = [s for s in summary if s["name"].startswith("the real Claude Code CLI")]
    assert ("skipped" in claude["observed"]) == (demo.find_claude() is None)

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

    lines = (out / "github-requests.jsonl").read_text().splitlines()
    assert lines
    for line in lines:
        assert set(json.loads(line)) == {"method", "path", "query", "body", "status"}
    # The worker never asked GitHub for a token wider than one repository.
    tokens = [json.loads(x) for x in lines if json.loads(x)["path"].endswith("/access_tokens")]
    assert tokens
    assert all(len(t["body"]["repositories"]) == 1 for t in tokens)
