"""`baton demo`: Baton end to end on this machine, with no credentials and no network.

Starts an embedded Redis-protocol server, the GitHub emulator, and `baton serve
--worker` as real processes; creates an App (a fresh key pair and webhook
secret), its installation and a private sample repository with a policy; then
plays scenarios the way GitHub would deliver them (signed webhooks from the
emulator's state changes, and GitHub's own published `issues.labeled` example)
and checks what Baton did. Exit 0 only if every scenario ended as expected.

This module is the command; the running pieces are in `demo.harness`, the scenarios in
`demo.scenarios`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import redis

from baton.redis_server import EmbeddedRedis
from bot.app import WEBHOOK_PATH
from demo import reviewing
from demo.harness import (
    Demo,
    Outcome,
    baton_serving,
    find_cli,
    play_all,
    print_table,
    signing_env,
    write_evidence,
)
from demo.scenarios import (
    AGENT_SCRIPT,
    DEFAULT_AGENTS,
    MODEL_KEY,
    PULL_SCENARIOS,
    REAL_AGENTS,
    issue_scenarios,
    receipts_verify,
    redis_restart_recovered,
    replay_and_audit,
)
from emulator import world
from emulator.admin.client import AdminClient
from emulator.model.standin import ModelStandin
from emulator.server import EmulatorServer, free_port


def run(out: Path | None, agents: tuple[str, ...] = DEFAULT_AGENTS) -> int:
    started = time.monotonic()
    # Absolute: the worker's BATON_DATA_DIR lives under it, and the README runs `--out demo-out`.
    work = (out or Path(tempfile.mkdtemp(prefix="baton-demo-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    for ours in FRESH:  # a fresh world every run, also in a reused --out
        shutil.rmtree(work / ours, ignore_errors=True)
    outcomes: list[Outcome] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(EmbeddedRedis(data_dir=work / "redis", durable=False))
        github = stack.enter_context(EmulatorServer(work / "github"))
        admin = stack.enter_context(AdminClient(github.url))
        port = free_port()
        w = world.build(admin, github.url, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}",
                        org_policy=reviewing.org_policy(reviewing.install(work)))  # fmt: skip
        clis = {a: found for a in agents if (found := find_cli(REAL_AGENTS[a][0])) is not None}
        # Every agent's model calls go through Baton's model gateway, to this stand-in for the vendors;
        # it answers only to the key the worker holds, which no box ever sees.
        model = stack.enter_context(ModelStandin(AGENT_SCRIPT, record_dir=work / "model", api_key=MODEL_KEY))
        upstreams = ",".join(f"{provider}={model.url}" for provider in ("anthropic", "openai", "gemini"))
        # The reviewer's model is another provider's: a stand-in of its own (``demo.reviewing``).
        reviewer = stack.enter_context(ModelStandin(reviewing.SCRIPT, record_dir=work / "reviewer-model",
                                                    api_key=MODEL_KEY))  # fmt: skip
        upstreams += f",{reviewing.PROVIDER}={reviewer.url}"
        env = dict.fromkeys(
            ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "MISTRAL_API_KEY"), MODEL_KEY
        )
        env["BATON_MODEL_UPSTREAMS"] = upstreams
        if clis:
            where = dict.fromkeys(str(d) for d in clis.values())
            env["PATH"] = ":".join([*where, os.environ.get("PATH", "/usr/bin:/bin")])
        signing = signing_env(work, f"http://127.0.0.1:{port}")
        stack.enter_context(baton_serving(work, w, server.url, github.url, port=port,
                                          env_extra={**env, **signing}))  # fmt: skip
        rdb = stack.enter_context(contextlib.closing(redis.Redis.from_url(server.url)))
        demo = Demo(admin, rdb, w, github.directory, clis=clis, model=model, work=work, reviewer=reviewer)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            pulls = pool.submit(play_all, demo, PULL_SCENARIOS)
            outcomes = play_all(demo, issue_scenarios(agents)) + pulls.result()
        outcomes += play_all(demo, [
            ("Redis restarted while a maintainer labelled", redis_restart_recovered),
            ("every check run's receipt, offline", lambda d: receipts_verify(d, work, port)),
            ("every decision replayed, the audit chain", lambda d: replay_and_audit(server.url, signing)),
        ])  # fmt: skip
        write_evidence(work, admin, github.directory, outcomes)
    print_table(outcomes, time.monotonic() - started, work)
    return 0 if all(o.passed for o in outcomes) else 1


#: The folders the demo empties and remakes in DIR on every run.
FRESH = ("github", "redis", "keys", "receipts")


def out_dir(value: str) -> Path:
    """``--out``'s type: a path the demo can use as its folder, checked before anything starts, so
    a file in the way is argparse's usage error (exit 2) rather than a traceback halfway through."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{value} exists and is not a directory: name a new or existing directory, or move the file"
        )
    for ours in FRESH:
        inside = path / ours
        if inside.exists() and not inside.is_dir():
            raise argparse.ArgumentTypeError(
                f"{inside} is not a directory, and the demo remakes that folder on every run: "
                "move the file, or pass another --out"
            )
    return path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="play Baton end to end against a local GitHub emulator (no network)",
        description="Start an embedded Redis, the GitHub emulator, a model stand-in and `baton serve "
        "--worker`, play every scenario against them and print one line each. Exit 0 when every "
        "scenario went as expected, 1 otherwise, 2 usage.",
    )
    p.add_argument("--out", type=out_dir, metavar="DIR",
                   help="work in DIR (created if missing, reusable: its github/, redis/, keys/ and receipts/ "
                   "are remade each run) and leave summary.json, checks.json, comments.json, "
                   "github-requests.jsonl, receipts/ and baton.log there; "
                   "default: a new temporary folder")  # fmt: skip
    p.add_argument("--agents", type=agent_list, default=DEFAULT_AGENTS, metavar="LIST",
                   help="the real agent CLIs to play one pull request each with, where installed: 'all', or "
                   f"a comma-separated list of {', '.join(REAL_AGENTS)} (default: claude-code); "
                   "a CLI that is not installed is listed as skipped")  # fmt: skip
    p.set_defaults(handler=lambda args: run(args.out, args.agents))


def agent_list(value: str) -> tuple[str, ...]:
    """``--agents``' type: ``all`` or known adapter names, checked before anything starts."""
    if value == "all":
        return tuple(REAL_AGENTS)
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in REAL_AGENTS]
    if unknown or not names:
        known = ", ".join(REAL_AGENTS)
        raise argparse.ArgumentTypeError(
            f"unknown agent CLI {', '.join(unknown) or repr(value)}: say 'all' or some of {known}"
        )
    return names
