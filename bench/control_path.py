#!/usr/bin/env python3
"""bench/control_path.py: Baton's control path (a label -> its status comment), real processes.

    .venv/bin/python bench/control_path.py [--quick] [--keep]

Starts, all on 127.0.0.1 and each as its own process: a Redis-protocol server
(``EmbeddedRedis``, AOF on), the GitHub emulator (``baton emulator``), ``baton serve``
and ``baton worker --queues baton-control`` (one process, then two for step 3). The
world is ``emulator.world.build`` with the org ceiling's limits raised (runs per day,
and ``max_concurrent_runs`` to the schema's 64) and more private repositories like
``acme/widgets`` made as needed: no worker serves the agents queue here, so every
admitted run stays ``queued`` and keeps its repository's concurrency slot, and a
repository takes at most ~60 labels. Each repository gets one warm-up label before
anything on it is measured. No latency or fault is injected.

Every label is ``agent:claude-code`` by ``maria`` (maintain) on a fresh issue created
beforehand. The world's policy admits it: the control task checks the sender, loads
the policy, runs the gate, reserves the budget, hands the run to the agents queue and
writes the ``queued`` status comment. That is the control path measured.

How to read the output:

- (0) the emulator alone: authenticated ``GET /repos/{o}/{r}`` with an installation
  token, one keep-alive client, ~3 s. If Baton's figures are far from these, the
  emulator is not what limits them.
- (1) one label at a time; (2) labels at a fixed 20/s from a thread pool. Latency is
  from just before the admin call that labels the issue (it returns once the emulator
  has delivered the signed webhook to ``baton serve``: that round trip is included,
  nothing is subtracted) to the moment Redis shows the task done: its record
  (``bot.records.TASK_PREFIX`` + delivery GUID) has ``published`` (written after a
  terminal task's outcome is on GitHub), or, for a run handed to the agents queue
  (state ``queued``; today's code writes its status comment directly and no
  ``published`` field), its control job has finished in RQ (the status write is the
  job's last step). ``end markers`` says which marker ended how many tasks;
  ``comments`` that the status comment naming the task is on the emulator's issue.
  Redis is polled every 2 ms (coarser when many tasks are in flight).
- (3) 200 labels from 8 sender threads as fast as they go, with one worker process,
  then two: tasks/s from the first label sent to the last task done.
- (4) GitHub API calls per accepted label, from the emulator's request log: in step 1
  each label's calls are those logged between its label and the next (labels are
  serial), so the per-label figures and the endpoint list of one steady-state label
  (the last of step 1) are exact. ``counted``: the log's ``counted`` field where the
  emulator sets it, else every call that is not a 304. Calls to
  ``/app/hook/deliveries`` (the workers' periodic redelivery pass) are background and
  left out. Steps 2 and 3 give averages over the step.
- (5) CPU per task of the worker: utime+stime of each worker process and all its live
  descendants, plus cutime+cstime (RQ forks a work-horse per job and reaps it) from
  /proc, read before and after step 1 (jobs all finished), divided by its tasks. The
  same for serve, the emulator and Redis, for context; resolution is one clock tick.

The last line is one JSON object with every figure. Logs are kept (and their path
printed) with ``--keep`` or when a process logged an error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import json
import math
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import redis
import yaml
from rq.job import Job

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.app import WEBHOOK_PATH  # noqa: E402
from bot.queues import CONTROL  # noqa: E402
from bot.records import OUTBOX_KEY, QUEUED, TASK_PREFIX  # noqa: E402
from bot.redis_server import EmbeddedRedis, free_port  # noqa: E402
from emulator import world  # noqa: E402
from emulator.admin_client import AdminClient  # noqa: E402
from evidence.keys import SigningKey  # noqa: E402

AGENT_LABEL = "agent:claude-code"
SENDER = "maria"  # maintain on every repository here
LABELS_PER_REPO = 60  # admitted runs stay queued and keep a slot: max_concurrent_runs is 64 at most
START_TIMEOUT_S = 60.0
TASK_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
BACKGROUND_PATHS = ("/app/hook/deliveries",)
JOB_ENDED = {b"finished", b"failed", b"stopped", b"canceled"}
TARGETS = {
    "p50_ms": 100.0,
    "p95_ms": 300.0,
    "cpu_ms_per_task": 30.0,
    "tasks_per_s_2_workers": 50.0,
    "counted_calls_per_label": 2.0,
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP = threading.Event()  # set on Ctrl-C / SIGTERM: senders stop sending


# -- small helpers ------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("met" if ok else "MISSED")


def _die_with_parent() -> None:
    """In a child we start: SIGTERM when this bench dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {log}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1, trust_env=False).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer {url} within {START_TIMEOUT_S:g}s; see {log}")


