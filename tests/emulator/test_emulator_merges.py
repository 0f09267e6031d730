"""Merging pull requests on the emulator, checked against GitHub's own schemas and the bare repository.

The App (or a person) merges by each of GitHub's three methods; every answer is checked
against the OpenAPI description, every webhook against the webhook schemas and githubkit, and
the base branch is read back with git. The refusals and closing keywords are in
``test_emulator_merges_rules.py``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from emulator_world import World, build_world
from merging_world import (
    COMMIT,
    EVENTS,
    FULL,
    ISSUE,
    MERGE,
    PULL,
    PULL_COMMITS,
    fits,
    git,
    hooks,
    open_feature,
    parents,
    path,
    people,
    tree,
)
from webhook_receiver import Receiver

from emulator import EmulatorServer
from emulator.admin.client import AdminClient

GITHUB = "GitHub <noreply@github.com>"


@pytest.fixture
def heard(hooked: World, admin: AdminClient, receiver: Receiver) -> World:
    """The hooked world, its App hearing pushes too; the receiver starts empty."""
    admin.update_app(hooked.app_id, events=EVENTS)
    receiver.items.clear()
    return hooked


def _bot(world: World) -> str:
    with world.api(world.token()) as api:
        bot = api.get("/users/baton-test[bot]").json()
    return f"baton-test[bot] <{bot['id']}+baton-test[bot]@users.noreply.github.com>"


def _two_commit_pull(
    world: World, admin: AdminClient, branch: str = "feature", **extra: str
) -> tuple[int, str]:
    """A pull of two commits on ``branch``; the base moves on meanwhile (no fast-forward is possible).
    Answers its number and head."""
    number = open_feature(
        admin, branch, [({"a.txt": "a\n"}, "Add a\n\nThe first half."), ({"b.txt": "b\n"}, "Add b")], **extra
    )
    admin.commit(FULL, "main", {"c.txt": "c\n"}, message="Meanwhile on main")
    return number, git(world, "rev-parse", branch)


# -- the three methods ----------------------------------------------------------------------------


def test_a_merge_commit_has_two_parents_and_the_merger_as_author(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    number, head = _two_commit_pull(heard, admin)
    base_before = git(heard, "rev-parse", "main")
    receiver.items.clear()
    with heard.api(heard.token()) as api:
        merged = api.put(path(MERGE, number), json={"sha": head})
        check = api.get(path(MERGE, number))
        pull = api.get(path(PULL, number))
        commit = api.get(path(COMMIT, ref=merged.json()["sha"]))
    assert merged.status_code == 200
    fits("PUT", MERGE, merged)
    assert merged.json()["merged"] is True
    assert merged.json()["message"] == "Pull Request successfully merged"
    sha = merged.json()["sha"]
    assert git(heard, "rev-parse", "main") == sha
    assert parents(heard, sha) == [base_before, head]
    assert (
        git(heard, "log", "-1", "--format=%B", sha)
        == f"Merge pull request #{number} from acme/feature\n\nFeature"
    )
    assert people(heard, sha) == (_bot(heard), GITHUB)
    assert tree(heard, "main") == {**tree(heard, base_before), "a.txt": "a\n", "b.txt": "b\n"}
    assert check.status_code == 204
    assert check.content == b""
    fits("GET", PULL, pull)
    shown = pull.json()
    assert (shown["state"], shown["merged"], shown["merge_commit_sha"]) == ("closed", True, sha)
    assert shown["merged_by"]["login"] == "baton-test[bot]"
    assert shown["merged_at"] == shown["closed_at"]
    assert (shown["head"]["sha"], shown["base"]["sha"]) == (head, base_before)  # as they were at the merge
    assert (shown["commits"], shown["changed_files"]) == (2, 2)  # still the pull's own
    fits("GET", COMMIT, commit)
    assert commit.json()["committer"]["login"] == "web-flow"  # GitHub's account for its own commits
    assert commit.json()["author"]["login"] == "baton-test[bot]"


def test_a_squash_is_one_commit_with_the_combined_change(heard: World, admin: AdminClient) -> None:
    number, head = _two_commit_pull(heard, admin, title="Two halves")
    base_before = git(heard, "rev-parse", "main")
    with heard.api(heard.token()) as api:
        merged = api.put(path(MERGE, number), json={"merge_method": "squash"})
        listed = api.get(path(PULL_COMMITS, number))
    fits("PUT", MERGE, merged)
    sha = merged.json()["sha"]
    assert parents(heard, sha) == [base_before]
    assert git(heard, "rev-list", "--count", f"{base_before}..main") == "1"
    assert git(heard, "diff", "--name-only", base_before, sha).split() == ["a.txt", "b.txt"]
    assert git(heard, "log", "-1", "--format=%B", sha) == (
        f"Two halves (#{number})\n\n* Add a\n\nThe first half.\n\n* Add b"
    )
    wes = admin.call("GET", "/state")["users"]
    wes_id = next(u["id"] for u in wes if u["login"] == "wes")
    assert people(heard, sha) == (f"wes <{wes_id}+wes@users.noreply.github.com>", GITHUB)  # the pull's author
    on = git(heard, "branch", "--format=%(refname:short)", "--contains", head)
    assert on == "feature"  # the head's commits are on no branch but its own
    fits("GET", PULL_COMMITS, listed)
    assert [c["sha"] for c in listed.json()][-1] == head  # a merged pull still lists its commits


def test_a_squash_of_one_commit_takes_its_message_and_the_callers_words_win(
    heard: World, admin: AdminClient
) -> None:
    one = open_feature(admin, "one", [({"a.txt": "a\n"}, "Add a\n\nWhy a.")])
    two = open_feature(admin, "two", [({"b.txt": "b\n"}, "Add b")])
    with heard.api(heard.token()) as api:
        first = api.put(path(MERGE, one), json={"merge_method": "squash"}).json()["sha"]
        second = api.put(
            path(MERGE, two),
            json={"merge_method": "squash", "commit_title": "B!", "commit_message": "Because."},
        ).json()["sha"]
    assert git(heard, "log", "-1", "--format=%B", first) == f"Add a (#{one})\n\nWhy a."
    assert git(heard, "log", "-1", "--format=%B", second) == "B!\n\nBecause."


def test_a_rebase_replays_each_commit_with_its_author_and_github_as_committer(
    heard: World, admin: AdminClient
) -> None:
    number, _ = _two_commit_pull(heard, admin)
    admin.push_to_pull(FULL, number, {"d.txt": "d\n"}, sender="wes", message="Add d")
    head = git(heard, "rev-parse", "feature")
    base_before = git(heard, "rev-parse", "main")
    originals = git(heard, "log", "--reverse", "--format=%an <%ae>|%at|%s", f"{base_before}..{head}").split(
        "\n"
    )
    with heard.api(heard.token()) as api:
        merged = api.put(path(MERGE, number), json={"merge_method": "rebase", "commit_title": "ignored"})
    fits("PUT", MERGE, merged)
    sha = merged.json()["sha"]
    assert sha == git(heard, "rev-parse", "main")
    replayed = git(heard, "log", "--reverse", "--format=%an <%ae>|%at|%s", f"{base_before}..main").split("\n")
    assert replayed == originals  # authors, dates and messages kept, in order
    committers = git(heard, "log", "--format=%cn <%ce>", f"{base_before}..main").split("\n")
    assert committers == [GITHUB] * 3
    assert git(heard, "rev-list", "--merges", f"{base_before}..main") == ""  # linear
    assert git(heard, "merge-base", "--is-ancestor", base_before, "main") == ""
    assert sha != head  # new commits, even where the base had not moved
    assert tree(heard, "main") == {**tree(heard, base_before), "a.txt": "a\n", "b.txt": "b\n", "d.txt": "d\n"}


def test_a_rebase_onto_an_unmoved_base_still_makes_new_commits(heard: World, admin: AdminClient) -> None:
    number = open_feature(admin, "quick", [({"a.txt": "a\n"}, "Add a")])
    head = git(heard, "rev-parse", "quick")
    with heard.api(heard.token()) as api:
        sha = api.put(path(MERGE, number), json={"merge_method": "rebase"}).json()["sha"]
    assert sha != head
    assert parents(heard, sha) == parents(heard, head)
    assert people(heard, sha)[1] == GITHUB


# -- webhooks -------------------------------------------------------------------------------------


def test_a_merge_sends_push_then_closed_with_merged(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    number, head = _two_commit_pull(heard, admin)
    base_before = git(heard, "rev-parse", "main")
    receiver.items.clear()
    with heard.api(heard.token()) as api:
        sha = api.put(path(MERGE, number)).json()["sha"]
    (push_event, _, push), (event, action, closed) = hooks(receiver, 2)
    assert (push_event, event, action) == ("push", "pull_request", "closed")
    assert (push["ref"], push["before"], push["after"]) == ("refs/heads/main", base_before, sha)
    assert push["forced"] is False
    assert [c["message"].split("\n")[0] for c in push["commits"]] == [
        "Add a",
        "Add b",
        f"Merge pull request #{number} from acme/feature",
    ]
    assert push["head_commit"]["id"] == sha
    pull = closed["pull_request"]
    assert (pull["state"], pull["merged"], pull["merge_commit_sha"]) == ("closed", True, sha)
    assert pull["merged_by"]["login"] == closed["sender"]["login"] == "baton-test[bot]"
    assert pull["merged_at"] is not None
    assert pull["head"]["sha"] == head


def test_a_person_merges_and_is_the_sender(heard: World, admin: AdminClient, receiver: Receiver) -> None:
    number, _ = _two_commit_pull(heard, admin)
    receiver.items.clear()
    answer = admin.merge_pull(FULL, number, sender="maria", method="squash")
    assert answer["merged"] is True
    assert [(d["event"], d["action"]) for d in answer["deliveries"]] == [
        ("push", None),
        ("pull_request", "closed"),
    ]
    (_, _, push), (_, _, closed) = hooks(receiver, 2)
    assert push["pusher"]["name"] == "maria"
    assert closed["sender"]["login"] == closed["pull_request"]["merged_by"]["login"] == "maria"
    with heard.api(heard.token()) as api:
        assert api.get(path(MERGE, number)).status_code == 204
        issue = api.get(path(ISSUE, number))
    fits("GET", ISSUE, issue)
    assert issue.json()["pull_request"]["merged_at"] == closed["pull_request"]["merged_at"]
    assert issue.json()["state"] == "closed"


def test_a_pull_from_a_fork_merges_its_commits_into_the_base(
    heard: World, admin: AdminClient, receiver: Receiver
) -> None:
    admin.create_user("mallory")
    admin.fork(FULL, "mallory")
    admin.commit("mallory/widgets", "patch", {"m.txt": "m\n"}, message="From a fork")
    number = admin.open_pull(FULL, head="mallory:patch", user="mallory", title="Outside help")["number"]
    receiver.items.clear()
    answer = admin.merge_pull(FULL, number, sender="ada")
    sha = answer["sha"]
    assert git(heard, "log", "-1", "--format=%s", sha) == f"Merge pull request #{number} from mallory/patch"
    assert git(heard, "show", "main:m.txt") == "m"
    (_, _, push), (_, _, closed) = hooks(receiver, 2)
    assert push["repository"]["full_name"] == FULL
    assert closed["pull_request"]["head"]["repo"]["full_name"] == "mallory/widgets"


def test_the_merge_survives_a_restart(tmp_path: Path) -> None:
    with EmulatorServer(tmp_path / "github") as server:
        world = build_world(server)
        with AdminClient(server.url) as admin:
            number, _ = _two_commit_pull(world, admin)
            sha = admin.merge_pull(FULL, number, sender="maria")["sha"]
        world.admin.close()
    with EmulatorServer(tmp_path / "github") as again:
        pull = httpx.get(f"{again.url}{path(PULL, number)}", timeout=10).json()
        check = httpx.get(f"{again.url}{path(MERGE, number)}", timeout=10)
    assert (pull["merged"], pull["merge_commit_sha"], pull["merged_by"]["login"]) == (True, sha, "maria")
    assert (pull["commits"], pull["changed_files"]) == (2, 2)
    assert check.status_code == 204
