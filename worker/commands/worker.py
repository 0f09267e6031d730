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
        "BATON_AGENT_WORKERS processes for agent runs. With --queues, runs one worker here.",
    )
    p.add_argument("--queues", help="comma-separated queue names for a single worker in this process")
    p.add_argument("--burst", action="store_true", help="with --queues: exit once the queues are empty")
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
        return pool.work(url, pool.parse_queues(args.queues), burst=args.burst)
    return pool.supervise(url, pool.default_pools(config.agent_workers), config.log_level)