# -- processes ----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


class Processes:
    """Every process this bench starts, stopped (by pid, newest first) whatever happens."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[Proc] = []
        self.stop_hooks: list[Callable[[], None]] = []  # run after the processes stop (Redis last)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no thread runs when we start one
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=STOP_GRACE_S)
        for hook in self.stop_hooks:
            with contextlib.suppress(Exception):
                hook()


# -- CPU from /proc -----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int, float] | None:
    """(ppid, utime+stime+cutime+cstime in ticks, start) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 (state) is fields[0]
    ppid = int(fields[1])
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    return ppid, ticks, float(fields[19])


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds of ``roots`` and all their live descendants, reaped children included."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = (found[0], found[1])
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total / CLK_TCK


# -- the world ----------------------------------------------------------------------------------


def org_policy() -> str:
    """The world's org ceiling with limits high enough for hundreds of queued runs."""
    data = yaml.safe_load(world.ORG_POLICY)
    data["limits"] = {
        **(data.get("limits") or {}),
        "max_concurrent_runs": 64,
        "max_runs_per_day": 1_000_000,
        "max_agent_minutes_per_day": 100_000_000,
    }
    return str(yaml.safe_dump(data, sort_keys=False))


def check_agent_admitted() -> str:
    """The world's policies must allow the agent we label with (else the bench says so at once)."""
    data = yaml.safe_load(world.ORG_POLICY)
    agent = AGENT_LABEL.split(":", 1)[1]
    if agent not in (data.get("agents") or {}) or agent not in (yaml.safe_load(world.REPO_POLICY) or {}).get(
        "agents", {agent: None}
    ):
        raise RuntimeError(f"the sample world's policy no longer names {agent!r}; pick another agent")
    return agent


def installation_token(api: str, w: world.World) -> str:
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(w.app_id)}, w.private_key, "RS256")
    r = httpx.post(
        f"{api}/app/installations/{w.installation_id}/access_tokens",
        trust_env=False,
        timeout=10,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
    )
    r.raise_for_status()
    return str(r.json()["token"])


class RepoPool:
    """Fresh issues on private repositories like acme/widgets, at most LABELS_PER_REPO labels each."""

    def __init__(self, admin: AdminClient, warm: Callable[[str, int], None]) -> None:
        self.admin = admin
        self.warm = warm
        self.repos: list[str] = []
        self.used = 0

    def _new_repo(self) -> None:
        if not self.repos:
            repo = world.REPO
        else:
            name = f"bench-{len(self.repos):02d}"
            repo = f"{world.OWNER}/{name}"
            files = {
                "README.md": f"# {name}\n",
                "src/widgets.py": "def spin():\n    return 42\n",
                ".github/baton.yml": world.REPO_POLICY,
            }
            self.admin.create_repo(world.OWNER, name, files=files, private=True)
            self.admin.set_role(repo, SENDER, "maintain")
        self.repos.append(repo)
        self.used = 1
        number = int(self.admin.create_issue(repo, title="warm-up", user=SENDER)["number"])
        self.warm(repo, number)  # the repository's first label, not measured

    def issues(self, n: int) -> list[tuple[str, int]]:
        out = []
        for i in range(n):
            if STOP.is_set():
                raise KeyboardInterrupt
            if not self.repos or self.used >= LABELS_PER_REPO:
                self._new_repo()
            repo = self.repos[-1]
            out.append(
                (repo, int(self.admin.create_issue(repo, title=f"bench issue {i}", user=SENDER)["number"]))
            )
            self.used += 1
        return out


# -- following tasks in Redis -------------------------------------------------------------------


