"""Who may make Baton speak or act: the sender's permission is the first call, and strangers get silence.

Each test plays the attack or the mistake as GitHub would deliver it (the
emulator's people act; Baton's endpoint stores; the worker runs) and checks
what a maintainer would see on the issue and what Baton spent at GitHub.
"""

from __future__ import annotations

from typing import Any

import pytest

from baton import records
from emulator import world
from tests.worker.conftest import Stage
from worker.messages import inert


def _calls_since(stage: Stage, mark: int) -> list[tuple[str, str]]:
    """The repository API calls Baton made after ``mark`` (token exchanges are the App's own)."""
    return [
        (r["method"], r["path"]) for r in stage.admin.requests()[mark:] if r["path"].startswith("/repos/")
    ]


def _deliver_comment(stage: Stage, number: int, body: str, user: str) -> dict[str, Any]:
    deliveries: list[dict[str, Any]] = stage.admin.comment(world.REPO, number, body, user=user)["deliveries"]
    return deliveries[-1]


def _permission_call(login: str) -> tuple[str, str]:
    return ("GET", f"/repos/{world.REPO}/collaborators/{login}/permission")


@pytest.mark.parametrize("command", ["/baton run claude-code", "/baton run researcher --offline",
                                     "/baton retry", "/baton cancel", "/baton frobnicate"])  # fmt: skip
@pytest.mark.parametrize("who", ["rita", "tia", "nobody"])
def test_a_stranger_command_gets_no_reply_and_costs_one_call(stage: Stage, who: str, command: str) -> None:
    number = stage.issue()
    accepted = stage.label(number, "claude-code", sender="maria")
    assert accepted["state"] == "queued"
    [before] = stage.baton_comments(number)

    delivery = _deliver_comment(stage, number, command, who)
    mark = len(stage.admin.requests())
    result = stage.run(delivery)

    assert result["state"] == "refused"
    assert _calls_since(stage, mark) == [_permission_call(who)]
    [after] = stage.baton_comments(number)
    assert (after["id"], after["body"]) == (before["id"], before["body"])  # not overwritten
    assert stage.rdb.hget(records.COUNTERS_KEY, "unauthorised_sender") == b"1"


def test_the_permission_is_the_first_call_of_every_trigger(stage: Stage) -> None:
    number = stage.issue()
    deliveries = [
        stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="maria")["deliveries"][-1],
        _deliver_comment(stage, number, "/baton run researcher", "wes"),
        _deliver_comment(stage, number, "/baton retry", "ada"),
        _deliver_comment(stage, number, "/baton cancel", "maria"),
    ]
    for delivery, login in zip(deliveries, ["maria", "wes", "ada", "maria"], strict=True):
        mark = len(stage.admin.requests())
        stage.run(delivery)
        calls = _calls_since(stage, mark)
        assert calls[0] == _permission_call(login), calls


def test_a_label_from_below_write_is_refused_without_reading_the_policy(stage: Stage) -> None:
    number = stage.issue()
    delivery = stage.admin.label(world.REPO, number, ["agent:claude-code"], sender="tia")["deliveries"][-1]
    mark = len(stage.admin.requests())
    result = stage.run(delivery)
    assert result["state"] == "refused"
    calls = _calls_since(stage, mark)
    assert calls[0] == _permission_call("tia")
    assert not [c for c in calls if "/contents/" in c[1] or c[1].endswith("/branches/main")]
    [comment] = stage.baton_comments(number)
    assert "`tia` has triage access" in comment["body"]


def test_a_writer_below_the_policy_minimum_is_told_why(tmp_path: Any, redis_url: str, rdb: Any) -> None:
    from tests.worker.conftest import make_stage

    strict = world.REPO_POLICY.replace("version: 1\n", "version: 1\ntrigger:\n  min_permission: maintain\n")
    for st in make_stage(tmp_path, redis_url, rdb, repo_policy=strict):
        number = st.issue()
        result = st.comment(number, "/baton run claude-code", user="wes")
        assert result["state"] == "refused"
        [comment] = st.baton_comments(number)
        assert "`wes` has write access; triggering Baton here needs maintain or higher" in comment["body"]


@pytest.mark.parametrize(
    "line",
    [
        "/baton run x`@ada[link](https://evil.example)`",
        "/baton run @ada",
        "/baton run [x](https://evil.example)",
        "/baton run Claude-Code",
        "/baton run <img/src=x>",
    ],
)
def test_a_command_naming_no_valid_agent_is_ignored_at_the_door(stage: Stage, line: str) -> None:
    number = stage.issue()
    delivery = _deliver_comment(stage, number, line, "maria")
    assert delivery["status_code"] == 202  # answered `ignored`: nothing was stored
    assert not stage.rdb.exists("rq:job:" + delivery["guid"], records.TASK_PREFIX + delivery["guid"])
    assert stage.baton_comments(number) == []


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        ("claude-code", "`claude-code`"),
        ("x`@ada[link](https://evil.example)`", "`` x`@ada[link](https://evil.example)` ``"),
        ("a\nb\u202e", "`a b`"),
        ("``", "``` `` ```"),
        ("", "` `"),
    ],
)
def test_user_text_is_quoted_inert(typed: str, shown: str) -> None:
    assert inert(typed) == shown


def test_quoted_text_never_escapes_its_code_span() -> None:
    """Whatever is typed, the quote is one code span: same backtick run at both ends, none longer inside."""
    for typed in ["`", "a`", "`a", "a``b", "```", "@ada", "[x](y)", "<b>", "a" * 500]:
        quoted = inert(typed)
        fence = quoted[: len(quoted) - len(quoted.lstrip("`"))]
        assert quoted.endswith(fence)
        inner = quoted[len(fence) : -len(fence)]
        assert fence not in inner
        assert "\n" not in quoted
        assert len(quoted) < 120


@pytest.mark.parametrize("how", ["unlabel", "close"])
@pytest.mark.parametrize(("who", "answered"), [("rita", False), ("nobody", False), ("maria", True)])
def test_cancels_by_unlabel_or_close_are_authorised_like_a_run(
    stage: Stage, how: str, who: str, answered: bool
) -> None:
    """Closing an issue needs only triage (its author may close it), so this is checked too."""
    number = stage.issue(user=who if who != "maria" else "rita")
    assert stage.label(number, "claude-code", sender="maria")["state"] == "queued"
    [before] = stage.baton_comments(number)
    if how == "unlabel":
        sent = stage.admin.unlabel(world.REPO, number, "agent:claude-code", sender=who)
    else:
        sent = stage.admin.close_issue(world.REPO, number, sender=who)
    mark = len(stage.admin.requests())
    result = stage.run(sent["deliveries"][-1])
    calls = _calls_since(stage, mark)
    assert calls[0] == _permission_call(who)
    if answered:
        assert result["state"] == "done"
    else:
        assert result["state"] == "refused"
        assert calls == [_permission_call(who)]
    [after] = stage.baton_comments(number)
    assert after["body"] == before["body"]
