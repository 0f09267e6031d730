"""What a merge-gate evaluation found, in words, and the agreement ``success`` needs (all pure).

``build`` turns the built-in checks and the command gates into an ``Evaluation``: the result
stored in Redis (``to_data``, byte for byte what earlier versions stored, so a stored result is
reused across a deploy) and what the receipt claims. ``verdict_of`` is what the check run says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from worker.gates import builtin, commands, secrets
from worker.gates.pulls import Pull
from worker.github.limits import Action, Annotation
from worker.messages import fenced, inert
from worker.policy import Policy

APPROVE = Action("Approve run", "approve", "Run the command gates on this commit")
_TITLES = {
    "success": "All gates passed",
    "action_required": "Waiting for a maintainer to approve the command gates",
}


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a head under a policy: its conclusion and words, and what it is about."""

    conclusion: str
    title: str
    summary: str
    annotations: tuple[Annotation, ...]
    head: str
    base_ref: str
    policy_digest: str
    #: sha256 of the policy's gates as [[name, run, timeout], ...].
    gates_digest: str
    seconds: float
    # What the receipt names: the change (merge base, diff digest) and each gate by outcome.
    url: str
    merge_base: str
    diff_sha256: str
    gate_commands: tuple[tuple[str, str], ...]
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    waiting: tuple[str, ...]

    def to_data(self) -> dict[str, Any]:
        """The stored form (JSON-ready); its keys and values are the ones Redis has always held."""
        return {
            "conclusion": self.conclusion,
            "title": self.title,
            "summary": self.summary,
            "annotations": [
                {
                    "path": a.path,
                    "start_line": a.start_line,
                    "end_line": a.end_line,
                    "level": a.level,
                    "message": a.message,
                    "title": a.title,
                }
                for a in self.annotations
            ],
            "head": self.head,
            "base_ref": self.base_ref,
            "policy_digest": self.policy_digest,
            "gates_digest": self.gates_digest,
            "seconds": self.seconds,
            "url": self.url,
            "merge_base": self.merge_base,
            "diff_sha256": self.diff_sha256,
            "gate_commands": [[n, r] for n, r in self.gate_commands],
            "passed": list(self.passed),
            "failed": list(self.failed),
            "waiting": list(self.waiting),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Evaluation:
        """A stored result read back. The words and the policy must be there (they are reposted);
        what only the receipt names is read as absent when a stored result lacks it."""
        return cls(
            conclusion=str(data["conclusion"]),
            title=str(data["title"]),
            summary=str(data["summary"]),
            annotations=tuple(Annotation(**a) for a in data.get("annotations", [])),
            head=str(data.get("head", "")),
            base_ref=str(data.get("base_ref", "")),
            policy_digest=str(data["policy_digest"]),
            gates_digest=str(data.get("gates_digest", "")),
            seconds=float(data.get("seconds", 0.0)),
            url=str(data.get("url") or ""),
            merge_base=str(data.get("merge_base") or ""),
            diff_sha256=str(data.get("diff_sha256") or ""),
            gate_commands=tuple((str(n), str(r)) for n, r in data.get("gate_commands", ())),
            passed=tuple(str(n) for n in data.get("passed", ())),
            failed=tuple(str(n) for n in data.get("failed", ())),
            waiting=tuple(str(n) for n in data.get("waiting", ())),
        )


@dataclass(frozen=True)
class Verdict:
    conclusion: str
    title: str
    summary: str
    annotations: tuple[Annotation, ...] = ()
    actions: tuple[Action, ...] = ()
    #: The evaluation this verdict says (policy digest, gates, diff): what its receipt claims.
    evidence: Evaluation | None = None


def build(
    pr: Pull,
    policy: Policy,
    checks: Sequence[builtin.Check],
    gates: Sequence[commands.GateResult],
    *,
    waiting: bool,
    seconds: float,
    approved_by: str | None,
    change: tuple[str, str],
) -> Evaluation:
    """The evaluation of ``pr``'s head: ``change`` is (merge base, diff digest)."""
    failed = [c.name for c in checks if not c.passed] + [g.name for g in gates if not g.passed]
    conclusion = "failure" if failed else "action_required" if waiting else "success"
    title = _TITLES.get(conclusion) or f"{len(failed)} gate(s) failed: {', '.join(failed)}"
    return Evaluation(
        conclusion=conclusion,
        title=title[:200],
        summary=_summary(policy, checks, gates, waiting=waiting, approved_by=approved_by),
        annotations=tuple(
            [a for c in checks if not c.passed for a in c.annotations]
            + [a for g in gates if not g.passed for a in g.annotations]
        ),
        head=pr.head_sha,
        base_ref=pr.base_ref,
        policy_digest=policy.digest,
        gates_digest=hashlib.sha256(
            orjson.dumps([[g.name, g.run, g.timeout] for g in policy.gates])
        ).hexdigest(),
        seconds=round(seconds, 3),
        url=pr.html_url,
        merge_base=change[0],
        diff_sha256=change[1],
        gate_commands=tuple((g.name, g.run) for g in policy.gates),
        passed=tuple([c.name for c in checks if c.passed] + [g.name for g in gates if g.passed]),
        failed=tuple(failed),
        waiting=tuple(g.name for g in policy.gates) if waiting else (),
    )


def _summary(
    policy: Policy,
    checks: Sequence[builtin.Check],
    gates: Sequence[commands.GateResult],
    *,
    waiting: bool,
    approved_by: str | None,
) -> str:
    """The check run's summary: a table of every gate, then what failed and who made what."""
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
    return "\n".join(lines)


def verdict_of(result: Evaluation, *, reused: bool = False) -> Verdict:
    """What the check run says about an evaluation (a reused one says that it is)."""
    summary = result.summary
    if reused:
        summary = (
            f"Reused: this head was already evaluated under the same policy "
            f"(`sha256:{result.policy_digest[:16]}…`) and gate commands.\n\n{summary}"
        )
    actions = (APPROVE,) if result.conclusion == "action_required" else ()
    return Verdict(result.conclusion, result.title, summary, result.annotations, actions, result)


def agree(result: Evaluation, stored: Mapping[str, Any] | None, fresh: Pull, pr: Pull) -> Verdict:
    """``success`` needs three signals to agree: the stored result (as Redis holds it), the fresh
    pull request, and what is about to be published."""
    verdict = verdict_of(result)
    if verdict.conclusion != "success":
        return verdict
    problems = []
    if stored != result.to_data():
        problems.append("the stored result differs from the one computed")
    if (fresh.head_sha, fresh.base_ref, fresh.state) != (pr.head_sha, pr.base_ref, "open"):
        problems.append("the pull request changed")
    if result.head != fresh.head_sha:
        problems.append("the result is about another commit")
    if problems:
        return Verdict("neutral", "Not claimed: the evidence disagreed", "; ".join(problems) + ".")
    return verdict
