#!/usr/bin/env python3
"""bench/ingest_vs_probot.py: Baton's ingest side by side with Probot 14, interleaved A B C A B C.

Three contestants run side by side for the whole run:
  baton    `baton serve` (uvicorn) on a durable redis-server it stores every delivery in,
           as an RQ job and a task record, before its 2xx (BATON_REDIS_REPLICAS=0);
  baton-r1 the same on a durable primary with one replica, BATON_REDIS_REPLICAS=1: no 2xx
           before the replica confirmed the write (WAIT);
  probot   `run()` of the npm package `probot`, pinned below, with a handler that only
           counts `issues.labeled` and stores nothing.
`wrk` drives one, then the next, for --rounds rounds, at --connections connections,
with the very same request stream: bench/ingest's signed 12 KB `issues.labeled` bodies
(bench/ingest.lua, a new delivery id and body per request: Baton stores a body once).
After each Baton round the bench counts the tasks the primary gained against wrk's 2xx
count; after each Probot round, the deliveries its handler counted.

Probot is installed with npm into a cache outside the repository
(~/.cache/baton-bench/probot, or $BATON_BENCH_CACHE/probot). Needs `wrk`,
`node`/`npm`, `redis-server` on PATH and Baton installed in the interpreter.

    .venv/bin/python bench/ingest_vs_probot.py [--rounds 4] [--seconds 10] [--connections 16]

The figures: per side and round deliveries/s, p50/p99, CPU per delivery of the server and of
its Redis processes (/proc); the target is baton >= 1.0x probot with p99 no worse.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import httpx
import redis
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baton import queues, records  # noqa: E402
from baton.redis_server import EmbeddedRedis, free_port  # noqa: E402
from evidence.keys import SigningKey  # noqa: E402
from tests.redis_topology import Topology  # noqa: E402

PROBOT_VERSION = "14.3.2"
LUA = ROOT / "bench" / "ingest.lua"
CONTROL_QUEUE = "rq:queue:" + queues.CONTROL.name  # where issues.labeled tasks go
QUEUED_REGISTRY = records.REGISTRY_PREFIX + records.QUEUED

#: The Probot app: counts issues.labeled, stores nothing; GET /bench/count says how many it saw.
PROBOT_APP = """\
// Written by bench/ingest_vs_probot.py: Probot's side of the comparison.
import { run } from "probot";

let labeled = 0;
await run((app, { addHandler }) => {
  app.on("issues.labeled", async () => {
    labeled += 1;
  });
  addHandler((req, res) => {
    if (req.url !== "/bench/count") return false;
    res.writeHead(200, { "content-type": "text/plain" }).end(String(labeled));
    return true;
  });
});
"""


def _load_ingest() -> Any:
    """bench/ingest (a script without .py): its body and signature helpers are reused as they are."""
    loader = SourceFileLoader("bench_ingest", str(ROOT / "bench" / "ingest"))
    spec = importlib.util.spec_from_loader("bench_ingest", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ingest = _load_ingest()


def install_probot(cache: Path) -> Path:
    """Probot pinned to PROBOT_VERSION in ``cache`` (npm install only when missing); the app file."""
    cache.mkdir(parents=True, exist_ok=True)
    installed = cache / "node_modules" / "probot" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != PROBOT_VERSION:
        manifest = {"private": True, "type": "module", "dependencies": {"probot": PROBOT_VERSION}}
        (cache / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"installing probot@{PROBOT_VERSION} into {cache} ...", flush=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=cache,
                       check=True, timeout=600)  # fmt: skip
    app = cache / "bench-app.js"
    app.write_text(PROBOT_APP)
    return app


def rsa_pem() -> str:
    """A throwaway App key for Probot (it needs one to start; no token is ever asked for)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def clean_env() -> dict[str, str]:
    """The caller's environment without anything Baton or Probot would read as configuration."""
    drop = ("BATON_", "REDIS_URL", "WEBHOOK_", "APP_ID", "PRIVATE_KEY", "GITHUB_", "PORT", "HOST", "LOG_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (from /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not become ready within 60 s:\n{log.read_text()[-2000:]}")


