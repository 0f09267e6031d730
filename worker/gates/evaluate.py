"""One merge-gate evaluation: a pull request's head, under its default branch's policy, re-verified.

A gate result is a claim about one commit under one policy, so it is keyed by
(repository, head SHA, policy digest) and published only after the worker has
looked again:

1. fresh state first: the pull request as GitHub has it now (open, its head, its base)
   and the policy at the default branch's head; a trigger for an older head ends
   ``neutral`` ("superseded") at once, without a check run of its own;
2. one evaluation per key: a second trigger for the same key while one runs makes no
   check run (the first one's carries the result); a finished, verified result for the
   same key is posted again instead of recomputed, and says so;
3. the built-in gates on the change (merge base to head, read from git); the command
   gates in the agent box, unless the code is untrusted (a fork, or an author below
   ``trigger.min_permission``) and no maintainer approved this head: then
   ``action_required`` with an "Approve run" button;
4. before publishing, the pull request and the policy are read again: a head that moved
   ends the run ``neutral`` ("superseded by …"), a changed base or policy is evaluated
   again; ``success`` only when the stored result, the fresh pull request and the
   summary about to be published all agree.

This module is that flow. Its parts: ``pulls`` (the pull request as GitHub has it now),
``verdicts`` (the evaluation, its words and the agreement, all pure) and ``store`` (the lock,
the stored results and approvals in Redis).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import orjson
import redis
from githubkit import GitHub

from baton.errors import BatonError
from baton.tasks import BRANCH_PREFIX, Task
from evidence import statement
from worker import audit, config, receipts
from worker.authorize import ROLE_RANK, effective_role
from worker.context import Context
from worker.gates import builtin, commands, pulls, reviewer, secrets, store, verdicts
from worker.gates.pulls import Pull
from worker.gates.verdicts import Verdict
from worker.github import api
from worker.github.limits import Output
from worker.policy import Policy
from worker.publish import CheckRunEnd
from worker.runner import inspect_git
from worker.runner.inspect_rules import violations
from worker.runs import admit, report
from worker.runs.identity import bot_identity
from worker.runs.mirror import Mirror, Remote

log = logging.getLogger("baton.gates")

CHECK = "baton/merge-gate"
#: Times a policy change during the gates makes Baton evaluate again before it gives up (neutral).
MAX_ROUNDS = 2
# Used by the handlers: the button, finding a fork's pull request, a maintainer's approval.
APPROVE = verdicts.APPROVE
find_pull = pulls.find_pull
approve = store.approve


class Moved(Exception):
    """The pull request moved on while Baton looked at it: nothing may be claimed about the old head."""


def _role(gh: GitHub[Any], full_name: str, login: str, kind: str) -> str | None:
    """The author's role now, as GitHub says; None for bots and on any error (trusted less, never more)."""
    if kind == "Bot":
        return None
    found = api.permission(gh, full_name, login)
    return effective_role(found) if found.error is None else None


def _at_least(role: str | None, needed: str) -> bool:
    return role is not None and ROLE_RANK.get(role, -1) >= ROLE_RANK[needed]


# -- the evaluation --------------------------------------------------------------------------------


