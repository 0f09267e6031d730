"""The umbrella's status comment: one row per sub-issue, read fresh each time it is written.

Each row says what GitHub has now (the sub-issue open or closed, its pull request, the
``baton/merge-gate`` conclusion on that pull request's current head) and what Baton is doing with
it (its last task's state), and why a sibling's claim to be done was rejected, if one was. The
table is written as the split's own status (its task id and arrival), so whichever task rewrites
it, it is one comment, rendered from what was read just before (``refresh``); two refreshes of one
umbrella take turns under a lock, so an older read never lands over a newer one.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from githubkit import GitHub

from baton import keys, records
from baton.errors import BatonError
from worker import lifecycle, locks
from worker.gates import evaluate as gates
from worker.github import api
from worker.github.client import GitHubApp
from worker.lifecycle import State
from worker.messages import inert
from worker.publish import Publication, write_status
from worker.status import Status, render
from worker.umbrella.split import Umbrella, load

log = logging.getLogger("baton.umbrella")

#: A refresh holds the umbrella's table for at most this long (its GitHub reads are time-bounded);
#: the next waits this long for it.
LOCK_MS = 30_000
WAIT_S = 30.0
#: Rows' titles are the sub-issues' (the items' text): quoted, and cut this short.
TITLE_CHARS = 80


@dataclass(frozen=True, slots=True)
class Row:
    item: int
    number: int
    title: str  # the sub-issue's title: untrusted
    issue: str  # "open" | "closed" | "missing"
    run: str  # Baton's last task on it: its state, or "" for none
    pull: int | None = None
    pull_state: str = ""  # "open" | "merged" | "closed"
    gate: str = ""  # ``baton/merge-gate`` on the pull request's head now: its conclusion, "" for none
    note: str = ""  # Baton's words: a rejected claim's failed signal, "delivered by #n"


def rows_markdown(rows: Sequence[Row]) -> list[str]:
    """The table: every cell Baton's words, or quoted inert (titles, states), never raw."""
    lines = ["| item | sub-issue | state | pull request | merge gate | notes |", "|---|---|---|---|---|---|"]
    for row in rows:
        pull = f"#{row.pull} ({row.pull_state})" if row.pull is not None else "—"
        title = inert(" ".join(row.title.split()), TITLE_CHARS)
        state = row.issue + (f", Baton: {inert(row.run)}" if row.run else "")
        gate = inert(row.gate) if row.gate else "—"
        lines.append(f"| {row.item} | #{row.number} {title} | {state} | {pull} | {gate} | {row.note} |")
    return lines


def status(umbrella: Umbrella, rows: Sequence[Row], skipped: Sequence[str] = ()) -> Status:
    """The umbrella's status: the table, and what the split left out."""
    done = sum(1 for r in rows if r.pull_state == "merged" or r.issue == "closed")
    summary = "\n".join([
        f"Split into {len(rows)} sub-issue(s) for {inert(umbrella.agent)}, asked by "
        f"{inert(umbrella.split_by)}; {done} done. Each runs on its own (the usual checks, budgets and "
        "waiting line); this table changes as they do.",
        "",
        *rows_markdown(rows),
    ])  # fmt: skip
    return Status(
        State.DONE,
        umbrella.task_id,
        umbrella.agent,
        summary,
        details=tuple(skipped),
        headline="🧩 Split into sub-issues",
        next_steps=(
            "Comment `/baton split` again after editing the task list: only new items become sub-issues.",
        ),
    )