@dataclass
class Side:
    name: str
    base: str
    proc: subprocess.Popen[bytes]
    count: Callable[[], int]  # what this side has stored (Baton) or counted (Probot) so far
    helpers: tuple[int, ...] = ()  # other processes whose CPU belongs to this side (redis-server)


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.run_tag = 0
        self.prefix, self.suffix = ingest.payload()
        (work / "prefix.json").write_bytes(self.prefix)
        (work / "suffix.json").write_bytes(self.suffix)
        self.body_size = len(self.prefix) + len(ingest.delivery_id(0, 0, 0)) + len(self.suffix)

    def drive(self, side: Side, seconds: int) -> dict[str, Any]:
        """One wrk run against ``side``; its figures, the side's count before and after, and CPU."""
        args = self.args
        self.run_tag += 1
        threads = min(args.threads, args.connections)
        per_thread = seconds * args.max_rate
        ingest.write_signatures(self.work, self.run_tag, threads, per_thread, self.prefix, self.suffix)
        before = side.count()
        pids = (side.proc.pid, *side.helpers)
        cpu_before = [cpu_seconds(p) for p in pids]
        wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(args.connections), "-d", f"{seconds}s", "--latency",
             "-s", str(LUA), side.base, "--", str(self.work), str(per_thread), str(self.run_tag)],
            capture_output=True, text=True, timeout=seconds + 60, check=True,
        )  # fmt: skip
        wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu_before, strict=True)]
        time.sleep(0.2)  # requests wrk cut off at its end may still be landing
        after = side.count()
        line = next(x for x in out.stdout.splitlines() if x.startswith("WRKJSON "))
        r = json.loads(line[len("WRKJSON ") :])
        ok = r["requests"] - r["non2xx"] - r["read_errors"] - r["timeouts"]
        seconds_run = r["duration_us"] / 1e6
        counted = after - before
        wrk_cpu = (wrk_after.ru_utime + wrk_after.ru_stime) - (wrk_before.ru_utime + wrk_before.ru_stime)
        return {
            "side": side.name,
            "requests": r["requests"],
            "ok": ok,
            "rps": ok / seconds_run,
            "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "max_ms": r["max_us"] / 1000,
            "non2xx": r["non2xx"],
            "errors": r["read_errors"] + r["timeouts"] + r["connect_errors"] + r["write_errors"],
            "counted": counted,
            # wrk counts a request cut off at the end as not done; every 2xx it saw must be counted.
            "every_2xx_counted": ok <= counted <= ok + args.connections,
            "server_cpu_us": 1e6 * cpu[0] / max(ok, 1),
            "helper_cpu_us": 1e6 * sum(cpu[1:]) / max(ok, 1),
            "wrk_cpu_us": 1e6 * wrk_cpu / max(r["requests"], 1),
            "loadavg": os.getloadavg()[0],
        }


def start_baton(name: str, work: Path, url: str, helpers: tuple[int, ...], replicas: int) -> Side:
    """`baton serve` on ``url``, requiring ``replicas`` replicas; ``helpers``: its Redis processes."""
    work.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    (work / "signing-key.pem").write_bytes(key.private_pem())
    port = free_port()
    env = {**clean_env(), "WEBHOOK_SECRET": ingest.SECRET.decode(), "HOST": "127.0.0.1", "PORT": str(port),
           "REDIS_URL": url, "LOG_LEVEL": "INFO", "XDG_CACHE_HOME": str(work / "cache"),
           "BATON_REDIS_REPLICAS": str(replicas), "BATON_SIGNING_KEY_PATH": str(work / "signing-key.pem"),
           "BATON_AUDIT_SECRET": secrets.token_hex(32)}  # fmt: skip
    log_path = work / "serve.log"
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "baton", "serve"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    ready = lambda: httpx.get(base + "/readyz", timeout=1).status_code == 200  # noqa: E731
    wait_until(ready, f"baton serve ({name})", proc, log_path)
    client = redis.Redis.from_url(url)

    def stored() -> int:
        # Both must grow by one per delivery: the job on its queue and the task's `queued` record.
        queued, registered = client.llen(CONTROL_QUEUE), client.zcard(QUEUED_REGISTRY)
        return min(int(queued), int(registered))

    return Side(name, base, proc, stored, helpers=helpers)


