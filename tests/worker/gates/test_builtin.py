"""The built-in gates as a pure function of what the inspection and the scanner found."""

from __future__ import annotations

from worker.gates import builtin
from worker.gates.secrets import Finding
from worker.runner.inspect_rules import Code, Violation

WORKFLOW = Violation(Code.PROTECTED_PATH, ".github/workflows/ci.yml", "matches the protected pattern")
DEPLOY = Violation(Code.PROTECTED_PATH, "deploy/prod.tf", "matches the protected pattern 'deploy/**'")
ESCAPE = Violation(Code.SYMLINK_ESCAPE, "link", "symlink to '/etc/passwd' leaves the tree")
BIG = Violation(Code.DIFF_TOO_LARGE, "", "3000 lines changed; the policy allows 2000")


def _by_name(checks: list[builtin.Check]) -> dict[str, builtin.Check]:
    return {c.name: c for c in checks}


def test_each_violation_lands_in_its_own_gate_with_an_annotation() -> None:
    checks = _by_name(
        builtin.judge(
            [WORKFLOW, DEPLOY, ESCAPE, BIG],
            policy_protected=("deploy/**",),
            author_is_admin=False,
            findings=[],
        )
    )
    assert [n for n, c in checks.items() if not c.passed] == [
        "protected-paths",
        "policy-and-workflows",
        "tree",
        "diff-size",
    ]
    assert checks["secrets"].passed
    assert [a.path for a in checks["protected-paths"].annotations] == ["deploy/prod.tf"]
    assert [a.path for a in checks["policy-and-workflows"].annotations] == [".github/workflows/ci.yml"]
    assert checks["diff-size"].annotations == ()  # the whole diff has no line to point at
    assert "provenance" not in checks  # only for Baton's own pull requests


def test_an_admin_may_change_the_rules_files_but_not_the_policys_protected_paths() -> None:
    checks = _by_name(
        builtin.judge([WORKFLOW, DEPLOY], policy_protected=("deploy/**",), author_is_admin=True, findings=[])
    )
    assert checks["policy-and-workflows"].passed
    assert "changed by an admin" in checks["policy-and-workflows"].detail
    assert not checks["protected-paths"].passed


def test_secret_findings_fail_and_point_at_their_lines_without_the_value() -> None:
    found = [Finding("config.py", 3, "github-token", "a GitHub token (ghp_…)")]
    [secrets] = [
        c
        for c in builtin.judge([], policy_protected=(), author_is_admin=False, findings=found)
        if c.name == "secrets"
    ]
    assert not secrets.passed
    assert [(a.path, a.start_line) for a in secrets.annotations] == [("config.py", 3)]


def test_provenance_names_who_made_each_commit_and_fails_a_forged_claim() -> None:
    ours = builtin.CommitFact("a" * 40, "baton[bot]", "task-1", recorded=True)
    human = builtin.CommitFact("b" * 40, "Wes", None, recorded=False)
    forged = builtin.CommitFact("c" * 40, "Mallory", "task-1", recorded=False)
    exact = builtin.provenance([ours])
    assert exact.passed
    assert "exactly the commit Baton pushed for task task-1" in exact.detail
    on_top = builtin.provenance([ours, human])
    assert on_top.passed
    assert "1 commit(s) on top by Wes" in on_top.detail
    assert f"{'b' * 12}: by Wes, not Baton" in on_top.items
    assert not builtin.provenance([ours, forged]).passed
    assert not builtin.provenance([human]).passed  # nothing on the branch is Baton's
