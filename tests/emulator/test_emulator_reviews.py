"""Pull request reviews and review comments on the emulator, checked against GitHub's own schemas.

Paths, status codes, answers and 422s as GitHub serves them (each answer checked against the
OpenAPI description), the admin API's people reviewing, and the webhooks each action sends,
in order, checked against ``@octokit/webhooks-schemas``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World, build_world
from github_schemas import rest_errors, webhook_errors
from webhook_receiver import Receiver

from emulator import EmulatorServer
from emulator.admin.client import AdminCallFailed, AdminClient

FULL = f"{OWNER}/{REPO}"
PULLS = "/repos/{owner}/{repo}/pulls/{pull_number}"
REVIEWS = PULLS + "/reviews"
PR_COMMENTS = PULLS + "/comments"
LINES = [f"line {i}" for i in range(1, 21)]
REVIEW_EVENTS = [
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
]


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


@pytest.fixture
def pull(hooked: World, admin: AdminClient, receiver: Receiver) -> dict[str, Any]:
    """Pull #1 by wes: ``long.txt`` changed at lines 2 and 18 (two hunks), ``new.py`` added (2 lines).

    The App hears reviews; the receiver starts empty.
    """
    admin.update_app(hooked.app_id, events=REVIEW_EVENTS)
    admin.commit(FULL, "main", {"long.txt": _text(LINES)})
    changed = list(LINES)
    changed[1], changed[17] = "line 2 changed", "line 18 changed"
    admin.commit(FULL, "feature", {"long.txt": _text(changed), "new.py": "a = 1\nb = 2\n"}, base="main")
    opened = admin.open_pull(FULL, head="feature", user="wes", title="Change")
    with hooked.api(hooked.token()) as api:
        opened["head_sha"] = api.get(f"/repos/{FULL}/pulls/1").json()["head"]["sha"]
    receiver.items.clear()
    return opened


def _api(world: World, **narrow: Any) -> httpx.Client:
    return world.api(world.token(**narrow))


def _path(template: str, **params: Any) -> str:
    return template.format(owner=OWNER, repo=REPO, pull_number=1, **params)


def _fits(method: str, template: str, response: httpx.Response) -> None:
    assert rest_errors(method, template, response.status_code, response.json()) == []


def _hooks(receiver: Receiver, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(event, action, payload) of the first ``count`` deliveries, each checked against its schema."""
    items = receiver.wait_for(count)
    assert len(items) == count, [i.event for i in items]
    out = []
    for item in items:
        event, action = item.event
        assert webhook_errors(event, item.body) == [], (event, action)
        out.append((event, str(action), item.body))
    return out


# -- a person's review ---------------------------------------------------------------------------


def test_a_persons_review_sends_the_review_then_each_comment(
    pull: dict[str, Any], admin: AdminClient, receiver: Receiver
) -> None:
    made = admin.review(
        FULL,
        1,
        user="maria",
        body="@baton-test please rename these",
        event="REQUEST_CHANGES",
        comments=[
            {"path": "long.txt", "line": 2, "body": "Call it two"},
            {"path": "new.py", "line": 2, "body": "And b?"},
        ],
    )
    assert made["state"] == "CHANGES_REQUESTED"
    assert [(d["event"], d["action"]) for d in made["deliveries"]] == [
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review_comment", "created"),
    ]
    (_, _, review), (_, _, first), (_, _, second) = _hooks(receiver, 3)
    assert review["review"]["state"] == "changes_requested"  # lower case in webhooks
    assert review["review"]["body"] == "@baton-test please rename these"  # a mention arrives as written
    assert review["review"]["user"]["login"] == review["sender"]["login"] == "maria"
    assert review["review"]["commit_id"] == pull["head_sha"]
    assert review["pull_request"]["number"] == 1
    assert "merged" not in review["pull_request"]  # GitHub's simple pull request
    assert [c["comment"]["id"] for c in (first, second)] == made["comments"]
    line = first["comment"]
    assert (line["path"], line["line"], line["side"], line["position"]) == ("long.txt", 2, "RIGHT", 3)
    assert line["diff_hunk"] == "@@ -1,5 +1,5 @@\n line 1\n-line 2\n+line 2 changed"
    assert line["pull_request_review_id"] == made["id"]
    assert "in_reply_to_id" not in line
    assert second["comment"]["diff_hunk"] == "@@ -0,0 +1,2 @@\n+a = 1\n+b = 2"


