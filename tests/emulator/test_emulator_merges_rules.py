"""What GitHub refuses when merging, with its codes and words, and the issues a merge closes.

Every refusal is checked against the OpenAPI description of ``PUT …/pulls/{n}/merge`` and
leaves the base branch where it was; closing keywords close exactly the issues they name.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_world import World
from github_schemas import response_schema
from merging_world import EVENTS, FULL, ISSUE, MERGE, PULL, fits, git, hooks, open_feature, path
from webhook_receiver import Receiver

from emulator import closing
from emulator.admin.client import AdminCallFailed, AdminClient


@pytest.fixture
def heard(hooked: World, admin: AdminClient, receiver: Receiver) -> World:
    admin.update_app(hooked.app_id, events=EVENTS)
    receiver.items.clear()
    return hooked


def _merge(world: World, number: int, token: str | None = None, **body: Any) -> httpx.Response:
    with world.api(token or world.token()) as api:
        return api.put(path(MERGE, number), json=body or None)


def _refused(world: World, answer: httpx.Response, status: int, message: str, main_before: str) -> None:
    assert answer.status_code == status, answer.text
    fits("PUT", MERGE, answer)
    assert answer.json()["message"] == message
    assert git(world, "rev-parse", "main") == main_before  # nothing changed


# -- refusals ---------------------------------------------------------------------------------------


def test_a_conflict_is_refused_and_changes_nothing(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    number = open_feature(admin, "clash", [({"README.md": "# theirs\n"}, "Rewrite the readme")])
    admin.commit(FULL, "main", {"README.md": "# ours\n"}, message="Rewrite it here too")
    before = git(heard, "rev-parse", "main")
    receiver.items.clear()
    for method in ("merge", "squash", "rebase"):
        _refused(
            heard, _merge(heard, number, merge_method=method), 405, "Pull Request is not mergeable", before
        )
    with heard.api(heard.token()) as api:
        pull = api.get(path(PULL, number)).json()
        check = api.get(path(MERGE, number))
    assert (pull["state"], pull["merged"], pull["merge_commit_sha"]) == ("open", False, None)
    _not_merged(check)
    assert receiver.wait_for(1, timeout=0.5) == []


def _not_merged(answer: httpx.Response) -> None:
    """``GET …/merge`` of a pull not merged: the description documents a 404 with no schema; the
    emulator answers GitHub's usual error body, as GitHub answers every 404."""
    assert response_schema("GET", MERGE, 404) is None
    assert answer.status_code == 404
    assert set(answer.json()) == {"message", "documentation_url", "status"}
    assert answer.json()["message"] == "Not Found"


def test_a_rebase_that_differs_from_the_merge_is_refused(heard: World, admin: AdminClient) -> None:
    """The head adds a line, removes it again, and the base adds the same line meanwhile: merging
    the head changes nothing, replaying its commits one by one would remove the base's line
    (GitHub: "unsafe ... would produce a different result than a merge would")."""
    number = open_feature(
        admin,
        "wobble",
        [({"README.md": "# widgets\nmore\n"}, "Add a line"), ({"README.md": "# widgets\n"}, "Take it out")],
    )
    admin.commit(FULL, "main", {"README.md": "# widgets\nmore\n", "x.txt": "x\n"}, message="Add it on main")
    before = git(heard, "rev-parse", "main")
    _refused(
        heard, _merge(heard, number, merge_method="rebase"), 405, "Pull Request is not mergeable", before
    )
    assert _merge(heard, number, merge_method="merge").status_code == 200  # a merge commit is fine


def test_a_moved_head_is_409(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "moving", [({"a.txt": "a\n"}, "Add a")])
    old_head = git(heard, "rev-parse", "moving")
    admin.push_to_pull(FULL, number, {"a.txt": "aa\n"}, sender="wes")
    before = git(heard, "rev-parse", "main")
    _refused(
        heard,
        _merge(heard, number, sha=old_head),
        409,
        "Head branch was modified. Review and try the merge again.",
        before,
    )
    new_head = git(heard, "rev-parse", "moving")
    assert _merge(heard, number, sha=new_head).status_code == 200


