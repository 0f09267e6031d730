"""GitHub's rules for sub-issues on the emulator, and their refusals.

One parent per sub-issue (unless ``replace_parent``), no issue its own ancestor, only issues
(not pull requests), the same owner, at most 100 sub-issues per parent and eight levels of
nesting (GitHub's documented limits), the request body's schema, the reprioritise
arguments, and auth: ``issues`` write to change, read to list. Every refusal is checked
against the OpenAPI description, and a refused change changes nothing and sends nothing.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World
from github_schemas import rest_errors
from webhook_receiver import Receiver

from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"
ISSUE = "/repos/{owner}/{repo}/issues/{issue_number}"
SUBS = ISSUE + "/sub_issues"
SUB = ISSUE + "/sub_issue"
PRIORITY = SUBS + "/priority"
FAILED = "An error occurred while adding the sub-issue to the parent issue. "


def _path(template: str, number: int = 1) -> str:
    return template.format(owner=OWNER, repo=REPO, issue_number=number)


def _issues(admin: AdminClient, count: int, full_name: str = FULL) -> dict[int, int]:
    """``count`` new issues in ``full_name``: number -> id."""
    made = [admin.create_issue(full_name, title=f"Task {n}", user="maria") for n in range(count)]
    return {m["number"]: m["id"] for m in made}


def _refused(response: httpx.Response, template: str, method: str = "POST") -> str:
    assert response.status_code == 422, response.text
    assert rest_errors(method, template, 422, response.json()) == []
    message: str = response.json()["message"]
    return message


@pytest.fixture
def quiet(hooked: World, admin: AdminClient, receiver: Receiver) -> World:
    """The App hears ``sub_issues`` only, so a refusal's silence shows."""
    admin.update_app(hooked.app_id, events=["sub_issues"])
    return hooked


# -- the rules of a link --------------------------------------------------------------------------


def test_a_sub_issue_has_one_parent_unless_it_is_replaced(
    quiet: World, admin: AdminClient, receiver: Receiver
) -> None:
    ids = _issues(admin, 3)
    with quiet.api(quiet.token()) as api:
        api.post(_path(SUBS), json={"sub_issue_id": ids[3]})
        assert len(receiver.wait_for(2)) == 2  # sent after the answer: wait for both ends
        receiver.items.clear()
        second = api.post(_path(SUBS, 2), json={"sub_issue_id": ids[3]})
        twice = api.post(_path(SUBS), json={"sub_issue_id": ids[3]})
        twice_replacing = api.post(_path(SUBS), json={"sub_issue_id": ids[3], "replace_parent": True})
        still = api.get(_path(ISSUE + "/parent", 3)).json()
    assert _refused(second, SUBS) == FAILED + "Sub issue may only have one parent"
    assert _refused(twice, SUBS) == (
        FAILED + "Issue may not contain duplicate sub-issues and Sub issue may only have one parent"
    )
    assert _refused(twice_replacing, SUBS) == FAILED + "Issue may not contain duplicate sub-issues"
    assert still["number"] == 1
    assert receiver.wait_for(1, timeout=0.3) == []


def test_an_issue_cannot_be_its_own_parent_or_ancestor(quiet: World, admin: AdminClient) -> None:
    ids = _issues(admin, 3)
    with quiet.api(quiet.token()) as api:
        api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
        api.post(_path(SUBS, 2), json={"sub_issue_id": ids[3]})
        itself = api.post(_path(SUBS), json={"sub_issue_id": ids[1]})
        loop = api.post(_path(SUBS, 3), json={"sub_issue_id": ids[1]})
        loop_replacing = api.post(_path(SUBS, 3), json={"sub_issue_id": ids[2], "replace_parent": True})
    assert _refused(itself, SUBS) == FAILED + "Sub issue cannot be the same as the parent issue"
    assert _refused(loop, SUBS) == FAILED + "Sub issue may not create a circular dependency"
    assert _refused(loop_replacing, SUBS) == FAILED + "Sub issue may not create a circular dependency"


