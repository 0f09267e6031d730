"""`baton run`: the whole agent path on a local repository, exactly as the worker runs it.

Gate, box, inspection, then one commit on a new branch `baton/run-<id>` (the
checked-out branch is never touched). No GitHub, no Redis: an org admin can try
a policy and an agent before installing the App. The agent's model calls go
through a model gateway of the run's own, as on the worker: the model keys are
read from this environment and never enter the box; ``--upstream`` (or
``BATON_MODEL_UPSTREAMS``) sends a provider's calls elsewhere, such as the model
stand-in. The run's spend cap is the policy's ``max_model_spend_per_run``; there
is no day budget without Redis. Exit 0 done (or no changes),
3 denied by the gate, 4 inspection violation, 5 agent failed, missing or timed
out, 1 bad input. (6, cancelled, comes only from the worker's `/baton cancel`;
Ctrl-C stops `baton run`'s box and exits 130 without a record.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import orjson

from baton import settings
from baton.errors import ConfigError
from worker import context
from worker.commands import _files
from worker.commands._policy_files import add_org_flag, read_doc, report
from worker.policy import Policy, PolicyDoc, PolicyError, UnknownAgent, merge, org_policy, parse
from worker.runner import gateway, inspect_git
from worker.runner import run as runner
from worker.runner.gateway import providers
from worker.runner.gateway.spend import usd

EXIT_BAD_INPUT = 1
REPO_POLICY = ".github/baton.yml"
MAX_ISSUE_BYTES = 1 << 20


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "run",
        help="run an agent on a local repository (gate, box, inspection, one commit)",
        description="Run AGENT on the repository at PATH as the worker would, leaving the result as one "
        "commit on a new branch baton/run-<id>. Exit 0 done or no changes, 3 denied, 4 violations, "
        "5 agent failed/missing/timed out, 6 cancelled, 1 bad input.",
    )
    p.add_argument("--agent", required=True, metavar="NAME", help="agent name, as in the agent:<name> label")
    p.add_argument("--repo", required=True, metavar="PATH", help="a git repository (its HEAD is the base)")
    issue_help = "GitHub's issue JSON (title, body), or Markdown whose first line is the title"
    p.add_argument("--issue-file", required=True, metavar="FILE", help=issue_help)
    add_org_flag(p)
    policy_help = f"the repository's policy; default: {REPO_POLICY} at the base commit, if any"
    p.add_argument("--policy", metavar="REPO.yml", help=policy_help)
    visibility = p.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="private", action="store_true", default=True,
                            help="private repository (default)")  # fmt: skip
    visibility.add_argument("--public", dest="private", action="store_false", help="public repository")
    p.add_argument("--offline", action="store_true", help="the offline retry: no external communication")
    p.add_argument("--route", action="append", default=[], metavar="HOST=IP:PORT",
                   help="send an egress host to a local listener instead of DNS (repeatable)")  # fmt: skip
    p.add_argument("--upstream", action="append", default=[], metavar="PROVIDER=URL",
                   help="the model gateway calls PROVIDER (anthropic, openai, gemini…) at URL, e.g. a local "
                        "model stand-in (repeatable; over BATON_MODEL_UPSTREAMS)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the run record as JSON")
    p.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    repo = Path(args.repo)
    try:
        base = runner.resolve_base(repo)
        issue = read_issue(Path(args.issue_file))
        routes = dict(_route(r) for r in args.route)
        config = settings.load()
        upstreams = {**context.model_upstreams(config), **dict(_upstream(u) for u in args.upstream)}
        prices = context.model_prices(config)
        org = read_doc(args.org)
        repo_doc = read_doc(args.policy) if args.policy else _repo_policy(repo, base)
        merged = merge(org_policy(org), repo_doc)
    except PolicyError as exc:
        report(exc.problems)
        return EXIT_BAD_INPUT
    except (ValueError, ConfigError) as exc:
        print(f"baton run: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not merged.ok:
        report(merged.problems)
        return EXIT_BAD_INPUT
    policy = merged.policy
    request = runner.RunRequest(
        agent=args.agent, repo=repo, base=base, issue=issue, policy=policy, repo_private=args.private,
        offline=args.offline, env_values=_env_values(policy, args.agent),
        model_keys=gateway.worker_keys(os.environ),
        egress_routes=routes, model_upstreams=upstreams, prices=prices,
    )  # fmt: skip
    try:
        record = runner.run(request)
    except UnknownAgent as exc:
        print(f"baton run: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(orjson.dumps(record.to_data(), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2).decode())
    else:
        _print(record)
    return record.exit_status


def _env_values(policy: Policy, agent: str) -> dict[str, str]:
    """Only the env names the effective policy passes to this agent are read from the environment."""
    found = policy.agents.get(agent)
    names = set(found.env) if found is not None else set()
    return {k: v for k, v in os.environ.items() if k in names}


def read_issue(path: Path) -> runner.Issue:
    """GitHub's issue JSON (``title``, ``body``), or Markdown whose first line is the title."""
    try:
        raw = _files.read_limited(str(path), MAX_ISSUE_BYTES)
    except _files.Refused as exc:
        reason = {
            _files.CANNOT_READ: f"cannot read the issue file ({exc.detail})",
            _files.NOT_REGULAR: f"not a regular file ({exc.detail}); give the path of an issue file",
            _files.TOO_LARGE: f"larger than {MAX_ISSUE_BYTES} bytes; GitHub's issues are far smaller",
        }[exc.problem]
        raise ValueError(f"{path}: {reason}") from exc
    text = raw.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from exc
        title, body = data.get("title"), data.get("body") or ""
        if not isinstance(title, str) or not isinstance(body, str):
            raise ValueError(f"{path}: an issue JSON needs a string `title` (and `body`)")
        return runner.Issue(title, body)
    first, _, rest = text.partition("\n")
    title = first.lstrip("# ").strip()
    if not title:
        raise ValueError(f"{path}: the first line (the title) is empty")
    return runner.Issue(title, rest.strip("\n"))


def _upstream(text: str) -> tuple[str, str]:
    try:
        name, url = settings.parse_upstream(text)
        return providers.served(name), url
    except ValueError as exc:
        raise ValueError(f"--upstream {exc}") from None


def _route(text: str) -> tuple[str, tuple[str, int]]:
    try:
        host, ip, port = settings.parse_route(text)
    except ValueError as exc:
        raise ValueError(f"--route {exc}") from None
    return host, (ip, port)


def _repo_policy(repo: Path, base: str) -> PolicyDoc | None:
    """The repository's own policy file at the base commit (as the worker reads the default branch)."""
    with inspect_git.session(repo) as git:
        code, data, _ = git.call("cat-file", "blob", f"{base}:{REPO_POLICY}")
    return parse(data, f"{repo}/{REPO_POLICY}") if code == 0 else None


def _print(record: runner.RunRecord) -> None:
    print(f"baton run {record.run_id}: {record.outcome} ({record.reason})")
    print(f"  agent {record.agent} via {record.adapter or '-'} {record.adapter_version or ''}".rstrip())
    print(f"  decision sha256 {record.decision_sha256}")
    if record.box:
        print(f"  box: network {record.box.get('network', '?')}")
    for entry in record.egress:
        print(f"  egress {entry}")
    if record.model:
        totals = record.model["totals"]
        print(
            f"  model: {totals['calls']} calls, {totals['refused']} refused, "
            f"{totals['input_tokens']} tokens in, {totals['output_tokens']} out, {usd(totals['cost_usd'])}"
        )
    for violation in record.violations:
        print(f"  violation {violation}")
    if record.commit:
        print(f"  commit {record.commit} on {record.branch}")
