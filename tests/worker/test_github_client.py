"""Baton's GitHub client against the emulator: tokens, retries, limits, check runs."""

from __future__ import annotations

import time

import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage
from worker.github import api, deadline
from worker.github.client import AppCredentials, GitHubApp, GitHubError, retry_after_seconds
from worker.github.deadline import DeadlineExceeded
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


def test_a_create_whose_answer_is_lost_is_not_sent_again(stage: Stage) -> None:
    """GitHub made the check run; its answer came after the client's read timeout. A second POST
    would make a second run, so none is sent: the run is found by its external id. A GET that
    timed out the same way is simply asked again."""
    creds = AppCredentials(str(stage.world.app_id), stage.world.private_key, stage.server.url)
    gh = GitHubApp(creds, stage.rdb, timeout=1, retry=RetryPolicy(base_delay=0.05))
    client = gh.for_repository(stage.world.installation_id, world.REPO, "gate")
    runs = f"/repos/{world.REPO}/check-runs"
    stage.admin.add_fault(runs, method="POST", kind="late_answer", latency_ms=2500, count=1)
    made = api.create_check_run(
        client, world.REPO, name="baton/merge-gate", head_sha=stage.world.head_sha,
        external_id="task-lost", details_url=None, output=Output("t", "s"),
    )  # fmt: skip
    assert len(stage.requests("POST", runs)) <= 1  # the late answer is logged once it is sent, or not yet
    held = [c for c in stage.admin.check_runs() if c["external_id"] == "task-lost"]
    assert [c["id"] for c in held] == [made]

    stage.admin.add_fault(f"/repos/{world.REPO}", method="GET", kind="late_answer", latency_ms=1500, count=1)
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    time.sleep(1)  # the late answer is logged when it is sent
    assert len(stage.requests("GET", f"/repos/{world.REPO}")) == 2


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
    assert held["details_url"] == "https://baton.example/evidence/task-1"  # "Details" opens the receipt
    assert len(held["output"]["summary"].encode()) <= MAX_OUTPUT_CHARS
    assert held["output"]["summary"].endswith("Full evidence: https://baton.example/evidence/task-1")
    assert held["output"]["annotations_count"] == 120
    assert [r["status"] for r in stage.requests("PATCH", f"/check-runs/{run}")] == [200, 200, 200]


# -- errors keep their codes, and say when to try again -------------------------------------------


def test_github_error_keeps_its_two_argument_form() -> None:
    error = GitHubError("bad-name", "'x' is not a GitHub repository name")
    assert (error.code, error.message, error.status, error.retry_after) == (
        "bad-name", "'x' is not a GitHub repository name", None, None,
    )  # fmt: skip
    assert str(error) == error.message


def test_a_refused_token_request_is_not_retried_and_says_why(stage: Stage) -> None:
    """GitHub answers 422 when a token is asked for a repository outside the installation;
    githubkit reports that as a bare RequestError, which is not a network failure."""
    gh = _client(stage, RetryPolicy(base_delay=0.05))
    client = gh.for_repository(stage.world.installation_id, "acme/elsewhere", "read")
    with pytest.raises(GitHubError) as caught:
        api.repo_head(client, "acme/elsewhere")
    error = caught.value
    assert (error.code, error.status, error.retry_after) == ("token-refused", 422, None)
    assert "\n" not in error.message
    assert f"POST /app/installations/{stage.world.installation_id}/access_tokens: 422" in error.message
    assert "not accessible" in error.message
    assert [r["status"] for r in token_requests(stage)] == [422]
    assert stage.requests("GET", "/repos/acme/elsewhere") == []


def test_a_refused_token_for_the_org_repository_reads_as_not_installed(stage: Stage) -> None:
    """The cause of a token refusal carries GitHub's answer (status 422), as callers expect."""
    gh = _client(stage, RetryPolicy(base_delay=0.05))
    client = gh.for_repository(stage.world.installation_id, "acme/elsewhere", "read")
    with pytest.raises(GitHubError) as caught:
        api.repo_head(client, "acme/elsewhere")
    response = getattr(caught.value.__cause__, "response", None)
    assert getattr(response, "status_code", None) == 422


def test_a_long_secondary_rate_limit_says_when_to_come_back(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/repos/{world.REPO}", kind="secondary_rate_limit", status=403, retry_after=600, count=5
    )
    gh = _client(stage, RetryPolicy(max_wait=5))
    with pytest.raises(GitHubError) as caught:
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    error = caught.value
    assert (error.code, error.status, error.retry_after) == ("github-call-failed", 403, 600.0)


def test_a_long_primary_rate_limit_says_when_it_resets(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/repos/{world.REPO}", kind="primary_rate_limit", status=429, reset_in=300, count=5
    )
    gh = _client(stage, RetryPolicy(max_wait=5))
    with pytest.raises(GitHubError) as caught:
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    error = caught.value
    assert error.status == 429
    assert error.retry_after is not None
    assert 290 <= error.retry_after <= 301
    assert len(stage.requests("GET", f"/repos/{world.REPO}")) == 1


