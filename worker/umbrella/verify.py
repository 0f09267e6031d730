"""Verify, then publish: a sub-issue's run, between its commit and its push, under its umbrella's lock.

Steps (``publish``), each round on state read just then (``check``):

  1. the umbrella's lock, one holder at a time across workers (leased, renewed while held; a run
     that cannot get it within ``LOCK_WAIT_S`` fails, saying so): no two runs of one umbrella
     verify and publish at once, so none publishes on a verification another has made stale;
  2. every sibling's claim to be done, judged on its three signals (``siblings.judge``); a rejected
     one is named on the umbrella's table;
  3. the base branch fetched again: if it moved onto files this run changed, the run's change is
     moved onto it (``git merge-tree``, outside the box like every git step on an agent's tree: no
     hooks, no configuration from the repository) and verified again from step 2; a conflict is
     reported and nothing is pushed; if the change is already on the base, nothing is pushed:
     "no changes needed, delivered by #n";
  4. the push and the pull request (``push``, ``open_pull``: the run's own steps), still holding
     the lock.

``before_run`` is the same check before any agent starts: a sub-issue a verified sibling already
delivered (its merged pull request closes it) is handed off without a run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from githubkit import GitHub

from baton import keys
from baton.errors import BatonError
from baton.tasks import Outcome, Task
from worker import audit, keepalive, locks
from worker.context import Context
from worker.gates import evaluate as gates
from worker.github import api
from worker.result import Result
from worker.runner import inspect, inspect_git
from worker.runs.mirror import Mirror, Remote
from worker.runs.record import Record
from worker.trigger import where
from worker.umbrella import siblings, split, tasklist
from worker.umbrella.siblings import Claim, Facts, Next

log = logging.getLogger("baton.umbrella")

#: The umbrella's lock: a lease renewed every LOCK_RENEW_S while held (a dead holder's lapses soon).
LOCK_MS = 30_000
LOCK_RENEW_S = 5.0
#: How long a run waits for a sibling's verify-and-publish to finish before it gives up.
LOCK_WAIT_S = 600.0
#: Rounds of verify (and move onto a base that moved) before a run gives up on a base that keeps moving.
ROUNDS = 3
#: GitHub's closing keywords ("Linking a pull request to an issue"): how a merged pull request names
#: the issues it delivers.
_CLOSES = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#([0-9]+)\b", re.IGNORECASE)


@contextlib.contextmanager
def held(ctx: Context, repo_id: int, umbrella: int, stop: threading.Event) -> Iterator[str]:
    """The umbrella's lock for the block (its token), renewed while the block runs."""
    key, token = f"{keys.UMBRELLA_VERIFY_PREFIX}{repo_id}:{umbrella}", secrets.token_hex(8)
    deadline = time.monotonic() + LOCK_WAIT_S
    while not locks.take(ctx.redis, key, token, LOCK_MS):
        if stop.is_set() or time.monotonic() > deadline:
            raise BatonError("umbrella-busy", f"umbrella #{umbrella} stayed held by a sibling's publication")
        time.sleep(0.2)
    try:
        with keepalive.every(LOCK_RENEW_S, lambda: locks.renew(ctx.redis, key, token, LOCK_MS),
                             name="baton-umbrella-lock"):  # fmt: skip
            yield token
    finally:
        locks.release(ctx.redis, key, token)


# -- reading the siblings ------------------------------------------------------------------------------


def _ticked(gh: GitHub[Any], full_name: str, umbrella: int) -> dict[int, bool]:
    issue = api.request(gh, "GET", f"{api.repo_path(full_name)}/issues/{umbrella}")
    return {item.index: item.ticked for item in tasklist.items(str(issue.get("body") or ""))}


def _pull_of(gh: GitHub[Any], full_name: str, sub: int) -> dict[str, Any] | None:
    owner = full_name.split("/", 1)[0]
    found = api.request(gh, "GET", f"{api.repo_path(full_name)}/pulls",
                        params={"head": f"{owner}:baton/issue-{sub}", "state": "all"})  # fmt: skip
    return found[0] if found else None


def _gate(gh: GitHub[Any], full_name: str, sha: str) -> str:
    found = api.request(gh, "GET", f"{api.repo_path(full_name)}/commits/{sha}/check-runs",
                        params={"check_name": gates.CHECK})  # fmt: skip
    runs = sorted(found.get("check_runs") or [], key=lambda r: int(r.get("id") or 0))
    return str(runs[-1].get("conclusion") or "") if runs else ""


