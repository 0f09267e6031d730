"""The merge gate, before any gate exists: a check run that says so, on the PR's head."""

from __future__ import annotations

from emulator import world
from tests.worker.conftest import Stage


def test_opening_a_pull_request_runs_the_merge_gate_check(stage: Stage) -> None:
    head = stage.admin.commit(
        world.REPO, "feature", {"src/widgets.py": "def spin():\n    return 43\n"}, base="main"
    )
    opened = stage.admin.open_pull(world.REPO, head="feature", user="wes", title="Spin faster")
    delivery = next(d for d in opened["deliveries"] if d["event"] == "pull_request")
    result = stage.run(delivery)
    assert result["state"] == "done"
    [run] = [c for c in stage.admin.check_runs() if c["name"] == "baton/merge-gate"]
    assert run["head_sha"] == head
    assert (run["status"], run["conclusion"]) == ("completed", "neutral")
    assert run["external_id"] == delivery["guid"]
    assert "No merge gates are configured yet" in run["output"]["summary"]
    created = stage.requests("POST", f"/repos/{world.REPO}/check-runs")
    assert [r["body"]["status"] for r in created] == ["in_progress"]  # created in progress, then completed
