"""The run itself (agents queue): checkout, the runner, then a branch and one pull request.

Steps, each on fresh state:
  1. a cancel asked for after this run was requested ends it before anything starts;
  2. a supervisor thread (``worker.runs.supervisor``) renews the issue's lock, the
     concurrency slots and the task's lease every second, and stops the box if a cancel
     arrives or the lock is lost;
  3. the policy is loaded again at the default branch's head, which is also the base
     the agent starts from (the runner decides again on it: a changed policy may deny);
  4. the repository's mirror is fetched with a ``contents: read`` token and the runner
     runs the agent on a plain copy of the base (``worker.runner.run``);
     with ``review:`` in the policy its reviewer then judges the commit, read-only
     (``worker.runs.review``): nothing is pushed unless it passes;
  5. if inspection passed, the commit (the App's bot as author, the person who asked
     as co-author, a ``Baton-Task`` trailer) is pushed to ``baton/issue-<n>`` with a
     ``contents: write`` token, never forced; if that branch has commits Baton did not
     make, nothing is pushed and the status says so;
  6. one pull request per issue: opened, or updated on a later run; the ``baton/trifecta``
     and ``baton/agent`` check runs are put on its head (``worker.runs.pull_request``).

A retry of a task whose worker died after its push finds its own commit on the branch
(by the trailer) and goes straight to step 6, so a crash never makes a second PR.

A follow-up on the pull request (``Task.pull_request``: an iteration) differs in three places:
the pull request is read again first (still Baton's, still open, and a review's line comments as
they are now: ``worker.runs.iteration``); the agent starts on the branch's tip, not the default
branch, and its commit has that tip as its one parent; and a commit on the branch that Baton did
not make is built on when GitHub ties it to an author holding ``trigger.min_permission`` (the run
records who), else nothing is pushed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import orjson
from githubkit import GitHub

from baton.errors import BatonError
from baton.tasks import Outcome, Sender, Task
from worker import audit, lifecycle, replay, trigger
from worker.authorize import authorize
from worker.context import Context
from worker.github import api
from worker.github.client import GitHubError
from worker.handlers import EVIDENCE_TTL_S
from worker.lifecycle import State
from worker.messages import inert
from worker.policy import (
    MODEL_KEYS,
    Policy,
    TaskFacts,
    UnknownAgent,
    decide,
    explain,
)
from worker.policy.load import reserved_env
from worker.publish import status_now
from worker.result import Result
from worker.runner import gateway, inspect_git
from worker.runner import run as runner
from worker.runs import admit, cancel, iteration, pull_request, report, review
from worker.runs.identity import bot_identity
from worker.runs.iteration import Conversation
from worker.runs.mirror import Mirror, MirrorError, Remote
from worker.runs.plan import Plan
from worker.runs.record import Record, issue_digest
from worker.runs.supervisor import Supervisor
from worker.trigger import where
from worker.umbrella import split as umbrella_split
from worker.umbrella import verify

log = logging.getLogger("baton.runs")

# -- the run ------------------------------------------------------------------------------------------


def run(ctx: Context, task: Task) -> Result:
    repo, _ = where(task)
    if task.number is None:
        raise BatonError("no-issue", "an agent run needs an issue")
    plan = Plan(
        agent=lifecycle.field(ctx.redis, task.id, admit.AGENT) or task.agent or "",
        offline=lifecycle.field(ctx.redis, task.id, admit.OFFLINE) == "1",
        attempt=int(lifecycle.field(ctx.redis, task.id, admit.ATTEMPT) or 1),
        number=task.number,
    )
    early = cancel.applies_to(ctx.redis, repo.id, (task.number, task.pull_request), task.received_at)
    if early is not None:
        record = Record(plan.agent, Outcome.CANCELLED, early.reason())
        return Result(
            State.CANCELLED,
            f"cancelled before it started: {early.reason()}",
            report.ended(task.id, plan.agent, record),
        )
    with Supervisor(ctx, task) as supervisor:
        try:
            return _run(ctx, task, plan, supervisor)
        finally:
            _forget_local_branch(ctx, task)


def _forget_local_branch(ctx: Context, task: Task) -> None:
    """The run's own branch in the mirror has served (pushed, or judged): drop it, so refs do not pile up."""
    repo, _ = where(task)
    mirror = Mirror(ctx.data_dir, repo.id)
    if not mirror.path.exists():
        return
    try:
        if mirror.head(f"refs/heads/{_local_branch(task)}") is not None:
            mirror.run("update-ref", "-d", f"refs/heads/{_local_branch(task)}")
    except MirrorError as exc:
        log.warning("could not drop the run's local branch", extra={"task": task.id, "error": exc.message})