def test_only_issues_of_the_same_owner_are_linked(quiet: World, admin: AdminClient) -> None:
    ids = _issues(admin, 1)
    admin.commit(FULL, "feature", {"new.txt": "x\n"})
    pull = admin.open_pull(FULL, head="feature", user="wes")
    admin.create_repo("globex", "gadgets", files={"a.txt": "a\n"})
    admin.set_role("globex/gadgets", "ada", "admin")
    elsewhere = _issues(admin, 1, "globex/gadgets")
    with quiet.api(quiet.token()) as api:
        pull_id = api.get(_path(ISSUE, pull["number"])).json()["id"]
        as_child = api.post(_path(SUBS), json={"sub_issue_id": pull_id})
        as_parent = api.post(_path(SUBS, pull["number"]), json={"sub_issue_id": ids[1]})
        other_owner = api.post(_path(SUBS), json={"sub_issue_id": elsewhere[1]})
    assert _refused(as_child, SUBS) == FAILED + "Sub issue may only be an issue"
    assert _refused(as_parent, SUBS) == FAILED + "Parent may only be an issue"
    assert other_owner.status_code == 403  # the App's token cannot write in another owner's repository
    with pytest.raises(AdminCallFailed) as person:
        admin.add_sub_issue(FULL, 1, "globex/gadgets#1", sender="ada")
    assert person.value.status == 422
    assert person.value.body["message"] == FAILED + "Sub issue must have the same owner as the parent"


def test_a_parent_holds_at_most_100_sub_issues(world: World, admin: AdminClient) -> None:
    ids = _issues(admin, 102)
    with world.api(world.token()) as api:
        for number in range(2, 102):
            assert api.post(_path(SUBS), json={"sub_issue_id": ids[number]}).status_code == 201
        one_more = api.post(_path(SUBS), json={"sub_issue_id": ids[102]})
        summary = api.get(_path(ISSUE)).json()["sub_issues_summary"]
        api.request("DELETE", _path(SUB), json={"sub_issue_id": ids[2]})
        room_again = api.post(_path(SUBS), json={"sub_issue_id": ids[102]})
    assert _refused(one_more, SUBS) == FAILED + "Parent cannot have more than 100 sub-issues"
    assert summary["total"] == 100
    assert room_again.status_code == 201


def test_nesting_stops_at_eight_levels(world: World, admin: AdminClient) -> None:
    """A root and seven layers of sub-issues below it: #1 ← #2 ← … ← #8; #9 cannot go under #8,
    nor a two-level tree (#10 ← #11) under #7, nor #1's whole tree under another root (#12)."""
    ids = _issues(admin, 12)
    deep = (
        FAILED + "You can\u2019t add more than 7 layers of sub-issues. "
        "To add a sub-issue, remove a parent issue at any level."
    )
    with world.api(world.token()) as api:
        for number in range(1, 8):
            assert api.post(_path(SUBS, number), json={"sub_issue_id": ids[number + 1]}).status_code == 201
        ninth = api.post(_path(SUBS, 8), json={"sub_issue_id": ids[9]})
        assert api.post(_path(SUBS, 10), json={"sub_issue_id": ids[11]}).status_code == 201
        tree = api.post(_path(SUBS, 7), json={"sub_issue_id": ids[10]})
        beside = api.post(_path(SUBS, 6), json={"sub_issue_id": ids[10]})  # its leaf is at level 8
        root = api.post(_path(SUBS, 12), json={"sub_issue_id": ids[1]})
    assert _refused(ninth, SUBS) == deep
    assert _refused(tree, SUBS) == deep
    assert beside.status_code == 201
    assert _refused(root, SUBS) == deep


