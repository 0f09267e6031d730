"""What each kind of task does: read fresh state from GitHub, decide, say what to publish.

A handler returns a ``Result``: the task's terminal state and what to tell
GitHub (a status comment, a check run). ``worker.jobs`` commits the state
first and publishes after, so a crash never leaves a claim on GitHub that the
record does not back. The decisions themselves are pure functions
(``authorize``, ``decide``); handlers only gather their inputs.

An agent run, step by step (nothing is ever spawned here; the agent runner
arrives with a later issue):
  1. load the policy: org ceiling, narrowed by the repo's default branch;
  2. check the sender's permission on the repository, as GitHub reports it now;
  3. run the trifecta gate on the effective policy and the fresh repo facts;
  4. record the decision for the evidence trail and explain it on the issue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from bot.errors import BatonError
from bot.tasks import Kind, Repository, Task
from worker import config
from worker.authorize import Authorization, authorize
from worker.context import Context
from worker.github import api
from worker.github.limits import Output
from worker.lifecycle import State
from worker.policy import Decision, PolicyError, TaskFacts, UnknownAgent, decide, explain
from worker.status import Status

MERGE_GATE_CHECK = "baton/merge-gate"
DECISION_PREFIX = "baton:decision:"
LAST_RUN_PREFIX = "baton:last-run:"
EVIDENCE_TTL_S = 90 * 24 * 3600


@dataclass(frozen=True)
class Result:
    state: State
    detail: str
    status: Status | None = None  # the status comment, when the task has an issue
    fields: dict[str, str] = field(default_factory=dict)


def failed(task: Task, exc: BatonError) -> Result:
    status = None
    if task.kind in (Kind.AGENT_RUN, Kind.COMMAND) and task.number is not None:
        status = Status(State.FAILED, task.id, task.agent, f"Baton could not finish this task: {exc.message}",
                        next_steps=("Fix the cause above, then comment `/baton retry`.",))  # fmt: skip
    return Result(State.FAILED, f"{exc.code}: {exc.message}", status)


# -- agent runs --------------------------------------------------------------------------------


def _policy_failed(task: Task, agent: str | None, exc: PolicyError) -> Result:
    problems = [str(p) for p in exc.problems]
    return Result(State.FAILED, f"policy invalid: {problems[0] if problems else exc.message}", Status(
        State.FAILED, task.id, agent,
        "The capability policy could not be read, so Baton refuses to run anything.", details=problems,
        next_steps=("Fix the file at the line and column shown, then comment `/baton retry`.",),
    ))  # fmt: skip


def _gatekeep(ctx: Context, task: Task) -> tuple[config.LoadedPolicy, Authorization]:
    """Steps 1 and 2: the effective policy, and whether the sender may trigger under it."""
    app = ctx.need_github()
    repo, installation = _where(task)
    loaded = config.load(app, ctx.redis, installation, repo.full_name)
    trigger = loaded.merged.policy.trigger
    gh = app.for_repository(installation, repo.full_name, "read")
    found = None if task.sender.is_bot else api.permission(gh, repo.full_name, task.sender.login)
    verdict = authorize(
        task.sender, found, min_permission=trigger.min_permission, allow_bots=trigger.allow_bots
    )
    return loaded, verdict


def agent_run(ctx: Context, task: Task, agent: str, *, offline: bool = False) -> Result:
    try:
        loaded, verdict = _gatekeep(ctx, task)
    except PolicyError as exc:
        return _policy_failed(task, agent, exc)
    policy = loaded.merged.policy
    widening = [str(p) for p in loaded.merged.problems]
    if not verdict.allowed:
        return Result(State.REFUSED, f"{verdict.code}: {verdict.reason}", Status(
            State.REFUSED, task.id, agent, verdict.reason,
            next_steps=(f"Ask someone with {policy.trigger.min_permission} access to label the issue "
                        f"`agent:{agent}` or comment `/baton run {agent}`.",),
        ))  # fmt: skip
    repo, _ = _where(task)
    last_run = orjson.dumps({"agent": agent, "offline": offline})  # what `/baton retry` repeats
    ctx.redis.set(f"{LAST_RUN_PREFIX}{repo.id}:{task.number}", last_run, ex=EVIDENCE_TTL_S)

    try:
        decision = decide(policy, TaskFacts(agent=agent, repo_private=loaded.repo.private, offline=offline))
    except UnknownAgent as exc:
        known = ", ".join(f"`{a}`" for a in sorted(policy.agents)) or "none"
        return Result(State.REFUSED, f"unknown-agent: {agent}", Status(
            State.REFUSED, task.id, agent,
            f"`{agent}` is not an agent this repository's policy allows. {exc.message}",
            details=(f"Agents allowed here: {known}.",),
        ))  # fmt: skip
    _record_decision(ctx, task, decision, loaded)
    sources = [f"policy: {s.label()}" for s in loaded.sources]
    if widening:
        sources += [f"ignored (a repository may only narrow the org policy): {w}" for w in widening]
    if not decision.allowed:
        legs = ", ".join(str(axis).replace("_", " ") for axis in decision.triggered)
        return Result(State.DENIED, f"trifecta: {', '.join(decision.triggered)}", Status(
            State.DENIED, task.id, agent,
            f"Baton started no agent: this run of `{agent}` would combine {legs} (the lethal trifecta). "
            "Here is what put each one there, and what would make it pass:",
            evidence=explain(decision), details=sources,
            next_steps=(f"Comment `/baton run {agent} --offline` to run it with every external-communication "
                        "tool and egress host removed (decided again by the same gate).",
                        "Or narrow the agent in `.github/baton.yml` as suggested above."),
        ), {"decision_sha256": _digest(decision)})  # fmt: skip
    mode = " offline" if offline else ""
    return Result(State.ACCEPTED, f"allowed{mode}", Status(
        State.ACCEPTED, task.id, agent,
        f"{verdict.reason}. The capability gate allowed this{mode} run of `{agent}`. "
        "No agent process is started yet: the agent runner arrives with a later Baton release.",
        details=[*explain(decision).splitlines()[:1], *sources],
    ), {"decision_sha256": _digest(decision)})  # fmt: skip


def _digest(decision: Decision) -> str:
    return hashlib.sha256(decision.to_json()).hexdigest()


def _record_decision(ctx: Context, task: Task, decision: Decision, loaded: config.LoadedPolicy) -> None:
    """Every decision, allowed or not, is kept for the evidence trail (signed in a later issue)."""
    record = {
        "task_id": task.id,
        "decision": orjson.loads(decision.to_json()),
        "sources": [{"repository": s.repository, "path": s.path, "sha": s.sha, "found": s.found}
                    for s in loaded.sources],
    }  # fmt: skip
    ctx.redis.set(
        DECISION_PREFIX + task.id, orjson.dumps(record, option=orjson.OPT_SORT_KEYS), ex=EVIDENCE_TTL_S
    )


def _where(task: Task) -> tuple[Repository, int]:
    if task.repository is None or task.installation_id is None:
        raise BatonError("no-installation", "the delivery names no repository or installation")
    return task.repository, task.installation_id


# -- commands, cancel -----------------------------------------------------------------------------


def command(ctx: Context, task: Task) -> Result:
    cmd = task.command
    if cmd is None or cmd.name == "invalid":
        # Answered only after the sender proves write access: strangers get no bot replies.
        return _checked_reply(ctx, task, cmd.error if cmd and cmd.error else "unknown command")
    if cmd.name == "run" and cmd.agent:
        return agent_run(ctx, task, cmd.agent, offline=cmd.offline)
    if cmd.name == "retry":
        repo, _ = _where(task)
        raw = ctx.redis.get(LAST_RUN_PREFIX + f"{repo.id}:{task.number}")
        if raw is None:
            return _checked_reply(ctx, task, "there is no earlier run on this issue to retry")
        last = orjson.loads(raw)
        return agent_run(ctx, task, str(last["agent"]), offline=bool(last["offline"]))
    return cancel(ctx, task)


def _checked_reply(ctx: Context, task: Task, message: str) -> Result:
    try:
        _, verdict = _gatekeep(ctx, task)
    except PolicyError as exc:
        return _policy_failed(task, None, exc)
    if not verdict.allowed:
        return Result(State.REFUSED, f"{verdict.code}: {verdict.reason}")  # no reply to strangers
    return Result(
        State.DONE,
        f"command not understood: {message}",
        Status(State.DONE, task.id, None, f"Baton did not understand that command: {message}"),
    )


def cancel(_ctx: Context, task: Task) -> Result:
    # No agent runs yet, so there is nothing to stop; the agent-runs issue stops the run under its lock.
    return Result(State.DONE, f"cancel for #{task.number}: no run is active")


# -- merge gate -------------------------------------------------------------------------------------


def merge_gate(ctx: Context, task: Task) -> Result:
    app = ctx.need_github()
    repo, installation = _where(task)
    if task.head_sha is None:
        raise BatonError("no-head-sha", "the delivery names no head commit")
    gh = app.for_repository(installation, repo.full_name, "report")
    output = Output("Baton merge gate", "Started.")
    run_id = api.create_check_run(gh, repo.full_name, name=MERGE_GATE_CHECK, head_sha=task.head_sha,
                                  external_id=task.id, details_url=None, output=output)  # fmt: skip
    summary = ("No merge gates are configured yet, so Baton makes no claim about this commit. "
               "Gates (and signed receipts) arrive with a later Baton release.")  # fmt: skip
    api.complete_check_run(gh, repo.full_name, run_id, conclusion="neutral", details_url=None,
                           output=Output("No gates configured", summary))  # fmt: skip
    return Result(State.DONE, f"check run {run_id} completed neutral", fields={"check_run_id": str(run_id)})


def installation_sync(ctx: Context, task: Task) -> Result:
    forgotten = ctx.github.invalidate(task.installation_id) if ctx.github and task.installation_id else 0
    return Result(State.DONE, f"installation {task.installation_id}: {forgotten} cached token(s) dropped")


def check_action(_ctx: Context, task: Task) -> Result:
    action = task.check.requested_action if task.check else None
    return Result(State.DONE, f"check-run action {action!r}: no actions are defined yet")


HANDLERS: dict[Kind, Callable[[Context, Task], Result]] = {
    Kind.AGENT_RUN: lambda ctx, task: agent_run(ctx, task, task.agent or ""),
    Kind.COMMAND: command,
    Kind.CANCEL: cancel,
    Kind.MERGE_GATE: merge_gate,
    Kind.GATE_RERUN: merge_gate,
    Kind.CHECK_ACTION: check_action,
    Kind.INSTALLATION_SYNC: installation_sync,
}