def test_the_review_as_the_rest_api_serves_it(
    hooked: World, pull: dict[str, Any], admin: AdminClient
) -> None:
    made = admin.review(
        FULL, 1, user="maria", event="APPROVE", comments=[{"path": "long.txt", "line": 18, "body": "nice"}]
    )
    with _api(hooked) as api:
        listed = api.get(_path(REVIEWS))
        one = api.get(_path(REVIEWS + "/{review_id}", review_id=made["id"]))
        its_comments = api.get(_path(REVIEWS + "/{review_id}/comments", review_id=made["id"]))
        all_comments = api.get(_path(PR_COMMENTS))
        comment = api.get(f"/repos/{FULL}/pulls/comments/{made['comments'][0]}")
        the_pull = api.get(_path(PULLS))
        missing = api.get(_path(REVIEWS + "/{review_id}", review_id=999999))
    _fits("GET", REVIEWS, listed)
    _fits("GET", REVIEWS + "/{review_id}", one)
    _fits("GET", REVIEWS + "/{review_id}/comments", its_comments)
    _fits("GET", PR_COMMENTS, all_comments)
    _fits("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", comment)
    review = one.json()
    assert (review["state"], review["body"], review["user"]["login"]) == ("APPROVED", "", "maria")
    assert review["author_association"] == "MEMBER"
    assert review["submitted_at"].endswith("Z")
    assert review["html_url"].endswith(f"/{FULL}/pull/1#pullrequestreview-{made['id']}")
    assert [r["id"] for r in listed.json()] == [made["id"]]
    assert (
        [c["id"] for c in its_comments.json()] == [c["id"] for c in all_comments.json()] == made["comments"]
    )
    assert (comment.json()["line"], comment.json()["original_line"]) == (18, 18)
    assert comment.json()["diff_hunk"].startswith("@@ -15,6 +15,6 @@")
    assert the_pull.json()["review_comments"] == 1
    assert missing.status_code == 404


# -- the App's review and replies ---------------------------------------------------------------------


def test_the_app_reviews_and_replies_in_a_thread(
    hooked: World, pull: dict[str, Any], admin: AdminClient, receiver: Receiver
) -> None:
    asked = admin.review_comment(FULL, 1, user="maria", path="long.txt", line=18, body="@baton-test why?")
    root = asked["id"]
    assert [(d["event"], d["action"]) for d in asked["deliveries"]] == [
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
    ]
    receiver.items.clear()
    with _api(hooked) as api:
        created = api.post(
            _path(REVIEWS),
            json={"body": "Looked at it", "event": "COMMENT",
                  "comments": [{"path": "new.py", "line": 1, "body": "fine"}]},
        )  # fmt: skip
        answer = api.post(
            _path(PR_COMMENTS + "/{comment_id}/replies", comment_id=root), json={"body": "Because."}
        )
        second = api.post(_path(PR_COMMENTS), json={"body": "And again.", "in_reply_to": root})
    assert created.status_code == 200  # GitHub answers a new review 200, not 201
    _fits("POST", REVIEWS, created)
    assert answer.status_code == second.status_code == 201
    _fits("POST", PR_COMMENTS + "/{comment_id}/replies", answer)
    _fits("POST", PR_COMMENTS, second)
    got = answer.json()
    assert got["in_reply_to_id"] == root
    assert (got["user"]["login"], got["user"]["type"]) == ("baton-test[bot]", "Bot")
    assert (got["path"], got["line"], got["side"]) == ("long.txt", 18, "RIGHT")
    assert got["pull_request_review_id"] not in {
        asked["review_id"],
        created.json()["id"],
    }  # a review of its own
    assert answer.headers["location"] == got["url"]
    hooks = _hooks(receiver, 6)
    assert [(e, a) for e, a, _ in hooks] == [
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review", "submitted"),
        ("pull_request_review_comment", "created"),
    ]
    reply_hook = hooks[3][2]
    assert reply_hook["comment"]["in_reply_to_id"] == root
    assert reply_hook["sender"]["login"] == "baton-test[bot]"


