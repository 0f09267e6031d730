"""Signed webhook deliveries reach a local receiver with GitHub's headers and payload shape."""

from __future__ import annotations

from pathlib import Path

import httpx
from emulator_world import GIT_ENV, OWNER, REPO, World, authed, build_world
from webhook_receiver import Receiver, assert_signed

from emulator import EmulatorServer


def test_signature_matches_githubs_documented_vector() -> None:
    from emulator.webhooks import sign

    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign("It's a Secret to Everybody", b"Hello, World!") == expected


def test_person_labels_issue_sends_signed_issues_labeled(hooked: World, receiver: Receiver) -> None:
    hooked.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "Do it", "user": "rita"})
    receiver.items.clear()
    result = hooked.post(
        f"/repos/{OWNER}/{REPO}/issues/1/labels", {"labels": ["agent:claude-code"], "sender": "tia"}
    )
    assert [d["status_code"] for d in result["deliveries"]] == [202]
    (item,) = receiver.wait_for(1)
    assert_signed(item, hooked.webhook_secret)
    assert item.headers["x-github-event"] == "issues"
    assert item.headers["user-agent"].startswith("GitHub-Hookshot/")
    assert item.headers["content-type"] == "application/json"
    assert item.headers["x-github-hook-id"].isdigit()
    assert len(item.headers["x-github-delivery"]) == 36
    body = item.body
    assert body["action"] == "labeled"
    assert body["label"]["name"] == "agent:claude-code"
    assert body["sender"]["login"] == "tia"
    assert body["sender"]["type"] == "User"
    assert body["installation"]["id"] == hooked.installation_id
    assert body["repository"]["full_name"] == f"{OWNER}/{REPO}"
    assert body["issue"]["number"] == 1
    assert body["issue"]["user"]["login"] == "rita"


def test_api_actions_send_webhooks_after_the_response(hooked: World, receiver: Receiver) -> None:
    hooked.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "Do it", "user": "rita"})
    hooked.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "agent/1", "files": {"a.txt": "a\n"}})
    receiver.items.clear()
    with hooked.api(hooked.token()) as api:
        api.post(f"/repos/{OWNER}/{REPO}/issues/1/labels", json={"labels": ["triaged"]})
        api.post(f"/repos/{OWNER}/{REPO}/issues/1/comments", json={"body": "status"})
        pull = api.post(
            f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "agent/1", "base": "main"}
        )
    items = receiver.wait_for(3)
    seen = [(i.headers["x-github-event"], i.body["action"]) for i in items]
    assert seen == [("issues", "labeled"), ("issue_comment", "created"), ("pull_request", "opened")]
    for item in items:
        assert_signed(item, hooked.webhook_secret)
        assert item.body["sender"]["login"] == "baton-test[bot]"
        assert item.body["sender"]["type"] == "Bot"
    opened = items[2].body
    assert opened["number"] == pull.json()["number"]
    assert opened["pull_request"]["head"]["ref"] == "agent/1"
    deliveries = httpx.get(f"{hooked.url}/_emulator/deliveries").json()
    recorded = [(d["event"], d["action"], d["status_code"]) for d in deliveries[-3:]]
    assert recorded == [
        ("issues", "labeled", 202),
        ("issue_comment", "created", 202),
        ("pull_request", "opened", 202),
    ]


def test_check_run_rerequest_and_requested_action_go_to_the_app(hooked: World, receiver: Receiver) -> None:
    with hooked.api(hooked.token()) as api:
        run = api.post(
            f"/repos/{OWNER}/{REPO}/check-runs",
            json={
                "name": "gate",
                "head_sha": hooked.head_sha,
                "conclusion": "failure",
                "output": {"title": "t", "summary": "s"},
                "actions": [{"label": "Override", "identifier": "override", "description": "Let it pass"}],
            },
        ).json()
    receiver.wait_for(2)  # check_run.created and .completed
    receiver.items.clear()
    hooked.post(f"/check-runs/{run['id']}/rerequest", {"sender": "maria"})
    hooked.post(f"/check-runs/{run['id']}/requested-action", {"sender": "ada", "identifier": "override"})
    first, second = receiver.wait_for(2)
    assert (first.body["action"], first.body["sender"]["login"]) == ("rerequested", "maria")
    assert first.body["check_run"]["id"] == run["id"]
    assert (second.body["action"], second.body["requested_action"]) == (
        "requested_action",
        {"identifier": "override"},
    )
    bad = hooked.admin.post(
        f"/_emulator/check-runs/{run['id']}/requested-action", json={"sender": "ada", "identifier": "nope"}
    )
    assert bad.status_code == 422


def test_arbitrary_event_and_redelivery_keep_the_guid(hooked: World, receiver: Receiver) -> None:
    payload = {
        "action": "created",
        "installation": {"id": hooked.installation_id},
        "zen": "Keep it logically awesome.",
    }
    sent = hooked.post(
        "/webhooks",
        {"event": "ping", "payload": payload, "delivery_id": "11111111-2222-3333-4444-555555555555"},
    )
    assert sent["status_code"] == 202
    (item,) = receiver.wait_for(1)
    assert item.headers["x-github-delivery"] == "11111111-2222-3333-4444-555555555555"
    assert item.body == payload
    assert_signed(item, hooked.webhook_secret)
    receiver.status = 500
    again = hooked.post(f"/deliveries/{sent['id']}/redeliver", {})
    assert again["status_code"] == 500
    assert again["redelivery"] is True
    second = receiver.wait_for(2)[1]
    assert second.headers["x-github-delivery"] == item.headers["x-github-delivery"]
    assert second.raw == item.raw


