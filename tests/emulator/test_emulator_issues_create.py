"""Issues an App opens and lists over REST, as GitHub serves them: checked against its OpenAPI
description and the ``issues`` webhook schemas (Baton opens an umbrella's sub-issues this way)."""

from __future__ import annotations

from emulator_world import OWNER, REPO, World
from github_schemas import rest_errors, webhook_errors
from webhook_receiver import Receiver

from emulator.admin.client import AdminClient

FULL = f"{OWNER}/{REPO}"
ISSUES = "/repos/{owner}/{repo}/issues"


def test_the_app_opens_an_issue_with_labels_and_finds_it_by_its_creator(
    hooked: World, admin: AdminClient, receiver: Receiver
) -> None:
    admin.update_app(hooked.app_id, events=["issues"])
    receiver.items.clear()
    with hooked.api(hooked.token()) as api:
        made = api.post(
            f"/repos/{FULL}/issues", json={"title": "A part", "body": "quoted", "labels": ["agent:x"]}
        )
        mine = api.get(
            f"/repos/{FULL}/issues", params={"creator": made.json()["user"]["login"], "state": "all"}
        )
        nobody = api.get(f"/repos/{FULL}/issues", params={"creator": "rita"})
        closed = api.get(f"/repos/{FULL}/issues", params={"state": "closed"})
        untitled = api.post(f"/repos/{FULL}/issues", json={"body": "no title"})
        too_long = api.post(f"/repos/{FULL}/issues", json={"title": "x" * 257})
        wrong_state = api.get(f"/repos/{FULL}/issues", params={"state": "merged"})
    assert made.status_code == 201
    assert rest_errors("POST", ISSUES, 201, made.json()) == []
    assert made.headers["location"] == made.json()["url"]
    assert (made.json()["title"], made.json()["body"]) == ("A part", "quoted")
    assert made.json()["user"]["type"] == "Bot"
    assert [lab["name"] for lab in made.json()["labels"]] == ["agent:x"]
    assert mine.status_code == 200
    assert rest_errors("GET", ISSUES, 200, mine.json()) == []
    assert [i["number"] for i in mine.json()] == [made.json()["number"]]
    assert (nobody.json(), closed.json()) == ([], [])
    assert (untitled.status_code, too_long.status_code, wrong_state.status_code) == (422, 422, 422)
    hooks = receiver.wait_for(2)
    assert [(h.event[1], webhook_errors("issues", h.body)) for h in hooks] == [
        ("opened", []),
        ("labeled", []),
    ]
    assert hooks[0].body["sender"]["login"] == made.json()["user"]["login"]  # the App's bot did it


def test_an_app_without_issues_write_may_not_open_one(hooked: World, admin: AdminClient) -> None:
    token = hooked.token(permissions={"metadata": "read", "issues": "read"})
    with hooked.api(token) as api:
        refused = api.post(f"/repos/{FULL}/issues", json={"title": "x"})
        listed = api.get(f"/repos/{FULL}/issues")
    assert refused.status_code == 403
    assert listed.status_code == 200
