"""Sub-issues on the emulator, checked against GitHub's own schemas.

The App links tasks under an umbrella issue by the tasks' ids, lists, reorders and removes
them, and reads a sub-issue's parent; people do the same through the admin API. Every
answer is checked against the OpenAPI description and every ``sub_issues`` webhook against
GitHub's schema of it, and githubkit parses them. The rules and their refusals are in
``test_emulator_sub_issues_rules.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World, build_world
from github_schemas import rest_errors, webhook_errors
from githubkit.webhooks import parse_obj
from webhook_receiver import Receiver

from emulator import EmulatorServer
from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"
ISSUE = "/repos/{owner}/{repo}/issues/{issue_number}"
SUBS = ISSUE + "/sub_issues"
SUB = ISSUE + "/sub_issue"
PRIORITY = SUBS + "/priority"
PARENT = ISSUE + "/parent"
EVENTS = ["issues", "issue_comment", "sub_issues"]


@pytest.fixture
def ids(hooked: World, admin: AdminClient, receiver: Receiver) -> dict[int, int]:
    """#1 an umbrella issue, #2 to #4 its tasks (not yet linked): number -> id. The App hears
    ``issues`` and ``sub_issues``; the receiver starts empty."""
    admin.update_app(hooked.app_id, events=EVENTS)
    made = {1: admin.create_issue(FULL, title="Umbrella", user="maria")["id"]}
    for number in (2, 3, 4):
        made[number] = admin.create_issue(FULL, title=f"Task {number}", user="maria")["id"]
    receiver.items.clear()
    return made


def _path(template: str, number: int = 1) -> str:
    return template.format(owner=OWNER, repo=REPO, issue_number=number)


def _fits(method: str, template: str, response: httpx.Response) -> None:
    assert rest_errors(method, template, response.status_code, response.json()) == [], response.text


def _hooks(receiver: Receiver, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(event, action, payload) of the first ``count`` deliveries, each checked against its schema
    and parsed by githubkit."""
    items = receiver.wait_for(count)
    assert len(items) == count, [i.event for i in items]
    out = []
    for item in items:
        event, action = item.event
        assert webhook_errors(event, item.body) == [], (event, action)
        parse_obj(event, item.body)  # type: ignore[call-overload]
        out.append((event, str(action), item.body))
    return out


def _numbers(answer: httpx.Response) -> list[int]:
    return [i["number"] for i in answer.json()]


# -- the App builds an umbrella ---------------------------------------------------------------------


def test_the_app_adds_sub_issues_by_id_and_both_ends_hear_of_it(
    hooked: World, ids: dict[int, int], receiver: Receiver
) -> None:
    with hooked.api(hooked.token()) as api:
        added = api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
        again = api.post(_path(SUBS), json={"sub_issue_id": ids[3]})
        listed = api.get(_path(SUBS))
        parent = api.get(_path(PARENT, 2))
        child = api.get(_path(ISSUE, 2))
        umbrella = api.get(_path(ISSUE, 1))
    assert added.status_code == again.status_code == 201
    _fits("POST", SUBS, added)
    _fits("GET", SUBS, listed)
    _fits("GET", PARENT, parent)
    _fits("GET", ISSUE, child)
    assert added.json()["number"] == 1  # the answer is the parent issue
    assert added.json()["sub_issues_summary"] == {"total": 1, "completed": 0, "percent_completed": 0}
    assert again.json()["sub_issues_summary"]["total"] == 2
    assert _numbers(listed) == [2, 3]  # in the order they were added
    assert parent.json()["id"] == ids[1]
    assert child.json()["parent_issue_url"] == f"{hooked.url}/repos/{FULL}/issues/1"
    assert umbrella.json()["parent_issue_url"] is None
    assert umbrella.json()["sub_issues_summary"]["total"] == 2
    hooks = _hooks(receiver, 4)
    assert [(e, a) for e, a, _ in hooks] == [
        ("sub_issues", "sub_issue_added"),
        ("sub_issues", "parent_issue_added"),
        ("sub_issues", "sub_issue_added"),
        ("sub_issues", "parent_issue_added"),
    ]
    (_, _, on_parent), (_, _, on_child) = hooks[0], hooks[1]
    assert (on_parent["parent_issue_id"], on_parent["sub_issue_id"]) == (ids[1], ids[2])
    assert on_parent["parent_issue"]["sub_issues_summary"]["total"] == 1  # as it is after the change
    assert on_parent["sub_issue"]["parent_issue_url"].endswith(f"/repos/{FULL}/issues/1")
    assert on_parent["sub_issue_repo"]["full_name"] == FULL
    assert on_child["parent_issue_repo"]["full_name"] == FULL
    assert "sub_issue_repo" not in on_child
    assert on_parent["sender"]["login"] == on_child["sender"]["login"] == "baton-test[bot]"
    assert on_parent["installation"]["id"] == hooked.installation_id


