"""The run's last step: one pull request per issue, and the signed check runs on its head.

A run whose commit was pushed opens the issue's pull request, or updates it (a later run, or
a retry that finds its own push), then puts the ``baton/trifecta`` and ``baton/agent`` check
runs on the commit, each carrying its receipt, signed into the installation's log before the
check run exists. A run that pushed nothing still gets its ``baton/agent`` receipt, about the
base it ran on (``unpushed_receipt``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from githubkit import GitHub

from baton.errors import BatonError
from baton.tasks import Outcome, Task
from evidence import statement
from worker import audit, receipts, replay
from worker.context import Context
from worker.github import api
from worker.github.client import GitHubError
from worker.github.limits import Output
from worker.lifecycle import State
from worker.policy import canonical_json
from worker.publish import Reply
from worker.result import Result
from worker.runner import inspect_git
from worker.runs import iteration, report
from worker.runs.mirror import Mirror
from worker.runs.plan import Plan
from worker.runs.record import Record
from worker.trigger import where


def publish(
    ctx: Context, task: Task, plan: Plan, gh: GitHub[Any], record: Record, *, base_branch: str
) -> Result:
    repo, _ = where(task)
    branch = report.branch_for(plan.number)
    explanation = record.explanation or _explanation(record)
    body = report.pr_body(number=plan.number, task_id=task.id, record=record, explanation=explanation)
    title = report.pr_title(str(plan.issue.get("title") or ""), plan.number)
    if plan.follow_up is not None:  # that pull request, open or not: its branch holds the commit
        path = f"{api.repo_path(repo.full_name)}/pulls/{plan.follow_up.pull_request}"
        pr, updated = api.request(gh, "PATCH", path, json={"body": body}), True
    else:
        opened = open_or_update(gh, repo.full_name, head=branch, base=base_branch, title=title, body=body)
        pr, updated = opened
    commit = str(record.commit)
    receipts_for = _receipts(ctx, task, plan, record)
    for name, (check_title, summary) in (
        (report.TRIFECTA_CHECK, report.trifecta_check(explanation)),
        (report.AGENT_CHECK, report.agent_check(record)),
    ):
        posted = _check(gh, repo.full_name, commit, task_id=task.id, name=name, title=check_title,
                        summary=summary, sign=functools.partial(receipts_for, name))  # fmt: skip
        if posted is not None:
            audit.note(ctx.redis, task.installation_id, task.id, "check-run-posted", check=name,
                       log_index=posted.index)  # fmt: skip
    fields = {**record.usage_fields(), "pull_request": str(pr["number"]), "head_sha": commit}
    unchanged = updated and _same_tree(Mirror(ctx.data_dir, repo.id).path, commit)
    status = report.pr_opened(task.id, plan.agent, record, pr, updated=updated, unchanged=unchanged)
    return Result(
        State.PR_OPENED,
        f"pull request #{pr['number']} {'updated' if updated else 'opened'}"
        + (" (no change)" if unchanged else ""),
        dataclasses.replace(status, notices=plan.notices),
        fields=fields,
        replies=answers(task, plan, record),
    )


def answers(task: Task, plan: Plan, record: Record) -> tuple[Reply, ...]:
    """A follow-up's replies in the review threads it was asked in: what its commit changed there, or
    why nothing was pushed."""
    if plan.follow_up is None:
        return ()
    changed = [str(c.get("path")) for c in record.changes]
    why = record.reason.rstrip(".") + "." if record.reason else "the run ended without a commit."
    return iteration.replies(plan.follow_up, task_id=task.id, commit=record.commit if record.outcome
                             is Outcome.DONE else None, changed=changed, why_not=why)  # fmt: skip


def _same_tree(repo_dir: Path, commit: str) -> bool:
    """Whether ``commit`` leaves the files as its first parent had them (a retry on an unchanged base
    makes the same change again, on top of the last run's commit)."""
    with inspect_git.session(repo_dir) as git:
        code, out, _ = git.call("rev-parse", f"{commit}^{{tree}}", f"{commit}^1^{{tree}}")
    trees = out.split()
    return code == 0 and len(trees) == 2 and trees[0] == trees[1]


def open_or_update(
    gh: GitHub[Any], full_name: str, *, head: str, base: str, title: str, body: str
) -> tuple[dict[str, Any], bool]:
    """The one open PR for ``head``: updated if it exists (a retry), else opened. (pr, updated)."""
    owner = full_name.split("/", 1)[0]
    path = f"{api.repo_path(full_name)}/pulls"
    for attempt in range(2):
        found = api.request(gh, "GET", path, params={"head": f"{owner}:{head}", "state": "open"})
        if found:
            pr = found[0]
            updated = api.request(gh, "PATCH", f"{path}/{pr['number']}", json={"body": body})
            return updated, True
        try:
            return api.request(
                gh,
                "POST",
                path,
                json={
                    "title": title,
                    "head": head,
                    "base": base,
                    "body": body,
                    "maintainer_can_modify": True,
                },
            ), False
        except GitHubError as exc:
            if exc.status != 422 or attempt:  # 422: one was opened meanwhile; find it
                raise
    raise BatonError("pull-request-failed", "GitHub neither listed nor opened the pull request")


def _receipts(ctx: Context, task: Task, plan: Plan, record: Record) -> Callable[[str], receipts.Receipt]:
    """Signing for the run's two check runs: the trifecta decision and the agent run, about the
    commit and the diff from the base the agent started on."""
    repo, installation = where(task)
    commit, base = str(record.commit), record.base
    with inspect_git.session(Mirror(ctx.data_dir, repo.id).path) as git:
        digest = inspect_git.diff_digest(git, base, commit)
    subjects = [receipts.commit_subject(repo.full_name, commit),
                receipts.diff_subject(repo.full_name, base, commit, digest)]  # fmt: skip
    decision = record.decision
    asked = iteration.Conversation.from_data(record.follow_up).inputs() if record.follow_up else []

    def sign(name: str) -> receipts.Receipt:
        if name == report.TRIFECTA_CHECK:
            kind = statement.TRIFECTA_DECISION
            predicate = receipts.trifecta(
                task_id=task.id, full_name=repo.full_name, number=plan.number, base=base,
                private=bool((decision.get("facts") or {}).get("repo_private", True)),
                issue_digest=record.issue_sha256, decision=decision,
                decision_json=canonical_json(decision), follow_up=asked,
            )  # fmt: skip
        else:
            kind = statement.AGENT_RUN
            predicate = receipts.agent_run(task_id=task.id, full_name=repo.full_name, number=plan.number,
                                           base=base, diff_digest=digest, record=record)  # fmt: skip
        return _attest(ctx, task, installation, name, subjects=subjects, kind=kind, predicate=predicate)

    return sign


def unpushed_receipt(ctx: Context, task: Task, plan: Plan, record: Record) -> receipts.Receipt:
    """The ``baton/agent`` receipt of a run that pushed nothing: about the base the agent ran on."""
    repo, installation = where(task)
    base = record.base
    predicate = receipts.agent_run(task_id=task.id, full_name=repo.full_name, number=plan.number, base=base,
                                   diff_digest="", record=record)  # fmt: skip
    subjects = [receipts.commit_subject(repo.full_name, base)]
    return _attest(ctx, task, installation, report.AGENT_CHECK, subjects=subjects, kind=statement.AGENT_RUN,
                   predicate=predicate)  # fmt: skip


def _attest(
    ctx: Context,
    task: Task,
    installation: int,
    check: str,
    *,
    subjects: Sequence[statement.Subject],
    kind: str,
    predicate: Mapping[str, object],
) -> receipts.Receipt:
    """Sign one check run's receipt into the installation's log, and remember where it is."""
    signed = receipts.attest(ctx.signer, ctx.redis, installation, subjects=subjects, predicate_type=kind,
                             predicate=predicate, replication=ctx.replication)  # fmt: skip
    replay.remember_receipt(ctx.redis, task.id, check, installation, signed.index)
    audit.note(ctx.redis, installation, task.id, "signed", check=check, log_index=signed.index)
    return signed


def _check(
    gh: GitHub[Any],
    full_name: str,
    sha: str,
    *,
    task_id: str,
    name: str,
    title: str,
    summary: str,
    sign: Callable[[], receipts.Receipt],
) -> receipts.Receipt | None:
    """A completed check run on ``sha``, once per task (a retry finds the one it made), carrying its
    receipt, which is in the log before the check run exists. Returns that receipt; None when the
    check run was already there."""
    existing = api.request(
        gh,
        "GET",
        f"{api.repo_path(full_name)}/commits/{sha}/check-runs",
        params={"check_name": name, "filter": "all"},
    )
    if any(r.get("external_id") == task_id for r in existing.get("check_runs", [])):
        return None
    signed = sign()
    api.create_check_run(
        gh,
        full_name,
        name=name,
        head_sha=sha,
        external_id=task_id,
        details_url=signed.details_url,
        output=Output(title, summary, signed.text()),
        conclusion="success",
    )
    return signed


def _explanation(record: Record) -> str:
    return orjson.dumps(record.decision, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
