"""`baton gate explain`: what the trifecta gate would decide for an agent, and why.

Exit 0 allowed, 3 denied, 1 bad input (invalid or widening policy file, unknown
agent). On a widening no Decision is printed (exit 1 means "no decision"), but
stderr says the worker would drop those items and decide on the rest, which
`baton policy check` prints. The repository is assumed private unless
``--public`` is given, because guessing public is the mistake that leaks.
"""

from __future__ import annotations

import argparse
import sys

from worker.commands._policy_files import add_org_flag, effective, report
from worker.policy import PolicyError, TaskFacts, UnknownAgent, decide, explain

EXIT_ALLOWED, EXIT_BAD_INPUT, EXIT_DENIED = 0, 1, 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("gate", help="explain the lethal-trifecta gate's decision")
    actions = parser.add_subparsers(dest="gate_action", metavar="ACTION", required=True)
    ex = actions.add_parser(
        "explain",
        help="print the Decision for an agent",
        description="Decide, as the worker would before spawning, whether AGENT may run. "
        "Exit 0 allowed, 3 denied, 1 bad input.",
    )
    ex.add_argument("--agent", required=True, metavar="NAME", help="agent name, as in the agent:<name> label")
    add_org_flag(ex)
    ex.add_argument("--policy", metavar="REPO.yml", help="the repository's .github/baton.yml")
    visibility = ex.add_mutually_exclusive_group()
    visibility.add_argument(
        "--private", dest="private", action="store_true", default=True, help="private repository (default)"
    )
    visibility.add_argument("--public", dest="private", action="store_false", help="public repository")
    ex.add_argument("--offline", action="store_true", help="decide the offline retry (no external_comm)")
    ex.add_argument(
        "--network-cutoff",
        action="store_true",
        help="decide as a worker whose box can cut the agent's network off (`baton doctor` on the workers' "
        "machine says if it can); without it, a shell counts as open network",
    )
    ex.add_argument("--json", action="store_true", help="print the Decision as canonical JSON")
    ex.set_defaults(handler=explain_command)


def explain_command(args: argparse.Namespace) -> int:
    try:
        merged = effective(args.org, args.policy)
    except PolicyError as exc:
        report(exc.problems)
        return EXIT_BAD_INPUT
    if not merged.ok:
        report(merged.problems)
        these = "this" if len(merged.problems) == 1 else "these"
        print(
            f"baton gate explain: the worker drops {these} and decides on the rest; "
            "`baton policy check` shows that policy",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    facts = TaskFacts(agent=args.agent, repo_private=args.private, offline=args.offline,
                      network_cutoff=args.network_cutoff)  # fmt: skip
    try:
        decision = decide(merged.policy, facts)
    except UnknownAgent as exc:
        print(f"baton gate explain: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(decision.to_json().decode("ascii") if args.json else explain(decision))
    return EXIT_ALLOWED if decision.allowed else EXIT_DENIED