def test_a_number_is_not_an_id(hooked: World, ids: dict[int, int]) -> None:
    with hooked.api(hooked.token()) as api:
        by_number = api.post(_path(SUBS), json={"sub_issue_id": 2})
        no_parent = api.get(_path(PARENT, 2))
        no_issue = api.get(_path(SUBS, 99))
    assert by_number.status_code == no_parent.status_code == no_issue.status_code == 404
    _fits("POST", SUBS, by_number)
    _fits("GET", PARENT, no_parent)
    assert by_number.json()["message"] == "The provided sub-issue does not exist"
    assert no_parent.json()["message"] == "No parent issue found"


def test_the_list_is_paginated_as_github_paginates(hooked: World, ids: dict[int, int]) -> None:
    with hooked.api(hooked.token()) as api:
        for number in (2, 3, 4):
            api.post(_path(SUBS), json={"sub_issue_id": ids[number]})
        first = api.get(_path(SUBS), params={"per_page": 2})
        second = api.get(_path(SUBS), params={"per_page": 2, "page": 2})
    assert _numbers(first) == [2, 3]
    assert 'rel="next"' in first.headers["link"]
    assert _numbers(second) == [4]
    _fits("GET", SUBS, second)


def test_removing_a_sub_issue_tells_both_ends(hooked: World, ids: dict[int, int], receiver: Receiver) -> None:
    with hooked.api(hooked.token()) as api:
        api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
        removed = api.request("DELETE", _path(SUB), json={"sub_issue_id": ids[2]})
        listed = api.get(_path(SUBS))
        gone = api.get(_path(PARENT, 2))
        not_one = api.request("DELETE", _path(SUB), json={"sub_issue_id": ids[3]})
    assert removed.status_code == 200
    _fits("DELETE", SUB, removed)
    assert removed.json()["number"] == 1
    assert removed.json()["sub_issues_summary"]["total"] == 0
    assert listed.json() == []
    assert gone.status_code == 404
    assert not_one.status_code == 404  # not a sub-issue of #1
    _fits("DELETE", SUB, not_one)
    hooks = _hooks(receiver, 4)
    assert [a for _, a, _ in hooks] == [
        "sub_issue_added",
        "parent_issue_added",
        "sub_issue_removed",
        "parent_issue_removed",
    ]
    assert hooks[3][2]["sub_issue"]["parent_issue_url"] is None


def test_replacing_a_parent_moves_the_sub_issue(
    hooked: World, ids: dict[int, int], receiver: Receiver
) -> None:
    with hooked.api(hooked.token()) as api:
        api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
        moved = api.post(_path(SUBS, 3), json={"sub_issue_id": ids[2], "replace_parent": True})
        old = api.get(_path(ISSUE, 1)).json()
        new_parent = api.get(_path(PARENT, 2)).json()
    assert moved.status_code == 201
    _fits("POST", SUBS, moved)
    assert old["sub_issues_summary"]["total"] == 0
    assert new_parent["number"] == 3
    hooks = _hooks(receiver, 6)[2:]
    assert [(a, p["parent_issue"]["number"]) for _, a, p in hooks] == [
        ("sub_issue_removed", 1),
        ("parent_issue_removed", 1),
        ("sub_issue_added", 3),
        ("parent_issue_added", 3),
    ]