def test_closed_merged_and_draft_pulls_are_405(heard: World, admin: AdminClient) -> None:
    closed = open_feature(admin, "closed", [({"a.txt": "a\n"}, "Add a")])
    admin.close_pull(FULL, closed, sender="maria")
    draft_number = int(admin.open_pull(FULL, head="closed", user="wes", draft=True)["number"])
    before = git(heard, "rev-parse", "main")
    _refused(heard, _merge(heard, closed), 405, "Pull Request is not mergeable", before)
    _refused(heard, _merge(heard, draft_number), 405, "Pull Request is still a draft", before)
    admin.ready_for_review(FULL, draft_number, sender="wes")
    assert _merge(heard, draft_number).status_code == 200
    after = git(heard, "rev-parse", "main")
    _refused(
        heard, _merge(heard, draft_number), 405, "Pull Request is not mergeable", after
    )  # already merged


def test_a_body_off_the_schema_is_422(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "schema", [({"a.txt": "a\n"}, "Add a")])
    before = git(heard, "rev-parse", "main")
    bad_method = _merge(heard, number, merge_method="fast-forward")
    bad_title = _merge(heard, number, commit_title=7)
    for answer in (bad_method, bad_title):
        assert answer.status_code == 422
        fits("PUT", MERGE, answer)
    assert bad_method.json()["message"] == (
        "Invalid request.\n\nFor 'properties/merge_method', \"fast-forward\" is not a possible value."
    )
    assert (
        bad_title.json()["message"] == "Invalid request.\n\nFor 'properties/commit_title', 7 is not a string."
    )
    assert git(heard, "rev-parse", "main") == before


def test_the_app_needs_contents_write(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "perm", [({"a.txt": "a\n"}, "Add a")])
    before = git(heard, "rev-parse", "main")
    pulls_only = heard.token(permissions={"pull_requests": "write", "contents": "read"})
    refused = _merge(heard, number, token=pulls_only)
    _refused(heard, refused, 403, "Resource not accessible by integration", before)
    with heard.api(pulls_only) as api:
        _not_merged(
            api.get(path(MERGE, number))
        )  # not merged (404), not refused: pull_requests: read reads it
    contents_only = heard.token(permissions={"contents": "write"})
    assert _merge(heard, number, token=contents_only).status_code == 200
    with heard.api(heard.token(permissions={"contents": "read"})) as api:
        assert api.get(path(MERGE, number)).status_code == 204  # a public repository: anyone may read
    missing = _merge(heard, 99)
    assert missing.status_code == 404
    fits("PUT", MERGE, missing)


def test_a_merged_pull_cannot_be_reopened(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "done", [({"a.txt": "a\n"}, "Add a")])
    assert _merge(heard, number).status_code == 200
    with heard.api(heard.token()) as api:
        reopened = api.patch(path(PULL, number), json={"state": "open"})
    assert reopened.status_code == 422
    assert (
        reopened.json()["errors"][0]["message"]
        == "state cannot be changed. The pull request cannot be reopened."
    )
    with pytest.raises(AdminCallFailed) as person:
        admin.reopen_pull(FULL, number, sender="maria")
    assert person.value.status == 422


def test_a_person_needs_write_to_merge(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "triaged", [({"a.txt": "a\n"}, "Add a")])
    for login in ("tia", "rita", "nobody"):
        with pytest.raises(AdminCallFailed) as refused:
            admin.merge_pull(FULL, number, sender=login)
        assert refused.value.status == 403
    with pytest.raises(AdminCallFailed) as conflict:
        admin.merge_pull(FULL, number, sender="wes", sha="0" * 40)
    assert (conflict.value.status, conflict.value.body["message"]) == (
        409,
        "Head branch was modified. Review and try the merge again.",
    )
    assert admin.merge_pull(FULL, number, sender="wes", method="rebase")["merged"] is True


# -- closing keywords -------------------------------------------------------------------------------


def test_the_keywords_as_github_documents_them() -> None:
    text = (
        "Closes #1, closes #2 and #3. FIXED: #4\nresolves:#5 fixes acme/widgets#6 Fixes other/repo#7 "
        "Prefixes #8 fix#9 close #10x resolve  #11 resolved#12 (fixes #13)"
    )
    assert closing.named([text], FULL) == [1, 2, 4, 5, 6, 11, 13]
    assert closing.named(["Close #2", None, "closes #2 and CLOSE #1"], FULL) == [2, 1]
    assert closing.named(["Fixes ACME/Widgets#3"], FULL) == [3]  # names compare as GitHub's do


