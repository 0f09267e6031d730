#!/usr/bin/env python3
"""bench/agent_run.py: an agent run's overhead, real processes (label -> agent started -> PR opened).

    .venv/bin/python bench/agent_run.py [--labels 5] [--quick] [--mb 10] [--keep]

Targets (the issue): label -> agent process started (mirror fetch, checkout, box) for a 10 MB
repository, median <= 2 s; the ``script`` agent end to end (label -> PR opened), median <= 5 s.

Starts, all on 127.0.0.1 and each as its own process: a Redis-protocol server
(``EmbeddedRedis``, AOF on), the GitHub emulator (``baton emulator``), ``baton serve`` and
``baton worker`` as deployed (no ``--queues``: its supervisor starts one in-process control
worker, one gates worker and one agents worker, ``BATON_AGENT_WORKERS=1``, which forks a
work-horse per run). The world is ``emulator.world.build``; its private ``acme/widgets``
then gets ``--mb`` MB of random bytes on ``main``, as 300 files of base64 text (the admin API
takes text; git's zlib shrinks base64 only to ~83% here, so 10 MB of random bytes makes a
~13.5 MB working tree and ~11 MB of git objects: both sizes are printed). Issues are made up
front with the App's ``issues`` events off. No latency or fault is injected; no warm-up label:
the first run fetches the whole repository into the agents worker's mirror (``cold``), later
runs fetch only what changed.

Each label is ``agent:script`` by ``maria`` (maintain) on a fresh issue whose body is a recipe
for Baton's script agent (``worker/runner/script_agent.py``): run ``date +%s.%N`` (the agent's
first step: the moment the agent process is up and running its program, inside its box), then
write one small file. Labels go one at a time; the next is sent once every queue is idle.

Where each moment comes from (wall clock, one machine; nothing in Baton is changed for this):

- ``label``: just before the admin call that labels the issue (it returns once the emulator has
  delivered the signed webhook to ``baton serve``: that round trip is included).
- ``admitted``: the task's history (``baton.records.TASK_PREFIX`` + id + ``:history``), its move
  ``running -> queued`` (the control task handed the run to the agents queue), ms resolution.
- ``picked``: the next move ``queued -> running`` (the agents worker took the run job).
- ``spawned``: the audit event ``spawned`` (``worker.audit.note`` in the run's ``on_start``
  callback), read from the installation's pending or sealed audit list. The worker records it
  once the policy is loaded, the issue read, the mirror fetched and the "running" status comment
  written, but *before* the checkout (``git archive`` into a fresh workspace) and the box: so
  ``spawned`` is not yet the agent process.
- ``agent``: the time ``date`` printed inside the box, read from the run's record
  (``baton:run:<id>``, ``output_tail``): the checkout, the egress proxy, bwrap and the agent's
  Python start-up are all before it. This is "agent process started" for the target.
- ``pr``: when the bench first sees the PR through the emulator's REST API
  (``GET /repos/{o}/{r}/pulls?head=...``, polled every 10 ms once the run's record exists).

The last line is one JSON object with every figure. Skips (exit 0, ``"skipped"`` in the JSON)
when bwrap is missing or cannot run here.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
from rq import Queue

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# bench/ is this script's directory: control_path.py's process handling is reused as it is.
import control_path  # noqa: E402
from control_path import (  # noqa: E402
    Processes,
    baton_env,
    events_without,
    installation_token,
    pct,
    say,
    start_redis_and_emulator,
    wait_http,
)

from baton.queues import ALL as ALL_QUEUES  # noqa: E402
from baton.records import HISTORY_SUFFIX, TASK_PREFIX  # noqa: E402
from baton.redis_server import free_port  # noqa: E402
from bot.app import WEBHOOK_PATH  # noqa: E402
from emulator import world  # noqa: E402
from emulator.admin.client import AdminClient  # noqa: E402
from evidence.audit import chain_key, pending_key  # noqa: E402
from worker.runs.admit import RECORD_PREFIX  # noqa: E402

AGENT = "script"
SENDER = "maria"
FILES = 300
TARGET_AGENT_MS, TARGET_PR_MS = 2000.0, 5000.0
RUN_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0
TERMINAL = {"pr_opened", "done", "failed", "denied", "refused", "cancelled", "timed-out", "accepted"}


def epoch(stamp: str) -> float:
    """Baton's RFC 3339 timestamps (``2026-11-30T23:12:11.123Z``) as epoch seconds."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def recipe(tag: str) -> str:
    steps = [
        {"op": "spawn", "argv": ["date", "+bench-agent-started %s.%N"], "check": True},
        {"op": "write", "path": f"bench/{tag}.txt", "content": f"{tag}\n"},
    ]
    return f"Bench run.\n\n```baton-recipe\n{json.dumps({'steps': steps})}\n```\n"


