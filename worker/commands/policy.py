"""`baton policy check`: validate policy files and print the effective policy.

Exit 0 when valid; 1 when a file is invalid or the repository file tries to
widen the org ceiling, with one ``file:line:col: message`` per problem on
stderr. On a widening the effective policy is still printed: it is what the
worker would run (the widening items dropped, every narrowing kept), and its
header says how many items were dropped. An invalid file has no effective
policy, so nothing is printed on stdout then (``--json``: ok false and the
problems). `baton policy schema` prints the JSON Schema editors use.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from worker.commands._policy_files import add_org_flag, effective, report
from worker.policy import PolicyError, Problem, canonical_json, schema_text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("policy", help="check capability policy files (baton.yml)")
    actions = parser.add_subparsers(dest="policy_action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="validate and print the effective policy",
        description="Validate an org ceiling and/or a repository's .github/baton.yml; "
        "print the effective policy.",
    )
    add_org_flag(check)
    check.add_argument("repo", nargs="?", metavar="REPO.yml", help="a repository's .github/baton.yml")
    check.add_argument("--json", action="store_true", help="print canonical JSON")
    check.set_defaults(handler=check_command)
    schema = actions.add_parser(
        "schema",
        help="print the JSON Schema of baton.yml",
        description="Print the JSON Schema (draft 2020-12) a baton.yml is checked against, for an "
        "editor's completion; `baton policy check` also checks what a schema cannot say.",
    )
    schema.set_defaults(handler=schema_command)


def check_command(args: argparse.Namespace) -> int:
    try:
        merged = effective(args.org, args.repo)
    except PolicyError as exc:
        report(exc.problems)
        if args.json:
            print(canonical_json({"ok": False, "problems": _listed(exc.problems)}).decode("ascii"))
        return 1
    report(merged.problems)
    policy = merged.policy
    if args.json:
        out = {
            "ok": merged.ok,
            "policy": policy.to_data(),
            "policy_sha256": policy.digest,
            "problems": _listed(merged.problems),
        }
        print(canonical_json(out).decode("ascii"))
    else:
        count = len(merged.problems)
        dropped = f", {count} widening attempt{'s' * (count != 1)} dropped (see stderr);" if count else ","
        print(f"# effective policy{dropped} sha256 {policy.digest}")
        print(yaml.safe_dump(policy.to_data(), sort_keys=False, default_flow_style=None), end="")
    return 0 if merged.ok else 1


def _listed(problems: tuple[Problem, ...]) -> list[dict[str, object]]:
    return [{"file": p.file, "line": p.line, "col": p.col, "message": p.message} for p in problems]


def schema_command(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return 0