def _local_branch(task: Task) -> str:
    return f"baton/task-{task.id}"


def _run(ctx: Context, task: Task, plan: Plan, supervisor: Supervisor) -> Result:
    app = ctx.need_github()
    repo, installation = where(task)
    # 3. the policy, read again at the default branch's head: also the base the agent starts on
    loaded = trigger.policy(ctx, task, speak=True)
    if isinstance(loaded, Result):
        return loaded
    policy, head = loaded.merged.policy, loaded.repo
    plan.notices = tuple(loaded.notices)
    gh = app.for_repository(installation, repo.full_name, "pull-request")
    plan.issue = api.request(gh, "GET", f"{api.repo_path(repo.full_name)}/issues/{plan.number}")
    plan.clone_url = str(api.request(gh, "GET", api.repo_path(repo.full_name))["clone_url"])
    if task.pull_request is not None:
        asked = _follow_up(ctx, task, plan, gh, task.pull_request)
        if isinstance(asked, Result):
            return asked
        plan.follow_up = asked
    # 4. the mirror, fetched; the agent runs unless an earlier attempt of this task already pushed
    mirror = Mirror(ctx.data_dir, repo.id)
    branch = report.branch_for(plan.number)
    read = Remote(plan.clone_url, app.git_token(installation, repo.full_name))
    with mirror.locked():
        tip = mirror.fetch(read, [head.branch, branch]).get(branch)
    record = _saved(ctx, task.id)
    # A sub-issue of an umbrella: its siblings are verified before it runs and before it publishes.
    umbrella = umbrella_split.parent_of(ctx.redis, repo.id, plan.number) if plan.follow_up is None else None
    if tip is None or record is None or record.commit != tip:
        handed = verify.before_run(ctx, task, umbrella, gh) if umbrella is not None else None
        if handed is not None:
            return _ended(ctx, task, plan, Record(plan.agent, Outcome.NO_CHANGES, handed))
        ran = _agent(ctx, task, plan, supervisor, policy=policy, head=head, mirror=mirror, tip=tip)
        if isinstance(ran, Result):
            return ran
        if umbrella is not None:  # 5 and 6 under the umbrella's lock, on state verified there
            return _verified(ctx, task, plan, supervisor, umbrella, record=ran, mirror=mirror, tip=tip,
                             gh=gh, base_branch=head.branch)  # fmt: skip
        # 5. the commit, pushed to the issue's branch (never forced)
        stopped = _push(ctx, task, plan, supervisor, mirror=mirror, record=ran, tip=tip)
        if stopped is not None:
            return stopped
        record = ran
    # 6. the pull request and its check runs
    return pull_request.publish(ctx, task, plan, gh, record, base_branch=head.branch)


def _verified(
    ctx: Context, task: Task, plan: Plan, supervisor: Supervisor, umbrella: umbrella_split.Umbrella, *,
    record: Record, mirror: Mirror, tip: str | None, gh: GitHub[Any], base_branch: str,
) -> Result:  # fmt: skip
    """Steps 5 and 6 for a sub-issue: its siblings verified, its change moved onto a base that moved
    under it, then pushed and opened, all under its umbrella's lock (``worker.umbrella.verify``). The
    record kept is the one pushed (a move onto a new base makes a new commit)."""
    repo, installation = where(task)
    app = ctx.need_github()

    def push(kept: Record) -> Result | None:
        _save(ctx, task.id, kept)
        return _push(ctx, task, plan, supervisor, mirror=mirror, record=kept, tip=tip)

    def ended(kept: Record) -> Result:
        _save(ctx, task.id, kept)
        return _ended(ctx, task, plan, kept)

    return verify.publish(
        ctx, task, umbrella, record=record, mirror=mirror, base_branch=base_branch, tip=tip,
        remote=lambda: Remote(plan.clone_url, app.git_token(installation, repo.full_name)),
        stop=supervisor.stop, push=push, ended=ended,
        open_pull=lambda kept: pull_request.publish(ctx, task, plan, gh, kept, base_branch=base_branch),
    )  # fmt: skip


