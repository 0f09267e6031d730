"""What each kind of task does: read fresh state from GitHub, decide, say what to publish.

A handler returns a ``Result``: the task's terminal state and what to tell
GitHub (a status comment, check runs to complete). ``worker.jobs`` commits the
state together with the publication, and the outbox publishes after, so a
crash never leaves a claim on GitHub that the record does not back. The
decisions themselves are pure functions (``screen``, ``authorize``,
``decide``); handlers only gather their inputs.

Every trigger (label, `/baton` command, cancel, unlabel, close), step by step
(nothing is ever spawned here: an admitted run is handed to the agents queue,
where ``worker.runs.execute`` runs it):
  1-3. who asked, the policy, the sender against its trigger rules (``worker.trigger``);
  4. the trifecta gate on the effective policy and the fresh repo facts;
  5. the decision recorded for the evidence trail, and explained on the issue;
  6. for an allowed run: the issue's lock and the budgets (``worker.runs.admit``),
     then ``queued`` on the issue and the run on the agents queue.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import orjson
import redis
from githubkit import GitHub

from baton import keys, records
from baton.errors import BatonError
from baton.tasks import Kind, Task
from worker import audit, config, lifecycle, replay
from worker.authorize import Permission, screen
from worker.context import Context
from worker.gates import evaluate as gates
from worker.github import api
from worker.github.limits import Output
from worker.lifecycle import State
from worker.messages import inert
from worker.policy import Decision, Policy, TaskFacts, UnknownAgent, decide, explain
from worker.result import Decided, Handler, HandOff, Result
from worker.runs import admit, budget, iteration, line, report
from worker.runs import cancel as stopping
from worker.runs.identity import bot_identity
from worker.status import Status
from worker.trigger import NOT_LOOKED_UP, authorised, permission, unauthorised, where

log = logging.getLogger("baton.handlers")

DECISION_PREFIX = replay.DECISION_PREFIX
LAST_RUN_PREFIX = keys.LAST_RUN_PREFIX
EVIDENCE_TTL_S = 90 * 24 * 3600
#: Set on a task's record (to the head, and when it was sent) while its merge-gate check run's create
#: awaits GitHub's answer.
CHECK_RUN_OPENING = "check_run_opening"
CHECK_RUN_SENT_AT = "check_run_sent_at"


def _context_lines(loaded: config.LoadedPolicy) -> list[str]:
    """Which files the policy came from, and every line of the repo's file that was ignored."""
    lines = [f"policy: {inert(s.label(), 200)}" for s in loaded.sources]
    lines += [f"ignored (a repository may only narrow the org policy): {inert(str(p), 400)}"
              for p in loaded.merged.problems]  # fmt: skip
    return lines


# -- agent runs --------------------------------------------------------------------------------


def agent_run(
    ctx: Context,
    task: Task,
    agent: str | None,
    *,
    offline: bool = False,
    found: Permission | None = NOT_LOOKED_UP,
) -> Decided:
    """``agent`` None: Baton was called by name (`@<app-slug> ...`), and the policy's
    ``trigger.default_agent`` runs."""
    label = task.kind is Kind.AGENT_RUN
    who = authorised(ctx, task, found, tell_policy=label, tell_refusal=label or not task.sender.is_bot)
    if isinstance(who, Result):
        return who
    loaded = who.loaded
    policy = loaded.merged.policy
    if agent is None:
        agent = policy.trigger.default_agent
    if agent is None:
        known = ", ".join(inert(a) for a in sorted(policy.agents)) or "none"
        return Result(State.DONE, "called by name: no default agent", Status(
            State.DONE, task.id, None,
            "Baton was called by name, but this repository's policy names no `trigger.default_agent` to run.",
            details=(f"Agents allowed here: {known}.", *_context_lines(loaded)), notices=loaded.notices,
            next_steps=("Name one: label the issue `agent:<name>` or comment `/baton run <name>`.",
                        "Or set `trigger.default_agent` in the org's `baton.yml` (or, among those, in "
                        "`.github/baton.yml`)."),
        ))  # fmt: skip
    repo, _ = where(task)
    last_run = orjson.dumps({"agent": agent, "offline": offline})  # what `/baton retry` repeats
    ctx.redis.set(f"{LAST_RUN_PREFIX}{repo.id}:{task.number}", last_run, ex=EVIDENCE_TTL_S)
    return _gate(ctx, task, agent, offline=offline, loaded=loaded)