def start_probot(app: Path, log_path: Path) -> Side:
    port = free_port()
    env = {**clean_env(), "APP_ID": "1", "PRIVATE_KEY": rsa_pem(), "WEBHOOK_SECRET": ingest.SECRET.decode(),
           "HOST": "127.0.0.1", "PORT": str(port), "LOG_LEVEL": "info", "NODE_ENV": "production"}  # fmt: skip
    log = log_path.open("wb")
    proc = subprocess.Popen(["node", str(app)], cwd=app.parent, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"

    def counted() -> int:
        return int(httpx.get(base + "/bench/count", timeout=5).text)

    ready = lambda: httpx.get(base + "/bench/count", timeout=1).status_code == 200  # noqa: E731
    wait_until(ready, "probot", proc, log_path)
    return Side("probot", base, proc, counted)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


SIDES = ("baton", "baton-r1", "probot")


def report(rows: list[dict[str, Any]], started: str, load_start: tuple[float, float, float]) -> None:
    """Medians over the rounds, the ratios, the target's verdict, then every row as one JSON line."""

    def median(side: str, key: str) -> float:
        return float(statistics.median(r[key] for r in rows if r["side"] == side))

    keys = ("rps", "p50_ms", "p99_ms", "server_cpu_us", "helper_cpu_us")
    summary = {side: {key: round(median(side, key), 2) for key in keys} for side in SIDES}
    by_round: dict[int, dict[str, float]] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["side"]] = r["rps"]
    ratios = [x["baton"] / x["probot"] for x in by_round.values()]
    ratio = summary["baton"]["rps"] / summary["probot"]["rps"]
    replica_ratio = summary["baton-r1"]["rps"] / summary["baton"]["rps"]
    load_end = os.getloadavg()
    rates = ", ".join(f"{side} {summary[side]['rps']:.0f}" for side in SIDES)
    per_round = ", ".join(f"{x:.2f}" for x in ratios)
    print(f"median deliveries/s: {rates}: baton/probot {ratio:.2f} (per round {per_round}), "
          f"baton-r1/baton {replica_ratio:.2f}")  # fmt: skip
    latencies = (f"{side} {summary[side]['p50_ms']:.2f} / {summary[side]['p99_ms']:.2f} ms" for side in SIDES)
    print(f"median p50 / p99: {', '.join(latencies)}")
    met = ratio >= 1.0 and summary["baton"]["p99_ms"] <= summary["probot"]["p99_ms"]
    print(f"target (baton >= 1.0x Probot, p99 no worse): {'met' if met else 'NOT met'}; load average at "
          f"the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")  # fmt: skip
    machine = f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"
    print(json.dumps({"date": started, "machine": machine, "probot": PROBOT_VERSION, "load_start": load_start,
                      "load_end": load_end, "summary": summary, "ratio": round(ratio, 3),
                      "replica_ratio": round(replica_ratio, 3), "rows": rows}))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3, help="seconds of load for each side before round 1")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (wrk shares the 2 cores)")
    parser.add_argument("--max-rate", type=int, default=15000,
                        help="signed bodies prepared per second of a run, per wrk thread")  # fmt: skip
    cache_root = Path(os.environ.get("BATON_BENCH_CACHE") or Path.home() / ".cache" / "baton-bench")
    parser.add_argument("--probot-dir", type=Path, default=cache_root / "probot")
    args = parser.parse_args()
    for tool in ("wrk", "node", "npm", "redis-server"):
        if shutil.which(tool) is None:
            print(f"bench/ingest_vs_probot.py: {tool} is not on PATH", file=sys.stderr)
            return 2

    app = install_probot(args.probot_dir)
    work = Path(tempfile.mkdtemp(prefix="baton-vs-probot-"))
    bench = Bench(args, work)
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    load_start = os.getloadavg()
    alone = EmbeddedRedis(data_dir=work / "redis", durable=True)  # redis-server from PATH, AOF everysec
    pair = Topology(work / "redis-r1", replicas=1, sentinels=0)  # the same, and a replica of it
    sides: list[Side] = []
    rows: list[dict[str, Any]] = []
    try:
        url = alone.start()
        assert alone.pid is not None
        sides.append(start_baton("baton", work / "baton", url, (alone.pid,), replicas=0))
        pair.start()
        primary, replica = pair.data
        assert primary.proc is not None
        assert replica.proc is not None
        sides.append(start_baton("baton-r1", work / "baton-r1", f"redis://127.0.0.1:{primary.port}/0",
                                 (primary.proc.pid, replica.proc.pid), replicas=1))  # fmt: skip
        sides.append(start_probot(app, work / "probot.log"))
        pids = ", ".join(f"{side.name} pid {side.proc.pid}" for side in sides)
        print(f"{started}; body {bench.body_size} bytes; {args.connections} connections; wrk {args.threads} "
              f"thread(s); {pids} (probot@{PROBOT_VERSION}); load average {load_start[0]:.2f} "
              f"{load_start[1]:.2f} {load_start[2]:.2f}")  # fmt: skip
        for side in sides:
            bench.drive(side, args.warmup)
        print(f"{'round':>5} {'side':>8} {'deliv/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'non-2xx':>7} "
              f"{'stored':>7} {'cpu µs/d':>8} {'+redis':>6} {'wrk µs':>6} {'load':>5}")  # fmt: skip
        for n in range(1, args.rounds + 1):
            for side in sides:
                row = bench.drive(side, args.seconds)
                row["round"] = n
                rows.append(row)
                print(f"{n:>5} {side.name:>8} {row['rps']:>8.0f} {row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f} "
                      f"{row['non2xx'] + row['errors']:>7} {'yes' if row['every_2xx_counted'] else 'NO':>7} "
                      f"{row['server_cpu_us']:>8.0f} {row['helper_cpu_us']:>6.0f} {row['wrk_cpu_us']:>6.0f} "
                      f"{row['loadavg']:>5.2f}", flush=True)  # fmt: skip
    finally:
        for side in reversed(sides):
            stop(side.proc)
        pair.stop()
        alone.stop()

    report(rows, started, load_start)
    ok = all(r["every_2xx_counted"] and r["non2xx"] == 0 and r["errors"] == 0 for r in rows)
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"a round lost or refused deliveries: logs kept in {work}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
