"""Baton's GitHub client against the emulator: tokens, retries, limits, check runs."""

from __future__ import annotations

import time

import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage
from worker.github import api
from worker.github.client import AppCredentials, GitHubApp, GitHubError
from worker.github.limits import MAX_OUTPUT_CHARS, Action, Annotation, Output
from worker.github.retry import RetryPolicy


def token_requests(stage: Stage) -> list[dict[str, object]]:
    return stage.requests("POST", "/access_tokens")


def test_token_is_narrowed_cached_in_redis_and_shared_by_workers(stage: Stage) -> None:
    first = stage.ctx.github
    assert first is not None
    api.repo_head(first.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    [asked] = token_requests(stage)
    assert asked["body"] == {
        "repositories": ["widgets"],
        "permissions": {"metadata": "read", "contents": "read"},
    }
    assert asked["status"] == 201
    assert any(k.startswith(b"baton:github:") for k in stage.rdb.keys("baton:github:*"))

    # A second worker process (a new client on the same Redis) reuses the token.
    creds = AppCredentials(str(stage.world.app_id), stage.world.private_key, stage.server.url)
    other = GitHubApp(creds, redis.Redis(connection_pool=stage.rdb.connection_pool))
    api.repo_head(other.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert len(token_requests(stage)) == 1


def test_an_expired_token_is_replaced(stage: Stage) -> None:
    """githubkit keeps a token until a minute before it expires: a 63 s token stays ~2 s in the cache."""
    stage.admin.settings(token_ttl_seconds=63)
    gh = stage.ctx.github
    assert gh is not None
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert len(token_requests(stage)) == 1  # the branch lookup reused it
    time.sleep(3.2)
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert len(token_requests(stage)) == 2


def test_a_token_about_to_expire_is_used_but_not_cached(stage: Stage) -> None:
    stage.admin.settings(token_ttl_seconds=30)
    gh = stage.ctx.github
    assert gh is not None
    for _ in range(2):
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert len(token_requests(stage)) == 4  # repo and branch, each with a fresh token


def test_installation_events_drop_cached_tokens(stage: Stage) -> None:
    gh = stage.ctx.github
    assert gh is not None
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert gh.invalidate(stage.world.installation_id) >= 1
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert len(token_requests(stage)) == 2


def _client(stage: Stage, retry: RetryPolicy) -> GitHubApp:
    creds = AppCredentials(str(stage.world.app_id), stage.world.private_key, stage.server.url)
    return GitHubApp(creds, stage.rdb, timeout=5, retry=retry)


def test_server_errors_are_retried_with_backoff(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}", kind="status", status=502, count=2)
    gh = _client(stage, RetryPolicy(max_retries=3, base_delay=0.05, max_delay=0.2))
    head = api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert head.private is True
    assert [r["status"] for r in stage.requests("GET", f"/repos/{world.REPO}")] == [502, 502, 200]


def test_persistent_server_errors_fail_within_a_bounded_time(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}", kind="status", status=503, count=100)
    policy = RetryPolicy(max_retries=2, base_delay=0.05, max_delay=0.1)
    gh = _client(stage, policy)
    started = time.monotonic()
    with pytest.raises(GitHubError, match="503"):
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert time.monotonic() - started < policy.worst_case_seconds(5)
    assert len(stage.requests("GET", f"/repos/{world.REPO}")) == 3


def test_secondary_rate_limit_waits_for_retry_after(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/repos/{world.REPO}", kind="secondary_rate_limit", status=429, retry_after=1, count=1
    )
    gh = _client(stage, RetryPolicy(max_wait=5))
    started = time.monotonic()
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert time.monotonic() - started >= 0.9
    assert [r["status"] for r in stage.requests("GET", f"/repos/{world.REPO}")] == [429, 200]


def test_a_rate_limit_longer_than_the_bound_fails_at_once(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/repos/{world.REPO}", kind="secondary_rate_limit", status=403, retry_after=600, count=5
    )
    gh = _client(stage, RetryPolicy(max_wait=5))
    started = time.monotonic()
    with pytest.raises(GitHubError, match="403"):
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert time.monotonic() - started < 3


def test_primary_rate_limit_waits_for_the_reset(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}", kind="primary_rate_limit", reset_in=1, count=1)
    gh = _client(stage, RetryPolicy(max_wait=5))
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    statuses = [r["status"] for r in stage.requests("GET", f"/repos/{world.REPO}")]
    assert statuses[-1] == 200
    assert statuses[0] in (403, 429)


def test_other_client_errors_are_not_retried(stage: Stage) -> None:
    gh = _client(stage, RetryPolicy(base_delay=0.05))
    client = gh.for_repository(stage.world.installation_id, world.REPO, "read")
    with pytest.raises(GitHubError, match="404"):
        api.request(client, "GET", f"/repos/{world.REPO}/issues/9999")
    assert len(stage.requests("GET", f"/repos/{world.REPO}/issues/9999")) == 1
    assert api.read_file(client, world.REPO, "no/such/file", "main") is None


def test_check_run_output_over_githubs_limits_still_lands(stage: Stage) -> None:
    gh = stage.ctx.github
    assert gh is not None
    client = gh.for_repository(stage.world.installation_id, world.REPO, "report")
    run = api.create_check_run(
        client, world.REPO, name="baton/merge-gate", head_sha=stage.world.head_sha,
        external_id="task-1", details_url=None, output=Output("t", "started"),
    )  # fmt: skip
    notes = [Annotation("src/widgets.py", 1, 1, "warning", f"note {i}") for i in range(120)]
    api.complete_check_run(
        client, world.REPO, run, conclusion="neutral", details_url="https://baton.example/evidence/task-1",
        output=Output("Big", "s" * 200_000, "é" * 70_000), annotations=notes,
        actions=[Action("Approve run", "approve", "Run the gates on this fork PR")],
    )  # fmt: skip
    [held] = [c for c in stage.admin.check_runs() if c["id"] == run]
    assert held["status"] == "completed"
    assert held["conclusion"] == "neutral"
    assert held["external_id"] == "task-1"
    assert len(held["output"]["summary"].encode()) <= MAX_OUTPUT_CHARS
    assert held["output"]["summary"].endswith("Full evidence: https://baton.example/evidence/task-1")
    assert held["output"]["annotations_count"] == 120
    assert [r["status"] for r in stage.requests("PATCH", f"/check-runs/{run}")] == [200, 200, 200]