@dataclass
class Sent:
    repo: str
    number: int
    t0: float  # perf_counter just before the admin label call
    ack_s: float  # the admin call's round trip (includes the webhook delivery to serve)
    task_id: str | None
    delivery_status: int | None
    delivery_ms: float | None  # how long serve took to answer the webhook, as the emulator saw it
    error: str | None = None
    done_at: float | None = None
    marker: str | None = None
    state: str | None = None

    @property
    def latency_ms(self) -> float | None:
        return None if self.done_at is None else (self.done_at - self.t0) * 1000


class Tracker:
    """Polls Redis for each sent task until it is done (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        self.rdb = redis.Redis.from_url(url)
        self.lock = threading.Lock()
        self.pending: dict[str, Sent] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tracker", daemon=True)

    def __enter__(self) -> Tracker:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.rdb.close()

    def add(self, sent: Sent) -> None:
        if sent.task_id is not None:
            with self.lock:
                self.pending[sent.task_id] = sent

    def _run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                items = list(self.pending.items())
            if not items:
                self.stop.wait(0.002)
                continue
            pipe = self.rdb.pipeline(transaction=False)
            for task_id, _ in items:
                pipe.hget(TASK_PREFIX + task_id, "published")
                pipe.hget(TASK_PREFIX + task_id, "state")
                pipe.hget(Job.key_for(task_id), "status")
            try:
                got = pipe.execute()
            except redis.RedisError:
                self.stop.wait(0.05)
                continue
            now = time.perf_counter()
            for k, (task_id, sent) in enumerate(items):
                published, state, job = got[3 * k : 3 * k + 3]
                marker = None
                if published is not None:
                    marker = "published"
                elif job in JOB_ENDED and state == QUEUED.encode():  # handed to the agents queue
                    marker = f"{(state or b'?').decode()} + job {job.decode()}"
                if marker is not None:
                    with self.lock:
                        self.pending.pop(task_id, None)
                    sent.done_at, sent.marker = now, marker
                    sent.state = (state or b"?").decode()
            self.stop.wait(min(0.02, max(0.002, 0.0005 * len(items))))

    def wait(self, sents: list[Sent], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not STOP.is_set():
            if all(s.done_at is not None or s.task_id is None for s in sents):
                return
            time.sleep(0.002)


def job_finished(rdb: redis.Redis, task_id: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rdb.hget(Job.key_for(task_id), "status") in JOB_ENDED:
            return True
        time.sleep(0.002)
    return False


class Labeller:
    """Labels issues through the admin API (one client per thread)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.local = threading.local()

    def admin(self) -> AdminClient:
        client = getattr(self.local, "admin", None)
        if client is None:
            client = self.local.admin = AdminClient(self.api, timeout=30)
        return client

    def label(self, repo: str, number: int) -> Sent:
        t0 = time.perf_counter()
        try:
            answer = self.admin().label(repo, number, [AGENT_LABEL], sender=SENDER)
        except Exception as exc:
            return Sent(
                repo, number, t0, time.perf_counter() - t0, None, None, None, f"{type(exc).__name__}: {exc}"
            )
        ack = time.perf_counter() - t0
        ours = [d for d in answer.get("deliveries", []) if d.get("event") == "issues"] or answer.get(
            "deliveries", []
        )
        if not ours:
            return Sent(repo, number, t0, ack, None, None, None, "no delivery in the admin answer")
        d = ours[-1]
        status = d.get("status_code")
        error = None if isinstance(status, int) and 200 <= status < 300 else f"webhook answered {status}"
        return Sent(repo, number, t0, ack, str(d["guid"]), status, d.get("duration_ms"), error)


# -- the request log ------------------------------------------------------------------------------

_SEGMENT_ID = re.compile(r"/\d+(?=/|$)")


def endpoint(entry: dict[str, Any]) -> str:
    path = re.sub(r"^/repos/[^/]+/[^/]+", "/repos/{o}/{r}", str(entry.get("path", "")))
    path = re.sub(r"/collaborators/[^/]+/", "/collaborators/{user}/", path)
    path = _SEGMENT_ID.sub("/{n}", path)
    return f"{entry.get('method')} {path} -> {entry.get('status')}"


def background(entry: dict[str, Any]) -> bool:
    return str(entry.get("path", "")).startswith(BACKGROUND_PATHS)