def _agent(
    ctx: Context, task: Task, plan: Plan, supervisor: Supervisor, *, policy: Policy, head: api.RepoHead,
    mirror: Mirror, tip: str | None,
) -> Record | Result:  # fmt: skip
    """Step 4: the runner on a plain copy of the base. A Record with a commit to push, or how the
    run ended without one."""
    branch = report.branch_for(plan.number)
    if plan.follow_up is not None and tip is None:
        record = Record(plan.agent, Outcome.CONFLICT, f"branch `{branch}` is gone, so there is nothing to "
                                                      "follow up on")  # fmt: skip
        return _ended(ctx, task, plan, record)
    if tip is not None and (foreign := _foreign_commits(ctx, mirror.path, head.sha, tip)):
        refused = (
            _build_on(ctx, task, policy, foreign, plan)
            if plan.follow_up is not None
            else f"branch `{branch}` has {len(foreign)} commit(s) Baton did not make "
            f"(newest {foreign[0][:12]}), and Baton never pushes over them."
        )
        if refused is not None:
            return _ended(ctx, task, plan, Record(plan.agent, Outcome.CONFLICT, refused))
    # A follow-up starts on the pull request's head; a run from the issue on today's default branch.
    base = tip if plan.follow_up is not None and tip is not None else head.sha
    parents = (base,) if base != head.sha else _parents(mirror.path, head.sha, tip)
    request = _request(ctx, task, plan, policy, base=base, private=head.private, repo_dir=mirror.path,
                       parents=parents)  # fmt: skip
    try:
        run_record = runner.run(request, stop=supervisor.stop)
    except UnknownAgent:
        record = Record(plan.agent, Outcome.DENIED, "the agent is no longer in this repository's policy")
        return _ended(ctx, task, plan, record)
    audit.note(ctx.redis, task.installation_id, task.id, "exited", outcome=run_record.outcome,
               exit_code=run_record.exit_code, violations=len(run_record.violations),
               commit=run_record.commit, decision_sha256=run_record.decision_sha256)  # fmt: skip
    # What the receipts name: the base, the issue text as the agent got it, the policy in force.
    record = Record.of(run_record, explanation=_explain(ctx, policy, plan, head.private), base=base,
                       issue_sha256=issue_digest(plan.issue))  # fmt: skip
    if plan.follow_up is not None:
        record = dataclasses.replace(record, follow_up=plan.follow_up.to_data(), built_on=plan.built_on)
    replay.remember_policy(ctx.redis, policy)
    if supervisor.reason is not None:  # stopped in the box, or a cancel came as the agent ended
        record = dataclasses.replace(record, outcome=Outcome.CANCELLED, reason=supervisor.reason)
    # The policy's reviewer, on the commit made and before any push (a no-op without ``review:``).
    record = review.judge(ctx, task, plan, supervisor, policy=policy, private=head.private, mirror=mirror,
                          record=record)  # fmt: skip
    _save(ctx, task.id, record)
    if record.outcome is not Outcome.DONE:
        return _ended(ctx, task, plan, record, agent_env=_secrets(policy, plan.agent))
    return record


def _push(
    ctx: Context, task: Task, plan: Plan, supervisor: Supervisor, *, mirror: Mirror, record: Record,
    tip: str | None,
) -> Result | None:  # fmt: skip
    """Step 5: the commit onto the issue's branch, expecting the tip it was made on. None: pushed."""
    repo, installation = where(task)
    branch = report.branch_for(plan.number)
    write = Remote(plan.clone_url, ctx.need_github().git_token(installation, repo.full_name, write=True))
    try:
        with mirror.locked():
            if supervisor.reason is not None:  # the last moment a cancel can still stop the push
                record = dataclasses.replace(record, outcome=Outcome.CANCELLED, reason=supervisor.reason)
                _save(ctx, task.id, record)
                return _ended(ctx, task, plan, record)
            mirror.push(write, str(record.commit), branch, expect=tip)
        audit.note(ctx.redis, installation, task.id, "pushed", branch=branch, commit=str(record.commit))
    except MirrorError as exc:
        if exc.code != "push-rejected":
            raise
        record = dataclasses.replace(
            record,
            outcome=Outcome.CONFLICT,
            reason=f"GitHub refused the push to `{branch}`: it changed while the agent ran",
        )
        return _ended(ctx, task, plan, record)
    return None