def test_a_reply_must_answer_the_threads_first_comment(
    hooked: World, pull: dict[str, Any], admin: AdminClient
) -> None:
    root = admin.review_comment(FULL, 1, user="maria", path="new.py", line=1, body="?")["id"]
    first = admin.reply_review_comment(FULL, 1, root, user="wes", body="!")
    assert first["in_reply_to_id"] == root
    with pytest.raises(AdminCallFailed) as refused:
        admin.reply_review_comment(FULL, 1, first["id"], user="maria", body="?!")
    assert refused.value.status == 422
    with _api(hooked) as api:
        unknown = api.post(
            _path(PR_COMMENTS + "/{comment_id}/replies", comment_id=999999), json={"body": "x"}
        )
        no_body = api.post(_path(PR_COMMENTS + "/{comment_id}/replies", comment_id=root), json={})
    assert unknown.status_code == 404
    assert no_body.status_code == 422
    assert no_body.json()["message"] == 'Invalid request.\n\n"body" wasn\'t supplied.'


# -- where a comment may go ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comment", "sentence"),
    [
        ({"path": "long.txt", "line": 10}, "Pull request review thread line must be part of the diff and "
                                           "Pull request review thread diff hunk can't be blank"),
        ({"path": "README.md", "line": 1}, "Pull request review thread path is invalid and "
                                           "Pull request review thread diff hunk can't be blank"),
        ({"path": "long.txt", "line": 10, "start_line": 9},
         "Pull request review thread line must be part of the diff, Pull request review thread start "
         "line must be part of the same hunk as the line., and Pull request review thread diff hunk "
         "can't be blank"),
        ({"path": "long.txt", "line": 18, "start_line": 2},
         "Pull request review thread start line must be part of the same hunk as the line."),
        ({"path": "long.txt", "line": 16, "start_line": 18},
         "Pull request review thread start line must precede the end line."),
        ({"path": "long.txt", "line": 3, "side": "LEFT"}, None),  # unchanged: shown on both sides
    ],
)  # fmt: skip
def test_a_review_comment_off_the_diff_is_refused_and_nothing_is_kept(
    hooked: World, pull: dict[str, Any], receiver: Receiver, comment: dict[str, Any], sentence: str | None
) -> None:
    with _api(hooked) as api:
        answer = api.post(
            _path(REVIEWS),
            json={"event": "COMMENT", "body": "b", "comments": [{**comment, "body": "here"}]},
        )
        reviews = api.get(_path(REVIEWS)).json()
    if sentence is None:
        assert answer.status_code == 200, answer.text
        return
    assert answer.status_code == 422
    _fits("POST", REVIEWS, answer)
    assert answer.json()["message"] == "Unprocessable Entity"
    assert answer.json()["errors"] == [sentence]
    assert reviews == []
    assert receiver.wait_for(1, timeout=0.3) == []


def test_a_single_comment_off_the_diff_gets_githubs_validation_errors(
    hooked: World, pull: dict[str, Any]
) -> None:
    head = pull["head_sha"]
    with _api(hooked) as api:
        off_line = api.post(
            _path(PR_COMMENTS), json={"body": "x", "commit_id": head, "path": "long.txt", "line": 9}
        )
        off_path = api.post(
            _path(PR_COMMENTS), json={"body": "x", "commit_id": head, "path": "nope", "line": 1}
        )
        base_sha = api.get(_path(PULLS)).json()["base"]["sha"]
        old = api.post(
            _path(PR_COMMENTS), json={"body": "x", "commit_id": base_sha, "path": "new.py", "line": 1}
        )
        missing = api.post(_path(PR_COMMENTS), json={"body": "x", "line": 1})
        deleted = api.post(
            _path(PR_COMMENTS),
            json={"body": "x", "commit_id": head, "path": "long.txt", "line": 2, "side": "LEFT"},
        )
    for answer in (off_line, off_path, old):
        assert answer.status_code == 422
        _fits("POST", PR_COMMENTS, answer)
        assert answer.json()["message"] == "Validation Failed"
    thread = "pull_request_review_thread"
    assert off_line.json()["errors"] == [
        {"resource": "PullRequestReviewComment", "code": "custom", "field": f"{thread}.line",
         "message": f"{thread}.line must be part of the diff"},
        {"resource": "PullRequestReviewComment", "code": "missing_field", "field": f"{thread}.diff_hunk"},
    ]  # fmt: skip
    assert [(e["code"], e["field"]) for e in off_path.json()["errors"]] == [
        ("invalid", f"{thread}.path"),
        ("missing_field", f"{thread}.diff_hunk"),
    ]
    assert old.json()["errors"][0]["field"] == f"{thread}.end_commit_oid"
    assert missing.status_code == 422
    assert missing.json()["message"] == 'Invalid request.\n\n"commit_id", "path" weren\'t supplied.'
    assert deleted.status_code == 201, deleted.text
    assert (deleted.json()["side"], deleted.json()["line"], deleted.json()["position"]) == ("LEFT", 2, 2)