# -- the request --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, 'Invalid request.\n\n"sub_issue_id" wasn\'t supplied.'),
        ({"sub_issue_id": "5"},
         "Invalid request.\n\nFor 'properties/sub_issue_id', \"5\" is not an integer."),
        ({"sub_issue_id": 5, "replace_parent": "yes"},
         "Invalid request.\n\nFor 'properties/replace_parent', \"yes\" is not a boolean."),
    ],
)  # fmt: skip
def test_a_body_off_the_schema_is_refused(
    world: World, admin: AdminClient, body: dict[str, Any], message: str
) -> None:
    _issues(admin, 1)
    with world.api(world.token()) as api:
        answer = api.post(_path(SUBS), json=body)
    assert _refused(answer, SUBS) == message


def test_reprioritising_needs_one_place_among_the_parents(world: World, admin: AdminClient) -> None:
    ids = _issues(admin, 4)
    with world.api(world.token()) as api:
        for number in (2, 3):
            api.post(_path(SUBS), json={"sub_issue_id": ids[number]})

        def patch(**body: Any) -> httpx.Response:
            return api.patch(_path(PRIORITY), json={"sub_issue_id": ids[3], **body})

        refusals = {
            "neither": patch(),
            "both": patch(after_id=ids[2], before_id=ids[2]),
            "parent": patch(after_id=ids[1]),
            "itself": patch(before_id=ids[3]),
            "stranger": patch(after_id=ids[4]),
        }
        against_itself = api.patch(_path(PRIORITY), json={"sub_issue_id": ids[1], "after_id": ids[2]})
        not_a_child = api.patch(_path(PRIORITY), json={"sub_issue_id": ids[4], "after_id": ids[2]})
    assert {k: _refused(v, PRIORITY, "PATCH") for k, v in refusals.items()} == {
        "neither": "Either a before_id or after_id argument must be provided",
        "both": "Only the before_id or the after_id argument may be provided, but not both",
        "parent": "The provided positional id cannot be the parent issue",
        "itself": "The provided positional id cannot be the child issue",
        "stranger": "Provided positional argument is not a sub-issue of the provided parent",
    }
    assert _refused(against_itself, PRIORITY, "PATCH") == "A sub-issue cannot be prioritized against itself"
    assert not_a_child.status_code == 404
    assert rest_errors("PATCH", PRIORITY, 404, not_a_child.json()) == []
    assert not_a_child.json()["message"] == "Sub-issue relationship does not exist"


# -- auth --------------------------------------------------------------------------------------------


def test_changing_needs_issues_write_and_listing_read(world: World, admin: AdminClient) -> None:
    ids = _issues(admin, 2)
    with world.api(world.token()) as api:
        api.post(_path(SUBS), json={"sub_issue_id": ids[2]})
    named = {"sub_issue_id": ids[2]}
    with world.api(world.token(permissions={"issues": "read"})) as reader:
        listed = reader.get(_path(SUBS))
        parent = reader.get(_path(ISSUE + "/parent", 2))
        changes = {
            ("POST", SUBS): reader.post(_path(SUBS), json=named),
            ("DELETE", SUB): reader.request("DELETE", _path(SUB), json=named),
            ("PATCH", PRIORITY): reader.patch(_path(PRIORITY), json={**named, "after_id": ids[2]}),
        }
    assert listed.status_code == parent.status_code == 200
    for (method, template), refused in changes.items():
        assert refused.status_code == 403
        assert rest_errors(method, template, 403, refused.json()) == []
        assert refused.json()["message"] == "Resource not accessible by integration"


def test_a_private_repositorys_sub_issues_need_a_token_that_reaches_it(
    world: World, admin: AdminClient
) -> None:
    ids = _issues(admin, 2, f"{OWNER}/secret-sauce")
    path = f"/repos/{OWNER}/secret-sauce/issues/1/sub_issues"
    with world.api(world.token()) as api:
        assert api.post(path, json={"sub_issue_id": ids[2]}).status_code == 201
    anonymous = httpx.get(f"{world.url}{path}", timeout=10)
    with world.api(world.token(repositories=[REPO])) as narrowed:
        outside = narrowed.get(path)
    with world.api(world.token(permissions={"metadata": "read"})) as no_issues:
        without = no_issues.get(path)
    assert anonymous.status_code == outside.status_code == 404
    assert without.status_code == 403