def test_other_failures_carry_their_status_but_no_retry_after(stage: Stage) -> None:
    gh = _client(stage, RetryPolicy(base_delay=0.05))
    client = gh.for_repository(stage.world.installation_id, world.REPO, "read")
    with pytest.raises(GitHubError) as caught:
        api.request(client, "GET", f"/repos/{world.REPO}/issues/9999")
    error = caught.value
    assert (error.code, error.status, error.retry_after) == ("github-call-failed", 404, None)


def test_a_rate_limited_token_request_is_a_rate_limit_not_a_refusal(stage: Stage) -> None:
    stage.admin.add_fault(
        f"/app/installations/{stage.world.installation_id}/access_tokens",
        kind="secondary_rate_limit", status=429, retry_after=600, count=5,
    )  # fmt: skip
    gh = _client(stage, RetryPolicy(max_wait=5))
    with pytest.raises(GitHubError) as caught:
        api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    error = caught.value
    assert (error.code, error.status, error.retry_after) == ("github-call-failed", 429, 600.0)
    assert len(token_requests(stage)) == 1


def test_a_short_rate_limit_on_the_token_request_is_waited_out(stage: Stage) -> None:
    stage.admin.add_fault(
        "/app/installations/*/access_tokens", kind="secondary_rate_limit", status=403, retry_after=1, count=1
    )
    gh = _client(stage, RetryPolicy(base_delay=0.05, max_wait=5))
    started = time.monotonic()
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert time.monotonic() - started >= 0.9
    assert [r["status"] for r in token_requests(stage)] == [403, 201]


def test_a_server_error_on_the_token_request_is_retried(stage: Stage) -> None:
    stage.admin.add_fault("/app/installations/*/access_tokens", kind="status", status=502, count=1)
    gh = _client(stage, RetryPolicy(base_delay=0.05))
    api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert [r["status"] for r in token_requests(stage)] == [502, 201]


def test_a_key_that_cannot_sign_fails_at_once(stage: Stage) -> None:
    """Only network failures are retried: a JWT that cannot be signed is not one."""
    not_a_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
    creds = AppCredentials(str(stage.world.app_id), not_a_key, stage.server.url)
    gh = GitHubApp(creds, stage.rdb, timeout=5, retry=RetryPolicy(base_delay=1.0))
    started = time.monotonic()
    with pytest.raises(GitHubError) as caught:
        api.request(gh.app, "GET", "/app/installations")
    assert time.monotonic() - started < 0.9
    assert caught.value.code == "github-call-failed"
    assert stage.requests("GET", "/app/installations") == []


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"retry-after": "30"}, 30.0),
        (403, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        (403, {"retry-after": "soon"}, None),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1"}, 0.0),
        (403, {"x-ratelimit-remaining": "7", "x-ratelimit-reset": "1"}, None),
        (403, {}, None),
        (503, {"retry-after": "30"}, None),
    ],
)
def test_retry_after_reads_what_github_named(
    status: int, headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_seconds(status, headers) == expected


def test_a_rate_limit_wait_that_does_not_fit_the_deadline_ends_the_call_at_once(stage: Stage) -> None:
    """GitHub asks for 3 s, which the call alone would sit out (max_wait 5 s); 2 s are left of the
    deadline: no wait, one request, and GitHub's 3 s kept for whoever tries again (the outbox)."""
    stage.admin.add_fault(
        f"/repos/{world.REPO}", kind="secondary_rate_limit", status=429, retry_after=3, count=5
    )
    gh = _client(stage, RetryPolicy(max_wait=5))
    client = gh.for_repository(stage.world.installation_id, world.REPO, "read")
    api.request(
        client, "GET", f"/repos/{world.REPO}/branches/main"
    )  # the token, minted before the clock starts
    started = time.monotonic()
    with deadline.within(2.0), pytest.raises(DeadlineExceeded) as caught:
        api.request(client, "GET", f"/repos/{world.REPO}")
    assert time.monotonic() - started < 1.0
    assert (caught.value.code, caught.value.retry_after) == ("github-deadline", 3.0)
    assert "answered 429; a retry in 3 s would not fit" in caught.value.message
    assert len(stage.requests("GET", f"/repos/{world.REPO}")) == 1


def test_retries_that_fit_the_deadline_are_made_as_without_one(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}", kind="status", status=502, count=2)
    gh = _client(stage, RetryPolicy(max_retries=3, base_delay=0.05, max_delay=0.2))
    with deadline.within(10.0):
        head = api.repo_head(gh.for_repository(stage.world.installation_id, world.REPO, "read"), world.REPO)
    assert head.private is True
    assert [r["status"] for r in stage.requests("GET", f"/repos/{world.REPO}")] == [502, 502, 200]


def test_a_deadline_already_set_that_runs_out_sooner_stays() -> None:
    with deadline.within(5.0):
        with deadline.within(60.0):
            assert 4.0 < (deadline.remaining() or 0.0) <= 5.0
        with deadline.within(1.0):
            assert 0.0 < (deadline.remaining() or 0.0) <= 1.0
    assert deadline.remaining() is None
    with pytest.raises(ValueError, match="positive"), deadline.within(0.0):
        pass
