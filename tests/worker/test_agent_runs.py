"""Agent runs end to end: emulator webhook -> Baton endpoint -> Redis -> worker -> GitHub.

No agent process exists yet; what a user sees is the decision and its explanation
in the issue's single status comment.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage, make_stage
from worker import lifecycle
from worker.handlers import DECISION_PREFIX


@pytest.mark.parametrize("who", ["ada", "maria", "wes"])
def test_write_or_higher_labeling_is_admitted_with_one_status_comment(stage: Stage, who: str) -> None:
    number = stage.issue()
    result = stage.label(number, "claude-code", sender=who)
    assert result["state"] == "queued", result
    comments = stage.baton_comments(number)
    assert len(comments) == 1
    assert "Queued" in comments[0]["body"]
    assert "waiting for an agent worker" in comments[0]["body"]
    decision = orjson.loads(stage.rdb.get(DECISION_PREFIX + result["task_id"]) or b"{}")
    assert decision["decision"]["allowed"] is True
    assert {s["path"] for s in decision["sources"]} == {"baton.yml", ".github/baton.yml"}


@pytest.mark.parametrize(("who", "role"), [("tia", "triage"), ("rita", "read"), ("nobody", "none")])
def test_below_write_is_refused_and_explained_once(stage: Stage, who: str, role: str) -> None:
    if who == "nobody":
        stage.admin.create_user("nobody")
    number = stage.issue()
    result = stage.label(number, "claude-code", sender=who)
    assert result["state"] == "refused"
    assert "below-minimum" in result["detail"]
    [comment] = stage.baton_comments(number)
    assert f"`{who}` has {role} access" in comment["body"]
    assert "needs write or higher" in comment["body"]
    assert stage.rdb.get(DECISION_PREFIX + result["task_id"]) is None  # the gate never ran


def test_permission_lookup_error_refuses(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/repos/{world.REPO}/collaborators/*/permission", kind="status", status=500, count=10
    )
    number = stage.issue()
    result = stage.label(number, "claude-code", sender="maria")
    assert result["state"] == "refused"
    assert "lookup-failed" in result["detail"]
    assert "refuses when unsure" in stage.baton_comments(number)[0]["body"]


def test_bots_are_refused_unless_the_policy_names_them(stage: Stage) -> None:
    stage.admin.create_user("helper-bot[bot]", type="Bot")
    stage.admin.set_role(world.REPO, "helper-bot[bot]", "admin")
    number = stage.issue()
    result = stage.label(number, "claude-code", sender="helper-bot[bot]")
    assert (result["state"], result["detail"].split(":")[0]) == ("refused", "bot-not-allowed")


def test_web_fetch_on_a_private_repo_is_denied_then_allowed_offline_in_the_same_comment(stage: Stage) -> None:
    number = stage.issue()
    denied = stage.label(number, "researcher", sender="maria")
    assert denied["state"] == "denied"
    [comment] = stage.baton_comments(number)
    body = comment["body"]
    assert "DENIED" in body or "denied" in body
    for leg in ("private data", "untrusted input", "external communication"):
        assert leg in body
    assert "web_fetch" in body
    assert "`/baton run researcher --offline`" in body

    allowed = stage.comment(number, "/baton run researcher --offline", user="maria")
    assert allowed["state"] == "queued"
    [edited] = stage.baton_comments(number)  # still one comment: edited in place
    assert edited["id"] == comment["id"]
    assert "Queued" in edited["body"]
    assert "offline" in edited["body"]
    record = orjson.loads(stage.rdb.get(DECISION_PREFIX + allowed["task_id"]) or b"{}")
    assert [r["name"] for r in record["decision"]["removed"]] == ["web_fetch"]


def test_a_reader_cannot_use_the_offline_retry(stage: Stage) -> None:
    number = stage.issue()
    result = stage.comment(number, "/baton run researcher --offline", user="rita")
    assert result["state"] == "refused"


def test_retry_repeats_the_last_run_on_the_issue(stage: Stage) -> None:
    number = stage.issue()
    assert stage.label(number, "researcher", sender="maria")["state"] == "denied"
    assert stage.comment(number, "/baton retry", user="maria")["state"] == "denied"
    nothing = stage.issue("Other")
    assert stage.comment(nothing, "/baton retry", user="maria")["state"] == "done"
    assert "no earlier run" in stage.baton_comments(nothing)[0]["body"]


def test_unknown_agent_is_refused_with_the_list_of_agents(stage: Stage) -> None:
    number = stage.issue()
    result = stage.label(number, "gpt-hacker", sender="maria")
    assert result["state"] == "refused"
    body = stage.baton_comments(number)[0]["body"]
    assert "`gpt-hacker` is not an agent" in body
    assert "`claude-code`" in body
    assert "`researcher`" in body


def test_policy_comes_from_the_default_branch_not_a_pull_request(stage: Stage) -> None:
    """A PR that would drop web_fetch from researcher does not change how researcher is judged."""
    narrowed = world.REPO_POLICY.replace("tools: [read_repo, edit_files, web_fetch]", "tools: [read_repo]")
    stage.admin.commit(world.REPO, "loosen", {".github/baton.yml": narrowed}, base="main")
    stage.admin.open_pull(world.REPO, head="loosen", user="maria", title="Policy change")
    number = stage.issue()
    assert stage.label(number, "researcher", sender="maria")["state"] == "denied"
    reads = stage.requests("GET", "/contents/.github/baton.yml")
    assert reads
    assert all(r["query"].get("ref") == stage.world.head_sha for r in reads)


def test_policy_files_are_read_once_per_commit(stage: Stage) -> None:
    for _ in range(3):
        assert stage.label(stage.issue(), "claude-code", sender="maria")["state"] == "queued"
    assert len(stage.requests("GET", "/contents/.github/baton.yml")) == 1
    assert len(stage.requests("GET", "/contents/baton.yml")) == 1
    stage.admin.commit(world.REPO, "main", {"README.md": "# widgets v2\n"})  # a new head: read again
    assert stage.label(stage.issue(), "claude-code", sender="maria")["state"] == "queued"
    assert len(stage.requests("GET", "/contents/.github/baton.yml")) == 2


def test_a_malformed_policy_fails_closed_naming_file_line_and_column(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    broken = "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: [read_repo\n"
    for bad in make_stage(tmp_path, redis_url, rdb, repo_policy=broken):
        number = bad.issue()
        result = bad.label(number, "claude-code", sender="maria")
        assert result["state"] == "failed"
        body = bad.baton_comments(number)[0]["body"]
        assert "acme/widgets/.github/baton.yml:" in body
        assert lifecycle.current(rdb, result["task_id"]) == lifecycle.State.FAILED


def test_a_repo_file_that_widens_the_ceiling_is_reported_and_ignored(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    widening = world.REPO_POLICY + "  rogue:\n    adapter: claude-code\n    tools: [read_repo]\n"
    for st in make_stage(tmp_path, redis_url, rdb, repo_policy=widening):
        number = st.issue()
        assert st.label(number, "rogue", sender="maria")["state"] == "refused"  # the ceiling applied
        assert st.label(number, "claude-code", sender="maria")["state"] == "queued"
        body = st.baton_comments(number)[0]["body"]
        assert "a repository may only narrow the org policy" in body


def test_a_refused_command_does_not_become_the_run_retry_repeats(stage: Stage) -> None:
    number = stage.issue()
    first = stage.label(number, "script", sender="maria")
    assert first["state"] == "queued"
    assert stage.run_agent(first["task_id"])["state"] == "failed"  # no recipe in the issue
    assert stage.comment(number, "/baton run researcher", user="rita")["state"] == "refused"
    retried = stage.comment(number, "/baton retry", user="maria")
    assert retried["state"] == "queued"  # the script agent again, not rita's researcher (which is denied)
    record = orjson.loads(stage.rdb.get(DECISION_PREFIX + retried["task_id"]) or b"{}")
    assert record["decision"]["agent"] == "script"
