"""Check-run validation exactly at GitHub's limits, and annotations appended across updates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World

CHECKS = f"/repos/{OWNER}/{REPO}/check-runs"


@pytest.fixture
def api(world: World) -> Iterator[httpx.Client]:
    with world.api(world.token()) as client:
        yield client


def _run(world: World, **extra: Any) -> dict[str, Any]:
    return {"name": "baton/merge-gate", "head_sha": world.head_sha, **extra}


def _annotation(i: int) -> dict[str, Any]:
    return {
        "path": "src/app.py",
        "start_line": i,
        "end_line": i,
        "annotation_level": "warning",
        "message": "m",
    }


def _action(
    label: str = "Retry", identifier: str = "retry", description: str = "Run it again"
) -> dict[str, str]:
    return {"label": label, "identifier": identifier, "description": description}


def test_summary_and_text_limits(world: World, api: httpx.Client) -> None:
    at_limit = api.post(
        CHECKS, json=_run(world, output={"title": "t", "summary": "s" * 65535, "text": "t" * 65535})
    )
    assert at_limit.status_code == 201
    for field in ("summary", "text"):
        output = {"title": "t", "summary": "s", field: "x" * 65536}
        over = api.post(CHECKS, json=_run(world, output=output))
        assert over.status_code == 422
        assert (
            over.json()["message"]
            == "Invalid request.\n\nOnly 65535 characters are allowed; 65536 were supplied."
        )


def test_summary_over_65535_bytes_is_validation_failed(world: World, api: httpx.Client) -> None:
    summary = "é" * 40000  # 40,000 characters, 80,000 UTF-8 bytes
    response = api.post(CHECKS, json=_run(world, output={"title": "t", "summary": summary}))
    assert response.status_code == 422
    body = response.json()
    assert body["message"] == "Validation Failed"
    assert body["errors"] == [
        {
            "resource": "CheckRun",
            "code": "custom",
            "field": "summary",
            "message": "summary exceeds a maximum bytesize of 65535",
        }
    ]
    assert body["documentation_url"].startswith("https://docs.github.com/")


def test_annotations_fifty_per_request_appended_across_updates(world: World, api: httpx.Client) -> None:
    output = {"title": "t", "summary": "s", "annotations": [_annotation(i) for i in range(1, 52)]}
    too_many = api.post(CHECKS, json=_run(world, output=output))
    assert too_many.status_code == 422
    assert (
        too_many.json()["message"]
        == "Invalid request.\n\nNo more than 50 items are allowed; 51 were supplied."
    )
    output["annotations"] = [_annotation(i) for i in range(1, 51)]
    created = api.post(CHECKS, json=_run(world, output=output))
    assert created.status_code == 201
    run_id = created.json()["id"]
    output["annotations"] = [_annotation(i) for i in range(51, 76)]
    updated = api.patch(f"{CHECKS}/{run_id}", json={"output": output})
    assert updated.status_code == 200
    assert updated.json()["output"]["annotations_count"] == 75
    listed = api.get(f"{CHECKS}/{run_id}/annotations", params={"per_page": 100})
    assert [a["start_line"] for a in listed.json()] == list(range(1, 76))


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (
            [_action(identifier=f"a{i}") for i in range(4)],
            "No more than 3 items are allowed; 4 were supplied.",
        ),
        ([_action(label="L" * 21)], "Only 20 characters are allowed; 21 were supplied."),
        ([_action(identifier="i" * 21)], "Only 20 characters are allowed; 21 were supplied."),
        ([_action(description="d" * 41)], "Only 40 characters are allowed; 41 were supplied."),
        ([{"label": "x", "identifier": "y"}], '"description" wasn\'t supplied.'),
    ],
    ids=["4-actions", "label-21", "identifier-21", "description-41", "missing-description"],
)
def test_action_limits(world: World, api: httpx.Client, actions: list[dict[str, str]], message: str) -> None:
    response = api.post(CHECKS, json=_run(world, actions=actions))
    assert response.status_code == 422
    assert response.json()["message"] == f"Invalid request.\n\n{message}"


def test_actions_at_limits_accepted(world: World, api: httpx.Client) -> None:
    actions = [_action("L" * 20, f"{i}" * 20, "d" * 40) for i in range(3)]
    assert api.post(CHECKS, json=_run(world, actions=actions)).status_code == 201


def test_completed_needs_conclusion_and_conclusion_completes(world: World, api: httpx.Client) -> None:
    missing = api.post(CHECKS, json=_run(world, status="completed"))
    assert missing.status_code == 422
    bad = api.post(CHECKS, json=_run(world, conclusion="stale"))
    assert bad.status_code == 422
    done = api.post(CHECKS, json=_run(world, conclusion="success"))
    assert done.status_code == 201
    assert done.json()["status"] == "completed"
    assert done.json()["completed_at"] is not None


def test_required_fields_and_unknown_commit(world: World, api: httpx.Client) -> None:
    response = api.post(CHECKS, json={"status": "queued"})
    assert response.status_code == 422
    assert response.json()["message"] == 'Invalid request.\n\n"head_sha", "name" weren\'t supplied.'
    unknown = api.post(CHECKS, json={"name": "x", "head_sha": "0" * 40})
    assert unknown.status_code == 422
    assert unknown.json()["message"] == f"No commit found for SHA: {'0' * 40}"


def test_list_for_ref_keeps_latest_per_name(world: World, api: httpx.Client) -> None:
    first = api.post(CHECKS, json=_run(world, status="queued")).json()
    second = api.post(CHECKS, json=_run(world, status="in_progress")).json()
    api.post(CHECKS, json={"name": "other", "head_sha": world.head_sha})
    latest = api.get(f"/repos/{OWNER}/{REPO}/commits/main/check-runs").json()
    assert latest["total_count"] == 2
    assert {r["id"] for r in latest["check_runs"]} >= {second["id"]}
    assert first["id"] not in {r["id"] for r in latest["check_runs"]}
    everything = api.get(
        f"/repos/{OWNER}/{REPO}/commits/{world.head_sha}/check-runs", params={"filter": "all"}
    )
    assert everything.json()["total_count"] == 3
    named = api.get(f"/repos/{OWNER}/{REPO}/commits/main/check-runs", params={"check_name": "other"})
    assert [r["name"] for r in named.json()["check_runs"]] == ["other"]


def test_only_the_creating_app_may_update(world: World, api: httpx.Client) -> None:
    run = api.post(CHECKS, json=_run(world)).json()
    anonymous = httpx.patch(f"{world.url}{CHECKS}/{run['id']}", json={"status": "in_progress"})
    assert anonymous.status_code == 401
    assert api.patch(f"{CHECKS}/{run['id'] + 999}", json={"status": "in_progress"}).status_code == 404


def test_another_app_cannot_update_the_run(world: World, api: httpx.Client) -> None:
    from emulator_world import INSTALLATION_PERMISSIONS, app_jwt, keypair

    from emulator.admin.client import AdminClient

    run = api.post(CHECKS, json=_run(world)).json()
    private, public = keypair("second-app")
    with AdminClient(world.url) as admin:
        other = admin.create_app(
            name="Other App", public_key_pem=public, permissions=INSTALLATION_PERMISSIONS
        )
        inst = admin.create_installation(
            app_id=other["id"], account=OWNER, permissions=INSTALLATION_PERMISSIONS
        )
    token = httpx.post(
        f"{world.url}/app/installations/{inst['id']}/access_tokens",
        headers={"Authorization": f"Bearer {app_jwt(other['id'], private)}"},
    ).json()["token"]
    with world.api(token) as other_api:
        response = other_api.patch(f"{CHECKS}/{run['id']}", json={"status": "in_progress"})
        assert other_api.get(f"{CHECKS}/{run['id']}").status_code == 200  # reading is fine
    assert response.status_code == 403
    assert response.json()["message"] == (
        f"Invalid app_id `{other['id']}` - check run can only be modified by the GitHub App that created it."
    )