# -- GitHub's other rules --------------------------------------------------------------------------


def test_a_pending_review_is_its_authors_alone(
    hooked: World, pull: dict[str, Any], receiver: Receiver
) -> None:
    with _api(hooked) as api:
        later = {"path": "new.py", "line": 1, "body": "later"}
        pending = api.post(_path(REVIEWS), json={"body": "draft", "comments": [later]})
        again = api.post(_path(REVIEWS), json={"body": "another draft"})
        mine = api.get(_path(REVIEWS)).json()
        in_pull = api.get(_path(PR_COMMENTS)).json()
    assert pending.status_code == 200
    _fits("POST", REVIEWS, pending)
    assert pending.json()["state"] == "PENDING"
    assert "submitted_at" not in pending.json()
    assert again.status_code == 422
    assert again.json()["errors"] == ["User can only have one pending review per pull request"]
    assert [r["id"] for r in mine] == [pending.json()["id"]]
    assert in_pull == []  # a pending review's comments are not shown
    others = httpx.get(f"{hooked.url}{_path(REVIEWS)}", timeout=10).json()  # anyone may read a public repo
    assert others == []
    assert receiver.wait_for(1, timeout=0.3) == []  # nothing is sent until it is submitted


def test_an_author_cannot_approve_or_reject_their_own_pull(pull: dict[str, Any], admin: AdminClient) -> None:
    for event, words in (
        ("APPROVE", "Can not approve your own pull request"),
        ("REQUEST_CHANGES", "Review Can not request changes on your own pull request"),
    ):
        with pytest.raises(AdminCallFailed) as refused:
            admin.review(FULL, 1, user="wes", body="mine", event=event)
        assert (refused.value.status, refused.value.body["errors"]) == (422, [words])
    assert admin.review(FULL, 1, user="wes", body="a note", event="COMMENT")["state"] == "COMMENTED"


def test_a_review_body_is_checked_as_github_checks_it(hooked: World, pull: dict[str, Any]) -> None:
    with _api(hooked) as api:
        bad_event = api.post(_path(REVIEWS), json={"body": "x", "event": "MERGE"})
        no_path = api.post(
            _path(REVIEWS), json={"body": "x", "event": "COMMENT", "comments": [{"body": "y"}]}
        )
        no_body = api.post(_path(REVIEWS), json={"event": "REQUEST_CHANGES"})
        approve = api.post(_path(REVIEWS), json={"event": "APPROVE"})  # no body needed
    assert bad_event.status_code == no_path.status_code == no_body.status_code == 422
    assert (
        bad_event.json()["message"]
        == "Invalid request.\n\nFor 'properties/event', \"MERGE\" is not a possible value."
    )
    assert no_path.json()["message"] == 'Invalid request.\n\n"path" wasn\'t supplied.'
    assert no_body.json()["message"] == "Unprocessable Entity"
    assert approve.status_code == 200
    assert approve.json()["state"] == "APPROVED"


def test_creating_needs_pull_requests_write_and_listing_read(hooked: World, pull: dict[str, Any]) -> None:
    with _api(hooked, permissions={"pull_requests": "read"}) as api:
        listed = api.get(_path(REVIEWS))
        create = api.post(_path(REVIEWS), json={"event": "COMMENT", "body": "x"})
        note = {"body": "x", "commit_id": pull["head_sha"], "path": "new.py", "line": 1}
        single = api.post(_path(PR_COMMENTS), json=note)
    assert listed.status_code == 200
    for refused in (create, single):
        assert refused.status_code == 403
        assert refused.json()["message"] == "Resource not accessible by integration"


def test_an_app_not_subscribed_to_reviews_hears_nothing(
    hooked: World, pull: dict[str, Any], admin: AdminClient, receiver: Receiver
) -> None:
    admin.update_app(hooked.app_id, events=["pull_request"])
    made = admin.review(
        FULL, 1, user="maria", body="ok", comments=[{"path": "new.py", "line": 1, "body": "y"}]
    )
    assert made["deliveries"] == []