# -- the world ----------------------------------------------------------------------------------


def fill_repository(admin: AdminClient, mb: float, state: Path) -> dict[str, Any]:
    """``mb`` MB of random bytes on main, as FILES files of base64 text, in commits of ~1.8 MB."""
    raw_per_file = max(1, round(mb * 1e6 / FILES))
    tree_bytes = 0
    batch: dict[str, str | None] = {}
    for i in range(FILES):
        text = base64.encodebytes(os.urandom(raw_per_file)).decode()
        batch[f"data/blob-{i:03d}.txt"] = text
        tree_bytes += len(text)
        if len(batch) == 40 or i == FILES - 1:
            admin.commit(world.REPO, "main", batch)
            batch = {}
    bare = state / "repos" / f"{world.REPO}.git"
    out = subprocess.run(
        ["git", "-C", str(bare), "count-objects", "-v"], capture_output=True, text=True, check=True
    ).stdout
    counts = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    git_kib = int(counts.get("size", 0)) + int(counts.get("size-pack", 0))
    return {
        "files": FILES,
        "tree_mb": round(tree_bytes / 1e6, 2),
        "git_objects_mb": round(git_kib * 1024 / 1e6, 2),
    }


def start_worker(procs: Processes, env: dict[str, str], rdb: redis.Redis) -> None:
    """`baton worker` as deployed; waits until RQ lists a worker on every queue."""
    proc = procs.start(
        "worker", [sys.executable, "-m", "baton", "worker"], {**env, "BATON_AGENT_WORKERS": "1"}
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"baton worker exited with {proc.popen.returncode}; see {proc.log}")
        if all(rdb.scard(f"rq:workers:{q.name}") >= 1 for q in ALL_QUEUES):
            return
        time.sleep(0.05)
    raise RuntimeError(
        f"baton worker's processes not all registered within {START_TIMEOUT_S:g}s; see {proc.log}"
    )


# -- one label ----------------------------------------------------------------------------------


