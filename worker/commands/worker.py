"""`baton worker`: serve Baton's queues with RQ workers."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from baton import envfile, logs, redis_server, settings
from baton.errors import ConfigError
from worker import pool


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker",
        help="run workers over Baton's queues (agents, gates, control)",
        description="Without --queues, starts one process for control tasks, one for merge gates and "
        "BATON_AGENT_WORKERS processes for agent runs, until stopped. With --queues, runs one worker "
        "here. With --burst, one worker here drains its queues (all of them, without --queues) and "
        "exits. Redis: REDIS_URL (also from ./.env), else the embedded one `baton serve` started.",
    )
    p.add_argument(
        "--queues",
        metavar="NAMES",
        help="comma-separated queue names (baton-control, baton-gates, baton-agents) for a single "
        "worker in this process",
    )
    p.add_argument(
        "--burst",
        action="store_true",
        help="exit once the queues served are empty (without --queues: one worker over every queue, "
        "control first)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    envfile.load_into(os.environ, Path.cwd() / envfile.ENV_NAME)  # as `baton serve` does
    config = settings.load()
    missing = config.missing_evidence()
    if missing is not None:  # a worker signs every check run it completes: no key, no start
        raise ConfigError("missing-evidence", missing)
    logs.configure(config.log_level)
    url = config.redis_url or redis_server.discover()
    if args.queues:
        return pool.work(
            url, pool.parse_queues(args.queues), burst=args.burst, failover_wait=config.redis_failover_wait
        )
    if args.burst:  # burst is about the queues, not the pools: one worker drains them all, then exits
        return pool.work(url, pool.BURST_QUEUES, burst=True, failover_wait=config.redis_failover_wait)
    return pool.supervise(url, pool.default_pools(config.agent_workers), config.log_level)
