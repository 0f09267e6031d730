"""Injected faults, rate-limit headers and the request log."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import pytest
from emulator_world import OWNER, REPO, World

REPO_PATH = f"/repos/{OWNER}/{REPO}"


def _fault(world: World, **spec: object) -> None:
    response = world.admin.post("/_emulator/faults", json=spec)
    assert response.status_code == 201, response.text


def test_next_n_matching_requests_get_5xx(world: World) -> None:
    _fault(world, path="/repos/*/widgets", status=502, count=2)
    with world.api(world.token()) as api:
        statuses = [api.get(REPO_PATH).status_code for _ in range(3)]
        other = api.get(f"/repos/{OWNER}/secret-sauce").status_code
    assert statuses == [502, 502, 200]
    assert other == 200
    assert world.admin.get("/_emulator/faults").json()[0]["hits"] == 2


def test_fault_method_filter(world: World) -> None:
    _fault(world, path="/repos/*/check-runs", method="POST", status=503)
    with world.api(world.token()) as api:
        assert api.get(REPO_PATH).status_code == 200
        failed = api.post(f"{REPO_PATH}/check-runs", json={"name": "x", "head_sha": world.head_sha})
    assert failed.status_code == 503
    assert failed.json()["message"] == "Service Unavailable"


@pytest.mark.parametrize("status", [403, 429])
def test_secondary_rate_limit_has_retry_after(world: World, status: int) -> None:
    _fault(world, kind="secondary_rate_limit", path=REPO_PATH, status=status, retry_after=7)
    with world.api(world.token()) as api:
        limited = api.get(REPO_PATH)
        after = api.get(REPO_PATH)
    assert limited.status_code == status
    assert limited.headers["retry-after"] == "7"
    assert "secondary rate limit" in limited.json()["message"]
    assert after.status_code == 200


def test_primary_rate_limit_has_remaining_zero_and_reset(world: World) -> None:
    _fault(world, kind="primary_rate_limit", path=REPO_PATH, reset_in=30)
    with world.api(world.token()) as api:
        limited = api.get(REPO_PATH)
    assert limited.status_code == 403
    assert limited.headers["x-ratelimit-remaining"] == "0"
    assert int(limited.headers["x-ratelimit-reset"]) >= int(time.time()) + 25
    assert limited.json()["message"].startswith("API rate limit exceeded")


def test_latency_fault_delays_then_answers(world: World) -> None:
    _fault(world, kind="latency", path=REPO_PATH, latency_ms=300)
    with world.api(world.token()) as api:
        started = time.monotonic()
        slow = api.get(REPO_PATH)
        elapsed = time.monotonic() - started
        started = time.monotonic()
        api.get(REPO_PATH)
        fast = time.monotonic() - started
    assert slow.status_code == 200
    assert elapsed >= 0.3 > fast


def test_a_late_answer_acts_at_once_and_answers_late(world: World) -> None:
    """GitHub made the check run; the caller's read timeout lost the answer: the run is there before
    the answer arrives."""
    runs = f"{REPO_PATH}/check-runs"
    _fault(world, kind="late_answer", path=runs, method="POST", latency_ms=1500)
    with world.api(world.token()) as api, pytest.raises(httpx.ReadTimeout):
        api.post(runs, json={"name": "made-once", "head_sha": world.head_sha}, timeout=0.5)
    with world.api(world.token()) as api:
        listed = api.get(f"{REPO_PATH}/commits/{world.head_sha}/check-runs").json()["check_runs"]
    assert [r["name"] for r in listed].count("made-once") == 1


def test_bad_fault_spec_is_rejected(world: World) -> None:
    assert world.admin.post("/_emulator/faults", json={"kind": "nope", "path": "/x"}).status_code == 422
    assert world.admin.post("/_emulator/faults", json={"path": "no-slash"}).status_code == 422


def test_rate_limit_headers_count_down_and_exhaust(world: World) -> None:
    with world.api(world.token()) as api:
        first = api.get(REPO_PATH)
        second = api.get(REPO_PATH)
    assert first.headers["x-ratelimit-limit"] == "5000"
    assert int(second.headers["x-ratelimit-remaining"]) == int(first.headers["x-ratelimit-remaining"]) - 1
    assert first.headers["x-ratelimit-resource"] == "core"
    world.admin.patch("/_emulator/settings", json={"rate_limit": 2})
    with world.api(world.token()) as api:
        statuses = [api.get(REPO_PATH).status_code for _ in range(3)]
        exhausted = api.get(REPO_PATH)
    assert statuses == [200, 200, 403]
    assert exhausted.headers["x-ratelimit-remaining"] == "0"


def test_every_api_request_is_one_log_line(world: World) -> None:
    with world.api(world.token()) as api:
        api.get(f"{REPO_PATH}/contents/README.md", params={"ref": "main"})
        api.post(f"{REPO_PATH}/check-runs", json={"name": "x"})
        api.get("/no/such/path")
    path = world.server.directory / "github-requests.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    keys = ["method", "path", "query", "body", "status", "duration_ms", "counted", "client_port"]
    assert all(list(line) == keys for line in lines)
    assert all(isinstance(line.pop("duration_ms"), float | int) for line in lines)
    assert all(isinstance(line.pop("client_port"), int) for line in lines)  # the caller's TCP port
    token_line = lines[0]
    assert token_line["path"] == f"/app/installations/{world.installation_id}/access_tokens"
    assert token_line["status"] == 201
    assert token_line["body"] is None
    assert lines[-3:] == [
        {
            "method": "GET",
            "path": f"{REPO_PATH}/contents/README.md",
            "query": {"ref": "main"},
            "body": None,
            "status": 200,
            "counted": True,
        },
        {
            "method": "POST",
            "path": f"{REPO_PATH}/check-runs",
            "query": {},
            "body": {"name": "x"},
            "status": 422,
            "counted": True,
        },
        {"method": "GET", "path": "/no/such/path", "query": {}, "body": None, "status": 404, "counted": True},
    ]
    admin_paths = [line["path"] for line in lines if line["path"].startswith("/_emulator")]
    assert admin_paths == []
    assert httpx.get(f"{world.url}/_emulator/requests").json()[-1]["path"] == "/no/such/path"


def test_a_freeze_holds_every_request_unanswered_and_undone_until_cleared(world: World) -> None:
    """A frozen GitHub takes the connection and the request and says nothing; once thawed, a request
    it held is ended with a 504 and nothing it asked for was done."""
    runs = f"{REPO_PATH}/check-runs"
    _fault(world, kind="freeze", path="/repos/*", count=100)
    with world.api(world.token()) as api:
        with pytest.raises(httpx.ReadTimeout):
            api.get(REPO_PATH, timeout=0.3)
        with pytest.raises(httpx.ReadTimeout):
            api.post(runs, json={"name": "never-made", "head_sha": world.head_sha}, timeout=0.3)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(api.get, REPO_PATH, timeout=10.0)
            deadline = time.monotonic() + 5
            while world.admin.get("/_emulator/faults").json()[0]["hits"] < 3:
                assert time.monotonic() < deadline, "the third request never reached the emulator"
                time.sleep(0.02)
            assert not held.done()
            world.admin.delete("/_emulator/faults")
            assert held.result(timeout=5).status_code == 504
        listed = api.get(f"{REPO_PATH}/commits/{world.head_sha}/check-runs").json()["check_runs"]
    assert "never-made" not in [r["name"] for r in listed]
