"""Putting one task's outcome on GitHub: its check runs completed, its issue's status comment.

A ``Publication`` is plain data, stored with the task's terminal state (see
``worker.lifecycle.move``), so it can be attempted again by any worker until
GitHub has it (``worker.outbox``). Performing it is idempotent: completing a
check run twice says the same thing twice, and the status comment is edited in
place.

One status comment per issue, updated in order. Tasks for one issue run on
different queues at once; each would otherwise find-then-create or edit the
comment with no ordering, making two comments or letting an older task
overwrite a newer state. So each issue has a record in Redis (the comment's id,
and the ``received_at`` and id of the task that last wrote it), changed only by
the holder of a short per-issue lock: a task older than the last writer writes
nothing, and only the lock holder ever creates the comment. The record marks a
create before it is sent, so the next writer lists the issue's comments only if
that create's answer may have been lost (a new issue's first status is one call), and
it does so only once no write whose answer nobody heard can still land
(``UNHEARD_PREFIX``): otherwise it would find nothing, make a second comment, and
the first would land below it, stale.

While an agent run holds the issue (``baton.keys.run_lock``), other tasks'
statuses ("a run is already in progress", a refusal) are shown but do not take the
comment over: the run's later states, though older by arrival, still replace them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import redis
from githubkit import GitHub

from baton import keys, records
from baton.errors import BatonError
from baton.redis_client import NO_REPLICAS, Replication
from baton.tasks import Task
from worker import audit, keepalive, locks
from worker.context import Context
from worker.github import api, retry
from worker.github.client import GitHubApp, GitHubError
from worker.github.limits import SETTLED_AFTER_S, Action, Annotation, Output
from worker.status import Status, is_status_comment, render

log = logging.getLogger("baton.publish")

ISSUE_PREFIX = keys.ISSUE_PREFIX  # what each key holds, and for how long: baton/keys.py
LOCK_PREFIX = keys.ISSUE_LOCK_PREFIX
#: A dead writer's lock lapses this soon (a later status of the issue waits no longer); a live
#: writer renews it every LOCK_RENEW_S for as long as its GitHub calls take (``_renewer``).
LOCK_MS = 15_000
LOCK_RENEW_S = 5.0
ISSUE_TTL_S = 90 * 24 * 3600
#: Set while a write to the comment is on its way to GitHub, removed once its answer is heard. A
#: writer that died (or lost its lock) with a write unanswered leaves it: until it lapses (GitHub
#: ends a request after 10 s) the write may still land, and the next writer must not look for the
#: comment yet (it would find nothing, create a second, and the first would land below it, stale).
UNHEARD_PREFIX = keys.ISSUE_UNHEARD_PREFIX
UNHEARD_MS = int(SETTLED_AFTER_S * 1000)


class Busy(BatonError):
    """Not yet: another task is writing this issue's status comment, or a write whose answer nobody
    heard may still land. Try again shortly (the outbox does, without counting it as a failure)."""


@dataclass(frozen=True, slots=True)
class CheckRunEnd:
    """A check run to complete: its id, conclusion and output.

    No id: the task sent the run's create and died before hearing the answer, so GitHub may hold
    a run nobody knows the id of. It is found by the task's external id on ``head_sha`` and
    completed; if GitHub never made it, there is nothing to complete."""

    check_run_id: int | None
    conclusion: str
    title: str
    summary: str
    annotations: Sequence[dict[str, Any]] = ()  # ``Annotation`` fields; batched by 50 when sent
    actions: Sequence[dict[str, str]] = ()  # ``Action`` fields: buttons, e.g. "Approve run"
    text: str | None = None  # the signed receipt (``worker.receipts``), whole
    details_url: str | None = None  # where ``baton serve`` serves that receipt
    name: str | None = None  # with ``head_sha``, where to look for a run whose id is unknown
    head_sha: str | None = None
    sent_at: float | None = None  # when its create was sent (epoch s): not found is final once settled


@dataclass(frozen=True, slots=True)
class Reply:
    """Baton's answer in one review thread of pull request ``Publication.pull_request``: posted once
    (its body ends with ``REPLY_MARKER`` for the task, which a retried publication looks for)."""

    comment_id: int  # the thread's first comment (GitHub answers a reply to a reply with 422)
    body: str


#: The hidden last line of a reply: which task made it.
REPLY_MARKER = "<!-- baton:reply {task_id} -->"


@dataclass(frozen=True, slots=True)
class Publication:
    task_id: str
    received_at: str
    installation_id: int
    full_name: str
    repo_id: int
    number: int | None = None
    comment: str | None = None  # the rendered status comment for issue ``number``
    check_runs: Sequence[CheckRunEnd] = field(default_factory=tuple)
    #: A follow-up's pull request: its status comment says the same as the issue's, and its review
    #: threads get ``replies``.
    pull_request: int | None = None
    replies: Sequence[Reply] = field(default_factory=tuple)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> Publication:
        data: dict[str, Any] = orjson.loads(raw)
        runs = tuple(CheckRunEnd(**r) for r in data.pop("check_runs", ()))
        replies = tuple(Reply(**r) for r in data.pop("replies", ()))
        return cls(**data, check_runs=runs, replies=replies)

    @property
    def empty(self) -> bool:
        return self.comment is None and not self.check_runs and not self.replies

    @classmethod
    def about(
        cls, task: Task, status: Status | None, check_runs: Sequence[CheckRunEnd] = (),
        replies: Sequence[Reply] = (),
    ) -> Publication | None:  # fmt: skip
        """What GitHub should hear about ``task`` ending: its issue's status (a follow-up's pull
        request's too), its check runs, its replies in review threads; None: nothing (or nowhere to
        say it)."""
        repo = task.repository
        if repo is None or task.installation_id is None:
            return None
        comment = render(status) if status is not None and task.number is not None else None
        pub = cls(task.id, task.received_at, task.installation_id, repo.full_name, repo.id, task.number,
                  comment, tuple(check_runs), task.pull_request, tuple(replies))  # fmt: skip
        return None if pub.empty else pub


def perform(app: GitHubApp, cache: redis.Redis, pub: Publication, app_id: int | None) -> str:
    """Do everything ``pub`` says; raise GitHubError or Busy to be tried again. Returns what was done."""
    done: list[str] = []
    if pub.check_runs:
        gh = app.for_repository(pub.installation_id, pub.full_name, "report")
        for run in pub.check_runs:
            run_id = run.check_run_id if run.check_run_id is not None else _find(gh, pub, run)
            if run_id is None and time.time() - (run.sent_at or 0.0) < SETTLED_AFTER_S:
                raise Busy("create-unsettled", f"check run {run.name}'s create may still land")
            if run_id is None:
                done.append(f"no check run {run.name} to complete (GitHub never made it)")
                continue
            api.complete_check_run(gh, pub.full_name, run_id, conclusion=run.conclusion,
                                   output=Output(run.title, run.summary, run.text),
                                   details_url=run.details_url,
                                   annotations=[Annotation(**a) for a in run.annotations],
                                   actions=[Action(**a) for a in run.actions])  # fmt: skip
            audit.note(cache, pub.installation_id, pub.task_id, "check-run-posted",
                       check_run_id=run_id, conclusion=run.conclusion)  # fmt: skip
            done.append(f"check run {run_id} {run.conclusion}")
    if pub.comment is not None and pub.number is not None:
        gh = app.for_repository(pub.installation_id, pub.full_name, "report")
        done.append(write_status(gh, cache, pub, app_id))
        if pub.pull_request is not None:
            done.append(write_status(gh, cache, dataclasses.replace(pub, number=pub.pull_request), app_id))
    if pub.replies and pub.pull_request is not None:
        gh = app.for_repository(pub.installation_id, pub.full_name, "reply")
        done.append(post_replies(gh, pub, app_id))
    return "; ".join(done) or "nothing to publish"


def post_replies(gh: GitHub[Any], pub: Publication, app_id: int | None) -> str:
    """Each of ``pub``'s replies in its review thread, unless the thread holds it already: one of
    Baton's comments replying there with this task's marker. A thread GitHub no longer has (404) or
    refuses a reply to (422) is skipped: asking again would never land it."""
    marker = REPLY_MARKER.format(task_id=pub.task_id)
    path = f"{api.repo_path(pub.full_name)}/pulls/{pub.pull_request}/comments"
    answered = {
        int(c["in_reply_to_id"])
        for c in api.list_pages(gh, path)
        if c.get("in_reply_to_id") and marker in str(c.get("body") or "") and _by_app(c, app_id)
    }
    posted = skipped = 0
    for reply in pub.replies:
        if reply.comment_id in answered:
            continue
        try:
            api.request(gh, "POST", f"{path}/{reply.comment_id}/replies", json={"body": reply.body})
        except GitHubError as exc:
            if exc.status not in (404, 422):
                raise
            skipped += 1
            log.warning("review thread refused a reply", extra={"task": pub.task_id,
                        "comment": reply.comment_id, "status": exc.status})  # fmt: skip
            continue
        answered.add(reply.comment_id)
        posted += 1
    return f"{posted} repl{'y' if posted == 1 else 'ies'} in review threads" + (
        f" ({skipped} thread(s) gone)" if skipped else ""
    )


def _by_app(comment: dict[str, Any], app_id: int | None) -> bool:
    via = comment.get("performed_via_github_app")
    return isinstance(via, dict) and via.get("id") == app_id


def _find(gh: GitHub[Any], pub: Publication, run: CheckRunEnd) -> int | None:
    if run.name is None or run.head_sha is None:
        return None
    return api.check_run_by_external_id(gh, pub.full_name, run.head_sha, run.name, pub.task_id)


def publisher(
    app: GitHubApp, cache: redis.Redis, app_id: int | None, replication: Replication = NO_REPLICAS
) -> Callable[[Publication], str]:
    """``perform`` bound to one App and Redis: what the outbox calls for each publication.

    Nothing is said on GitHub about a task until BATON_REDIS_REPLICAS replicas hold its final state
    (and the log entries of its receipts, written before it): a primary that dies unreplicated must
    not take with it the only record of what GitHub was told. Until they do, the attempt fails and
    the outbox tries again with back-off."""

    def act(pub: Publication) -> str:
        replication.confirm(cache, f"the publication of task {pub.task_id}")
        return perform(app, cache, pub, app_id)

    return act


def write_status(gh: GitHub[Any], cache: redis.Redis, pub: Publication, app_id: int | None) -> str:
    """Write the issue's status comment if ``pub``'s task is the newest that has written it."""
    if pub.comment is None or pub.number is None:
        return "no status comment"
    where = f"{pub.repo_id}:{pub.number}"
    issue, lock, unheard = ISSUE_PREFIX + where, LOCK_PREFIX + where, UNHEARD_PREFIX + where
    token = secrets.token_hex(8)
    if not locks.take(cache, lock, token, LOCK_MS):
        raise Busy("issue-busy", f"another task is writing the status comment of #{pub.number}")
    try:
        record, run = _read(cache, where, keys.run_lock(pub.repo_id, pub.number), pub.number)
        mine = (pub.received_at, pub.task_id)
        theirs = (record.get("received_at", ""), record.get("task_id", ""))
        if theirs > mine:
            return f"status comment left to newer task {theirs[1]}"
        passing = run is not None and run != pub.task_id  # another task's run holds the issue
        digest = hashlib.sha256(pub.comment.encode()).hexdigest()
        comment_id = int(record["comment_id"]) if record.get("comment_id") else None
        if comment_id is not None and theirs == mine and record.get("body_sha256") == digest:
            return f"status comment {comment_id} (already written)"
        # Look before creating only where a create may already have landed (its answer lost):
        # the record says so. A new issue's first status is one call, not a list and a create.
        look = comment_id is not None or bool(record.get("creating"))
        with cache.pipeline(transaction=True) as pipe:
            if comment_id is None:
                pipe.hset(issue, "creating", pub.task_id)
                pipe.expire(issue, ISSUE_TTL_S)
            pipe.set(unheard, token, px=UNHEARD_MS)  # gone once the answer is heard
            pipe.execute()
        try:
            renewed = _renewer(cache, lock, token)
            with keepalive.every(LOCK_RENEW_S, renewed, name="baton-issue-lock"):  # only GitHub may take long
                comment_id = _write(gh, pub, comment_id, app_id, look=look)
        except GitHubError as exc:
            if not retry.maybe_done(exc.__cause__):
                locks.release(cache, unheard, token)  # GitHub answered: nothing of this write is on its way
            raise  # no answer: the mark stays, and lapses once GitHub has ended the request
        if locks.holder(cache, lock) != token:  # the lock lapsed: someone else may have written since
            locks.release(cache, unheard, token)  # answered: not another writer's mark, if one took over
            raise Busy("issue-busy", f"lost the status-comment lock of #{pub.number}")
        mapping = {"comment_id": str(comment_id), "body_sha256": digest}
        if not passing:
            mapping.update(received_at=pub.received_at, task_id=pub.task_id)
        with cache.pipeline(transaction=True) as pipe:
            pipe.hset(issue, mapping=mapping)  # type: ignore[arg-type]
            pipe.expire(issue, ISSUE_TTL_S)
            pipe.delete(unheard)  # ours: the lock still is
            pipe.execute()
        return f"status comment {comment_id}"
    finally:
        locks.release(cache, lock, token)


def _read(cache: redis.Redis, where: str, run_lock: str, number: int) -> tuple[dict[str, str], str | None]:
    """The issue's record and the task whose run holds the issue, in one round trip; Busy while a
    write whose answer nobody heard may still land."""
    with cache.pipeline(transaction=False) as pipe:
        pipe.hgetall(ISSUE_PREFIX + where)
        pipe.get(run_lock)
        pipe.exists(UNHEARD_PREFIX + where)
        raw, run, unheard = pipe.execute()
    if unheard:
        raise Busy("issue-busy", f"a write to #{number}'s status comment may still land; looking again "
                                 "once GitHub has ended it")  # fmt: skip
    record = {records.text(k): records.text(v) for k, v in raw.items()}
    return record, None if run is None else records.text(run)


def _write(
    gh: GitHub[Any], pub: Publication, comment_id: int | None, app_id: int | None, *, look: bool
) -> int:
    body, number = pub.comment or "", pub.number or 0
    if comment_id is not None and api.edit_comment(gh, pub.full_name, comment_id, body):
        return comment_id
    if not look:
        return api.create_comment(gh, pub.full_name, number, body)
    # Gone (deleted by someone), or never known: find it again or create it.

    def ours(comment: dict[str, Any]) -> bool:
        via = comment.get("performed_via_github_app")
        return is_status_comment(comment.get("body")) and isinstance(via, dict) and via.get("id") == app_id

    # Gone, or a create that may have landed: look before creating, so a comment whose creation
    # answer was lost is found again instead of duplicated.
    return api.upsert_comment(gh, pub.full_name, number, body, ours)


def _renewer(cache: redis.Redis, lock: str, token: str) -> Callable[[], bool]:
    """Renews an issue's status-comment lock while its holder waits on GitHub (``keepalive``), so the
    lock can be short: a writer that dies (SIGKILL, a lost machine) holds the issue for LOCK_MS at
    most, not for as long as the slowest write could take."""

    def renew() -> bool:
        try:
            # False: it lapsed and was taken; the writer finds out by asking whose it is.
            return locks.renew(cache, lock, token, LOCK_MS)
        except redis.RedisError as exc:
            log.warning("could not renew a status-comment lock", extra={"lock": lock, "error": str(exc)})
            return True

    return renew


def status_now(ctx: Context, task: Task, status: Status) -> str | None:
    """Write a passing state (queued, running) at once, best effort: the task's final state goes
    through the outbox and replaces it, so a GitHub error here is logged and nothing else."""
    if ctx.github is None or task.repository is None or task.installation_id is None or task.number is None:
        return None
    pub = Publication(task.id, task.received_at, task.installation_id, task.repository.full_name,
                      task.repository.id, task.number, render(status))  # fmt: skip
    gh = ctx.github.for_repository(task.installation_id, task.repository.full_name, "report")
    try:
        done = write_status(gh, ctx.redis, pub, ctx.app_id)
        if task.pull_request is not None:  # a follow-up: said where it was asked for too
            pr = dataclasses.replace(pub, number=task.pull_request)
            done += "; " + write_status(gh, ctx.redis, pr, ctx.app_id)
        return done
    except BatonError as exc:
        log.warning("status not written now", extra={"task": task.id, "state": str(status.state),
                                                     "error": exc.code})  # fmt: skip
        return None