def gather(
    cache: redis.Redis, gh: GitHub[Any], full_name: str, umbrella: Umbrella, *, repo_id: int
) -> list[Row]:
    """One row per sub-issue, read now from GitHub (and Baton's own record of its last task)."""
    base = api.repo_path(full_name)
    owner = full_name.split("/", 1)[0]
    rows: list[Row] = []
    for item, number in sorted(umbrella.subs.items()):
        try:
            issue = api.request(gh, "GET", f"{base}/issues/{number}")
        except BatonError:
            rows.append(Row(item, number, "", "missing", _run_state(cache, repo_id, number)))
            continue
        pulls = api.request(gh, "GET", f"{base}/pulls", params={"head": f"{owner}:baton/issue-{number}",
                                                                  "state": "all"})  # fmt: skip
        pull = pulls[0] if pulls else None
        gate = ""
        if pull is not None and pull.get("state") == "open":
            gate = _gate(gh, base, str(pull["head"]["sha"]))
        state = "" if pull is None else "merged" if pull.get("merged_at") else str(pull.get("state"))
        rows.append(Row(item, number, str(issue.get("title") or ""), str(issue.get("state") or ""),
                        _run_state(cache, repo_id, number), int(pull["number"]) if pull else None,
                        state, gate, umbrella.notes.get(number, "")))  # fmt: skip
    return rows


def _gate(gh: GitHub[Any], base: str, sha: str) -> str:
    found = api.request(gh, "GET", f"{base}/commits/{sha}/check-runs", params={"check_name": gates.CHECK})
    runs = sorted(found.get("check_runs") or [], key=lambda r: int(r.get("id") or 0))
    if not runs:
        return ""
    newest = runs[-1]
    return str(newest.get("conclusion") or newest.get("status") or "")


def _run_state(client: redis.Redis, repo_id: int, number: int) -> str:
    """The state of the task that last wrote the sub-issue's status comment."""
    writer = client.hget(f"{keys.ISSUE_PREFIX}{repo_id}:{number}", "task_id")
    if writer is None:
        return ""
    state = lifecycle.current(client, records.text(writer))
    return "" if state is None else str(state)


def refresh(
    app: GitHubApp, cache: redis.Redis, app_id: int | None, pub_repo: tuple[str, int, int], number: int,
) -> str | None:  # fmt: skip
    """Read the umbrella's rows now and write its table, after any refresh in progress (which may
    have read before this change); best effort: the next change writes it again. ``pub_repo``: (full
    name, repository id, installation). None: ``number`` is no umbrella, or the table stayed held."""
    full_name, repo_id, installation = pub_repo
    umbrella = load(cache, repo_id, number)
    if umbrella is None:
        return None
    lock, token = f"{keys.UMBRELLA_LOCK_PREFIX}{repo_id}:{number}", secrets.token_hex(8)
    deadline = time.monotonic() + WAIT_S
    while not locks.take(cache, lock, token, LOCK_MS):  # another refresh may have read before this change
        if time.monotonic() > deadline:
            log.warning("umbrella table not written now: another refresh holds it", extra={"issue": number})
            return None
        time.sleep(0.1)
    try:
        gh = app.for_repository(installation, full_name, "umbrella")
        rows = gather(cache, gh, full_name, umbrella, repo_id=repo_id)
        pub = Publication(umbrella.task_id, umbrella.received_at, installation, full_name, repo_id, number,
                          render(status(umbrella, rows)))  # fmt: skip
        return write_status(gh, cache, pub, app_id)
    except BatonError as exc:
        log.warning("umbrella table not written now", extra={"issue": number, "error": exc.code})
        return None
    finally:
        locks.release(cache, lock, token)


def after_publication(
    app: GitHubApp, cache: redis.Redis, app_id: int | None
) -> Callable[[Publication], None]:
    """What follows a publication on GitHub (``worker.publish.publisher``'s ``after``): the table of the
    umbrella it concerns, if any: a sub-issue's status, or the checks of a sub-issue's pull request."""

    def follow(pub: Publication) -> None:
        if pub.number is None:
            return
        sub = pub.number
        if pub.comment is None:  # check runs only: of a pull request Baton opened for a sub-issue?
            found = cache.get(f"{keys.UMBRELLA_PULL_PREFIX}{pub.repo_id}:{pub.number}")
            if found is None:
                return
            sub = int(records.text(found))
        parent = cache.get(f"{keys.UMBRELLA_OF_PREFIX}{pub.repo_id}:{sub}")
        if parent is not None:
            refresh(
                app,
                cache,
                app_id,
                (pub.full_name, pub.repo_id, pub.installation_id),
                int(records.text(parent)),
            )

    return follow
