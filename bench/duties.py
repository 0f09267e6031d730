#!/usr/bin/env python3
"""bench/duties.py: what idle workers' periodic duties cost Redis, by the number of workers.

    .venv/bin/python bench/duties.py [--workers 1,6,12] [--seconds 20] [--code DIR]

Starts a Redis-protocol server (``EmbeddedRedis``) holding what a busy deployment holds
(``--started`` agent runs in progress: started jobs whose tasks are running and leased;
``--queued`` tasks queued for longer than a lease: admitted runs waiting for a slot), then N
``baton worker --queues baton-control`` processes with no GitHub App (so no job and no GitHub
call: the duties' Redis side alone), waits one interval, resets Redis's command statistics and
counts the commands Redis runs over ``--seconds``: commands per second, and the commands that
dominate. Commands run inside a script count one by one, as Redis counts them.

``--code DIR`` runs the workers from another checkout (``git worktree add /tmp/before <commit>``)
to compare before and after. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baton import keys  # noqa: E402
from baton.redis_server import EmbeddedRedis  # noqa: E402
from evidence.keys import SigningKey  # noqa: E402

START_TIMEOUT_S = 60.0
SETTLE_S = 6.0  # one interval (5 s) and a little: every worker has begun ticking


def populate(rdb: redis.Redis, started: int, queued: int) -> None:
    now = time.time()
    with rdb.pipeline(transaction=False) as pipe:
        for i in range(started):
            pipe.zadd("rq:wip:baton-agents", {f"run-{i}:exec-{i}": now + 3600})  # RQ's started registry
            pipe.hset(f"{keys.TASK_PREFIX}run-{i}", mapping={"state": "running"})
            pipe.zadd(keys.LEASES_KEY, {f"run-{i}": now + 3600})
        for i in range(queued):
            pipe.zadd(f"{keys.REGISTRY_PREFIX}queued", {f"wait-{i}": now - 60})
            pipe.hset(f"{keys.TASK_PREFIX}wait-{i}", mapping={"state": "queued"})
        pipe.execute()


def measure(args: argparse.Namespace, workers: int, work: Path) -> dict[str, Any]:
    """``workers`` idle workers from ``args.code`` on a Redis holding ``args``' load, counted."""
    code, seconds, started, queued = args.code, args.seconds, args.started, args.queued
    key = work / "signing-key.pem"
    key.write_bytes(SigningKey.generate().private_pem())
    key.chmod(0o600)
    with EmbeddedRedis(data_dir=work / f"redis-{workers}", durable=False) as server:
        rdb = redis.Redis.from_url(server.url)
        populate(rdb, started, queued)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REDIS_URL": server.url,
               "BATON_SIGNING_KEY_PATH": str(key), "BATON_AUDIT_SECRET": secrets.token_hex(32),
               "LOG_LEVEL": "WARNING", "XDG_CACHE_HOME": str(work / "cache"),
               "BATON_DATA_DIR": str(work / "data")}  # fmt: skip
        argv = [sys.executable, "-m", "baton", "worker", "--queues", "baton-control"]
        procs = []
        try:
            for i in range(workers):
                with (work / f"worker-{workers}-{i}.log").open("wb") as log:
                    procs.append(subprocess.Popen(argv, cwd=code, env=env, stdout=log, stderr=log))
            deadline = time.monotonic() + START_TIMEOUT_S
            while rdb.scard("rq:workers") < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{workers} workers did not register within {START_TIMEOUT_S:g}s; see {work}"
                    )
                time.sleep(0.1)
            time.sleep(SETTLE_S)
            rdb.config_resetstat()
            time.sleep(seconds)
            stats = rdb.info("commandstats")
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            rdb.close()
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    return {
        "workers": workers,
        "commands_per_s": round(sum(calls.values()) / seconds, 1),
        "top": dict(sorted(calls.items(), key=lambda kv: -kv[1])[:6]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", default="1,6,12", help="worker counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each count is measured")
    parser.add_argument("--started", type=int, default=64, help="agent runs in progress")
    parser.add_argument("--queued", type=int, default=50, help="tasks queued for longer than a lease")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout the workers run from")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    work = Path(tempfile.mkdtemp(prefix="baton-duties-"))
    out: dict[str, Any] = {"code": str(args.code), "started": args.started, "queued": args.queued,
                           "seconds": args.seconds}  # fmt: skip
    out["load_before"] = [round(x, 2) for x in os.getloadavg()]
    try:
        out["runs"] = [measure(args, n, work) for n in counts]
    finally:
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    for run in out["runs"]:
        top = ", ".join(f"{k} {round(v / args.seconds, 1)}/s" for k, v in run["top"].items())
        print(f"{run['workers']:>3} idle worker(s): {run['commands_per_s']} Redis commands/s ({top})")
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
