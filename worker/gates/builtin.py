"""The built-in gates: what every pull request is checked for, whatever its repository's policy says.

Judged on the pull request's change (merge base to head), read from git, never from the
PR's own files: the policy that applies is the default branch's. A repository cannot
remove these gates; it can only add protected paths and command gates.

- ``protected-paths``: nothing under the policy's ``paths.protected`` changed;
- ``policy-and-workflows``: ``.github/baton.yml``, workflows and actions unchanged, unless
  the PR's author is an admin of the repository (as GitHub says at evaluation time);
- ``tree``: no symlink leaving the tree, no submodule, no file GitHub would refuse;
- ``diff-size``: within ``limits.max_diff_lines``;
- ``secrets``: no secret-looking material added (each finding annotated, never echoed);
- ``provenance`` (Baton's own PRs only): which commits Baton made for which run, and every
  commit on top of them with who made it. A commit that claims a run Baton has no record
  of fails it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from worker.gates.secrets import Finding
from worker.github.limits import Annotation
from worker.policy import ALWAYS_PROTECTED
from worker.runner.inspect_rules import Code, Violation, compile_globs, protected_by

_TREE_CODES = {
    Code.SYMLINK_ESCAPE,
    Code.GITMODULES,
    Code.GITLINK,
    Code.FILE_TOO_LARGE,
    Code.BINARY_TOO_LARGE,
    Code.GIT_METADATA,
    Code.SETUID,
    Code.SPECIAL_FILE,
}


@dataclass(frozen=True)
class Check:
    """One built-in gate's verdict; ``detail`` is Baton's own words (paths already quoted by the caller)."""

    name: str
    passed: bool
    detail: str
    annotations: tuple[Annotation, ...] = ()
    items: tuple[str, ...] = field(default_factory=tuple)  # one line per finding, for the summary

    def to_data(self) -> dict[str, object]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail, "items": list(self.items)}


@dataclass(frozen=True)
class CommitFact:
    """A commit on the PR (merge base excluded), oldest first, and what Baton knows of it."""

    sha: str
    author: str
    task: str | None  # its ``Baton-Task`` trailer
    recorded: bool  # Baton's record of that task's run names exactly this commit


def judge(
    violations: Sequence[Violation],
    *,
    policy_protected: Sequence[str],
    author_is_admin: bool,
    findings: Sequence[Finding],
    findings_truncated: bool = False,
    commits: Sequence[CommitFact] | None = None,
) -> list[Check]:
    """The built-in gates, from the inspection of the change (``inspect_rules.violations`` with the
    policy's protected paths and ``max_diff_lines``), the secret findings and, for Baton's own
    PRs, the commits. Pure: the same facts give the same checks, in the module docstring's order."""
    always = compile_globs(ALWAYS_PROTECTED)
    chosen = compile_globs([p for p in policy_protected if p not in ALWAYS_PROTECTED])
    protected: list[Violation] = []
    rules_files: list[Violation] = []
    tree: list[Violation] = []
    size: list[Violation] = []
    for v in violations:
        if v.code in (Code.PROTECTED_PATH, Code.PROTECTED_SYMLINK):
            only_always = protected_by(always, v.path) is not None and protected_by(chosen, v.path) is None
            (rules_files if only_always else protected).append(v)
        elif v.code is Code.DIFF_TOO_LARGE:
            size.append(v)
        elif v.code in _TREE_CODES:
            tree.append(v)
        else:  # a code added later: fail closed, under the tree gate
            tree.append(v)
    checks = [
        _from_violations("protected-paths", protected, "nothing under the policy's protected paths changed"),
        _rules_files(rules_files, author_is_admin=author_is_admin),
        _from_violations(
            "tree", tree, "no symlink leaves the tree; no submodule; no file GitHub would refuse"
        ),
        _from_violations("diff-size", size, "the diff is within limits.max_diff_lines"),
        _secrets(findings, truncated=findings_truncated),
    ]
    if commits is not None:
        checks.append(provenance(commits))
    return checks


def _items(found: Sequence[Violation]) -> tuple[str, ...]:
    return tuple(f"{v.path or '(whole diff)'}: {v.detail}" for v in found)


def _annotations(found: Sequence[Violation], title: str) -> tuple[Annotation, ...]:
    return tuple(Annotation(v.path, 1, 1, "failure", v.detail, title) for v in found if v.path)


def _from_violations(name: str, found: Sequence[Violation], ok: str) -> Check:
    if not found:
        return Check(name, True, ok)
    return Check(name, False, f"{len(found)} problem(s)", _annotations(found, name), _items(found))


def _rules_files(found: Sequence[Violation], *, author_is_admin: bool) -> Check:
    name = "policy-and-workflows"
    if not found:
        return Check(name, True, "the Baton policy, workflows and actions are unchanged")
    if author_is_admin:
        return Check(
            name,
            True,
            f"{len(found)} rules file(s) changed by an admin of the repository",
            items=_items(found),
        )
    detail = f"{len(found)} rules file(s) changed; only an admin of the repository may change them"
    return Check(name, False, detail, _annotations(found, name), _items(found))


def _secrets(findings: Sequence[Finding], *, truncated: bool) -> Check:
    if not findings:
        return Check("secrets", True, "no secret-looking material added")
    notes = tuple(
        Annotation(f.path, f.line, f.line, "failure", f"{f.description} was added here", "secrets")
        for f in findings
    )
    more = " (more not listed)" if truncated else ""
    items = tuple(f"{f.path}:{f.line}: {f.description}" for f in findings)
    return Check("secrets", False, f"{len(findings)} secret-looking value(s) added{more}", notes, items)


def provenance(commits: Sequence[CommitFact]) -> Check:
    """Which commits are Baton's runs, as recorded, and who made every other one."""
    forged = [c for c in commits if c.task is not None and not c.recorded]
    ours = [c for c in commits if c.task is not None and c.recorded]
    items = tuple(
        f"{c.sha[:12]}: Baton, task {c.task}"
        if c.task is not None and c.recorded
        else f"{c.sha[:12]}: claims task {c.task}, which Baton has no record of"
        if c.task is not None
        else f"{c.sha[:12]}: by {c.author}, not Baton"
        for c in commits
    )
    if forged:
        return Check(
            "provenance",
            False,
            f"{len(forged)} commit(s) claim a Baton run that Baton did not record",
            items=items,
        )
    if not ours:
        return Check("provenance", False, "no commit on this branch is one Baton recorded", items=items)
    on_top = list(commits[commits.index(ours[-1]) + 1 :])
    if not on_top:
        return Check(
            "provenance",
            True,
            f"the head is exactly the commit Baton pushed for task {ours[-1].task}",
            items=items,
        )
    who = ", ".join(sorted({c.author for c in on_top}))
    return Check(
        "provenance",
        True,
        f"Baton's commit for task {ours[-1].task}, then {len(on_top)} commit(s) on top by {who}",
        items=items,
    )