def test_the_pulls_comments_are_sorted_and_filtered(
    hooked: World, pull: dict[str, Any], admin: AdminClient
) -> None:
    ids = [
        admin.review_comment(FULL, 1, user="maria", path="new.py", line=1, body=str(n))["id"]
        for n in range(3)
    ]
    with _api(hooked) as api:
        default = api.get(_path(PR_COMMENTS)).json()
        newest = api.get(_path(PR_COMMENTS), params={"sort": "created", "direction": "desc"}).json()
        paged = api.get(_path(PR_COMMENTS), params={"per_page": 2})
        future = api.get(_path(PR_COMMENTS), params={"since": "2999-01-01T00:00:00Z"}).json()
    assert [c["id"] for c in default] == ids
    assert [c["id"] for c in newest] == ids[::-1]
    assert [c["id"] for c in paged.json()] == ids[:2]
    assert 'rel="next"' in paged.headers["link"]
    assert future == []


# -- editing comments ------------------------------------------------------------------------------


def test_editing_a_comment_sends_issue_comment_edited(
    hooked: World, pull: dict[str, Any], admin: AdminClient, receiver: Receiver
) -> None:
    said = admin.comment(FULL, 1, "@baton-test first try", user="wes")
    receiver.items.clear()
    edited = admin.edit_comment(FULL, said["id"], body="@baton-test second try")
    assert [(d["event"], d["action"]) for d in edited["deliveries"]] == [("issue_comment", "edited")]
    ((_, _, payload),) = _hooks(receiver, 1)
    assert payload["changes"] == {"body": {"from": "@baton-test first try"}}
    assert payload["comment"]["body"] == "@baton-test second try"
    assert payload["sender"]["login"] == "wes"  # the author, unless another editor is named
    assert admin.edit_comment(FULL, said["id"], body="@baton-test second try")["deliveries"] == []
    by_maria = admin.edit_comment(FULL, said["id"], body="tidied", sender="maria")
    assert len(by_maria["deliveries"]) == 1
    with _api(hooked) as api:
        shown = api.get(f"/repos/{FULL}/issues/comments/{said['id']}")
    _fits("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", shown)
    assert shown.json()["body"] == "tidied"


def test_editing_a_review_comment_sends_its_edited_event(
    hooked: World, pull: dict[str, Any], admin: AdminClient, receiver: Receiver
) -> None:
    made = admin.review_comment(FULL, 1, user="maria", path="new.py", line=2, body="b?")
    receiver.items.clear()
    edited = admin.edit_review_comment(FULL, made["id"], body="b, really?")
    assert [(d["event"], d["action"]) for d in edited["deliveries"]] == [
        ("pull_request_review_comment", "edited")
    ]
    ((_, _, payload),) = _hooks(receiver, 1)
    assert payload["changes"] == {"body": {"from": "b?"}}
    with _api(hooked) as api:
        patched = api.patch(f"/repos/{FULL}/pulls/comments/{made['id']}", json={"body": "by the bot"})
    _fits("PATCH", "/repos/{owner}/{repo}/pulls/comments/{comment_id}", patched)
    assert patched.json()["body"] == "by the bot"
    assert _hooks(receiver, 2)[1][2]["sender"]["login"] == "baton-test[bot]"


def test_reviews_survive_a_restart(tmp_path: Path) -> None:
    with EmulatorServer(tmp_path / "github") as server:
        world = build_world(server)
        with AdminClient(server.url) as admin:
            admin.commit(FULL, "feature", {"new.py": "a = 1\n"})
            admin.open_pull(FULL, head="feature", user="wes")
            ok = {"path": "new.py", "line": 1, "body": "ok"}
            made = admin.review(FULL, 1, user="maria", event="APPROVE", comments=[ok])
        world.admin.close()
    with EmulatorServer(tmp_path / "github") as again:
        listed = httpx.get(f"{again.url}{_path(REVIEWS)}", timeout=10).json()
        comments = httpx.get(f"{again.url}{_path(PR_COMMENTS)}", timeout=10).json()
    assert [(r["id"], r["state"]) for r in listed] == [(made["id"], "APPROVED")]
    assert [c["id"] for c in comments] == made["comments"]