def counted(entry: dict[str, Any]) -> bool:
    if "counted" in entry:
        return bool(entry["counted"])
    return entry.get("status") != 304


def summarise_calls(entries: list[dict[str, Any]], labels: int) -> dict[str, Any]:
    ours = [e for e in entries if not background(e)]
    durations = [float(e["duration_ms"]) for e in ours if isinstance(e.get("duration_ms"), int | float)]
    return {
        "calls_per_label": rounded(len(ours) / labels, 2) if labels else None,
        "counted_per_label": rounded(sum(counted(e) for e in ours) / labels, 2) if labels else None,
        "emulator_ms_per_label": rounded(sum(durations) / labels, 1) if labels and durations else None,
        "background_calls": len(entries) - len(ours),
        "counted_from": "counted field" if any("counted" in e for e in entries) else "status != 304",
    }


# -- the steps ----------------------------------------------------------------------------------


@dataclass
class Bench:
    api: str
    admin: AdminClient
    rdb: redis.Redis
    redis_url: str
    w: world.World
    labeller: Labeller
    pool: RepoPool | None = None
    problems: list[str] = field(default_factory=list)
    all_sent: list[Sent] = field(default_factory=list)

    def log_len(self) -> int:
        return len(self.admin.requests())

    def one(self, repo: str, number: int) -> Sent:
        """Label, wait until done and until its job has ended (so the next label's calls are its own)."""
        with Tracker(self.redis_url) as tracker:
            sent = self.labeller.label(repo, number)
            tracker.add(sent)
            tracker.wait([sent], TASK_TIMEOUT_S)
        if sent.task_id is not None:
            job_finished(self.rdb, sent.task_id)
        self.all_sent.append(sent)
        return sent

    def warm(self, repo: str, number: int) -> None:
        sent = self.one(repo, number)
        if sent.done_at is None:
            raise RuntimeError(
                f"warm-up label on {repo}#{number} never finished ({sent.error or sent.marker})"
            )

    def many(self, issues: list[tuple[str, int]], *, threads: int, rate: float | None) -> list[Sent]:
        """Label every issue from ``threads`` threads, at ``rate``/s (None: as fast as they go)."""
        sents: list[Sent] = []
        with Tracker(self.redis_url) as tracker:
            start = time.perf_counter() + 0.05

            def send(i: int, repo: str, number: int) -> Sent:
                if rate is not None:
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        STOP.wait(delay)
                if STOP.is_set():
                    return Sent(
                        repo, number, time.perf_counter(), 0.0, None, None, None, "not sent (stopped)"
                    )
                sent = self.labeller.label(repo, number)
                tracker.add(sent)
                return sent

            executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads)
            try:
                futures = [executor.submit(send, i, r, n) for i, (r, n) in enumerate(issues)]
                sents = [f.result(timeout=TASK_TIMEOUT_S + len(issues)) for f in futures]
            finally:
                executor.shutdown(wait=True, cancel_futures=True)
            tracker.wait(sents, TASK_TIMEOUT_S)
        self.all_sent += sents
        return sents

    def comments_present(self, sents: list[Sent]) -> int:
        """How many of ``sents`` have a status comment by the App naming their task on their issue."""
        found: dict[tuple[str, int], list[str]] = {}
        for c in self.admin.comments():
            if (c.get("performed_via_github_app") or {}).get("id") == self.w.app_id:
                found.setdefault((c["repository"], c["issue_number"]), []).append(c.get("body") or "")
        return sum(
            1
            for s in sents
            if s.task_id and any(f"`{s.task_id}`" in b for b in found.get((s.repo, s.number), []))
        )


def latency_summary(bench: Bench, sents: list[Sent]) -> dict[str, Any]:
    lat = [s.latency_ms for s in sents if s.latency_ms is not None]
    acks = [s.ack_s * 1000 for s in sents if s.task_id]
    serve = [float(s.delivery_ms) for s in sents if isinstance(s.delivery_ms, int | float)]
    return {
        "labels": len(sents),
        "done": len(lat),
        "p50_ms": rounded(pct(lat, 50)),
        "p95_ms": rounded(pct(lat, 95)),
        "max_ms": rounded(max(lat) if lat else None),
        "admin_call_p50_ms": rounded(pct(acks, 50)),
        "webhook_answer_p50_ms": rounded(pct(serve, 50)),
        "end_markers": dict(Counter(s.marker or "never" for s in sents)),
        "states": dict(Counter(s.state or "?" for s in sents)),
        "comments": bench.comments_present(sents),
        "errors": [f"{s.repo}#{s.number}: {s.error}" for s in sents if s.error][:5],
    }