def _request(
    ctx: Context,
    task: Task,
    plan: Plan,
    policy: Policy,
    *,
    base: str,
    private: bool,
    repo_dir: Path,
    parents: tuple[str, ...],
) -> runner.RunRequest:
    title = str(plan.issue.get("title") or "")
    body = str(plan.issue.get("body") or "")
    asked = plan.follow_up
    message = report.commit_message(title=title, number=plan.number, task_id=task.id, agent=plan.agent,
                                    co_author=_co_author(ctx, task),
                                    follow_up=asked.pull_request if asked else None)  # fmt: skip

    def started(record: runner.RunRecord) -> None:
        """The agent was found and its version read: say "running" just before its box starts."""
        running = report.running(task.id, plan.agent, adapter=str(record.adapter), box=_box_promise(ctx),
                                 version=record.adapter_version, attempt=plan.attempt)  # fmt: skip
        status_now(ctx, task, dataclasses.replace(running, notices=plan.notices))
        audit.note(ctx.redis, task.installation_id, task.id, "spawned", agent=plan.agent,
                   adapter=str(record.adapter), adapter_version=str(record.adapter_version))  # fmt: skip

    return runner.RunRequest(
        on_start=started,
        agent=plan.agent,
        repo=repo_dir,
        base=base,
        issue=runner.Issue(
            title,
            body,
            instruction=asked.instruction if asked else None,
            notes=asked.notes() if asked else (),
        ),
        policy=policy,
        repo_private=private,
        offline=plan.offline,
        run_id=task.id,
        env_values={name: os.environ[name] for name in _env_names(policy, plan.agent) if name in os.environ},
        model_keys=gateway.worker_keys(os.environ),
        max_seconds=admit.seconds_left(ctx, task, policy),
        egress_routes={host: (ip, port) for host, ip, port in ctx.agent_routes},
        model_upstreams=ctx.model_upstreams,
        prices=ctx.prices,
        ledger=admit.spend_ledger(ctx, task, policy),
        commit=runner.CommitSpec(
            branch=_local_branch(task), message=message, author=bot_identity(ctx, task), parents=parents
        ),
    )


def _ended(ctx: Context, task: Task, plan: Plan, record: Record, agent_env: tuple[str, ...] = ()) -> Result:
    """A run that opened no pull request. If its agent ran, what it did is signed all the same (an
    injected agent's refused model requests above all) and the receipt goes on the issue."""
    status = dataclasses.replace(report.ended(task.id, plan.agent, record, agent_env), notices=plan.notices)
    if task.pull_request is not None:  # asked on the pull request: asked again there, not retried
        status = dataclasses.replace(status, next_steps=(report.ASK_AGAIN,))
    if record.box and record.base:
        status = dataclasses.replace(
            status, receipt=pull_request.unpushed_receipt(ctx, task, plan, record).text()
        )
    fields = record.usage_fields()
    replies = pull_request.answers(task, plan, record)
    return Result(status.state, f"{record.outcome}: {record.reason}", status, fields=fields, replies=replies)


# -- identities, secrets, the mirror ---------------------------------------------------------------


def _co_author(ctx: Context, task: Task) -> str | None:
    """``login <id+login@users.noreply.github.com>`` for the person who asked (GitHub credits it)."""
    if task.sender.is_bot or task.installation_id is None or task.repository is None:
        return None
    gh = ctx.need_github().for_repository(task.installation_id, task.repository.full_name, "read")
    try:
        user = api.request(gh, "GET", f"/users/{task.sender.login}")
    except GitHubError:
        return None  # credit is not worth failing a run for
    return f"{task.sender.login} <{user['id']}+{task.sender.login}@users.noreply.github.com>"


def _env_names(policy: Policy, agent: str) -> tuple[str, ...]:
    """The names whose values the agent gets. Loading refuses Baton's own settings; should a
    policy reach here naming one anyway, the run is refused rather than handed the value."""
    found = policy.agents.get(agent)
    names = tuple(found.env) if found is not None else ()
    reserved = [name for name in names if reserved_env(name)]
    if reserved:
        raise BatonError("reserved-env", f"the policy passes {reserved[0]} to the agent: Baton's own setting")
    return names


def _secrets(policy: Policy, agent: str) -> tuple[str, ...]:
    """Values the agent was given, and the model keys it never was: never shown, even if printed."""
    names = {*_env_names(policy, agent), *MODEL_KEYS}
    return tuple(os.environ[name] for name in sorted(names) if os.environ.get(name))


def _box_promise(ctx: Context) -> str:
    return (
        "network cut off except through Baton's egress proxy"
        if ctx.network_cutoff
        else ("this machine cannot cut the agent's network; the gate counted it as open")
    )


def _foreign_commits(ctx: Context, repo_dir: Path, base: str, tip: str) -> list[str]:
    """Commits on the branch (not on the base) that Baton did not make, newest first: no
    ``Baton-Task`` trailer, or one naming a run whose record holds another commit (a trailer anyone
    can write; the record only Baton)."""
    with inspect_git.session(repo_dir) as git:
        listed = inspect_git.commit_log(git, base, tip)

    def ours(sha: str, message: str) -> bool:
        task_id = report.trailer(message)
        if task_id is None:
            return False
        recorded = _saved(ctx, task_id)
        return recorded is not None and recorded.commit == sha

    return [sha for sha, _, message in reversed(listed) if not ours(sha, message)]


