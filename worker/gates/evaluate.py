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
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from githubkit import GitHub

from baton.errors import BatonError
from baton.tasks import Task
from evidence import statement
from worker import audit, config, lifecycle, receipts
from worker.authorize import ROLE_RANK, effective_role
from worker.context import Context
from worker.gates import builtin, commands, secrets
from worker.github import api
from worker.github.limits import Action, Annotation, Output
from worker.messages import fenced, inert
from worker.policy import Policy
from worker.publish import CheckRunEnd
from worker.runner import inspect_git
from worker.runner.inspect_rules import violations
from worker.runs import admit, report
from worker.runs.identity import bot_identity
from worker.runs.mirror import Mirror, Remote

log = logging.getLogger("baton.gates")

CHECK = "baton/merge-gate"
RESULT_PREFIX = "baton:gate-result:"  # + repo id : head : policy digest -> the verified result (JSON)
LOCK_PREFIX = "baton:gate-lock:"  # same key -> the evaluating task
APPROVAL_PREFIX = "baton:gate-approval:"  # + repo id : pull number : head -> who approved
RESULT_TTL_S = 30 * 24 * 3600
LOCK_MS = 2 * 3600 * 1000
APPROVE = Action("Approve run", "approve", "Run the command gates on this commit")
#: Times a policy change during the gates makes Baton evaluate again before it gives up (neutral).
MAX_ROUNDS = 2


class Moved(Exception):
    """The pull request moved on while Baton looked at it: nothing may be claimed about the old head."""


@dataclass(frozen=True)
class Pull:
    number: int
    state: str
    head_sha: str
    head_ref: str
    base_ref: str
    fork: bool
    author: str
    author_type: str
    html_url: str = ""

    @classmethod
    def from_api(cls, data: dict[str, Any], full_name: str) -> Pull:
        head, base = data["head"], data["base"]
        head_repo = (head.get("repo") or {}).get("full_name")
        return cls(
            int(data["number"]),
            str(data["state"]),
            str(head["sha"]),
            str(head["ref"]),
            str(base["ref"]),
            head_repo != full_name,
            str(data["user"]["login"]),
            str(data["user"].get("type", "User")),
            str(data.get("html_url") or ""),
        )


@dataclass(frozen=True)
class Verdict:
    conclusion: str
    title: str
    summary: str
    annotations: tuple[Annotation, ...] = ()
    actions: tuple[Action, ...] = ()
    #: The stored result this verdict says (policy digest, gates, diff): what its receipt claims.
    evidence: Mapping[str, Any] | None = None


def pull(gh: GitHub[Any], full_name: str, number: int) -> Pull:
    return Pull.from_api(api.request(gh, "GET", f"{api.repo_path(full_name)}/pulls/{number}"), full_name)


def find_pull(gh: GitHub[Any], full_name: str, head_sha: str) -> int | None:
    """The open pull request whose head is ``head_sha`` (check-run events from forks name none)."""
    for page in range(1, 11):
        found = api.request(
            gh,
            "GET",
            f"{api.repo_path(full_name)}/pulls",
            params={"state": "open", "per_page": 100, "page": page},
        )
        for item in found:
            if item["head"]["sha"] == head_sha:
                return int(item["number"])
        if len(found) < 100:
            return None
    return None


def _key(repo_id: int, head: str, digest: str) -> str:
    return f"{repo_id}:{head}:{digest}"


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
        pr = pull(gh, repo.full_name, number)
        if pr.state != "open" or pr.head_sha != task.head_sha:
            why = "closed" if pr.state != "open" else f"superseded by {pr.head_sha[:12]}"
            return None, None, f"#{number} {why}: nothing to evaluate for {task.head_sha[:12]}"
        loaded = config.for_task(ctx, task)
        policy = loaded.merged.policy
        key = _key(repo.id, pr.head_sha, policy.digest)
        reused = _stored(ctx.redis, key)
        if reused is not None and reused.get("conclusion") != "action_required":
            run_id = open_run(pr.head_sha)
            verdict = _verdict_from(reused, reused=True)
            return run_id, _reverified(gh, repo.full_name, pr, verdict), "reused"
        holder = _lock(ctx.redis, key, task.id)
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
            fresh = pull(gh, repo.full_name, number)
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
            stored = _store(ctx.redis, key, result)
            audit.note(ctx.redis, installation, task.id, "gate-result", head=pr.head_sha,
                       conclusion=result["conclusion"], failed=result["failed"],
                       policy_sha256=policy.digest)  # fmt: skip
            return run_id, _agree(result, stored, fresh, pr), result["conclusion"]
        finally:
            _unlock(ctx.redis, key, task.id)
    return None, None, "the policy kept changing while the gates ran"