def step_emulator(api: str, token: str, seconds: float) -> dict[str, Any]:
    times: list[float] = []
    statuses: Counter[int] = Counter()
    headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json"}
    with httpx.Client(base_url=api, headers=headers, trust_env=False, timeout=10) as client:
        for _ in range(20):  # warm the connection and the route
            client.get(f"/repos/{world.REPO}")
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds and not STOP.is_set():
            t = time.perf_counter()
            statuses[client.get(f"/repos/{world.REPO}").status_code] += 1
            times.append((time.perf_counter() - t) * 1000)
        took = time.perf_counter() - begin
    return {
        "requests": len(times),
        "rps": round(len(times) / took),
        "p50_ms": rounded(pct(times, 50), 2),
        "p95_ms": rounded(pct(times, 95), 2),
        "statuses": dict(statuses),
    }


@dataclass
class Setup:
    bench: Bench
    env: dict[str, str]
    pids: dict[str, list[int]]  # serve, emulator, redis
    workers: list[Proc]


def baton_env(
    base: dict[str, str], work: Path, w: world.World, *, redis_url: str, api: str, port: int
) -> dict[str, str]:
    """What `baton serve` and `baton worker` need, as the demo gives it (a fresh signing key, mode 0600)."""
    key_path = work / "keys" / "baton-signing-key.pem"
    key_path.parent.mkdir(mode=0o700)
    key_path.touch(mode=0o600)
    key_path.write_bytes(SigningKey.generate().private_pem())
    return {
        **base,
        "APP_ID": str(w.app_id),
        "PRIVATE_KEY": w.private_key,
        "WEBHOOK_SECRET": w.webhook_secret,
        "REDIS_URL": redis_url,
        "GITHUB_API_URL": api,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "LOG_LEVEL": "INFO",
        "BATON_DATA_DIR": str(work / "data"),
        "BATON_SIGNING_KEY_PATH": str(key_path),
        "BATON_AUDIT_SECRET": secrets.token_hex(32),
    }


def setup(work: Path, procs: Processes) -> Setup:
    """Redis, the emulator and its world, `baton serve`, one `baton worker`: all running."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "GITHUB_"))}
    for name in ("REDIS_URL", "PRIVATE_KEY", "PRIVATE_KEY_PATH", "APP_ID", "WEBHOOK_SECRET", "PORT", "HOST"):
        base.pop(name, None)
    base["XDG_CACHE_HOME"] = str(work / "cache")
    py = sys.executable
    server = EmbeddedRedis(data_dir=work / "redis", durable=True)
    procs.stop_hooks.append(server.stop)
    server.start()
    port_gh = free_port()
    argv = [py, "-m", "bot.cli", "emulator", "--port", str(port_gh), "--state", str(work / "github")]
    emulator = procs.start("emulator", argv, base)
    api = f"http://127.0.0.1:{port_gh}"
    wait_http(f"{api}/_emulator/health", emulator.popen, "the emulator", emulator.log)
    admin = AdminClient(api, timeout=60)
    admin.settings(rate_limit=1_000_000_000)  # the emulator's 5,000/h would be spent by step 0 alone
    port = free_port()
    w = world.build(admin, api, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}", org_policy=org_policy())
    env = baton_env(base, work, w, redis_url=server.url, api=api, port=port)
    serve = procs.start("serve", [py, "-m", "bot.cli", "serve"], env)
    wait_http(f"http://127.0.0.1:{port}/readyz", serve.popen, "baton serve", serve.log)
    rdb = redis.Redis.from_url(server.url)
    workers = [start_worker(procs, env, rdb, 1)]
    bench = Bench(api, admin, rdb, server.url, w, Labeller(api))
    bench.pool = RepoPool(admin, bench.warm)
    pids = {"serve": [serve.popen.pid], "emulator": [emulator.popen.pid], "redis": [server.pid or 0]}
    return Setup(bench, env, pids, workers)


def cpu_now(s: Setup) -> dict[str, float]:
    found = {name: tree_cpu_s(pids) for name, pids in s.pids.items()}
    found["worker"] = tree_cpu_s([p.popen.pid for p in s.workers])
    return found


def step_serial(s: Setup, n: int) -> dict[str, Any]:
    """(1), (4) and (5): one label at a time, each one's calls, the CPU of each process."""
    bench = s.bench
    issues = bench.pool.issues(n) if bench.pool else []
    cpu0 = cpu_now(s)
    start = bench.log_len()
    per_label: list[list[dict[str, Any]]] = []
    serial: list[Sent] = []
    for repo, number in issues:
        if STOP.is_set():
            raise KeyboardInterrupt
        serial.append(bench.one(repo, number))
        log = bench.admin.requests()
        per_label.append(log[start:])
        start = len(log)
    cpu1 = cpu_now(s)
    tasks = max(1, len(serial))
    calls = summarise_calls([e for c in per_label for e in c], len(per_label))
    own = [[e for e in c if not background(e)] for c in per_label]
    calls["per_label_min_max"] = [min(map(len, own), default=0), max(map(len, own), default=0)]
    counts = [sum(map(counted, c)) for c in own]
    calls["counted_min_max"] = [min(counts, default=0), max(counts, default=0)]
    steady = own[-1] if own else []
    calls["steady_label_endpoints"] = dict(Counter(endpoint(e) for e in steady).most_common())
    calls["steady_label_counted"] = sum(map(counted, steady))
    return {
        "serial": latency_summary(bench, serial),
        "cpu_ms_per_task": {name: round((cpu1[name] - cpu0[name]) * 1000 / tasks, 1) for name in cpu1},
        "calls_serial": calls,
    }


