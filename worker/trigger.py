"""Who asked, and may they: steps 1 to 3 of every trigger, before anything else is decided.

  1. the sender's permission on the repository, as GitHub reports it now: the first call
     Baton makes for a task. A sender below ``write`` (the floor of every policy) ends the
     task here: nothing is said and nothing else is spent (it is logged and counted), except
     for a label, whose author may get a refusal because labelling already needs triage;
  2. the policy: org ceiling, narrowed by the repo's default branch (``worker.config``);
  3. the sender against the policy's trigger rules (``min_permission``, bots).

The decisions are pure (``worker.authorize``); this module gathers their inputs and says what
a refusal is. ``worker.handlers`` calls it for every trigger, and the run itself
(``worker.runs.execute``) for its policy, read again when the run starts. Admission, the issue's
lock and the budgets, is another step (``worker.runs.admit``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from baton import records
from baton.errors import BatonError
from baton.tasks import Kind, Repository, Task
from worker import config, lifecycle
from worker.authorize import Authorization, Permission, authorize, screen
from worker.context import Context
from worker.github import api
from worker.lifecycle import State
from worker.messages import inert
from worker.policy import PolicyError
from worker.result import Result
from worker.status import Status

log = logging.getLogger("baton.handlers")

#: Set on a task's record once its sender passed step 3: from then on Baton may speak for it.
AUTHORISED = "authorised"


@dataclass(frozen=True)
class Authorised:
    """A sender who passed steps 1 to 3, and the policy they passed under."""

    loaded: config.LoadedPolicy
    verdict: Authorization


def where(task: Task) -> tuple[Repository, int]:
    if task.repository is None or task.installation_id is None:
        raise BatonError("no-installation", "the delivery names no repository or installation")
    return task.repository, task.installation_id


def permission(ctx: Context, task: Task) -> Permission | None:
    """Step 1, the first GitHub call of every trigger. None for bots (they are not collaborators)."""
    app = ctx.need_github()
    repo, installation = where(task)
    if task.sender.is_bot:
        return None
    return api.permission(app.for_repository(installation, repo.full_name, "read"), repo.full_name,
                          task.sender.login)  # fmt: skip


def _refusal(verdict: Authorization, login: str) -> str:
    """Why the sender was refused, in Baton's words; the login is quoted inert."""
    who = inert(login)
    return {
        "below-minimum": f"{who} has {verdict.role} access; triggering Baton here needs "
        f"{verdict.needed} or higher.",
        "bot-not-allowed": f"{who} is a bot; bots trigger Baton only when `trigger.allow_bots` names them.",
        "lookup-failed": f"Baton could not check {who}'s permission on this repository, and refuses when "
        "unsure.",
        "unknown-role": f"GitHub reported a role for {who} that Baton does not know; it refuses when unsure.",
    }.get(verdict.code, "The policy's trigger rules do not let this sender start Baton.")


def unauthorised(ctx: Context, task: Task, verdict: Authorization, *, say: bool) -> Result:
    """Refuse. Only a label's author is told (``say``); anyone else gets silence, and a count."""
    ctx.redis.hincrby(records.COUNTERS_KEY, "unauthorised_sender", 1)
    log.warning("sender may not trigger Baton", extra={"task": task.id, "kind": task.kind.value,
                "sender": task.sender.login, "code": verdict.code, "answered": say})  # fmt: skip
    if not say:
        return Result(State.REFUSED, f"{verdict.code}: {verdict.reason} (not answered)")
    needed = verdict.needed or "write"
    command = inert(f"/baton run {task.agent}") if task.agent else "`/baton run`"
    return Result(State.REFUSED, f"{verdict.code}: {verdict.reason}", Status(
        State.REFUSED, task.id, task.agent, _refusal(verdict, task.sender.login),
        next_steps=(f"Ask someone with {needed} access to add the label again or comment {command}.",),
    ))  # fmt: skip


def policy_failed(task: Task, exc: PolicyError, *, speak: bool) -> Result:
    problems = [str(p) for p in exc.problems]
    status = Status(
        State.FAILED, task.id, task.agent,
        "The capability policy could not be read, so Baton refuses to run anything.",
        evidence="\n".join(problems),
        next_steps=("Fix the file at the line and column shown, then comment `/baton retry`.",),
    ) if speak and task.number is not None else None  # fmt: skip
    return Result(State.FAILED, f"policy invalid: {problems[0] if problems else exc.message}", status)


def policy(ctx: Context, task: Task, *, speak: bool) -> config.LoadedPolicy | Result:
    """Step 2: the effective policy, or the failed Result of a policy that cannot be read (said on
    the issue if ``speak``). A BatonError (GitHub could not be asked) propagates: closed either way."""
    try:
        return config.for_task(ctx, task)
    except PolicyError as exc:
        return policy_failed(task, exc, speak=speak)


#: ``authorised``'s default: look the sender's permission up (step 1) rather than reuse one.
NOT_LOOKED_UP = Permission(error="not looked up")


def authorised(
    ctx: Context, task: Task, found: Permission | None, *, tell_policy: bool, tell_refusal: bool
) -> Authorised | Result:
    """Steps 1 to 3: the sender's permission (unless already ``found``), the policy, the sender
    against its trigger rules. A Result means: stop here (said on the issue only where ``tell_*``)."""
    if found is NOT_LOOKED_UP:
        found = permission(ctx, task)
    below = screen(task.sender, found)
    if below is not None:
        return unauthorised(ctx, task, below, say=task.kind is Kind.AGENT_RUN)
    loaded = policy(ctx, task, speak=tell_policy)
    if isinstance(loaded, Result):
        return loaded
    trigger = loaded.merged.policy.trigger
    verdict = authorize(
        task.sender, found, min_permission=trigger.min_permission, allow_bots=trigger.allow_bots
    )
    if not verdict.allowed:
        return unauthorised(ctx, task, verdict, say=tell_refusal)
    lifecycle.annotate(ctx.redis, task.id, **{AUTHORISED: "1"})
    return Authorised(loaded, verdict)