def _contains(mirror: Mirror, ancestor: str, tip: str) -> bool:
    with inspect_git.session(mirror.path) as git:
        return git.call("merge-base", "--is-ancestor", ancestor, tip)[0] == 0


def facts(
    gh: GitHub[Any], full_name: str, umbrella: split.Umbrella, *, me: int, mirror: Mirror, base_now: str
) -> list[Facts]:
    """Every sibling of sub-issue ``me`` as GitHub (and the freshly fetched base) has it now."""
    ticked = _ticked(gh, full_name, umbrella.number)
    found: list[Facts] = []
    for item, number in sorted(umbrella.subs.items()):
        if number == me:
            continue
        issue = api.request(gh, "GET", f"{api.repo_path(full_name)}/issues/{number}")
        pull = _pull_of(gh, full_name, number)
        if pull is None:
            found.append(Facts(number, issue.get("state") == "closed", ticked.get(item, False)))
            continue
        merged, head = bool(pull.get("merged_at")), str(pull["head"]["sha"])
        merge_commit = str(pull.get("merge_commit_sha") or "") or None
        on_base = merged and merge_commit is not None and _contains(mirror, merge_commit, base_now)
        files = api.list_pages(gh, f"{api.repo_path(full_name)}/pulls/{pull['number']}/files", pages=30)
        found.append(Facts(
            number, issue.get("state") == "closed", ticked.get(item, False), int(pull["number"]), merged,
            pull.get("state") == "open", head, "" if merged else _gate(gh, full_name, head), merge_commit,
            on_base, frozenset(str(f.get("filename")) for f in files),
        ))  # fmt: skip
    return found


def _note(ctx: Context, repo_id: int, umbrella: split.Umbrella, claims: list[Claim]) -> split.Umbrella:
    """The table's notes: each rejected claim with the signal that failed (cleared once it holds)."""
    notes = {**umbrella.notes}
    for claim in claims:
        if claim.verdict is siblings.Verdict.REJECTED:
            notes[claim.number] = claim.note()
        elif notes.get(claim.number, "").startswith("claim rejected"):
            del notes[claim.number]
    fresh = split.load(ctx.redis, repo_id, umbrella.number) or umbrella
    kept = dataclasses.replace(fresh, notes=notes)
    split.store(ctx.redis, repo_id, kept)
    return kept


# -- before the run, and between its commit and its push --------------------------------------------


def before_run(_ctx: Context, task: Task, umbrella: split.Umbrella, gh: GitHub[Any]) -> str | None:
    """Why sub-issue ``task.number`` needs no run: closed, by a sibling's merged pull request that
    names it with a closing keyword ("delivered by #n"), or by hand. None: run it."""
    repo, _ = where(task)
    issue = api.request(gh, "GET", f"{api.repo_path(repo.full_name)}/issues/{task.number}")
    if issue.get("state") != "closed":
        return None
    for number in sorted(umbrella.subs.values()):
        pull = _pull_of(gh, repo.full_name, number) if number != task.number else None
        body = str((pull or {}).get("body") or "")
        if pull is not None and pull.get("merged_at") and str(task.number) in _CLOSES.findall(body):
            return f"no changes needed: delivered by #{pull['number']} (sub-issue #{number})"
    return "no changes needed: the sub-issue is closed"


Push = Callable[[Record], "Result | None"]
OpenPull = Callable[[Record], Result]
Ended = Callable[[Record], Result]