class Run:
    def __init__(self, bench: Bench, number: int) -> None:
        self.bench, self.number = bench, number
        self.t: dict[str, float] = {}
        self.task_id: str | None = None
        self.state: str | None = None
        self.error: str | None = None
        self.record: dict[str, Any] = {}

    def go(self) -> None:
        b = self.bench
        self.t["label"] = time.time()
        answer = b.admin.label(world.REPO, self.number, [f"agent:{AGENT}"], sender=SENDER)
        ours = [d for d in answer.get("deliveries") or [] if d.get("event") == "issues"]
        if not ours or ours[-1].get("status_code") != 202:
            self.error = f"the label's delivery was not accepted: {ours[-1:] or 'none'}"
            return
        self.task_id = task = str(ours[-1]["guid"])
        head = f"{world.OWNER}:baton/issue-{self.number}"
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            if "pr" not in self.t and b.rdb.exists(RECORD_PREFIX + task):  # the agent has exited
                pulls = b.gh.get(f"/repos/{world.REPO}/pulls", params={"head": head, "state": "all"})
                if pulls.status_code == 200 and pulls.json():
                    self.t["pr"] = time.time()
            state = b.rdb.hget(TASK_PREFIX + task, "state")
            self.state = state.decode() if state else None
            if self.state in TERMINAL and "pr" in self.t:
                break
            if self.state in TERMINAL and self.state != "pr_opened":
                self.error = f"the task ended {self.state}: {b.rdb.hget(TASK_PREFIX + task, 'detail')!r}"
                break
            time.sleep(0.01 if "pr" not in self.t and b.rdb.exists(RECORD_PREFIX + task) else 0.005)
        else:
            self.error = f"not done within {RUN_TIMEOUT_S:g}s (state {self.state})"
        b.settle()
        self._read_moments(task)

    def _read_moments(self, task: str) -> None:
        b = self.bench
        moves = [orjson.loads(e) for e in b.rdb.lrange(TASK_PREFIX + task + HISTORY_SUFFIX, 0, -1)]
        handed = next(
            (i for i, m in enumerate(moves) if m.get("from") == "running" and m.get("to") == "queued"), None
        )
        if handed is not None:
            self.t["admitted"] = epoch(moves[handed]["at"])
            picked = next((m for m in moves[handed + 1 :] if m.get("to") == "running"), None)
            if picked is not None:
                self.t["picked"] = epoch(picked["at"])
        installation = b.w.installation_id
        events = [orjson.loads(e) for e in b.rdb.lrange(pending_key(installation), 0, -1)]
        events += [orjson.loads(e).get("event", {}) for e in b.rdb.lrange(chain_key(installation), 0, -1)]
        spawned = [e for e in events if e.get("task") == task and e.get("event") == "spawned"]
        if spawned:
            self.t["spawned"] = epoch(spawned[0]["at"])
        raw = b.rdb.get(RECORD_PREFIX + task)
        self.record = orjson.loads(raw) if raw else {}
        for line in str(self.record.get("output_tail") or "").splitlines():
            if line.startswith("bench-agent-started "):
                self.t["agent"] = float(line.split()[1])
        if self.error is None and not {"admitted", "spawned", "agent", "pr"} <= set(self.t):
            self.error = f"moments missing: {sorted({'admitted', 'spawned', 'agent', 'pr'} - set(self.t))}"

    def ms(self, start: str, end: str) -> float | None:
        if start in self.t and end in self.t:
            return round((self.t[end] - self.t[start]) * 1000, 1)
        return None

    def to_data(self) -> dict[str, Any]:
        durations = self.record.get("durations") or {}
        return {
            "issue": self.number,
            "task": self.task_id,
            "state": self.state,
            "error": self.error,
            "label_to_admitted_ms": self.ms("label", "admitted"),
            "admitted_to_picked_ms": self.ms("admitted", "picked"),
            "picked_to_spawned_ms": self.ms("picked", "spawned"),
            "spawned_to_agent_ms": self.ms("spawned", "agent"),
            "agent_to_pr_ms": self.ms("agent", "pr"),
            "admitted_to_spawned_ms": self.ms("admitted", "spawned"),
            "spawned_to_pr_ms": self.ms("spawned", "pr"),
            "label_to_spawned_ms": self.ms("label", "spawned"),
            "label_to_agent_ms": self.ms("label", "agent"),
            "label_to_pr_ms": self.ms("label", "pr"),
            "box_s": durations.get("agent_s"),
            "runner_total_s": durations.get("total_s"),
        }


class Bench:
    def __init__(self, admin: AdminClient, rdb: redis.Redis, w: world.World, gh: httpx.Client) -> None:
        self.admin, self.rdb, self.w, self.gh = admin, rdb, w, gh

    def settle(self, timeout: float = 60.0) -> None:
        """Until no queue has a job waiting or running (the PR's own webhooks make gate work too)."""
        deadline = time.monotonic() + timeout
        time.sleep(0.2)  # the last webhooks of the run are delivered after the PR is opened
        while time.monotonic() < deadline:
            queues = [Queue(q.name, connection=self.rdb) for q in ALL_QUEUES]
            if not any(q.count or q.started_job_registry.get_job_count(cleanup=False) for q in queues):
                return
            time.sleep(0.05)


# -- the whole bench --------------------------------------------------------------------------------


def run(args: argparse.Namespace, work: Path, procs: Processes, out: dict[str, Any]) -> None:
    base, server, _, api = start_redis_and_emulator(work, procs)
    port = free_port()
    with AdminClient(api, timeout=120) as admin:
        admin.settings(rate_limit=1_000_000_000)
        w = world.build(admin, api, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}")
        say(f"filling {world.REPO} with ~{args.mb:g} MB ...")
        out["repository"] = fill_repository(admin, args.mb, work / "github")
        say(f"repository: {out['repository']}; {args.labels} issues ...")
        with events_without(admin, w, "issues"):
            numbers = [
                int(
                    admin.create_issue(world.REPO, title=f"bench {i}", user=SENDER, body=recipe(f"run-{i}"))[
                        "number"
                    ]
                )
                for i in range(args.labels)
            ]
        env = baton_env(base, work, w, redis_url=server.url, api=api, port=port)
        serve = procs.start("serve", [sys.executable, "-m", "baton", "serve"], env)
        wait_http(f"http://127.0.0.1:{port}/readyz", serve.popen, "baton serve", serve.log)
        rdb = redis.Redis.from_url(server.url)
        start_worker(procs, env, rdb)
        headers = {
            "Authorization": f"token {installation_token(api, w)}",
            "Accept": "application/vnd.github+json",
        }
        with httpx.Client(base_url=api, headers=headers, trust_env=False, timeout=30) as gh:
            bench = Bench(admin, rdb, w, gh)
            runs = []
            for i, number in enumerate(numbers):
                say(f"label {i + 1}/{len(numbers)} on {world.REPO}#{number} ...")
                one = Run(bench, number)
                one.go()
                runs.append(one)
                d = one.to_data()
                said = f"label->agent {d['label_to_agent_ms']} ms, label->PR {d['label_to_pr_ms']} ms"
                say(f"  {d['state']}: {said}" + (f"; {one.error}" if one.error else ""))
        rdb.close()
    out["runs"] = [r.to_data() for r in runs]
    ok = [r for r in out["runs"] if r["error"] is None]
    out["complete"] = len(ok)

    def summary(key: str) -> dict[str, float | None]:
        values = [r[key] for r in ok if r[key] is not None]
        return {"p50": round(statistics.median(values), 1) if values else None, "p95": pct(values, 95)}

    keys = [k for k in out["runs"][0] if k.endswith("_ms")] if out["runs"] else []
    out["summary"] = {k: summary(k) for k in keys}
    out["cold"] = out["runs"][0] if out["runs"] else None


