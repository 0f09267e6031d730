"""`/baton split`: an umbrella issue's open task-list items become sub-issues, each run on its own.

A run started from a broad issue overlaps with whatever lands beside it, and is judged on work it
never did; a split makes the umbrella's units dispatchable. Steps, after the sender passed steps 1
to 3 like every command (``worker.handlers.command``):

  1. the umbrella, read fresh: its task list (``tasklist``) and the sub-issues GitHub already has;
  2. the umbrella's record (who split it, for which agent) is kept before anything is made, so the
     runs the labels start act for that person (``delegated``) and a retried split finds its work;
  3. for each open item with no sub-issue yet: a sub-issue whose body quotes the item as untrusted
     text (marked with the umbrella and the item's place), added to the umbrella with GitHub's
     sub-issues API, then labelled `agent:<name>`. The label's webhook starts the sub-issue's run
     through the normal path: the sender's permission (the person who split, checked again then),
     the gate, the issue's lock, the budgets and the waiting line. A ticked item, or one whose
     sub-issue is closed, is not run;
  4. the umbrella's status comment becomes the table of its sub-issues (``table``).

Nothing here branches on the items' text; it is copied, quoted, into the sub-issues.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from githubkit import GitHub

from baton import keys
from baton.tasks import Sender, Task
from worker import audit
from worker.context import Context
from worker.github import api
from worker.github.limits import MAX_SUB_ISSUES
from worker.messages import fenced
from worker.trigger import where
from worker.umbrella import tasklist

#: How long the umbrella's record is kept after its last change.
RECORD_TTL_S = 90 * 24 * 3600
#: The hidden line that ties a sub-issue to its umbrella and item: how a retried split finds the
#: sub-issues it made (an issue create whose answer was lost included).
MARKER = "<!-- baton:umbrella {umbrella} item {index} -->"
_MARKED = re.compile(r"<!-- baton:umbrella ([0-9]+) item ([0-9]+) -->")
#: GitHub caps an issue's title at 256 characters.
MAX_TITLE_CHARS = 256


@dataclass(frozen=True, slots=True)
class Umbrella:
    """What Baton keeps of a split: who asked, for which agent, and the sub-issue of each item."""

    number: int
    split_by: str
    agent: str
    offline: bool
    task_id: str  # the split's task: the umbrella's table is written as its status
    received_at: str
    subs: Mapping[int, int]  # item index -> sub-issue number
    #: sub-issue -> what the table says of it beside GitHub's state (a rejected claim's failed signal,
    #: "delivered by #n"), in Baton's words (``worker.umbrella.siblings``).
    notes: Mapping[int, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> bytes:
        data = {"number": self.number, "split_by": self.split_by, "agent": self.agent,
                "offline": self.offline, "task_id": self.task_id, "received_at": self.received_at,
                "subs": {str(k): v for k, v in sorted(self.subs.items())},
                "notes": {str(k): v for k, v in sorted(self.notes.items())}}  # fmt: skip
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Umbrella:
        data = orjson.loads(raw)
        subs = {int(k): int(v) for k, v in (data.get("subs") or {}).items()}
        notes = {int(k): str(v) for k, v in (data.get("notes") or {}).items()}
        return cls(int(data["number"]), str(data["split_by"]), str(data["agent"]), bool(data["offline"]),
                   str(data["task_id"]), str(data["received_at"]), subs, notes)  # fmt: skip


def umbrella_key(repo_id: int, number: int) -> str:
    return f"{keys.UMBRELLA_PREFIX}{repo_id}:{number}"


def parent_key(repo_id: int, sub: int) -> str:
    return f"{keys.UMBRELLA_OF_PREFIX}{repo_id}:{sub}"


def load(client: redis.Redis, repo_id: int, number: int) -> Umbrella | None:
    raw = client.get(umbrella_key(repo_id, number))
    return Umbrella.from_json(raw) if raw else None


def parent_of(client: redis.Redis, repo_id: int, sub: int) -> Umbrella | None:
    """The umbrella whose split made sub-issue ``sub``, if any."""
    raw = client.get(parent_key(repo_id, sub))
    return load(client, repo_id, int(raw)) if raw else None


def store(client: redis.Redis, repo_id: int, umbrella: Umbrella) -> None:
    """Keep the umbrella's record, and each sub-issue's way back to it."""
    with client.pipeline(transaction=True) as pipe:
        pipe.set(umbrella_key(repo_id, umbrella.number), umbrella.to_json(), ex=RECORD_TTL_S)
        for sub in umbrella.subs.values():
            pipe.set(parent_key(repo_id, sub), str(umbrella.number), ex=RECORD_TTL_S)
        pipe.execute()


def delegated(ctx: Context, task: Task, bot_login: str) -> Task:
    """A label Baton's own bot put on a sub-issue it split: the task, as asked by the person who split
    the umbrella (for that agent). Any other task is returned as it is (a bot, refused as usual)."""
    repo, _ = where(task)
    if task.number is None or task.sender.login != bot_login:
        return task
    umbrella = parent_of(ctx.redis, repo.id, task.number)
    if umbrella is None or umbrella.agent != task.agent or task.number not in umbrella.subs.values():
        return task
    audit.note(ctx.redis, task.installation_id, task.id, "delegated", by=bot_login, to=umbrella.split_by,
               umbrella=umbrella.number)  # fmt: skip
    return dataclasses.replace(task, sender=Sender(umbrella.split_by, "User"))


# -- the split itself ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Split:
    """What a split did: the umbrella's record, the items it made sub-issues for now, and why it made
    none of some (ticked, closed, over GitHub's limit)."""

    umbrella: Umbrella
    made: tuple[int, ...]
    skipped: tuple[str, ...]


def sub_issue_body(umbrella: int, item: tasklist.Item) -> str:
    """The item, quoted: a person's words (untrusted), in a block nothing inside can close."""
    return "\n".join([
        f"Part of #{umbrella}: item {item.index} of its task list, split by Baton.",
        "",
        fenced(item.text),
        "",
        MARKER.format(umbrella=umbrella, index=item.index),
    ])  # fmt: skip


def split(ctx: Context, task: Task, *, agent: str, offline: bool, bot_login: str) -> Split:
    """Steps 1 to 3 (the caller says who may and which agent). Idempotent: a split asked again, or
    retried after a worker died, makes a sub-issue only for an item that has none."""
    repo, installation = where(task)
    if task.number is None:
        raise ValueError("a split needs an issue")
    gh = ctx.need_github().for_repository(installation, repo.full_name, "split")
    base = f"{api.repo_path(repo.full_name)}/issues"
    issue = api.request(gh, "GET", f"{base}/{task.number}")
    items = tasklist.items(str(issue.get("body") or ""))
    known = load(ctx.redis, repo.id, task.number)
    subs = dict(known.subs) if known is not None else {}
    existing = _existing_subs(gh, base, task.number)  # GitHub's word: item index -> (number, open)
    for index, (number, _) in existing.items():
        subs.setdefault(index, number)
    umbrella = Umbrella(task.number, task.sender.login, agent, offline, task.id, task.received_at, subs)
    store(ctx.redis, repo.id, umbrella)  # before any label: the labelled runs act for this person
    made: list[int] = []
    skipped: list[str] = []
    lost: dict[str, tuple[int, int]] | None = None  # issues a lost create may have made, read once
    for item in items:
        if item.ticked:
            skipped.append(f"item {item.index} is ticked")
            continue
        if item.index in subs:
            continue
        if len(subs) >= MAX_SUB_ISSUES:
            skipped.append(f"item {item.index}: GitHub holds at most {MAX_SUB_ISSUES} sub-issues an issue")
            continue
        if lost is None:
            lost = _marked_issues(gh, base, task.number, bot_login)
        number = _make(gh, base, task.number, item, lost.get(MARKER.format(umbrella=task.number,
                                                                           index=item.index)))  # fmt: skip
        subs[item.index] = number
        umbrella = dataclasses.replace(umbrella, subs=dict(subs))
        store(ctx.redis, repo.id, umbrella)
        made.append(number)
    ticked = {i.index for i in items if i.ticked}
    for index, number in sorted(subs.items()):
        if index in ticked:
            continue
        if not existing.get(index, (number, True))[1]:
            skipped.append(f"#{number} (item {index}) is closed")
            continue
        _label(gh, base, number, agent)
    return Split(umbrella, tuple(made), tuple(skipped))


def _existing_subs(gh: GitHub[Any], base: str, number: int) -> dict[int, tuple[int, bool]]:
    """The umbrella's sub-issues that a split made (by their marker): item index -> (number, open)."""
    found: dict[int, tuple[int, bool]] = {}
    for sub in api.list_pages(gh, f"{base}/{number}/sub_issues", pages=MAX_SUB_ISSUES // 100 + 1):
        marked = _MARKED.search(str(sub.get("body") or ""))
        if marked is not None and int(marked.group(1)) == number:
            found.setdefault(int(marked.group(2)), (int(sub["number"]), sub.get("state") == "open"))
    return found


def _make(
    gh: GitHub[Any], base: str, umbrella: int, item: tasklist.Item, made: tuple[int, int] | None
) -> int:
    """One sub-issue for ``item`` (unless a create whose answer was lost ``made`` it), added to the
    umbrella."""
    if made is None:
        first = " ".join(item.title.split())
        title = f"#{umbrella} item {item.index}: {first}"[:MAX_TITLE_CHARS]
        created = api.request(gh, "POST", base, json={"title": title, "body": sub_issue_body(umbrella, item)})
        made = (int(created["number"]), int(created["id"]))
    number, issue_id = made
    api.request(gh, "POST", f"{base}/{umbrella}/sub_issues", json={"sub_issue_id": issue_id})
    return number


def _marked_issues(gh: GitHub[Any], base: str, umbrella: int, bot_login: str) -> dict[str, tuple[int, int]]:
    """The App's issues marked as items of ``umbrella``: marker -> (number, id)."""
    found: dict[str, tuple[int, int]] = {}
    for issue in api.list_pages(gh, base, params={"creator": bot_login, "state": "all"}):
        marked = _MARKED.search(str(issue.get("body") or ""))
        if marked is not None and int(marked.group(1)) == umbrella and "pull_request" not in issue:
            found.setdefault(marked.group(0), (int(issue["number"]), int(issue["id"])))
    return found


def _label(gh: GitHub[Any], base: str, number: int, agent: str) -> None:
    """The sub-issue labelled for the agent (a label it has already is left as it is: no second run)."""
    labels = api.request(gh, "GET", f"{base}/{number}/labels")
    if any(isinstance(lab, dict) and lab.get("name") == f"agent:{agent}" for lab in labels):
        return
    api.request(gh, "POST", f"{base}/{number}/labels", json={"labels": [f"agent:{agent}"]})