def evaluate(ctx: Context, task: Task, *, open_run: Any) -> tuple[int | None, Verdict | None, str]:
    """Judge the task's pull request head. ``open_run(head_sha) -> check run id`` posts the
    in-progress run once the key is ours. Returns (check run id, verdict, detail); no run id
    means no check run was made (superseded, or joined another evaluation)."""
    app = ctx.need_github()
    repo, installation = task.repository, task.installation_id
    if repo is None or installation is None or task.head_sha is None:
        raise BatonError("no-head-sha", "the delivery names no repository or head commit")
    gh = app.for_repository(installation, repo.full_name, "gate")
    number = task.number or find_pull(gh, repo.full_name, task.head_sha)
    if number is None:
        return None, None, f"no open pull request has head {task.head_sha[:12]}"
    for _ in range(MAX_ROUNDS):
        pr = pulls.pull(gh, repo.full_name, number)
        if pr.state != "open" or pr.head_sha != task.head_sha:
            why = "closed" if pr.state != "open" else f"superseded by {pr.head_sha[:12]}"
            return None, None, f"#{number} {why}: nothing to evaluate for {task.head_sha[:12]}"
        loaded = config.for_task(ctx, task)
        policy = loaded.merged.policy
        key = store.key(repo.id, pr.head_sha, policy.digest)
        reused = store.load(ctx.redis, key)
        if reused is not None and reused.conclusion != "action_required":
            run_id = open_run(pr.head_sha)
            verdict = verdicts.verdict_of(reused, reused=True)
            return run_id, _reverified(gh, repo.full_name, pr, verdict), "reused"
        holder = store.lock(ctx.redis, key, task.id)
        if holder is not None:
            return None, None, f"joined the evaluation of task {holder} for {pr.head_sha[:12]}"
        try:
            run_id = open_run(pr.head_sha)
            try:
                result = _judge(ctx, task, gh, pr, policy, number=number)
            except Moved as moved:
                said = f"The pull request was {moved} while Baton looked: no claim about {pr.head_sha[:12]}."
                return run_id, Verdict("neutral", "Not judged: the pull request moved", said), str(moved)
            # Re-read the board before writing: the PR and the policy, as they are now.
            fresh = pulls.pull(gh, repo.full_name, number)
            if fresh.state != "open" or fresh.head_sha != pr.head_sha:
                why = "closed" if fresh.state != "open" else f"superseded by {fresh.head_sha[:12]}"
                return (
                    run_id,
                    Verdict(
                        "neutral",
                        f"Not judged: {why}",
                        f"While the gates ran, the pull request "
                        f"was {why}. Nothing is claimed about {pr.head_sha[:12]}.",
                    ),
                    why,
                )
            again = config.for_task(ctx, task).merged.policy
            if again.digest != policy.digest or fresh.base_ref != pr.base_ref:
                _complete_now(
                    ctx,
                    task,
                    run_id,
                    pr.head_sha,
                    Verdict(
                        "neutral",
                        "Evaluated again",
                        "The policy or the base "
                        "branch changed while the gates ran; this head is evaluated again.",
                    ),
                )
                continue
            stored = store.save(ctx.redis, key, result)
            audit.note(ctx.redis, installation, task.id, "gate-result", head=pr.head_sha,
                       conclusion=result.conclusion, failed=list(result.failed),
                       policy_sha256=policy.digest)  # fmt: skip
            return run_id, verdicts.agree(result, stored, fresh, pr), result.conclusion
        finally:
            store.unlock(ctx.redis, key, task.id)
    return None, None, "the policy kept changing while the gates ran"


def _judge(
    ctx: Context, task: Task, gh: GitHub[Any], pr: Pull, policy: Policy, *, number: int
) -> verdicts.Evaluation:
    """Fetch, inspect, scan, run the command gates where allowed: the evaluation of the head."""
    app = ctx.need_github()
    repo, installation = task.repository, task.installation_id
    if repo is None or installation is None:
        raise BatonError("no-repository", "the delivery names no repository or installation")
    clone_url = str(api.request(gh, "GET", api.repo_path(repo.full_name))["clone_url"])
    mirror = Mirror(ctx.data_dir, repo.id)
    remote = Remote(clone_url, app.git_token(installation, repo.full_name))
    with mirror.locked():
        found = mirror.fetch(remote, [pr.base_ref])
        head = mirror.fetch_pull(remote, number)
    if head != pr.head_sha:
        raise Moved(f"superseded by {(head or 'nothing')[:12]}")
    if pr.base_ref not in found:
        raise Moved(f"left without its base branch {pr.base_ref}")
    started = time.monotonic()
    with inspect_git.session(mirror.path) as git:
        base = git.run("merge-base", found[pr.base_ref], head).decode().strip()
        base_tree, head_tree = git.rev(base, "tree"), git.rev(head, "tree")
        changes = inspect_git.diff(git, base_tree, head_tree)
        blobs = sorted({c.new_blob for c in changes if c.new_blob and c.new_mode in (0o100644, 0o100755)})
        sizes = inspect_git.blob_sizes(git, blobs)
        links, base_links = inspect_git.symlinks(git, head_tree), inspect_git.symlinks(git, base_tree)
        patch = inspect_git.patch(git, base, head)
        commits_on_pr = inspect_git.commit_log(git, base, head)
        diff_sha256 = inspect_git.diff_digest(git, base, head)
    found_v = violations(
        changes,
        protected=policy.protected_paths,
        max_diff_lines=policy.limits.max_diff_lines,
        sizes=sizes,
        links=links,
        base_links=base_links,
    )
    author_role = _role(gh, repo.full_name, pr.author, pr.author_type)
    scanned = secrets.scan_patch(patch)
    batons = _is_batons(ctx, task, pr)
    commits = _provenance(ctx.redis, commits_on_pr) if batons else None
    checks = builtin.judge(
        found_v,
        policy_protected=policy.protected_paths,
        author_is_admin=author_role == "admin",
        findings=scanned.findings,
        findings_truncated=scanned.truncated,
        commits=commits,
    )
    if policy.review is not None and policy.review.merge_gate:  # after the built-in gates, read-only
        checks.append(
            reviewer.check(ctx, task, pr, policy, repo=mirror.path, base=base, head=head, patch=patch)
        )
    # Baton's own PRs hold agent-written code, which already ran in this same box: no approval needed.
    untrusted = pr.fork or not (batons or _at_least(author_role, str(policy.trigger.min_permission)))
    approved = store.approval(ctx.redis, repo.id, number, head)
    gate_results: list[commands.GateResult] = []
    waiting = bool(policy.gates) and untrusted and approved is None
    if policy.gates and not waiting:
        gate_results = commands.run_gates(
            mirror.path, head, policy.gates, max_disk_bytes=policy.limits.max_workspace_bytes
        )
    return verdicts.build(
        pr,
        policy,
        checks,
        gate_results,
        waiting=waiting,
        seconds=time.monotonic() - started,
        approved_by=approved,
        change=(base, diff_sha256),
    )