def _build_on(ctx: Context, task: Task, policy: Policy, foreign: list[str], plan: Plan) -> str | None:
    """Whether a follow-up may build on commits Baton did not make: each must be tied by GitHub to
    an author holding ``trigger.min_permission`` now (or a bot ``trigger.allow_bots`` names). None:
    it may (``plan.built_on`` says who); else why not, naming the first commit refused."""
    repo, installation = where(task)
    gh = ctx.need_github().for_repository(installation, repo.full_name, "read")
    rules = policy.trigger
    built: list[dict[str, str]] = []
    for sha in reversed(foreign):  # oldest first, as they were made
        data = api.request(gh, "GET", f"{api.repo_path(repo.full_name)}/commits/{sha}")
        author = data.get("author") if isinstance(data.get("author"), dict) else None
        login = str(author.get("login") or "") if author else ""
        if not login:
            return (f"commit {sha[:12]} on the branch is tied by GitHub to no account, so Baton cannot tell "
                    "whether its author may trigger it; it builds only on commits whose author holds "
                    f"`{rules.min_permission}`. Nothing was pushed.")  # fmt: skip
        sender = Sender(login, str(author.get("type") or "User")) if author else Sender(login, "User")
        found = trigger.permission(ctx, dataclasses.replace(task, sender=sender))
        verdict = authorize(sender, found, min_permission=rules.min_permission, allow_bots=rules.allow_bots)
        if not verdict.allowed:
            return (f"commit {sha[:12]} on the branch is by {inert(login)}, who may not trigger Baton here "
                    f"({inert(verdict.code)}); Baton builds only on commits whose author holds "
                    f"`{rules.min_permission}`. Nothing was pushed.")  # fmt: skip
        held = found.permission if found is not None and found.permission else "bot"
        built.append({"sha": sha, "author": login, "permission": held})
    plan.built_on = tuple(built)
    return None


def _follow_up(ctx: Context, task: Task, plan: Plan, gh: GitHub[Any], number: int) -> Conversation | Result:
    """The pull request, read again as the run starts: still Baton's for this issue and open, and what
    was asked on it (a review's line comments as they are now). Else how the run ends."""
    repo, _ = where(task)
    bot = bot_identity(ctx, task)[0]
    pull = iteration.baton_pull(iteration.read_pull(gh, repo.full_name, number), repo_id=repo.id,
                                bot_login=bot)  # fmt: skip
    if isinstance(pull, str) or pull.issue != plan.number:
        why = pull if isinstance(pull, str) else f"its branch is not #{plan.number}'s"
        return _ended(
            ctx,
            task,
            plan,
            Record(
                plan.agent, Outcome.CONFLICT, f"pull request #{number} is not Baton's for this issue: {why}"
            ),
        )
    if not pull.open:
        return _ended(
            ctx,
            task,
            plan,
            Record(
                plan.agent, Outcome.CANCELLED, f"pull request #{number} was closed before the run started"
            ),
        )
    if task.review_id is None:
        return iteration.of_comment(number, task.sender.login, task.untrusted.instruction or "")
    submitted = iteration.read_review(gh, repo.full_name, number, task.review_id)
    return iteration.of_review(number, submitted, bot.removesuffix("[bot]"))


def _parents(repo_dir: Path, base: str, tip: str | None) -> tuple[str, ...]:
    """On top of the branch's tip when there is one; with the base as second parent if the branch
    does not contain it yet, so the PR's diff is exactly this run's change against today's base."""
    if tip is None:
        return ()
    with inspect_git.session(repo_dir) as git:
        contains = git.call("merge-base", "--is-ancestor", base, tip)[0] == 0
    return (tip,) if contains else (tip, base)


def _saved(ctx: Context, task_id: str) -> Record | None:
    raw = ctx.redis.get(admit.RECORD_PREFIX + task_id)
    return Record.from_data(orjson.loads(raw)) if raw else None


def _save(ctx: Context, task_id: str, record: Record) -> None:
    data = orjson.dumps(record.to_data(), option=orjson.OPT_SORT_KEYS)
    ctx.redis.set(admit.RECORD_PREFIX + task_id, data, ex=EVIDENCE_TTL_S)


def _explain(ctx: Context, policy: Policy, plan: Plan, private: bool) -> str:
    """The gate's decision in words: the same inputs as the runner's, so the same decision."""
    facts = TaskFacts(agent=plan.agent, repo_private=private, offline=plan.offline,
                      network_cutoff=ctx.network_cutoff, seccomp=ctx.seccomp)  # fmt: skip
    return explain(decide(policy, facts))
