"""The merge gate: what Baton checks on every pull request before it says anything about it.

Reading order: ``builtin`` (the checks a repository cannot remove: protected paths,
symlinks, diff size, secrets, the policy and workflow files, provenance of Baton's own
PRs), ``secrets`` (the scanner), ``commands`` (the policy's command gates, run in the
agent box) with ``annotations`` (their output as GitHub annotations), and ``evaluate``
(one evaluation per head and policy, re-verified before anything is published) with its
parts: ``pulls`` (the pull request as GitHub has it), ``verdicts`` (the evaluation and its
words, pure) and ``store`` (its lock, results and approvals in Redis).
"""