def _is_batons(ctx: Context, task: Task, pr: Pull) -> bool:
    """A pull request Baton opened for an agent run: its bot's, from a branch of the repository."""
    if pr.fork or not pr.head_ref.startswith(BRANCH_PREFIX) or pr.author_type != "Bot":
        return False
    return pr.author == bot_identity(ctx, task)[0]


def _provenance(client: redis.Redis, commits: Sequence[tuple[str, str, str]]) -> list[builtin.CommitFact]:
    facts = []
    for sha, author, message in commits:
        task_id = report.trailer(message)
        recorded = False
        if task_id is not None:
            raw = client.get(admit.RECORD_PREFIX + task_id)
            recorded = raw is not None and orjson.loads(raw).get("commit") == sha
        facts.append(builtin.CommitFact(sha, author, task_id, recorded))
    return facts


def _reverified(gh: GitHub[Any], full_name: str, pr: Pull, verdict: Verdict) -> Verdict:
    fresh = pulls.pull(gh, full_name, pr.number)
    if (fresh.head_sha, fresh.state) != (pr.head_sha, "open"):
        return Verdict(
            "neutral", "Not claimed: superseded", f"The pull request moved to {fresh.head_sha[:12]}."
        )
    return verdict


def receipt(ctx: Context, task: Task, head: str, verdict: Verdict) -> receipts.Receipt:
    """The verdict, signed and logged: in-toto's test-result about ``head`` (and its diff)."""
    repo, installation = task.repository, task.installation_id
    if repo is None or installation is None:
        raise BatonError("no-repository", "the delivery names no repository or installation")
    found = verdict.evidence
    subjects = [receipts.commit_subject(repo.full_name, head)]
    if found is not None and found.diff_sha256 and found.merge_base:
        subjects.append(receipts.diff_subject(repo.full_name, found.merge_base, head, found.diff_sha256))
    if found is None:  # a verdict about no evaluation (moved, superseded): it names only itself
        predicate = receipts.gate_result(
            conclusion=verdict.conclusion, title=verdict.title, policy_digest=None
        )
    else:
        predicate = receipts.gate_result(
            conclusion=verdict.conclusion,
            title=verdict.title,
            policy_digest=found.policy_digest,
            gates=found.gate_commands,
            passed=found.passed,
            failed=found.failed,
            warned=found.waiting,
            url=found.url or None,
        )
    return receipts.attest(ctx.signer, ctx.redis, installation, subjects=subjects,
                           predicate_type=statement.TEST_RESULT, predicate=predicate,
                           replication=ctx.replication)  # fmt: skip


def signed_failure(ctx: Context, task: Task, end: CheckRunEnd) -> CheckRunEnd:
    """A check run a dead task leaves behind, completed with a signed ``FAILED``. If even that
    cannot be signed it is completed unsigned, saying so: a failure claims nothing anyone could
    merge on, and a run left in progress forever would claim even less."""
    try:
        if task.head_sha is None:
            raise BatonError("no-head-sha", "the delivery names no head commit")
        signed = receipt(ctx, task, task.head_sha, Verdict(end.conclusion, end.title, end.summary))
    except (BatonError, redis.RedisError) as exc:
        note = f"No receipt: it could not be signed ({getattr(exc, 'code', type(exc).__name__)})."
        return dataclasses.replace(end, text=note)
    return dataclasses.replace(end, text=signed.text(), details_url=signed.details_url)


def end_for(run_id: int, verdict: Verdict, signed: receipts.Receipt) -> CheckRunEnd:
    return CheckRunEnd(
        run_id,
        verdict.conclusion,
        verdict.title,
        verdict.summary,
        annotations=tuple(dataclasses.asdict(a) for a in verdict.annotations),
        actions=tuple(dataclasses.asdict(a) for a in verdict.actions),
        text=signed.text(),
        details_url=signed.details_url,
    )


def _complete_now(ctx: Context, task: Task, run_id: int, head: str, verdict: Verdict) -> None:
    if task.repository is None or task.installation_id is None:
        raise BatonError("no-repository", "the delivery names no repository or installation")
    signed = receipt(ctx, task, head, verdict)
    gh = ctx.need_github().for_repository(task.installation_id, task.repository.full_name, "gate")
    api.complete_check_run(
        gh,
        task.repository.full_name,
        run_id,
        conclusion=verdict.conclusion,
        output=Output(verdict.title, verdict.summary, signed.text()),
        details_url=signed.details_url,
    )
