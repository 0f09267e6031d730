"""The review step of a run (``review:`` in the policy): between a passing inspection and the push.

``worker.runs.execute`` calls :func:`judge` with the run's record once its commit is made in the
mirror and before anything is pushed. The reviewer (``worker.runner.review``) reads the issue (and
a follow-up's instruction and line comments), the change from the agent's base to its commit, and
the run's egress and model summaries, read-only; its verdict decides:

- passed: the record goes on to the push, the review bound into it (and so into the receipt);
- anything else (a finding it blocks on, a reply that does not parse, a timeout, a crash, its own
  model requests refused, a gate that would deny it): ``review-blocked``, the commit dropped, nothing
  pushed; a cancel is ``cancelled``, the spend cap ``over-budget``, as for the agent.

The reviewer's model dollars are counted live by its gateway in the run's day budgets (the same
ledger) and against the run's cap together with the agent's; its minutes are added to the agent's
when the run is released (``Record.usage_fields``); its time is ``durations.review_s``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from baton.tasks import Outcome, Task
from worker import audit
from worker.context import Context
from worker.policy import Policy
from worker.runner import gateway, review_prompt
from worker.runner import review as reviewer
from worker.runner.verdict import Result
from worker.runs import admit, report
from worker.runs.mirror import Mirror
from worker.runs.plan import Plan
from worker.runs.record import Record
from worker.runs.supervisor import Supervisor

#: Refused model requests listed in the reviewer's material, at most.
MAX_REFUSED_LINES = 50


def judge(
    ctx: Context, task: Task, plan: Plan, supervisor: Supervisor, *, policy: Policy, private: bool,
    mirror: Mirror, record: Record,
) -> Record:  # fmt: skip
    """``record`` (a run that made its commit) as the reviewer leaves it: still ``done``, or not."""
    if policy.review is None or record.outcome is not Outcome.DONE or not record.commit:
        return record
    asked = plan.follow_up
    material = review_prompt.Material(
        "run", str(plan.issue.get("title") or ""), str(plan.issue.get("body") or ""), diff="",
        instruction=asked.instruction if asked else None, notes=asked.notes() if asked else (),
        egress=report.egress_summary(record.egress).replace("; ", "\n"), model=model_text(record.model),
    )  # fmt: skip
    request = reviewer.ReviewRequest(
        policy=policy, repo=mirror.path, base=record.base, head=record.commit, material=material,
        repo_private=private, run_id=task.id, model_keys=gateway.worker_keys(os.environ),
        model_upstreams=ctx.model_upstreams, prices=ctx.prices, ledger=admit.spend_ledger(ctx, task, policy),
        spent_before_usd=float(record.cost_usd or 0.0),
    )  # fmt: skip
    done = reviewer.run(request, stop=supervisor.stop)  # reads the mirror, as the agent's run does
    audit.note(ctx.redis, task.installation_id, task.id, "reviewed", agent=done.agent,
               result=str(done.result), blocking=done.blocking, reply_sha256=done.reply_sha256)  # fmt: skip
    return reviewed(record, done, cancelled=supervisor.reason)


def reviewed(record: Record, done: reviewer.ReviewRecord, *, cancelled: str | None = None) -> Record:
    """The run's record with its review in it: its outcome as the review leaves it (pure)."""
    durations = {**record.durations, "review_s": done.durations.get("review_s", 0.0)}
    record = dataclasses.replace(record, review=done.to_data(), durations=durations)
    if done.passed:
        return record
    record = dataclasses.replace(record, commit=None, branch=None)  # made in the mirror, never pushed
    if done.result is Result.CANCELLED:
        return dataclasses.replace(record, outcome=Outcome.CANCELLED,
                                   reason=cancelled or "cancelled while the reviewer ran")  # fmt: skip
    if done.result is Result.OVER_BUDGET:
        return dataclasses.replace(record, outcome=Outcome.OVER_BUDGET,
                                   reason=f"{done.detail}; nothing was committed")  # fmt: skip
    return dataclasses.replace(
        record, outcome=Outcome.REVIEW_BLOCKED, reason=f"{done.detail}; nothing was pushed"
    )


def model_text(model: Mapping[str, Any] | None) -> str:
    """The run's model account for the reviewer: totals per model, then every refused request."""
    if not isinstance(model, Mapping):
        return "the agent had no model"
    totals = model.get("totals") or {}
    lines = [
        f"{totals.get('calls', 0)} calls through Baton's model gateway, {totals.get('refused', 0)} refused"
    ]
    for entry in list(totals.get("models") or [])[: report.MODEL_LINES * 4]:
        lines.append(f"{entry.get('provider')}/{entry.get('model')}: {entry.get('calls', 0)} calls, "
                     f"{entry.get('input_tokens')} tokens in, {entry.get('output_tokens')} out")  # fmt: skip
    refused = list(model.get("violations") or [])
    for violation in refused[:MAX_REFUSED_LINES]:
        lines.append(
            f"refused {violation.get('code')} {violation.get('path') or ''}: {violation.get('detail')}"
        )
    if len(refused) > MAX_REFUSED_LINES:
        lines.append(f"and {len(refused) - MAX_REFUSED_LINES} more refused requests")
    return "\n".join(lines)