def _gate(
    ctx: Context, task: Task, agent: str, *, offline: bool, loaded: config.LoadedPolicy,
    run: Task | None = None, context: Sequence[str] = (),
) -> Decided:  # fmt: skip
    """Steps 4 to 6 for an authorised sender: the trifecta gate, the decision recorded and explained,
    then admission of ``run`` (the task the run job runs; None: ``task`` itself)."""
    policy = loaded.merged.policy
    context = [*context, *_context_lines(loaded)]
    notices = loaded.notices
    try:
        facts = TaskFacts(agent=agent, repo_private=loaded.repo.private, offline=offline,
                          network_cutoff=ctx.network_cutoff, seccomp=ctx.seccomp)  # fmt: skip
        decision = decide(policy, facts)
    except UnknownAgent:
        known = ", ".join(inert(a) for a in sorted(policy.agents)) or "none"
        return Result(State.REFUSED, f"unknown-agent: {agent}", Status(
            State.REFUSED, task.id, agent, f"{inert(agent)} is not an agent this repository's policy allows.",
            details=(f"Agents allowed here: {known}.", *context), notices=notices,
        ))  # fmt: skip
    _record_decision(ctx, task, decision, loaded)
    fields = {"decision_sha256": _digest(decision)}
    if not decision.allowed:
        legs = ", ".join(str(axis).replace("_", " ") for axis in decision.triggered)
        return Result(State.DENIED, f"trifecta: {', '.join(decision.triggered)}", Status(
            State.DENIED, task.id, agent,
            f"Baton started no agent: this run of {inert(agent)} would combine {legs} "
            "(the lethal trifecta). Here is what put each one there, and what would make it pass:",
            evidence=explain(decision), details=context, notices=notices,
            next_steps=(f"Comment {inert(f'/baton run {agent} --offline')} to run it with every "
                        "external-communication tool and egress host removed (decided again by the same "
                        "gate).",
                        "Or narrow the agent in `.github/baton.yml` as suggested above."),
        ), fields=fields)  # fmt: skip
    return _reserve(ctx, run or task, agent, offline=offline, policy=policy, fields=fields, notices=notices,
                    context=[inert(explain(decision).splitlines()[0], 200), *context])  # fmt: skip


def _reserve(
    ctx: Context, task: Task, agent: str, *, offline: bool, policy: Policy, fields: dict[str, str],
    context: Sequence[str], notices: Sequence[str],
) -> Decided:  # fmt: skip
    """Step 6: the issue's lock and the budgets (``worker.runs.admit``); a HandOff goes to the
    agents queue through ``worker.jobs``."""
    verdict = admit.reserve(ctx, task, policy)
    if verdict.code == "busy":
        return Result(State.REFUSED, f"busy: run {verdict.holder} holds #{task.number}",
                      report.busy(task.id, agent, verdict.holder or "?"))  # fmt: skip
    waits = verdict.code == budget.CONCURRENT_RUNS  # no slot free: it waits in line (worker.runs.line)
    if not verdict.allowed and not waits:
        return Result(State.REFUSED, f"over-budget: {verdict.code} ({verdict.scope})",
                      report.over_budget(task.id, agent, verdict.lines()), fields=fields)  # fmt: skip
    fields = {**fields, admit.AGENT: agent, admit.OFFLINE: "1" if offline else "0"}
    queued = report.queued(task.id, agent, offline=offline, context=context, notices=notices)
    if waits:
        return HandOff("waiting in line for a free run slot", queued, fields=fields, task=task, wait=policy)
    return HandOff("admitted", queued, fields=fields, task=task)


def _digest(decision: Decision) -> str:
    return hashlib.sha256(decision.to_json()).hexdigest()