def _judge(
    ctx: Context, task: Task, gh: GitHub[Any], pr: Pull, policy: Policy, *, number: int
) -> dict[str, Any]:
    """Fetch, inspect, scan, run the command gates where allowed: the result as plain data."""
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
    # Baton's own PRs hold agent-written code, which already ran in this same box: no approval needed.
    untrusted = pr.fork or not (batons or _at_least(author_role, str(policy.trigger.min_permission)))
    approved = ctx.redis.get(f"{APPROVAL_PREFIX}{repo.id}:{number}:{head}")
    gate_results: list[commands.GateResult] = []
    waiting = bool(policy.gates) and untrusted and approved is None
    if policy.gates and not waiting:
        gate_results = commands.run_gates(mirror.path, head, policy.gates)
    return _result(
        pr,
        policy,
        checks,
        gate_results,
        waiting=waiting,
        seconds=time.monotonic() - started,
        approved_by=approved.decode() if isinstance(approved, bytes) else None,
        change=(base, diff_sha256),
    )


def _is_batons(ctx: Context, task: Task, pr: Pull) -> bool:
    """A pull request Baton opened for an agent run: its bot's, from a branch of the repository."""
    if pr.fork or not pr.head_ref.startswith("baton/issue-") or pr.author_type != "Bot":
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


# -- the result, its words, and the agreement before success ----------------------------------------


def _result(
    pr: Pull,
    policy: Policy,
    checks: Sequence[builtin.Check],
    gates: Sequence[commands.GateResult],
    *,
    waiting: bool,
    seconds: float,
    approved_by: str | None,
    change: tuple[str, str],
) -> dict[str, Any]:
    failed = [c.name for c in checks if not c.passed] + [g.name for g in gates if not g.passed]
    conclusion = "failure" if failed else "action_required" if waiting else "success"
    rows = [(c.name, "pass" if c.passed else "FAIL", inert(c.detail, 300), "", "") for c in checks]
    rows += [
        (
            g.name,
            "pass" if g.passed else ("timed out" if g.timed_out else "FAIL"),
            inert(g.command, 200),
            f"{g.duration_s:.1f}s",
            "" if g.exit_code is None else str(g.exit_code),
        )
        for g in gates
    ]
    if waiting:
        rows += [(g.name, "waiting", inert(g.run, 200), "", "") for g in policy.gates]
    lines = [
        "| gate | result | what | time | exit |",
        "|---|---|---|---|---|",
        *(f"| {n} | {r} | {w} | {t} | {e} |" for n, r, w, t, e in rows),
    ]
    for g in gates:
        if not g.passed and g.tail:
            lines += ["", f"**{g.name}**, last lines:", fenced(secrets.redact(g.tail))]
    for c in checks:
        if c.items and (not c.passed or c.name == "provenance"):  # who made what, always
            lines += ["", f"**{c.name}**:", *(f"- {inert(i, 300)}" for i in c.items[:50])]
    if waiting:
        lines += [
            "",
            "The command gates would run this pull request's code, which comes from a fork or from an "
            f"author below `{policy.trigger.min_permission}`. Someone with that permission can press "
            "**Approve run** to run them on this commit only.",
        ]
    if approved_by:
        lines += ["", f"Command gates approved for this commit by {inert(approved_by)}."]
    annotations = [a for c in checks if not c.passed for a in c.annotations]
    annotations += [a for g in gates if not g.passed for a in g.annotations]
    title = {
        "success": "All gates passed",
        "action_required": "Waiting for a maintainer to approve the command gates",
        "failure": f"{len(failed)} gate(s) failed: {', '.join(failed)}",
    }[conclusion]
    return {
        "conclusion": conclusion,
        "title": title[:200],
        "summary": "\n".join(lines),
        "annotations": [
            {
                "path": a.path,
                "start_line": a.start_line,
                "end_line": a.end_line,
                "level": a.level,
                "message": a.message,
                "title": a.title,
            }
            for a in annotations
        ],
        "head": pr.head_sha,
        "base_ref": pr.base_ref,
        "policy_digest": policy.digest,
        "gates_digest": hashlib.sha256(
            orjson.dumps([[g.name, g.run, g.timeout] for g in policy.gates])
        ).hexdigest(),
        "seconds": round(seconds, 3),
        # What the receipt names: the change (merge base, diff digest) and each gate by outcome.
        "url": pr.html_url,
        "merge_base": change[0],
        "diff_sha256": change[1],
        "gate_commands": [[g.name, g.run] for g in policy.gates],
        "passed": [c.name for c in checks if c.passed] + [g.name for g in gates if g.passed],
        "failed": failed,
        "waiting": [g.name for g in policy.gates] if waiting else [],
    }