def report(out: dict[str, Any]) -> None:
    s = out["summary"]

    def row(name: str, key: str, target: float | None = None) -> None:
        p50, p95 = s[key]["p50"], s[key]["p95"]
        verdict = "" if target is None else ("  met" if p50 is not None and p50 <= target else "  MISSED")
        goal = f"  (target median <= {target / 1000:g} s)" if target else ""
        print(f"{name:<44} median {p50!s:>8} ms   p95 {p95!s:>8} ms{goal}{verdict}")

    print()
    print(f"{out['complete']}/{len(out['runs'])} runs complete; repository {out['repository']}")
    row("label -> admitted (control task)", "label_to_admitted_ms")
    row("admitted -> picked up (agents worker)", "admitted_to_picked_ms")
    row("picked up -> spawned (policy, fetch, status)", "picked_to_spawned_ms")
    row("spawned -> agent's first step (checkout, box)", "spawned_to_agent_ms")
    row("agent's first step -> PR visible", "agent_to_pr_ms")
    row("admitted -> spawned", "admitted_to_spawned_ms")
    row("spawned -> PR visible", "spawned_to_pr_ms")
    row("label -> spawned (the worker's audit event)", "label_to_spawned_ms")
    row("label -> agent process started", "label_to_agent_ms", TARGET_AGENT_MS)
    row("label -> PR opened (script agent)", "label_to_pr_ms", TARGET_PR_MS)
    cold = out.get("cold") or {}
    said = f"label->agent {cold.get('label_to_agent_ms')} ms, label->PR {cold.get('label_to_pr_ms')} ms"
    print(f"first run (mirror cold): {said}")


def skip_reason() -> str | None:
    """Why no run can be measured here (no usable bwrap, or bwrap cannot make a box), else None."""
    from worker.runner import box  # noqa: PLC0415 - its probe runs boxes: only when asked

    found = box.probe()
    if not found.bwrap_runs:
        return f"bwrap cannot run boxes here: {'; '.join(found.problems) or 'see baton doctor'}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--labels", type=int, default=None, help="labels, one at a time (default 5; --quick 3)"
    )
    parser.add_argument("--quick", action="store_true", help="3 labels")
    parser.add_argument("--mb", type=float, default=10.0, help="MB of random bytes in the repository")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, state)")
    args = parser.parse_args()
    args.labels = args.labels or (3 if args.quick else 5)
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "labels": args.labels,
        "quick": args.quick,
    }
    skipped = skip_reason()
    if skipped is not None:
        print(f"bench/agent_run: skipped: {skipped}")
        print(json.dumps({**out, "skipped": skipped}))
        return 0

    work = Path(tempfile.mkdtemp(prefix="baton-agent-run-"))
    procs = Processes(work)

    def interrupted(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    failed: str | None = None
    try:
        run(args, work, procs, out)
    except KeyboardInterrupt:
        failed = "interrupted"
    except Exception as exc:
        failed = f"{type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            procs.stop_all()
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["seconds"] = round(time.monotonic() - control_path.BEGAN, 1)
    out["error"] = failed
    if failed is None:
        report(out)
        if out["complete"] < len(out["runs"]):
            failed = out["error"] = f"{len(out['runs']) - out['complete']} run(s) incomplete"
    else:
        print(f"bench/agent_run: stopped: {failed}", file=sys.stderr)
    control_path.close(out, work, keep=args.keep or failed is not None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
