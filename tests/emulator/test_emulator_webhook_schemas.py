"""Every webhook the emulator sends fits ``@octokit/webhooks-schemas``, made by people's actions.

Each payload here comes from an action on the emulator's state (a maintainer closing an
issue, reopening a pull, re-running checks, changing an installation's repositories), not
from a hand-written body, and is checked against the vendored schema of its event and action
(see ``github_schemas.py`` for the few properties GitHub sends that the schema predates).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World
from github_schemas import webhook_errors
from webhook_receiver import Receiver

FULL = f"{OWNER}/{REPO}"


def _payloads(world: World, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """(event, payload) of every delivery recorded after the delivery id ``since``."""
    listed = httpx.get(f"{world.url}/_emulator/deliveries", timeout=10).json()
    out = []
    for item in listed:
        if item["id"] > since:
            full = httpx.get(f"{world.url}/_emulator/deliveries/{item['id']}", timeout=10).json()
            out.append((item["event"], full["payload"]))
    return out


def _last_id(world: World) -> int:
    listed = httpx.get(f"{world.url}/_emulator/deliveries", timeout=10).json()
    return max((d["id"] for d in listed), default=0)


def _all_events(world: World) -> None:
    """Let the App hear every event, as Baton's manifest asks for more than the test world's four."""
    httpx.patch(f"{world.url}/_emulator/apps/{world.app_id}", json={"events": []}, timeout=10)


def _assert_fit(payloads: list[tuple[str, dict[str, Any]]], wanted: set[tuple[str, str]]) -> None:
    seen = {(event, str(p.get("action", ""))) for event, p in payloads}
    assert wanted <= seen, f"missing {wanted - seen}"
    failures = {f"{event}.{p.get('action')}": webhook_errors(event, p) for event, p in payloads}
    assert {k: v for k, v in failures.items() if v} == {}


def test_issue_and_pull_actions_fit_the_schemas(hooked: World, receiver: Receiver) -> None:
    """A maintainer closes an issue; a pull is opened as a draft, marked ready, closed, reopened, pushed to.

    Failed before: ``base.repo`` and ``head.repo`` of every ``pull_request`` payload lacked
    ``custom_properties``.
    """
    _all_events(hooked)
    hooked.post(f"/repos/{FULL}/issues", {"title": "x", "user": "rita", "labels": ["agent:claude-code"]})
    hooked.post(f"/repos/{FULL}/issues/1/comments", {"body": "@baton-test please", "user": "wes"})
    hooked.post(f"/repos/{FULL}/issues/1/close", {"sender": "maria"})
    hooked.post(f"/repos/{FULL}/issues/1/reopen", {"sender": "maria"})
    hooked.post(f"/repos/{FULL}/commits", {"branch": "b", "files": {"a.txt": "a\n"}})
    hooked.post(f"/repos/{FULL}/pulls", {"title": "x", "user": "wes", "head": "b", "draft": True})
    hooked.post(f"/repos/{FULL}/pulls/2/ready_for_review", {"sender": "wes"})
    hooked.post(f"/repos/{FULL}/pulls/2/close", {"sender": "maria"})
    hooked.post(f"/repos/{FULL}/pulls/2/reopen", {"sender": "maria"})
    hooked.post(f"/repos/{FULL}/pulls/2/push", {"sender": "wes", "files": {"a.txt": "b\n"}})
    _assert_fit(
        _payloads(hooked),
        {
            ("issues", "opened"),
            ("issues", "labeled"),
            ("issue_comment", "created"),
            ("issues", "closed"),
            ("issues", "reopened"),
            ("pull_request", "opened"),
            ("pull_request", "ready_for_review"),
            ("pull_request", "closed"),
            ("pull_request", "reopened"),
            ("push", ""),
            ("pull_request", "synchronize"),
        },
    )


def test_pull_request_repositories_carry_custom_properties(hooked: World, receiver: Receiver) -> None:
    hooked.admin.post("/_emulator/repos", json={"owner": OWNER, "name": "props", "files": {"a": "a\n"},
                                                 "custom_properties": {"team": "core"}})  # fmt: skip
    hooked.post(f"/repos/{OWNER}/props/commits", {"branch": "b", "files": {"a": "b\n"}})
    opened = hooked.post(f"/repos/{OWNER}/props/pulls", {"title": "x", "user": "wes", "head": "b"})
    (event, payload) = _payloads(hooked, opened["deliveries"][0]["id"] - 1)[0]
    assert event == "pull_request"
    pull = payload["pull_request"]
    assert pull["base"]["repo"]["custom_properties"] == {"team": "core"}
    assert pull["head"]["repo"]["custom_properties"] == {"team": "core"}
    with hooked.api(hooked.token()) as api:  # the REST answer has none, as GitHub's has none
        rest = api.get(f"/repos/{OWNER}/props/pulls/1").json()
    assert "custom_properties" not in rest["base"]["repo"]


def test_check_run_and_suite_rerequests_fit_the_schemas(hooked: World, receiver: Receiver) -> None:
    _all_events(hooked)
    with hooked.api(hooked.token()) as api:
        run = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "gate", "head_sha": hooked.head_sha, "conclusion": "failure",
                  "output": {"title": "t", "summary": "s"}},
        ).json()  # fmt: skip
    since = _last_id(hooked)
    hooked.post(f"/check-runs/{run['id']}/rerequest", {"sender": "maria"})
    hooked.post(f"/check-suites/{run['check_suite']['id']}/rerequest", {"sender": "maria"})
    payloads = _payloads(hooked, since)
    _assert_fit(payloads, {("check_run", "rerequested"), ("check_suite", "rerequested")})
    suite = payloads[0][1]["check_run"]["check_suite"]
    assert (suite["status"], suite["conclusion"]) == ("completed", "failure")


@pytest.mark.parametrize("who", ["person", "app"])
def test_an_unfinished_check_run_is_not_rerequestable(hooked: World, receiver: Receiver, who: str) -> None:
    """Failed before: the rerequest went out with a suite ``in_progress``, which the schema refuses."""
    with hooked.api(hooked.token()) as api:
        run = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "gate", "head_sha": hooked.head_sha, "status": "in_progress"},
        ).json()
        done = api.post(
            f"/repos/{FULL}/check-runs",
            json={"name": "other", "head_sha": hooked.head_sha, "conclusion": "success",
                  "output": {"title": "t", "summary": "s"}},
        ).json()  # fmt: skip
        since = _last_id(hooked)
        for target in (run, done):  # the run itself, then a finished run of the unfinished suite
            if who == "person":
                answer = hooked.admin.post(
                    f"/_emulator/check-runs/{target['id']}/rerequest", json={"sender": "maria"}
                )
            else:
                answer = api.post(f"/repos/{FULL}/check-runs/{target['id']}/rerequest")
            assert answer.status_code == 422, answer.text
            assert "not rerequestable" in answer.json()["message"]
    assert _payloads(hooked, since) == []


def test_installation_repository_changes_fit_the_schemas(hooked: World, receiver: Receiver) -> None:
    since = _last_id(hooked)
    hooked.post(
        f"/installations/{hooked.installation_id}/repositories/removed", {"repositories": ["secret-sauce"]}
    )
    hooked.post(
        f"/installations/{hooked.installation_id}/repositories/added", {"repositories": ["secret-sauce"]}
    )
    _assert_fit(
        _payloads(hooked, since),
        {("installation_repositories", "removed"), ("installation_repositories", "added")},
    )


def test_the_check_refuses_what_the_schema_refuses() -> None:
    """The checker itself: a payload GitHub would never send is caught, with the field named."""
    bad = {"action": "closed", "issue": {"number": "one"}, "repository": {}, "sender": {}, "surprise": 1}
    errors = webhook_errors("issues", bad)
    assert any(e.startswith("(top level)") and "surprise" in e for e in errors), errors
    assert any(e.startswith("issue/number") for e in errors), errors


def test_the_rest_check_refuses_what_the_description_refuses() -> None:
    """The REST checker itself: a review without its ``state`` or with a string id is caught."""
    from github_schemas import rest_errors

    template = "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"
    errors = rest_errors("GET", template, 200, {"id": "42", "node_id": "x", "user": None, "body": "",
                                                "commit_id": None, "html_url": "h", "pull_request_url": "p",
                                                "_links": {}, "author_association": "NONE"})  # fmt: skip
    assert any(e.startswith("(top level)") and "'state' is a required property" in e for e in errors), errors
    assert any(e.startswith("id:") for e in errors), errors
    assert not any(e.startswith("commit_id") for e in errors)  # nullable in the description


def test_the_other_events_fit_the_schemas(hooked: World, receiver: Receiver) -> None:
    """Edits, labels, drafts, button clicks, forks, suspensions and deletions, made by actions.

    Failed before: ``installation.suspend`` carried ``suspended_by`` null; GitHub names who
    suspended it. (``installation.created`` is left out: its ``requester`` is null, as GitHub's
    own OpenAPI description allows, and the community schema does not.)
    """
    from emulator.admin.client import AdminClient

    _all_events(hooked)
    with AdminClient(hooked.url) as admin:
        admin.create_issue(FULL, title="x", user="rita", labels=["bug"])
        admin.unlabel(FULL, 1, "bug", sender="maria")
        admin.commit(FULL, "b", {"a.txt": "a\n"})
        admin.open_pull(FULL, head="b", user="wes")
        with hooked.api(hooked.token()) as api:
            api.patch(f"/repos/{FULL}/pulls/2", json={"title": "new title", "body": "b"})
            api.post(f"/repos/{FULL}/issues/2/labels", json={"labels": ["x"]})
            said = api.post(f"/repos/{FULL}/issues/2/comments", json={"body": "hi"}).json()
            api.patch(f"/repos/{FULL}/issues/comments/{said['id']}", json={"body": "ho"})
            run = api.post(
                f"/repos/{FULL}/check-runs",
                json={"name": "g", "head_sha": hooked.head_sha, "conclusion": "success",
                      "output": {"title": "t", "summary": "s"},
                      "actions": [{"label": "L", "identifier": "i", "description": "d"}]},
            ).json()  # fmt: skip
        hooked.post(f"/check-runs/{run['id']}/requested-action", {"sender": "ada", "identifier": "i"})
        admin.convert_to_draft(FULL, 2, sender="wes")
        admin.create_user("mallory")
        admin.fork(FULL, "mallory")
        for action in ("suspend", "unsuspend"):
            hooked.post(f"/installations/{hooked.installation_id}/{action}", {"sender": "ada"})
        admin.delete_repo(f"{OWNER}/secret-sauce")
    payloads = _payloads(hooked)
    _assert_fit(
        payloads,
        {
            ("issues", "unlabeled"),
            ("pull_request", "edited"),
            ("pull_request", "labeled"),
            ("issue_comment", "edited"),
            ("check_run", "requested_action"),
            ("pull_request", "converted_to_draft"),
            ("fork", ""),
            ("installation", "suspend"),
            ("installation", "unsuspend"),
            ("repository", "deleted"),
        },
    )
    suspended = next(p for e, p in payloads if (e, p.get("action")) == ("installation", "suspend"))
    assert suspended["installation"]["suspended_by"]["login"] == "ada"


def test_the_vendored_schemas_hold_what_the_cutting_script_lists() -> None:
    """The fixtures were cut with the script's current lists (re-cut them when a list changes)."""
    import json
    import runpy
    from pathlib import Path

    from github_schemas import FIXTURES, openapi_webhooks, operations

    script = Path(__file__).resolve().parents[2] / "scripts" / "github_schemas.py"
    lists = runpy.run_path(str(script), run_name="cut")  # its lists, without running main()
    assert operations() == sorted((m.upper(), p) for m, p in lists["OPERATIONS"])
    assert openapi_webhooks() == sorted(lists["OPENAPI_WEBHOOKS"])
    definitions = json.loads((FIXTURES / "webhooks-schemas.json").read_text())["definitions"]
    assert {name.split("$", 1)[0] for name in definitions if "$" in name} == set(lists["EVENTS"])