def step_rate(s: Setup, rate: float, seconds: float) -> dict[str, Any]:
    """(2): labels at a fixed rate from a thread pool."""
    bench = s.bench
    issues = bench.pool.issues(round(rate * seconds)) if bench.pool else []
    start = bench.log_len()
    sents = bench.many(issues, threads=16, rate=rate)
    t0s = [x.t0 for x in sents if x.task_id]
    span = max(t0s) - min(t0s) if len(t0s) > 1 else 0.0
    return {
        **latency_summary(bench, sents),
        "target_rate": rate,
        "sent_rate": rounded((len(t0s) - 1) / span if span > 0 else None),
        "calls": summarise_calls(bench.admin.requests()[start:], len(sents)),
    }


def step_throughput(s: Setup, n: int) -> dict[str, Any]:
    """(3): ``n`` labels from 8 threads as fast as they go, with the workers running now."""
    bench = s.bench
    issues = bench.pool.issues(n) if bench.pool else []
    start = bench.log_len()
    before = tree_cpu_s([p.popen.pid for p in s.workers])
    sents = bench.many(issues, threads=8, rate=None)
    after = tree_cpu_s([p.popen.pid for p in s.workers])
    done = [x for x in sents if x.done_at is not None]
    span = max(x.done_at or 0.0 for x in done) - min(x.t0 for x in sents) if done else None
    return {
        "workers": len(s.workers),
        **latency_summary(bench, sents),
        "tasks_per_s": rounded(len(done) / span if span else None),
        "seconds": rounded(span, 2),
        "worker_cpu_ms_per_task": round((after - before) * 1000 / max(1, len(done)), 1),
        "calls": summarise_calls(bench.admin.requests()[start:], len(sents)),
    }