def _verdict_from(result: dict[str, Any], *, reused: bool = False) -> Verdict:
    summary = str(result["summary"])
    if reused:
        summary = (
            f"Reused: this head was already evaluated under the same policy "
            f"(`sha256:{str(result['policy_digest'])[:16]}…`) and gate commands.\n\n{summary}"
        )
    notes = tuple(Annotation(**a) for a in result.get("annotations", []))
    actions = (APPROVE,) if result["conclusion"] == "action_required" else ()
    return Verdict(str(result["conclusion"]), str(result["title"]), summary, notes, actions, result)


def _agree(result: dict[str, Any], stored: dict[str, Any] | None, fresh: Pull, pr: Pull) -> Verdict:
    """``success`` needs three signals to agree: the stored result, the fresh PR, what is published."""
    verdict = _verdict_from(result)
    if verdict.conclusion != "success":
        return verdict
    problems = []
    if stored != result:
        problems.append("the stored result differs from the one computed")
    if (fresh.head_sha, fresh.base_ref, fresh.state) != (pr.head_sha, pr.base_ref, "open"):
        problems.append("the pull request changed")
    if result["head"] != fresh.head_sha:
        problems.append("the result is about another commit")
    if problems:
        return Verdict("neutral", "Not claimed: the evidence disagreed", "; ".join(problems) + ".")
    return verdict


def _reverified(gh: GitHub[Any], full_name: str, pr: Pull, verdict: Verdict) -> Verdict:
    fresh = pull(gh, full_name, pr.number)
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
    found = verdict.evidence or {}
    subjects = [receipts.commit_subject(repo.full_name, head)]
    if found.get("diff_sha256") and found.get("merge_base"):
        base, digest = str(found["merge_base"]), str(found["diff_sha256"])
        subjects.append(receipts.diff_subject(repo.full_name, base, head, digest))
    predicate = receipts.gate_result(
        conclusion=verdict.conclusion,
        title=verdict.title,
        policy_digest=found.get("policy_digest"),
        gates=[(str(n), str(r)) for n, r in found.get("gate_commands", ())],
        passed=found.get("passed", ()),
        failed=found.get("failed", ()),
        warned=found.get("waiting", ()),
        url=found.get("url") or None,
    )
    return receipts.attest(ctx.signer, ctx.redis, installation, subjects=subjects,
                           predicate_type=statement.TEST_RESULT, predicate=predicate)  # fmt: skip


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


# -- Redis: the lock, the stored results, approvals ----------------------------------------------------

_UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end
return 0
"""


def _lock(client: redis.Redis, key: str, task_id: str) -> str | None:
    """None if the key is now ours; else the task that holds it. A holder that has ended (its
    worker died mid-evaluation, and its check run was completed as failed) is taken over."""
    for _ in range(3):
        if client.set(LOCK_PREFIX + key, task_id, nx=True, px=LOCK_MS):
            return None
        held = client.get(LOCK_PREFIX + key)
        holder = held.decode() if isinstance(held, bytes) else held
        if holder is None:
            continue
        if holder == task_id:
            return None
        if lifecycle.current(client, holder) not in (lifecycle.State.QUEUED, lifecycle.State.RUNNING):
            if client.register_script(_TAKE_OVER)(keys=[LOCK_PREFIX + key], args=[holder, task_id, LOCK_MS]):
                return None
            continue
        return holder
    return "?"


def _unlock(client: redis.Redis, key: str, task_id: str) -> None:
    client.register_script(_UNLOCK)(keys=[LOCK_PREFIX + key], args=[task_id])


def _store(client: redis.Redis, key: str, result: dict[str, Any]) -> dict[str, Any] | None:
    client.set(RESULT_PREFIX + key, orjson.dumps(result, option=orjson.OPT_SORT_KEYS), ex=RESULT_TTL_S)
    return _stored(client, key)


def _stored(client: redis.Redis, key: str) -> dict[str, Any] | None:
    raw = client.get(RESULT_PREFIX + key)
    return orjson.loads(raw) if raw else None


def approve(client: redis.Redis, repo_id: int, number: int, head: str, login: str) -> None:
    """A maintainer's click: the command gates may run on this one commit."""
    client.set(f"{APPROVAL_PREFIX}{repo_id}:{number}:{head}", login, ex=RESULT_TTL_S)
