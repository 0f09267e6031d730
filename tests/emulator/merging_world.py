"""Helpers for the merge tests: pulls with commits, the bare repository's own view, checked webhooks."""

from __future__ import annotations

import subprocess
from typing import Any

import httpx
from emulator_world import GIT_ENV, OWNER, REPO, World
from github_schemas import rest_errors, webhook_errors
from githubkit.webhooks import parse_obj
from webhook_receiver import Receiver

from emulator.admin.client import AdminClient

FULL = f"{OWNER}/{REPO}"
MERGE = "/repos/{owner}/{repo}/pulls/{pull_number}/merge"
PULL = "/repos/{owner}/{repo}/pulls/{pull_number}"
PULL_COMMITS = PULL + "/commits"
COMMIT = "/repos/{owner}/{repo}/commits/{ref}"
ISSUE = "/repos/{owner}/{repo}/issues/{issue_number}"
#: What the App hears in these tests.
EVENTS = ["issues", "issue_comment", "pull_request", "push"]


def path(template: str, number: int = 1, *, ref: str = "") -> str:
    return template.format(owner=OWNER, repo=REPO, pull_number=number, issue_number=number, ref=ref)


def fits(method: str, template: str, response: httpx.Response) -> None:
    """The answer is one GitHub's OpenAPI description allows for that status."""
    body = response.json() if response.content else None
    assert rest_errors(method, template, response.status_code, body) == [], response.text


def git(world: World, *args: str) -> str:
    """``git`` on the base repository's bare directory, as the emulator keeps it."""
    bare = world.server.directory / "repos" / OWNER / f"{REPO}.git"
    done = subprocess.run(["git", "--git-dir", str(bare), *args], env=GIT_ENV, capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    return done.stdout.strip()


def parents(world: World, ref: str) -> list[str]:
    return git(world, "rev-list", "--parents", "-n", "1", ref).split()[1:]


def tree(world: World, ref: str) -> dict[str, str]:
    """Every file at ``ref`` and its content."""
    names = git(world, "ls-tree", "-r", "--name-only", ref).splitlines()
    return {name: git(world, "show", f"{ref}:{name}") + "\n" for name in names}


def people(world: World, ref: str) -> tuple[str, str]:
    """(author, committer) of a commit, as ``Name <email>``."""
    author, committer = git(world, "log", "-1", "--format=%an <%ae>%n%cn <%ce>", ref).split("\n")
    return author, committer


def open_feature(
    admin: AdminClient,
    branch: str,
    commits: list[tuple[dict[str, str | None], str]],
    *,
    title: str = "Feature",
    body: str | None = None,
    base: str | None = None,
    user: str = "wes",
    sender: str = "wes",
) -> int:
    """A branch with ``commits`` (files, message) made by ``sender`` from ``base``, and a pull of it."""
    for files, message in commits:
        admin.commit(FULL, branch, files, message=message, base=base, sender=sender)
    return int(admin.open_pull(FULL, head=branch, user=user, title=title, body=body, base=base)["number"])


def hooks(receiver: Receiver, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(event, action, payload) of the first ``count`` deliveries, each checked against its schema
    and parsed by githubkit."""
    items = receiver.wait_for(count)
    assert len(items) == count, [i.event for i in items]
    out = []
    for item in items:
        event, action = item.event
        assert webhook_errors(event, item.body) == [], (event, action)
        parse_obj(event, item.body)  # type: ignore[call-overload]
        out.append((event, str(action or ""), item.body))
    return out