def run(args: argparse.Namespace, work: Path, procs: Processes) -> dict[str, Any]:
    out: dict[str, Any] = {"agent": check_agent_admitted(), "quick": args.quick}
    s = setup(work, procs)
    bench = s.bench
    print("(0) the emulator alone ...", flush=True)
    out["emulator"] = step_emulator(bench.api, installation_token(bench.api, bench.w), 3.0)
    # Warm-up, not measured: tokens, the org policy, the worker's first jobs.
    for repo, number in bench.pool.issues(3) if bench.pool else []:
        bench.warm(repo, number)
    n_serial = 10 if args.quick else 30
    print(f"(1) {n_serial} labels, one at a time ...", flush=True)
    out.update(step_serial(s, n_serial))
    rate, seconds = 20.0, (3.0 if args.quick else 10.0)
    print(f"(2) {round(rate * seconds)} labels at {rate:g}/s ...", flush=True)
    out["rate"] = step_rate(s, rate, seconds)
    n_burst = 60 if args.quick else 200
    out["throughput"] = []
    for count in (1, 2):
        if count == 2:
            s.workers.append(start_worker(procs, s.env, bench.rdb, 2))
            for repo, number in bench.pool.issues(2) if bench.pool else []:  # its first jobs
                bench.warm(repo, number)
        print(f"(3) {n_burst} labels from 8 threads, {count} worker process(es) ...", flush=True)
        out["throughput"].append(step_throughput(s, n_burst))
    out["repositories"] = len(bench.pool.repos) if bench.pool else 0
    out["never_done"] = [
        f"{x.repo}#{x.number} {x.task_id}" for x in bench.all_sent if x.task_id and x.done_at is None
    ]
    out["outbox_pending_at_end"] = bench.rdb.zcard(OUTBOX_KEY)
    bench.rdb.close()
    bench.admin.close()
    return out


def start_worker(procs: Processes, env: dict[str, str], rdb: redis.Redis, n: int) -> Proc:
    argv = [sys.executable, "-m", "bot.cli", "worker", "--queues", CONTROL.name]
    proc = procs.start(f"worker-{n}", argv, env)
    deadline = time.monotonic() + START_TIMEOUT_S
    key = f"rq:workers:{CONTROL.name}"  # RQ's registry of the workers serving a queue
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"baton worker exited with {proc.popen.returncode}; see {proc.log}")
        if rdb.scard(key) >= n:
            return proc
        time.sleep(0.05)
    return proc  # not registered where RQ used to register: the warm-up labels prove it works


# -- output ---------------------------------------------------------------------------------------


def log_problems(work: Path) -> dict[str, list[str]]:
    """Error and warning lines (JSON ``level``, RQ's text, tracebacks) of each process's log."""
    found: dict[str, list[str]] = {}
    for log in sorted(work.glob("*.log")):
        lines = []
        for line in log.read_text(errors="replace").splitlines():
            if re.search(r'"level":\s*"(error|critical|warning)"|Traceback|\bERROR\b|\bWARNING\b', line):
                lines.append(line[:300])
        if lines:
            found[log.name] = lines
    return found