def test_reprioritising_moves_a_sub_issue_before_or_after_another(
    hooked: World, ids: dict[int, int], receiver: Receiver
) -> None:
    with hooked.api(hooked.token()) as api:
        for number in (2, 3, 4):
            api.post(_path(SUBS), json={"sub_issue_id": ids[number]})
        after = api.patch(_path(PRIORITY), json={"sub_issue_id": ids[4], "after_id": ids[2]})
        order_after = _numbers(api.get(_path(SUBS)))
        before = api.patch(_path(PRIORITY), json={"sub_issue_id": ids[3], "before_id": ids[2]})
        order_before = _numbers(api.get(_path(SUBS)))
        last = api.patch(_path(PRIORITY), json={"sub_issue_id": ids[3], "after_id": ids[4]})
        order_last = _numbers(api.get(_path(SUBS)))
    assert after.status_code == before.status_code == last.status_code == 200
    _fits("PATCH", PRIORITY, after)
    assert after.json()["number"] == 1
    assert order_after == [2, 4, 3]
    assert order_before == [3, 2, 4]
    assert order_last == [2, 4, 3]
    assert len(receiver.wait_for(7, timeout=0.5)) == 6  # the three adds' pairs: reordering sends nothing


def test_closing_a_sub_issue_completes_it_in_its_parents_summary(
    hooked: World, ids: dict[int, int], admin: AdminClient, receiver: Receiver
) -> None:
    with hooked.api(hooked.token()) as api:
        for number in (2, 3, 4):
            api.post(_path(SUBS), json={"sub_issue_id": ids[number]})
        before = api.get(_path(ISSUE, 1))
        admin.close_issue(FULL, 2, sender="maria")
        admin.close_issue(FULL, 3, sender="maria", state_reason="not_planned")
        after = api.get(_path(ISSUE, 1))
        listed = api.get(_path(SUBS)).json()
        unchanged = api.get(_path(ISSUE, 1), headers={"If-None-Match": before.headers["etag"]})
    assert before.json()["sub_issues_summary"] == {"total": 3, "completed": 0, "percent_completed": 0}
    assert after.json()["sub_issues_summary"] == {"total": 3, "completed": 2, "percent_completed": 66}
    assert unchanged.status_code == 200  # the parent's answer changed, so its ETag did
    assert [i["state"] for i in listed] == ["closed", "closed", "open"]
    closed = [p for e, a, p in _hooks(receiver, 8) if (e, a) == ("issues", "closed")]
    assert [p["issue"]["number"] for p in closed] == [2, 3]
    assert closed[0]["issue"]["sub_issues_summary"]["total"] == 0  # the task's own, as webhooks carry it


# -- people ---------------------------------------------------------------------------------------


def test_a_person_adds_reorders_and_removes_sub_issues(
    hooked: World, ids: dict[int, int], admin: AdminClient, receiver: Receiver
) -> None:
    added = admin.add_sub_issue(FULL, 1, 2, sender="wes")
    assert [(d["event"], d["action"]) for d in added["deliveries"]] == [
        ("sub_issues", "sub_issue_added"),
        ("sub_issues", "parent_issue_added"),
    ]
    admin.add_sub_issue(FULL, 1, f"{FULL}#3", sender="tia")  # triage is enough
    moved = admin.reprioritize_sub_issue(FULL, 1, 3, sender="wes", before=2)
    assert [s["number"] for s in moved["sub_issues"]] == [3, 2]
    assert moved["deliveries"] == []
    removed = admin.remove_sub_issue(FULL, 1, 2, sender="maria")
    assert [s["number"] for s in removed["sub_issues"]] == [3]
    assert removed["sub_issues_summary"] == {"total": 1, "completed": 0, "percent_completed": 0}
    hooks = _hooks(receiver, 6)
    assert [(a, p["sender"]["login"]) for _, a, p in hooks] == [
        ("sub_issue_added", "wes"),
        ("parent_issue_added", "wes"),
        ("sub_issue_added", "tia"),
        ("parent_issue_added", "tia"),
        ("sub_issue_removed", "maria"),
        ("parent_issue_removed", "maria"),
    ]
    with pytest.raises(AdminCallFailed) as refused:
        admin.add_sub_issue(FULL, 1, 4, sender="rita")  # read only
    assert refused.value.status == 403
    with pytest.raises(AdminCallFailed) as rule:
        admin.add_sub_issue(FULL, 1, 3, sender="wes")
    assert rule.value.status == 422
    assert rule.value.body["message"].endswith(
        "Issue may not contain duplicate sub-issues and Sub issue may only have one parent"
    )