def test_unreachable_receiver_is_recorded_not_retried(github_emulator: EmulatorServer) -> None:
    world = build_world(github_emulator, webhook_url="http://127.0.0.1:9/nowhere")
    world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "x", "user": "rita"})
    deliveries = httpx.get(f"{world.url}/_emulator/deliveries").json()
    assert deliveries
    assert all(d["status_code"] is None and d["error"] for d in deliveries)
    assert len(deliveries) == 1  # issues.opened once: no retries
    world.admin.close()


def test_webhook_url_must_be_loopback(github_emulator: EmulatorServer) -> None:
    from emulator_world import keypair

    response = httpx.post(
        f"{github_emulator.url}/_emulator/apps",
        json={"name": "x", "public_key_pem": keypair()[1], "webhook_url": "https://example.com/hook"},
    )
    assert response.status_code == 422


def test_emitted_payloads_parse_with_githubkits_webhook_models(hooked: World, receiver: Receiver) -> None:
    from githubkit.webhooks import parse_obj

    hooked.post(
        f"/repos/{OWNER}/{REPO}/issues", {"title": "x", "user": "rita", "labels": ["agent:claude-code"]}
    )
    hooked.post(f"/repos/{OWNER}/{REPO}/issues/1/comments", {"body": "/baton run", "user": "wes"})
    hooked.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "b", "files": {"a.txt": "a\n"}})
    hooked.post(f"/repos/{OWNER}/{REPO}/pulls", {"title": "x", "user": "wes", "head": "b"})
    with hooked.api(hooked.token()) as api:
        run = api.post(
            f"/repos/{OWNER}/{REPO}/check-runs",
            json={"name": "g", "head_sha": hooked.head_sha, "conclusion": "success",
                  "output": {"title": "t", "summary": "s"}},
        ).json()  # fmt: skip
    hooked.post(f"/check-runs/{run['id']}/rerequest", {"sender": "maria"})  # only a finished run
    items = receiver.wait_for(7)
    events = [(i.headers["x-github-event"], i.body["action"]) for i in items]
    assert events == [
        ("issues", "opened"),
        ("issues", "labeled"),
        ("issue_comment", "created"),
        ("pull_request", "opened"),
        ("check_run", "created"),
        ("check_run", "completed"),
        ("check_run", "rerequested"),
    ]
    for item in items:
        parsed = parse_obj(item.headers["x-github-event"], item.body)  # raises if the shape is wrong
        assert parsed.action == item.body["action"]  # type: ignore[union-attr]


def test_push_over_http_moves_pull_head_and_sends_synchronize(
    hooked: World, receiver: Receiver, tmp_path: Path
) -> None:
    import subprocess

    hooked.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "agent/2", "files": {"a.txt": "a\n"}})
    token = hooked.token()
    with hooked.api(token) as api:
        pull = api.post(
            f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "agent/2", "base": "main"}
        ).json()
    receiver.wait_for(1)
    receiver.items.clear()
    work = tmp_path / "w"
    url = authed(f"{hooked.url}/{OWNER}/{REPO}.git", token)

    def run(*args: str) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=tmp_path if not work.exists() else work,
            env=GIT_ENV,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip()

    run("clone", "--quiet", "--branch", "agent/2", url, str(work))
    (work / "a.txt").write_text("b\n")
    run("commit", "--quiet", "-am", "fix")
    run("push", "--quiet", "origin", "agent/2")
    new_head = run("rev-parse", "HEAD")
    (item,) = receiver.wait_for(1)  # push is not among the App's events, so only the pull event arrives
    assert (item.headers["x-github-event"], item.body["action"]) == ("pull_request", "synchronize")
    assert item.body["before"] == pull["head"]["sha"]
    assert item.body["after"] == new_head
    assert item.body["pull_request"]["head"]["sha"] == new_head
    assert_signed(item, hooked.webhook_secret)


def test_installation_events_reach_the_app(hooked: World, receiver: Receiver) -> None:
    hooked.post(f"/installations/{hooked.installation_id}/suspend", {"sender": "ada"})
    hooked.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "while suspended", "user": "rita"})
    hooked.post(f"/installations/{hooked.installation_id}/unsuspend", {"sender": "ada"})
    items = receiver.wait_for(2)
    events = [(i.headers["x-github-event"], i.body["action"]) for i in items]
    assert events == [("installation", "suspend"), ("installation", "unsuspend")]  # no issues.opened
    first = items[0].body
    assert first["installation"]["id"] == hooked.installation_id
    assert first["installation"]["suspended_at"] is not None
    assert first["sender"]["login"] == "ada"
    assert f"{OWNER}/{REPO}" in [r["full_name"] for r in first["repositories"]]
    from githubkit.webhooks import parse_obj

    for item in items:
        assert parse_obj("installation", item.body).action == item.body["action"]  # type: ignore[union-attr]


def test_admin_action_without_waiting_still_delivers(hooked: World, receiver: Receiver) -> None:
    answer = hooked.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "x", "user": "rita", "wait": False})
    assert [d["status_code"] for d in answer["deliveries"]] == [None]  # answered before sending
    (item,) = receiver.wait_for(1)
    assert item.headers["x-github-delivery"] == answer["deliveries"][0]["guid"]