def _record_decision(ctx: Context, task: Task, decision: Decision, loaded: config.LoadedPolicy) -> None:
    """Every decision, allowed or not, is kept with its policy, so ``baton replay`` can decide again."""
    record = {
        "task_id": task.id,
        "decision": orjson.loads(decision.to_json()),
        "sources": [{"repository": s.repository, "path": s.path, "sha": s.sha, "found": s.found}
                    for s in loaded.sources],
    }  # fmt: skip
    ctx.redis.set(
        DECISION_PREFIX + task.id, orjson.dumps(record, option=orjson.OPT_SORT_KEYS), ex=EVIDENCE_TTL_S
    )
    replay.remember_policy(ctx.redis, loaded.merged.policy)
    audit.note(ctx.redis, task.installation_id, task.id, "decided", allowed=decision.allowed,
               decision_sha256=_digest(decision), policy_sha256=decision.policy_sha256)  # fmt: skip


# -- a follow-up on Baton's pull request -------------------------------------------------------------


def iterate(ctx: Context, task: Task) -> Decided:
    """`/baton <instruction>` on a pull request, or a review calling Baton: the issue's agent again, on
    the pull request's head (``worker.runs.execute`` with ``Task.pull_request``).

    Steps 1 to 3 as for every trigger, and silence for a sender they refuse (a reader's mention gets
    nothing). Then, read fresh: the pull request is Baton's (``iteration.baton_pull``), open, and a
    review really calls Baton (its body or a line comment; a review that does not is no request).
    The gate and admission are the label's, for the issue whose branch the pull request is: the run
    holds that issue's lock, so it never runs beside the issue's own run."""
    who = authorised(ctx, task, NOT_LOOKED_UP, tell_policy=False, tell_refusal=False)
    if isinstance(who, Result):
        return who
    repo, installation = where(task)
    if task.number is None:
        raise BatonError("no-issue", "an iteration needs a pull request")
    gh = ctx.need_github().for_repository(installation, repo.full_name, "conversation")
    bot = bot_identity(ctx, task)[0]
    if task.review_id is not None:
        review = iteration.read_review(gh, repo.full_name, task.number, task.review_id)
        if not review.calls(bot.removesuffix("[bot]")):
            return Result(State.DONE, f"review {task.review_id} does not call Baton")
    pull = iteration.baton_pull(iteration.read_pull(gh, repo.full_name, task.number), repo_id=repo.id,
                                bot_login=bot)  # fmt: skip
    if isinstance(pull, str):
        return _answer(task, f"Baton follows up only on pull requests it opened; this one is not: {pull}.")
    if not pull.open:
        return _answer(task, "this pull request is closed; reopen it to ask for more.")
    raw = ctx.redis.get(f"{LAST_RUN_PREFIX}{repo.id}:{pull.issue}")
    if raw is None:
        return _answer(task, "Baton has no record of the agent that made this pull request; label "
                             f"#{pull.issue} `agent:<name>` to run one again.")  # fmt: skip
    last = orjson.loads(raw)
    run = dataclasses.replace(task, number=pull.issue, pull_request=pull.number)
    lifecycle.annotate(ctx.redis, task.id, **{admit.ISSUE: str(pull.issue)})  # what ending the task frees
    asked = "review" if task.review_id is not None else "comment"
    context = [f"A follow-up on pull request #{pull.number} for #{pull.issue}, from "
               f"{inert(task.sender.login)}'s {asked}."]  # fmt: skip
    return _gate(ctx, task, str(last["agent"]), offline=bool(last["offline"]), loaded=who.loaded, run=run,
                 context=context)  # fmt: skip


def _answer(task: Task, message: str) -> Result:
    """A short answer on the pull request to someone allowed to call Baton there."""
    answer = Status(State.DONE, task.id, None, f"Baton did not act on that: {message}")
    return Result(State.DONE, f"iteration answered: {message}", answer)


# -- commands, cancel -----------------------------------------------------------------------------