def report(out: dict[str, Any], seconds: float) -> None:
    e, s, r = out["emulator"], out["serial"], out["rate"]
    t = {x["workers"]: x for x in out["throughput"]}
    c = out["calls_serial"]
    cpu = out["cpu_ms_per_task"]["worker"]
    two = t.get(2, {}).get("tasks_per_s")
    rows = [
        (
            "(0) emulator alone: GET /repos/{o}/{r}, 1 client",
            f"{e['rps']} req/s, p50 {ms(e['p50_ms'])}, p95 {ms(e['p95_ms'])}",
            "",
            "",
        ),
        (
            f"(1) label->done, one at a time (n={s['labels']})",
            f"p50 {ms(s['p50_ms'])}, p95 {ms(s['p95_ms'])}",
            "(p50 <= 100, p95 <= 300 ms)",
            "",
        ),
        (
            f"(2) label->done at {r['target_rate']:g}/s (n={r['labels']}, sent {r['sent_rate']}/s)",
            f"p50 {ms(r['p50_ms'])}, p95 {ms(r['p95_ms'])}",
            "p50 <= 100 ms, p95 <= 300 ms",
            verdict(
                r["p50_ms"] is not None
                and r["p95_ms"] is not None
                and r["done"] == r["labels"]
                and r["p50_ms"] <= TARGETS["p50_ms"]
                and r["p95_ms"] <= TARGETS["p95_ms"]
            ),
        ),
    ]
    for n, x in sorted(t.items()):
        rows.append(
            (
                f"(3) throughput, {n} worker process(es) (n={x['labels']})",
                f"{x['tasks_per_s']} tasks/s (p50 {ms(x['p50_ms'])}, p95 {ms(x['p95_ms'])})",
                ">= 50 tasks/s" if n == 2 else "",
                verdict(two is not None and two >= 50) if n == 2 else "",
            )
        )
    rows += [
        (
            "(4) GitHub API calls per label (step 1 mean)",
            f"{c['calls_per_label']} calls, {c['counted_per_label']} counted",
            "",
            "",
        ),
        (
            "    one steady-state label (the last of step 1)",
            f"{sum(c['steady_label_endpoints'].values())} calls, {c['steady_label_counted']} counted",
            "<= 2 counted",
            verdict(c["steady_label_counted"] <= TARGETS["counted_calls_per_label"]),
        ),
        (
            "(5) worker CPU per task (step 1, mean)",
            f"{cpu} ms",
            "<= 30 ms",
            verdict(cpu <= TARGETS["cpu_ms_per_task"]),
        ),
    ]
    width = max(len(x[0]) for x in rows)
    fig = max(len(x[1]) for x in rows)
    print()
    print(f"{'step':<{width}}  {'figure':<{fig}}  {'target':<28}  ")
    for name, figure, target, ok in rows:
        print(f"{name:<{width}}  {figure:<{fig}}  {target:<28}  {ok}")
    print()
    print(
        "steady-state label's calls:", ", ".join(f"{n}x {k}" for k, n in c["steady_label_endpoints"].items())
    )
    print(
        f"calls per label: step 1 min/max {c['per_label_min_max']}, counted min/max {c['counted_min_max']} "
        f"({c['counted_from']}); step 2 {r['calls']['calls_per_label']} ({r['calls']['counted_per_label']} "
        f"counted); emulator time per label (step 1): {c['emulator_ms_per_label'] or 'not logged'} ms"
    )
    print(
        "CPU per task in step 1, ms:",
        ", ".join(f"{k} {v}" for k, v in out["cpu_ms_per_task"].items()),
        "| step 3:",
        ", ".join(f"{x['workers']} worker(s) {x['worker_cpu_ms_per_task']}" for x in out["throughput"]),
    )
    steps = [("1", s), ("2", r), *((f"3/{n}", x) for n, x in sorted(t.items()))]
    print("end markers:", "; ".join(f"step {k}: {v['end_markers']}" for k, v in steps))
    print("status comments found:", "; ".join(f"{v['comments']}/{v['labels']}" for v in (s, r, *t.values())))
    print(
        f"admin label call p50 {ms(s['admin_call_p50_ms'])} (serve answered the webhook in "
        f"{ms(s['webhook_answer_p50_ms'])}) one at a time; {ms(r['admin_call_p50_ms'])} at 20/s"
    )
    print(f"took {seconds:.0f} s; load average {out['load_before']} -> {out['load_after']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer labels and shorter steps (~1 minute)")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, state)")
    args = parser.parse_args()
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="baton-control-path-"))
    procs = Processes(work)

    def interrupted(_signum: int, _frame: object) -> None:
        if not STOP.is_set():  # once: the clean-up that follows must not be interrupted itself
            STOP.set()
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
        "load_before": round(os.getloadavg()[0], 2),
    }
    code = subprocess.run(
        ["git", "--no-optional-locks", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "--no-optional-locks", "-C", str(ROOT), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split("\n")
    out["code"] = {"head": code, "uncommitted": sorted(x[3:] for x in dirty if x.strip())}
    failed: str | None = None
    try:
        out.update(run(args, work, procs))
    except KeyboardInterrupt:
        failed = "interrupted"
    except Exception as exc:
        failed = f"{type(exc).__name__}: {exc}"
    finally:
        STOP.set()
        procs.stop_all()
    out["load_after"] = round(os.getloadavg()[0], 2)
    out["seconds"] = round(time.monotonic() - began, 1)
    problems = log_problems(work)
    out["log_problems"] = {name: len(lines) for name, lines in problems.items()}
    if failed is None:
        report(out, out["seconds"])
    else:
        print(f"bench/control_path: stopped: {failed}", file=sys.stderr)
    for name, lines in problems.items():
        print(f"{name}: {len(lines)} error/warning line(s), first: {lines[0]}")
    if out.get("never_done"):
        print(f"tasks never done: {len(out['never_done'])}, e.g. {out['never_done'][:3]}")
    keep = args.keep or failed is not None or bool(problems)
    if keep:
        print(f"logs and state kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    out["error"] = failed
    print(json.dumps(out, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