def test_an_app_not_subscribed_to_sub_issues_hears_nothing(
    hooked: World, ids: dict[int, int], admin: AdminClient
) -> None:
    admin.update_app(hooked.app_id, events=["issues"])
    assert admin.add_sub_issue(FULL, 1, 2, sender="wes")["deliveries"] == []


# -- across repositories --------------------------------------------------------------------------


def test_a_sub_issue_in_another_repository_of_the_owner(
    hooked: World, ids: dict[int, int], admin: AdminClient, receiver: Receiver
) -> None:
    secret = admin.create_issue(f"{OWNER}/secret-sauce", title="Private task", user="maria")
    receiver.items.clear()
    with hooked.api(hooked.token()) as api:
        added = api.post(_path(SUBS), json={"sub_issue_id": secret["id"]})
        listed = api.get(_path(SUBS)).json()
        up = api.get(f"/repos/{OWNER}/secret-sauce/issues/{secret['number']}/parent")
    assert added.status_code == 201
    assert [i["repository_url"] for i in listed] == [f"{hooked.url}/repos/{OWNER}/secret-sauce"]
    assert up.json()["number"] == 1
    (_, _, on_parent), (_, _, on_child) = _hooks(receiver, 2)
    assert on_parent["repository"]["full_name"] == FULL
    assert on_parent["sub_issue_repo"]["full_name"] == f"{OWNER}/secret-sauce"
    assert on_child["repository"]["full_name"] == f"{OWNER}/secret-sauce"
    assert on_child["parent_issue_repo"]["full_name"] == FULL
    with hooked.api(hooked.token(repositories=[REPO])) as narrowed:
        hidden = narrowed.get(_path(SUBS)).json()
        named = narrowed.request("DELETE", _path(SUB), json={"sub_issue_id": secret["id"]})
    anonymous = httpx.get(f"{hooked.url}{_path(SUBS)}", timeout=10).json()
    assert hidden == anonymous == []  # a sub-issue the caller cannot read is not listed
    assert named.status_code == 404
    assert named.json()["message"] == "The provided sub-issue does not exist"
    summary = httpx.get(f"{hooked.url}{_path(ISSUE)}", timeout=10).json()["sub_issues_summary"]
    assert summary["total"] == 1  # still counted in the parent's summary


def test_a_deleted_repository_takes_its_parents_with_it(
    hooked: World, ids: dict[int, int], admin: AdminClient
) -> None:
    secret = admin.create_issue(f"{OWNER}/secret-sauce", title="Umbrella elsewhere", user="maria")
    admin.set_role(f"{OWNER}/secret-sauce", "ada", "admin")
    admin.add_sub_issue(f"{OWNER}/secret-sauce", secret["number"], f"{FULL}#2", sender="ada")
    admin.delete_repo(f"{OWNER}/secret-sauce")
    with hooked.api(hooked.token()) as api:
        orphan = api.get(_path(ISSUE, 2)).json()
        parent = api.get(_path(PARENT, 2))
        adopted = api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
    assert orphan["parent_issue_url"] is None
    assert parent.status_code == 404
    assert adopted.status_code == 201


# -- restarts -------------------------------------------------------------------------------------


def test_sub_issues_survive_a_restart(tmp_path: Path) -> None:
    with EmulatorServer(tmp_path / "github") as server:
        world = build_world(server)
        with AdminClient(server.url) as admin:
            for n in range(1, 4):
                admin.create_issue(FULL, title=f"#{n}", user="maria")
            admin.add_sub_issue(FULL, 1, 2, sender="wes")
            admin.add_sub_issue(FULL, 1, 3, sender="wes")
            admin.reprioritize_sub_issue(FULL, 1, 3, sender="wes", before=2)
        world.admin.close()
    with EmulatorServer(tmp_path / "github") as again:
        listed = httpx.get(f"{again.url}{_path(SUBS)}", timeout=10).json()
    assert [i["number"] for i in listed] == [3, 2]