def test_a_merge_into_the_default_branch_closes_exactly_the_named_issues(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    for n in range(1, 6):
        admin.create_issue(FULL, title=f"Bug {n}", user="rita")
    admin.close_issue(FULL, 5, sender="maria", state_reason="not_planned")
    number = open_feature(
        admin,
        "fixes",
        [({"a.txt": "a\n"}, "Add a\n\nResolved: #3"), ({"b.txt": "b\n"}, "Add b, see #4")],
        body="Fixes #1, mentions #2, closes #5 and closes #99",
    )
    receiver.items.clear()
    answer = _merge(heard, number)
    assert answer.status_code == 200
    got = hooks(receiver, 4)
    assert [(e, a) for e, a, _ in got] == [
        ("push", ""),
        ("pull_request", "closed"),
        ("issues", "closed"),
        ("issues", "closed"),
    ]
    closed = [p for e, _, p in got if e == "issues"]
    assert [p["issue"]["number"] for p in closed] == [1, 3]  # the body first, then the commits
    assert all(p["issue"]["state_reason"] == "completed" for p in closed)
    assert all(p["sender"]["login"] == "baton-test[bot]" for p in closed)
    with heard.api(heard.token()) as api:
        states = {n: api.get(path(ISSUE, n)).json() for n in range(1, 6)}
    assert {n: i["state"] for n, i in states.items()} == {
        1: "closed",
        2: "open",
        3: "closed",
        4: "open",
        5: "closed",
    }
    assert states[5]["state_reason"] == "not_planned"  # already closed: left as it was
    for item in states.values():
        fits("GET", ISSUE, httpx.Response(200, json=item))
    assert len(receiver.wait_for(5, timeout=0.5)) == 4


def test_a_squash_closes_what_its_message_and_the_body_name(heard: World, admin: AdminClient) -> None:
    for n in range(1, 4):
        admin.create_issue(FULL, title=f"Bug {n}", user="rita")
    number = open_feature(admin, "squashed", [({"a.txt": "a\n"}, "Fix #1"), ({"b.txt": "b\n"}, "more")])
    answer = admin.merge_pull(FULL, number, sender="maria", method="squash", commit_message="closes #2")
    closed = [d for d in answer["deliveries"] if d["event"] == "issues"]
    assert len(closed) == 1  # the squash's message replaced "Fix #1"; only #2 landed
    with heard.api(heard.token()) as api:
        assert [api.get(path(ISSUE, n)).json()["state"] for n in (1, 2, 3)] == ["open", "closed", "open"]
        issue = api.get(path(ISSUE, 2)).json()
    assert issue["closed_at"] is not None


def test_a_keyword_naming_a_pull_request_closes_it(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    other = open_feature(admin, "other", [({"o.txt": "o\n"}, "Other")])
    number = open_feature(admin, "closer", [({"a.txt": "a\n"}, "Add a")], body=f"Closes #{other}")
    receiver.items.clear()
    admin.merge_pull(FULL, number, sender="maria")
    got = hooks(receiver, 3)
    assert [(e, a, p["pull_request"]["number"]) for e, a, p in got[1:]] == [
        ("pull_request", "closed", number),
        ("pull_request", "closed", other),
    ]
    assert got[2][2]["pull_request"]["merged"] is False


def test_a_merge_into_another_branch_closes_nothing(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    admin.create_issue(FULL, title="Bug", user="rita")
    admin.commit(FULL, "release", {"r.txt": "r\n"}, message="Cut a release")
    number = open_feature(
        admin, "backport", [({"a.txt": "a\n"}, "Fixes #1")], body="Fixes #1", base="release"
    )
    receiver.items.clear()
    answer = admin.merge_pull(FULL, number, sender="maria")
    assert [(d["event"], d["action"]) for d in answer["deliveries"]] == [
        ("push", None),
        ("pull_request", "closed"),
    ]
    (_, _, push), _ = hooks(receiver, 2)
    assert push["ref"] == "refs/heads/release"
    with heard.api(heard.token()) as api:
        assert api.get(path(ISSUE, 1)).json()["state"] == "open"
    assert git(heard, "rev-parse", "release") == answer["sha"]
