"""The org ceiling always loads, and always applies; when there is none, every status says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage, make_stage
from worker.config import no_org_ceiling_notice

NOTICE = no_org_ceiling_notice(world.OWNER)
ORG = f"{world.OWNER}/.github"


@pytest.fixture(params=["absent", "excluded"])
def unseen(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> Iterator[Stage]:
    """An owner whose `.github` the App cannot see: none, or private and left out of the installation."""
    yield from make_stage(tmp_path, redis_url, rdb, org_repo=request.param)


def test_without_a_visible_org_repo_the_built_in_ceiling_applies_and_each_status_says_so_once(
    unseen: Stage,
) -> None:
    number = unseen.issue()
    assert unseen.label(number, "claude-code", sender="maria")["state"] == "queued"
    [comment] = unseen.baton_comments(number)
    assert comment["body"].count(NOTICE) == 1
    # researcher exists only in the (unseen) org file: the repo file cannot add it.
    refused = unseen.label(number, "researcher", sender="maria")
    assert refused["state"] == "refused"
    [comment] = unseen.baton_comments(number)
    assert comment["body"].count(NOTICE) == 1
    assert "is not an agent this repository's policy allows" in comment["body"]
    assert "ignored (a repository may only narrow the org policy)" in comment["body"]
    assert not [
        r for r in unseen.admin.requests() if r["status"] == 422
    ]  # no token asked for the unseen repo


def test_an_operator_can_require_the_org_policy(unseen: Stage) -> None:
    strict = dataclasses.replace(unseen, ctx=dataclasses.replace(unseen.ctx, require_org_policy=True))
    number = strict.issue()
    result = strict.label(number, "claude-code", sender="maria")
    assert result["state"] == "failed"
    assert "org-policy-required" in result["detail"]
    [comment] = strict.baton_comments(number)
    assert "requires an organisation policy" in comment["body"]


@pytest.mark.parametrize(("path", "status"), [(f"/repos/{ORG}", 502), (f"/repos/{ORG}", 404),
                                              (f"/repos/{ORG}/contents/baton.yml", 500)])  # fmt: skip
def test_a_visible_ceiling_that_cannot_be_read_fails_closed(stage: Stage, path: str, status: int) -> None:
    stage.admin.add_fault(path, kind="status", status=status, count=50)
    number = stage.issue()
    result = stage.label(number, "claude-code", sender="maria")
    assert result["state"] == "failed"
    assert "org-policy-unreachable" in result["detail"]
    [comment] = stage.baton_comments(number)
    assert "could not read the organisation's capability policy" in comment["body"]
    assert f"{status}" not in comment["body"].split("<sub>")[0]  # exception text stays in the log


def test_the_org_repository_itself_is_judged_under_the_ceiling(stage: Stage) -> None:
    """codex is in the built-in defaults but not in acme's ceiling: not even `.github` may run it."""
    stage.admin.set_role(ORG, "maria", "maintain")
    number = int(stage.admin.create_issue(ORG, title="Tidy the templates", user="maria")["number"])
    deliveries: list[dict[str, Any]] = stage.admin.label(ORG, number, ["agent:codex"], sender="maria")[
        "deliveries"
    ]
    result = stage.run(deliveries[-1])
    assert result["state"] == "refused"
    assert "unknown-agent" in result["detail"]
    reads = [r["path"] for r in stage.admin.requests() if r["path"].endswith("/contents/baton.yml")]
    assert reads == [f"/repos/{ORG}/contents/baton.yml"]


def test_a_repo_file_that_narrows_and_widens_keeps_its_narrowing(
    tmp_path: Path, redis_url: str, rdb: redis.Redis
) -> None:
    """researcher loses web_fetch in the repo file (a narrowing) while a rogue agent is added (a widening)."""
    mixed = (
        "version: 1\nagents:\n  claude-code: {}\n  researcher:\n    tools: [read_repo, edit_files]\n"
        "  rogue:\n    adapter: claude-code\n    tools: [read_repo]\n"
    )
    for st in make_stage(tmp_path, redis_url, rdb, repo_policy=mixed):
        number = st.issue()
        assert st.label(number, "rogue", sender="maria")["state"] == "refused"
        # Before: the whole file was dropped and researcher (with web_fetch) was denied on this private repo.
        assert st.label(number, "researcher", sender="maria")["state"] == "queued"
        [comment] = st.baton_comments(number)
        assert "ignored (a repository may only narrow the org policy)" in comment["body"]
        assert "baton.yml:6:" in comment["body"]  # the rogue line, by line and column
