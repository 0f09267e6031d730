"""The pure parts of a follow-up: whose pull request, what a review asks, and the replies."""

from __future__ import annotations

from typing import Any

import pytest

from baton import calls
from worker.publish import REPLY_MARKER
from worker.runs import iteration
from worker.runs.iteration import Conversation, LineComment, Review

REPO_ID = 7
BOT = "baton[bot]"


def _pull(**change: Any) -> dict[str, Any]:
    pull: dict[str, Any] = {
        "number": 12,
        "state": "open",
        "user": {"login": BOT, "type": "Bot"},
        "head": {"ref": "baton/issue-3", "sha": "a" * 40, "repo": {"id": REPO_ID}},
    }
    for key, value in change.items():
        if key.startswith("head_"):
            pull["head"][key[5:]] = value
        else:
            pull[key] = value
    return pull


def test_baton_s_own_pull_request_names_its_issue() -> None:
    found = iteration.baton_pull(_pull(), repo_id=REPO_ID, bot_login=BOT)
    assert found == iteration.Pull(12, 3, "a" * 40, "baton/issue-3", True)
    closed = iteration.baton_pull(_pull(state="closed"), repo_id=REPO_ID, bot_login=BOT)
    assert isinstance(closed, iteration.Pull)
    assert not closed.open


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"head_ref": "feature/x"}, "not a branch Baton pushes"),
        ({"head_ref": "baton/issue-03"}, "not a branch Baton pushes"),
        ({"head_ref": "baton/issue-3/more"}, "not a branch Baton pushes"),
        ({"head_repo": {"id": 99}}, "in another repository (a fork)"),  # a fork's branch of that name
        ({"head_repo": None}, "in another repository (a fork)"),
        ({"user": {"login": "mallory", "type": "User"}}, "Baton did not open it"),
        ({"user": {"login": "other-app[bot]", "type": "Bot"}}, "Baton did not open it"),
        ({"head_sha": ""}, "no head commit"),
    ],
)
def test_a_pull_request_that_is_not_baton_s_says_why(change: dict[str, Any], why: str) -> None:
    found = iteration.baton_pull(_pull(**change), repo_id=REPO_ID, bot_login=BOT)
    assert isinstance(found, str)
    assert why in found


def _comment(cid: int, body: str, *, thread: int | None = None, line: int | None = 4) -> LineComment:
    return LineComment(cid, "src/app.py", line, None, body, thread if thread is not None else cid)


def test_a_review_calls_baton_in_its_body_or_any_line_comment() -> None:
    assert Review(1, "maria", "COMMENTED", "/baton tidy up").calls("baton")
    assert Review(1, "maria", "COMMENTED", "@Baton tidy up").calls("baton")
    assert Review(1, "maria", "COMMENTED", "", (_comment(5, "nit"), _comment(6, "/baton and here"))).calls(
        "baton"
    )
    assert not Review(1, "maria", "APPROVED", "Looks good, cc @baton").calls("baton")
    assert not Review(1, "maria", "COMMENTED", "> /baton quoted", (_comment(5, "nit"),)).calls("baton")
    assert calls.instruction("/baton ", "baton") is None  # nothing asked


def test_a_review_s_conversation_keeps_every_line_comment_and_its_body() -> None:
    lines = (_comment(5, "/baton rename"), _comment(6, "and this"))
    review = Review(9, "maria", "CHANGES_REQUESTED", "Please look at these", lines)
    asked = iteration.of_review(12, review, "baton")
    assert (asked.instruction, [c.id for c in asked.comments], asked.review_id) == (
        "Please look at these",
        [5, 6],
        9,
    )
    called = iteration.of_review(12, Review(9, "maria", "COMMENTED", "/baton fix these"), "baton")
    assert called.instruction == "fix these"


def test_each_piece_of_the_conversation_is_an_untrusted_input_by_digest() -> None:
    asked = Conversation(12, "maria", "fix it", (_comment(5, "here"),))
    assert [(i["name"], i["taint"]) for i in asked.inputs()] == [
        ("instruction on #12", ["untrustedInput"]), ("review comment 5 on #12", ["untrustedInput"]),
    ]  # fmt: skip
    assert "fix it" not in str(asked.inputs())
    assert Conversation.from_data(asked.to_data()) == asked


def test_one_reply_per_thread_saying_what_changed_or_why_not() -> None:
    asked = Conversation(12, "maria", None, (_comment(5, "a"), _comment(6, "b", thread=5),
                                            LineComment(7, "README.md", None, None, "c", 7)))  # fmt: skip
    pushed = iteration.replies(asked, task_id="t1", commit="c" * 40, changed=["src/app.py"], why_not="")
    assert [r.comment_id for r in pushed] == [5, 7]  # 6 is a reply in 5's thread
    assert "it changes `src/app.py`" in pushed[0].body
    assert "it leaves `README.md` as it was" in pushed[1].body
    assert all(r.body.endswith(REPLY_MARKER.format(task_id="t1")) for r in pushed)
    refused = iteration.replies(asked, task_id="t1", commit=None, changed=[], why_not="the policy said no.")
    assert all("Baton pushed nothing for this review: the policy said no." in r.body for r in refused)


def test_where_a_line_comment_points_in_words() -> None:
    assert _comment(1, "x").where() == "src/app.py line 4"
    assert LineComment(1, "a.py", 9, 7, "x", 1).where() == "a.py lines 7-9"
    assert "outdated" in _comment(1, "x", line=None).where()
