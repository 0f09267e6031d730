"""Instructions on Baton's pull requests, and Baton called by name: what each becomes (routing only;
whether the person may, and whether the pull request is Baton's, the worker decides against GitHub)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.tasks import Command, Kind
from bot.routing import PULL_USAGE, Ignored, Routed, mentioned, route
from tests.conftest import example

SLUG = "baton-acme"
APP_ID = 4242


def _comment(body: str, *, on_pull: bool) -> dict[str, Any]:
    payload = example("issue_comment", "created")
    payload["comment"]["body"] = body
    payload["comment"].pop("performed_via_github_app", None)
    if on_pull:
        payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/7"}
    else:
        payload["issue"].pop("pull_request", None)
    return payload


def _route(event: str, payload: dict[str, Any], slug: str | None = SLUG) -> Routed | Ignored:
    return route(event, payload, app_id=APP_ID, app_slug=slug)


@pytest.mark.parametrize(
    ("body", "instruction"),
    [
        ("/baton rename the helper to parse_args", "rename the helper to parse_args"),
        (
            "/baton the test still fails:\n\n```\nAssertionError\n```",
            "the test still fails:\n\n```\nAssertionError\n```",
        ),
        (f"@{SLUG} please also update the README", "please also update the README"),
        (f"@{SLUG.upper()}\nkeep the old name as an alias", "keep the old name as an alias"),
    ],
)
def test_an_instruction_on_a_pull_request_is_an_iteration(body: str, instruction: str) -> None:
    routed = _route("issue_comment", _comment(body, on_pull=True))
    assert isinstance(routed, Routed)
    assert (routed.kind, routed.command) == (Kind.ITERATE, Command("iterate"))
    assert routed.untrusted.instruction == instruction
    assert routed.untrusted.comment_body == body


def test_cancel_keeps_its_meaning_on_a_pull_request_and_run_and_retry_are_answered() -> None:
    routed = _route("issue_comment", _comment("/baton cancel", on_pull=True))
    assert isinstance(routed, Routed)
    assert (routed.kind, routed.command, routed.untrusted.instruction) == (
        Kind.COMMAND,
        Command("cancel"),
        None,
    )
    for body in ("/baton retry", "/baton run researcher --offline"):
        # Failed before: a run on a pull request made branch baton/issue-<pull's number> and a pull
        # request "Fixes #<pull>" for it.
        routed = _route("issue_comment", _comment(body, on_pull=True))
        assert isinstance(routed, Routed)
        assert (routed.kind, routed.command) == (Kind.COMMAND, Command("invalid", error=PULL_USAGE))
    assert _route("issue_comment", _comment("/baton retry", on_pull=False)).command == Command("retry")  # type: ignore[union-attr]


def test_called_by_name_on_an_issue_runs_the_default_agent_with_the_instruction() -> None:
    routed = _route("issue_comment", _comment(f"@{SLUG} fix the flaky spinner test", on_pull=False))
    assert isinstance(routed, Routed)
    assert (routed.kind, routed.command) == (Kind.COMMAND, Command("run"))  # no agent named: the default
    assert routed.untrusted.instruction == "fix the flaky spinner test"


@pytest.mark.parametrize(
    "body",
    [
        f"> @{SLUG} fix the flaky spinner test\n\nI agree with this",  # quoting an earlier mention
        f"Thanks! cc @{SLUG} fix it",  # a mention further in is not a call
        f"@{SLUG}2 fix it",  # another account
        f"@{SLUG}",  # nothing asked
        f"@{SLUG}   \n  ",
        "/baton frobnicate",  # on an issue: answered with the usage, not run
    ],
)
def test_what_is_not_a_call_on_an_issue(body: str) -> None:
    routed = _route("issue_comment", _comment(body, on_pull=False))
    if body.startswith("/baton"):
        assert isinstance(routed, Routed)
        assert routed.command is not None
        assert routed.command.name == "invalid"
    else:
        assert isinstance(routed, Ignored), routed


def test_without_a_slug_a_mention_is_no_call_and_an_edit_never_is() -> None:
    assert isinstance(_route("issue_comment", _comment(f"@{SLUG} fix it", on_pull=False), slug=None), Ignored)
    edited = _comment(f"@{SLUG} fix it", on_pull=True)
    edited["action"] = "edited"
    assert isinstance(_route("issue_comment", edited), Ignored)
    assert mentioned(f"@{SLUG}\tdo it", SLUG) == "do it"


def test_a_review_of_a_baton_branch_is_an_iteration_carrying_the_review() -> None:
    payload = example("pull_request_review", "submitted", 1)
    payload["pull_request"]["head"]["ref"] = "baton/issue-12"
    payload["review"]["body"] = "/baton handle the empty list too"
    routed = _route("pull_request_review", payload)
    assert isinstance(routed, Routed)
    assert routed.kind is Kind.ITERATE
    assert routed.review_id == payload["review"]["id"]
    assert routed.number == payload["pull_request"]["number"]
    assert routed.head_sha == payload["pull_request"]["head"]["sha"]
    assert routed.untrusted.instruction == "/baton handle the empty list too"


def test_reviews_of_other_branches_and_baton_s_own_reviews_are_ignored() -> None:
    payload = example("pull_request_review", "submitted", 1)
    assert isinstance(_route("pull_request_review", payload), Ignored)  # a person's branch
    payload["pull_request"]["head"]["ref"] = "baton/issue-12"
    payload["review"]["user"]["login"] = f"{SLUG}[bot]"
    assert isinstance(_route("pull_request_review", payload), Ignored)
    dismissed = example("pull_request_review", "dismissed")
    dismissed["pull_request"]["head"]["ref"] = "baton/issue-12"
    assert isinstance(_route("pull_request_review", dismissed), Ignored)