def command(ctx: Context, task: Task) -> Decided:
    found = permission(ctx, task)  # step 1 comes first, whatever the command says
    below = screen(task.sender, found)
    if below is not None:  # not even a reply about the command's syntax
        return unauthorised(ctx, task, below, say=False)
    cmd = task.command
    if cmd is not None and cmd.name == "run":  # no agent named: called by name, the default agent
        return agent_run(ctx, task, cmd.agent, offline=cmd.offline, found=found)
    if cmd is not None and cmd.name == "retry":
        repo, _ = where(task)
        raw = ctx.redis.get(LAST_RUN_PREFIX + f"{repo.id}:{task.number}")
        if raw is not None:
            last = orjson.loads(raw)
            return agent_run(ctx, task, str(last["agent"]), offline=bool(last["offline"]), found=found)
        return _reply(ctx, task, found, "there is no earlier run on this issue to retry.")
    if cmd is not None and cmd.name == "cancel":
        return cancel(ctx, task, found=found)
    usage = cmd.error if cmd is not None and cmd.error else "unknown command"
    return _reply(ctx, task, found, inert(usage, 200))


def _reply(ctx: Context, task: Task, found: Permission | None, message: str) -> Result:
    """A short answer to a command, for a sender the policy lets trigger Baton (anyone else: silence)."""
    who = authorised(ctx, task, found, tell_policy=False, tell_refusal=False)
    if isinstance(who, Result):
        return who
    answer = Status(State.DONE, task.id, None, f"Baton did not act on that command: {message}")
    return Result(State.DONE, f"command answered: {message}", answer)


def cancel(ctx: Context, task: Task, *, found: Permission | None = NOT_LOOKED_UP) -> Result:
    """`/baton cancel`, removing the agent label, closing the issue: authorised like a run."""
    who = authorised(ctx, task, found, tell_policy=False, tell_refusal=False)
    if isinstance(who, Result):
        return who
    repo, _ = where(task)
    if task.number is None:
        return Result(State.DONE, "cancel: no issue")
    how = "command" if task.kind is Kind.COMMAND else "closed" if task.action == "closed" else "unlabeled"
    stopping.request(
        ctx.redis, repo.id, task.number, stopping.Cancel(task.received_at, task.id, task.sender.login, how)
    )
    holder = ctx.redis.get(keys.run_lock(repo.id, task.number))
    # The run's own status says "cancelled" once its supervisor (on whichever worker) stops it; a run
    # still waiting in its repository's line leaves it now, cancelled.
    run = records.text(holder)
    if run and line.cancel(ctx, repo.id, run):
        return Result(State.DONE, f"cancel for #{task.number}: run {run} cancelled while it waited")
    waiting = [t for t in line.waiting_for_pull(ctx, repo.id, task.number) if line.cancel(ctx, repo.id, t)]
    if waiting:  # `/baton cancel` on a pull request whose follow-up waits in line
        return Result(
            State.DONE, f"cancel for #{task.number}: follow-up {waiting[0]} cancelled while it waited"
        )
    return Result(
        State.DONE, f"cancel for #{task.number}: " + (f"run {run} told to stop" if run else "no run active")
    )


# -- merge gate -------------------------------------------------------------------------------------


def merge_gate(ctx: Context, task: Task) -> Result:
    """``baton/merge-gate`` on the pull request's head (``worker.gates.evaluate``): the check run is
    opened once the head is known to be current and the evaluation ours, and completed through
    the outbox with what was re-verified."""
    app = ctx.need_github()
    repo, installation = where(task)
    if task.head_sha is None:
        raise BatonError("no-head-sha", "the delivery names no head commit")
    gh = app.for_repository(installation, repo.full_name, "gate")
    open_run = functools.partial(_open_check_run, ctx, task, gh)
    run_id, verdict, detail = gates.evaluate(ctx, task, open_run=open_run)
    if run_id is None or verdict is None:
        return Result(State.DONE, detail)
    signed = gates.receipt(ctx, task, task.head_sha, verdict)  # logged before GitHub hears of it
    return Result(State.DONE, f"check run {run_id}: {verdict.conclusion} ({detail})",
                  check_runs=(gates.end_for(run_id, verdict, signed),))  # fmt: skip