def publish(
    ctx: Context, task: Task, umbrella: split.Umbrella, *, record: Record, mirror: Mirror,
    remote: Callable[[], Remote], base_branch: str, tip: str | None, stop: threading.Event, push: Push,
    open_pull: OpenPull, ended: Ended,
) -> Result:  # fmt: skip
    """Steps 1 to 4 for a run whose commit is made (``record``); how the run ends."""
    repo, installation = where(task)
    gh = ctx.need_github().for_repository(installation, repo.full_name, "umbrella")
    me = int(task.number or 0)
    with held(ctx, repo.id, umbrella.number, stop):
        audit.note(ctx.redis, installation, task.id, "umbrella-verify", umbrella=umbrella.number)
        for _ in range(ROUNDS):
            with mirror.locked():
                base_now = mirror.fetch(remote(), [base_branch])[base_branch]
            found = facts(gh, repo.full_name, umbrella, me=me, mirror=mirror, base_now=base_now)
            claims = [siblings.judge(f) for f in found]
            umbrella = _note(ctx, repo.id, umbrella, claims)
            changed = [str(c.get("path")) for c in record.changes]
            moved, tree = _moved(mirror, record, base_now)
            step = siblings.plan(claims, found, started_on=record.base, base_now=base_now, changed=changed,
                                 moved_paths=moved, same_tree=tree == _tree(mirror, base_now))  # fmt: skip
            if step.next is Next.DELIVERED:
                pulls = [f.pull for f in found if f.number in step.by and f.pull is not None]
                why = f"delivered by #{pulls[0]}" if pulls else "the base branch already holds this change"
                return ended(dataclasses.replace(record, outcome=Outcome.NO_CHANGES, commit=None,
                                                 reason=f"no changes needed: {why}"))  # fmt: skip
            if step.next is Next.REBASE:
                if tree is None:
                    return ended(dataclasses.replace(record, outcome=Outcome.CONFLICT, commit=None, reason=(
                        "the base branch moved onto the files this run changed, and the change does not "
                        "apply onto it cleanly; nothing was pushed")))  # fmt: skip
                record = _rebased(mirror, task, record, tree, base_now=base_now, tip=tip)
                audit.note(ctx.redis, installation, task.id, "umbrella-rebased", base=base_now,
                           commit=str(record.commit))  # fmt: skip
                continue  # verified again, on the state after the move
            stopped = push(record)
            if stopped is not None:
                return stopped
            done = open_pull(record)
            pull = done.fields.get("pull_request")
            if pull:  # its checks' publications refresh the umbrella's table too
                ctx.redis.set(f"{keys.UMBRELLA_PULL_PREFIX}{repo.id}:{pull}", str(me), ex=split.RECORD_TTL_S)
            audit.note(ctx.redis, installation, task.id, "umbrella-published", umbrella=umbrella.number)
            return done
    return ended(dataclasses.replace(record, outcome=Outcome.CONFLICT, commit=None,
                                     reason=f"the base branch kept moving while Baton verified ({ROUNDS} "
                                            "rounds); nothing was pushed"))  # fmt: skip


# -- git: the change moved onto a new base ---------------------------------------------------------


def _tree(mirror: Mirror, commit: str) -> str:
    with inspect_git.session(mirror.path) as git:
        return git.rev(commit, "tree")


def _moved(mirror: Mirror, record: Record, base_now: str) -> tuple[list[str], str | None]:
    """The paths changed between the run's base and ``base_now``, and the run's change moved onto
    ``base_now`` as a tree (None: it conflicts)."""
    started, commit = record.base, str(record.commit)
    with inspect_git.session(mirror.path) as git:
        if started == base_now:
            return [], git.rev(commit, "tree")
        out = git.run("diff", "--name-only", "-z", "--no-renames", started, base_now)
        moved = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
        # Their merge base is ``started`` (the run's commit descends from it, and so does the base now);
        # git 2.39 has no --merge-base to say so.
        code, merged, _ = git.call("merge-tree", "--write-tree", "--no-messages", base_now, commit)
    return moved, merged.decode().split("\n", 1)[0].strip() if code == 0 else None


def _rebased(
    mirror: Mirror, task: Task, record: Record, tree: str, *, base_now: str, tip: str | None
) -> Record:
    """One commit of ``tree`` on ``base_now`` (after the branch's tip, if there is one), made like the
    run's own; refused if it changes any path the run's change did not (fail closed)."""
    changed = {str(c.get("path")) for c in record.changes}
    with inspect_git.session(mirror.path) as git:
        out = git.run("diff", "--name-only", "-z", "--no-renames", base_now, tree)
        message = git.run("log", "-1", "--format=%B", str(record.commit)).decode()
        who = git.run("log", "-1", "--format=%an%x00%ae", str(record.commit)).decode().strip().split("\0")
    touched = {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}
    if not touched <= changed:
        raise BatonError("rebase-widened", f"moving the change onto {base_now[:12]} touched more than it did")
    branch = f"baton/task-{task.id}-on-{base_now[:12]}"
    parents = (tip, base_now) if tip is not None else (base_now,)
    commit = inspect.commit(mirror.path, base_now, tree, branch=branch, message=message,
                            author=(who[0], who[1]), parents=parents)  # fmt: skip
    mirror.run("update-ref", "-d", f"refs/heads/{branch}")  # the commit stays; the push names it
    return dataclasses.replace(record, base=base_now, commit=commit)
