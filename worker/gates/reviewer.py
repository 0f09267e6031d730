"""The policy's reviewer as a merge-gate gate (``review.merge_gate: true``).

For any pull request, after the built-in gates, the reviewer (``worker.runner.review``) judges the
change from the merge base to the head, with the pull request's title and body as untrusted
material, in the same read-only box as before a push, never with a secret. Its verdict is one more
row, ``reviewer``:

- a finding in a blocking category fails it, with an annotation on each line it names that the change
  adds (a place outside the change is listed in the summary instead: GitHub would show it nowhere);
- a reply that does not parse, a timeout, a crash, its own model requests refused, a gate that would
  deny it: the row fails closed, "the reviewer could not judge this change: …".

:func:`check_of` is the pure part: from the review's record and the change's lines to the row.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from baton.tasks import Task
from worker.context import Context
from worker.gates.builtin import Check
from worker.gates.pulls import Pull
from worker.github.limits import Annotation
from worker.policy import Policy
from worker.runner import gateway, review_prompt, verdict
from worker.runner import review as reviewer
from worker.runner.verdict import Location, Result
from worker.runs import admit

NAME = "reviewer"
#: Annotations the reviewer's row may make (its verdict holds at most MAX_LOCATIONS per category).
MAX_ANNOTATIONS = 3 * verdict.MAX_LOCATIONS
_UNJUDGED = {Result.BLOCKED, Result.PASSED}


def check(
    ctx: Context, task: Task, pr: Pull, policy: Policy, *, repo: os.PathLike[str] | str, base: str, head: str,
    patch: str,
) -> Check:  # fmt: skip
    """Run the reviewer on the pull request's change and say its row."""
    material = review_prompt.Material("pull-request", pr.title, pr.body, diff="")
    private = bool(task.repository.private) if task.repository is not None else True
    request = reviewer.ReviewRequest(
        policy=policy, repo=Path(repo), base=base, head=head, material=material, repo_private=private,
        run_id=task.id, model_keys=gateway.worker_keys(os.environ), model_upstreams=ctx.model_upstreams,
        prices=ctx.prices, ledger=admit.spend_ledger(ctx, task, policy),
    )  # fmt: skip
    return check_of(reviewer.run(request), verdict.changed_lines(patch))


def check_of(done: reviewer.ReviewRecord, changed: Mapping[str, frozenset[int]]) -> Check:
    """The reviewer's row: passed, failed with its findings, or failed because it could not judge."""
    digest = f" (verdict sha256:{done.reply_sha256[:16]}…)" if done.reply_sha256 else ""
    if done.passed:
        return Check(NAME, True, f"{done.agent} found nothing it blocks on{digest}")
    if done.result not in _UNJUDGED:
        said = f"{done.detail}: {done.quoted}" if done.quoted else done.detail
        return Check(NAME, False, f"the reviewer could not judge this change: {said}")
    annotations: list[Annotation] = []
    items: list[str] = []
    blocking = set(done.blocking)
    for finding in done.findings:
        if finding.get("category") not in blocking:
            continue
        category = str(finding.get("category"))
        reasons = "; ".join(str(r) for r in finding.get("reasons") or ()) or "no reason given"
        items.append(f"{category}: {reasons}")
        for place in finding.get("locations") or ():
            where = _location(str(place))
            if where is not None and verdict.inside(where, changed) and len(annotations) < MAX_ANNOTATIONS:
                end = where.end if where.end is not None else where.line
                said = f"{category}: {reasons}"
                annotations.append(
                    Annotation(where.path, where.line, end, "failure", said, f"{NAME}: {category}")
                )
            else:
                items.append(f"{category} at {place} (outside the change)")
    return Check(NAME, False, f"{done.detail}{digest}", tuple(annotations), tuple(items))


def _location(text: str) -> Location | None:
    path, _, numbers = text.rpartition(":")
    first, _, last = numbers.partition("-")
    if not path or not first.isdigit() or (last and not last.isdigit()):
        return None
    return Location(path, int(first), int(last) if last else None)