# The merge gate's check run is opened safely in two halves, kept here together: ``_open_check_run``
# marks the task before the create is sent, and ``opened_check_runs`` reads the marks back for
# whatever ends the task (``worker.jobs``), so a run whose create went unanswered is completed too
# (the outbox finds it by name, head and the task's external id: ``worker.publish``).


def _open_check_run(ctx: Context, task: Task, gh: GitHub[Any], head: str) -> int:
    repo, _ = where(task)
    output = Output("Baton merge gate", "Evaluating this commit.")
    # Marked before it is sent and recorded at once: whatever ends this task from here on
    # completes this run (see worker.jobs), even one whose answer this process never heard.
    lifecycle.annotate(
        ctx.redis, task.id, **{CHECK_RUN_OPENING: head, CHECK_RUN_SENT_AT: f"{time.time():.3f}"}
    )
    run_id = api.create_check_run(gh, repo.full_name, name=gates.CHECK, head_sha=head,
                                  external_id=task.id, details_url=None, output=output)  # fmt: skip
    lifecycle.annotate(ctx.redis, task.id, check_run_ids=str(run_id), **{CHECK_RUN_OPENING: ""})
    return run_id


def opened_check_runs(client: redis.Redis, task_id: str) -> tuple[list[int], list[tuple[str, str, float]]]:
    """The check runs a task opened (their ids), and those whose create went unanswered (name, head,
    when sent): what ending the task must complete."""
    raw = lifecycle.field(client, task_id, "check_run_ids") or ""
    ids = [int(i) for i in raw.split(",") if i.isdigit()]
    opening = lifecycle.field(client, task_id, CHECK_RUN_OPENING)
    sent = lifecycle.field(client, task_id, CHECK_RUN_SENT_AT) or ""
    sent_at = float(sent) if sent.replace(".", "", 1).isdigit() else 0.0  # unknown: long settled
    return ids, [(gates.CHECK, opening, sent_at)] if opening else []


def installation_sync(ctx: Context, task: Task) -> Result:
    if ctx.github is None or task.installation_id is None:
        return Result(State.DONE, "nothing cached for this installation")
    forgotten = ctx.github.invalidate(task.installation_id)
    forgotten += config.forget_visibility(ctx.redis, task.installation_id)
    return Result(State.DONE, f"installation {task.installation_id}: {forgotten} cached entries dropped")


def check_action(ctx: Context, task: Task) -> Result:
    """The "Approve run" button: counts only from someone holding ``trigger.min_permission`` now,
    and approves the command gates for that one head. Anyone else's click changes nothing and
    gets no reply."""
    action = task.check.requested_action if task.check else None
    if action != gates.APPROVE.identifier or task.head_sha is None:
        return Result(State.DONE, f"check-run action {action!r}: not one Baton offers")
    who = authorised(ctx, task, NOT_LOOKED_UP, tell_policy=False, tell_refusal=False)
    if isinstance(who, Result):
        return who
    repo, installation = where(task)
    gh = ctx.need_github().for_repository(installation, repo.full_name, "gate")
    number = task.number or gates.find_pull(gh, repo.full_name, task.head_sha)
    if number is None:
        return Result(State.DONE, f"approval for {task.head_sha[:12]}: no open pull request has that head")
    gates.approve(ctx.redis, repo.id, number, task.head_sha, task.sender.login)
    return merge_gate(ctx, task)


HANDLERS: dict[Kind, Handler] = {
    Kind.AGENT_RUN: lambda ctx, task: agent_run(ctx, task, task.agent or ""),
    Kind.COMMAND: command,
    Kind.CANCEL: cancel,
    Kind.MERGE_GATE: merge_gate,
    Kind.GATE_RERUN: merge_gate,
    Kind.CHECK_ACTION: check_action,
    Kind.INSTALLATION_SYNC: installation_sync,
    Kind.ITERATE: iterate,
}
