#!/usr/bin/env python3
"""bench/control_path.py: Baton's control path (a label -> its status comment), real processes.

    .venv/bin/python bench/control_path.py [--quick] [--keep]

Starts, all on 127.0.0.1 and each as its own process: a Redis-protocol server
(``EmbeddedRedis``, AOF on), the GitHub emulator (``baton emulator``), ``baton serve``
and ``baton worker --queues baton-control`` (one process; two, then four for step 3). The
world is ``emulator.world.build`` with the org ceiling's limits raised (runs per day,
and ``max_concurrent_runs`` to the schema's 64), plus private repositories like
``acme/widgets``: no worker serves the agents queue here, so every admitted run stays
``queued`` and keeps its repository's concurrency slot, and a repository takes at most
~60 labels. Every issue is created before anything is measured (with the App's
``issues`` events off meanwhile, so their ``issues.opened`` deliveries neither reach
Baton nor fill the emulator's state); each repository then gets one warm-up label. No
latency or fault is injected.

Every label is ``agent:claude-code`` by ``maria`` (maintain) on a fresh issue. The
world's policy admits it: the control task checks the sender, loads the policy, runs
the gate, reserves the budget, hands the run to the agents queue and writes the
``queued`` status comment. That is the control path measured.

How to read the output:

- (0) the emulator alone: authenticated ``GET /repos/{o}/{r}`` with an installation
  token, one keep-alive client, ~3 s. Also writes: ``PATCH``es of one issue comment for
  2 s (no webhook: ``issue_comment`` events off meanwhile), before step 1 and after
  step 3, with the size of the emulator's ``state.json`` then (it saves its state
  while it serves, so its write speed may fall as the state grows).
- (1) one label at a time; (2) labels at a fixed 20/s from a thread pool. Latency is
  from just before the admin call that labels the issue (it returns once the emulator
  has delivered the signed webhook to ``baton serve``: that round trip is included,
  nothing is subtracted) to the moment Redis shows the task done: its record
  (``baton.records.TASK_PREFIX`` + delivery GUID) has ``published`` (written after a
  terminal task's outcome is on GitHub), or, for a run handed to the agents queue
  (state ``queued``; the code of 2026-11-30 writes that status comment directly and
  sets no ``published``), its control job has finished in RQ (writing the status is
  the job's last step). ``end markers`` says which marker ended how many tasks;
  ``comments`` how many status comments naming their task the emulator holds. Redis
  is polled every 2 ms (up to 20 ms with many tasks in flight).
- (3) 200 labels (``--quick``: 60) from 8 sender threads as fast as they go, with one worker
  process, then two, then four: tasks/s from the first label sent to the last task done, and
  the scale-out ratios 2/1 and 4/1 (target: 2 workers >= 1.8x one).
- (3h) the same with the workers on 1, then 2, then 4 *hosts*, one worker process each: each
  host a network namespace of its own (``tests/hosts.py``, root only; otherwise the step says
  why it was skipped), with its own data directory and process group, reaching Redis on the
  bridge's address (Redis listens there too) and the emulator through a forwarding process
  (``tests/forwarder.py``, one more hop per GitHub call than step 3; its CPU is ``forwarder``).
  The loopback workers of step 3 are stopped first. Also the runs of each periodic duty
  (``worker.rqworker.DUTIES``) over the step, against the step's length in intervals: once per
  interval across the hosts, not once per host.
- Steps 2 and 3 wait a bounded time after their last label (45 s and 75 s); a task not
  done by then counts as not done (a percentile that falls on one prints as ``>``) and
  its job is taken off the control queue, so the next step starts on an idle worker.
- (4) GitHub API calls per accepted label, from the emulator's request log. In step 1
  labels are serial: each label's calls are those logged between it and the next, so
  the per-label figures and the endpoint list of one steady-state label (the last of
  step 1) are exact. ``counted``: the log's ``counted`` field where the emulator sets
  it, else every call that is not a 304. Calls to ``/app/hook/deliveries`` (the
  workers' periodic redelivery pass) are background and left out. Steps 2 and 3 give
  means over the tasks whose job ran.
- Who limits steps 2 and 3: ``CPU busy`` gives each process's CPU over the step as a
  share of one core (``bench`` is this process: senders and poller). A process near
  100% is a bottleneck; a worker well below it while tasks wait runs its jobs one at a
  time and waits on GitHub's answers in each; the admin label call's time (emulator,
  then serve's answer) rising from step 1 to step 3 points at the emulator. Compare the
  sum with the machine's cores (the JSON's ``machine``) and its load average.
- (5) CPU per task of the worker: utime+stime of each worker process and all its live
  descendants, plus their cutime+cstime (RQ forks a work-horse per job and reaps it),
  from /proc before and after step 1 (every job ended), divided by its tasks. The same
  for serve, the emulator and Redis, for context. Resolution: one clock tick (10 ms)
  over the whole step. The machine is shared: the load average is printed.

The last line is one JSON object with every figure. Logs and state are kept (and
their path printed) with ``--keep`` or when a process logged an error or a warning.
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
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import jwt
import redis
import yaml
from rq import Queue
from rq.job import Job

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baton.queues import CONTROL  # noqa: E402
from baton.records import COUNTERS_KEY, OUTBOX_KEY, QUEUED, TASK_PREFIX  # noqa: E402
from baton.redis_server import EmbeddedRedis, free_port  # noqa: E402
from bot.app import WEBHOOK_PATH  # noqa: E402
from emulator import world  # noqa: E402
from emulator.admin.client import AdminClient  # noqa: E402
from evidence.keys import SigningKey  # noqa: E402
from tests.hosts import Host, Network, Unavailable, why_not  # noqa: E402
from worker.rqworker import DUTIES, RENEW_EVERY_S  # noqa: E402

AGENT_LABEL = "agent:claude-code"
SENDER = "maria"  # maintain on every repository here
LABELS_PER_REPO = 60  # admitted runs stay queued and keep a slot: max_concurrent_runs is 64 at most
START_TIMEOUT_S = 60.0
TASK_TIMEOUT_S = 30.0  # one label, alone
STOP_GRACE_S = 15.0
IDLE_TIMEOUT_S = 30.0  # for the control queue to empty after a step
BACKGROUND_PATHS = ("/app/hook/deliveries",)
JOB_ENDED = {b"finished", b"failed", b"stopped", b"canceled"}
TARGET_P50_MS, TARGET_P95_MS, TARGET_CPU_MS, TARGET_TASKS_S, TARGET_COUNTED = 100.0, 300.0, 30.0, 50.0, 2
TARGET_SCALE_2 = 1.8  # tasks/s with two worker processes over one
WORKER_COUNTS = (1, 2, 4)  # step 3
HOST_COUNTS = (1, 2, 4)  # step 3h: one worker process per host
CLK_TCK = os.sysconf("SC_CLK_TCK")
STOP = threading.Event()  # set on Ctrl-C / SIGTERM: senders stop sending
BEGAN = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - BEGAN:5.1f}s] {text}", flush=True)


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100); None for no values; inf if it falls on a task never done."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or math.isinf(value) else round(value, digits)


def ms(value: float | None, over: float | None = None) -> str:
    if value is None and over is not None:
        return f"> {over:g} s"
    return "-" if value is None else f"{value:.1f} ms"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


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
    """Every process this bench starts, stopped by pid (newest first) whatever happens."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[Proc] = []
        self.stop_hooks: list[Callable[[], None]] = []  # after the processes (Redis last)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,  # Ctrl-C reaches this bench only, which stops them in order
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no thread runs when we start one
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """One at a time, newest first: workers finish their job while GitHub and Redis still answer."""
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
            try:
                proc.popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=STOP_GRACE_S)
        for hook in self.stop_hooks:
            with contextlib.suppress(Exception):
                hook()


# -- CPU from /proc -----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime+cutime+cstime in ticks) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # fields[0] is field 3 (state) of proc(5)
    return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14))


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds of ``roots`` and all their live descendants, reaped children included."""
    stats = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _stat(int(e))) is not None}
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


def check_agent_named() -> str:
    """The world's policies must name the agent we label with (else the bench says so at once)."""
    agent = AGENT_LABEL.split(":", 1)[1]
    org = yaml.safe_load(world.ORG_POLICY).get("agents") or {}
    repo = (yaml.safe_load(world.REPO_POLICY) or {}).get("agents", {agent: None})
    if agent not in org or agent not in repo:
        raise RuntimeError(f"the sample world's policy no longer names {agent!r}; pick another agent")
    return agent


@contextlib.contextmanager
def events_without(admin: AdminClient, w: world.World, event: str) -> Iterator[None]:
    """The App stops receiving ``event`` meanwhile (set-up traffic Baton need not see)."""
    admin.update_app(w.app_id, events=[e for e in world.EVENTS if e != event])
    try:
        yield
    finally:
        admin.update_app(w.app_id, events=list(world.EVENTS))


def installation_token(api: str, w: world.World) -> str:
    now = int(time.time())
    token = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(w.app_id)}, w.private_key, "RS256")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
    url = f"{api}/app/installations/{w.installation_id}/access_tokens"
    r = httpx.post(url, headers=headers, trust_env=False, timeout=10)
    r.raise_for_status()
    return str(r.json()["token"])


class IssuePool:
    """Fresh issues, made up front, on private repositories like acme/widgets (LABELS_PER_REPO each)."""

    def __init__(self, admin: AdminClient, w: world.World) -> None:
        self.admin = admin
        self.w = w
        self.repos: list[str] = []
        self.warmups: list[tuple[str, int]] = []  # each repository's first label, not measured
        self.fresh: deque[tuple[str, int]] = deque()
        self.probe: tuple[str, int] | None = None  # an issue never labelled: the write probe's comment

    def _repo(self, k: int) -> str:
        if k == 0:
            return world.REPO
        name = f"bench-{k:02d}"
        files = {
            "README.md": f"# {name}\n",
            "src/widgets.py": "def spin():\n    return 42\n",
            ".github/baton.yml": world.REPO_POLICY,
        }
        self.admin.create_repo(world.OWNER, name, files=files, private=True)
        self.admin.set_role(f"{world.OWNER}/{name}", SENDER, "maintain")
        return f"{world.OWNER}/{name}"

    def _issue(self, repo: str, title: str) -> tuple[str, int]:
        if STOP.is_set():
            raise KeyboardInterrupt
        return repo, int(self.admin.create_issue(repo, title=title, user=SENDER)["number"])

    def prepare(self, labels: int) -> None:
        per_repo = LABELS_PER_REPO - 1
        with events_without(self.admin, self.w, "issues"):
            for k in range(math.ceil(labels / per_repo)):
                repo = self._repo(k)
                self.repos.append(repo)
                self.warmups.append(self._issue(repo, "warm-up"))
                for i in range(min(per_repo, labels - k * per_repo)):
                    self.fresh.append(self._issue(repo, f"bench issue {i}"))
            self.probe = self._issue(world.REPO, "the emulator's write probe")

    def take(self, n: int) -> list[tuple[str, int]]:
        if n > len(self.fresh):
            raise RuntimeError(f"only {len(self.fresh)} fresh issues left, {n} asked")
        return [self.fresh.popleft() for _ in range(n)]


# -- following tasks in Redis -------------------------------------------------------------------


@dataclass
class Sent:
    repo: str
    number: int
    t0: float  # perf_counter just before the admin label call
    ack_s: float = 0.0  # the admin call's round trip (includes the webhook delivery to serve)
    task_id: str | None = None
    delivery_ms: float | None = None  # how long serve took to answer the webhook, as the emulator saw it
    error: str | None = None
    done_at: float | None = None
    marker: str | None = None
    state: str | None = None
    ran: bool = False  # its control job ended (within the step, or while the step settled)

    @property
    def latency_ms(self) -> float:
        return math.inf if self.done_at is None else (self.done_at - self.t0) * 1000


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
                if published is not None:
                    marker = "published"
                elif job in JOB_ENDED and state == QUEUED.encode():  # handed to the agents queue
                    marker = f"queued + job {job.decode()}"
                else:
                    continue
                with self.lock:
                    self.pending.pop(task_id, None)
                sent.done_at, sent.marker, sent.state = now, marker, (state or b"?").decode()
            self.stop.wait(min(0.02, max(0.002, 0.0005 * len(items))))

    def wait(self, sents: list[Sent], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not STOP.is_set():
            if all(s.done_at is not None or s.task_id is None for s in sents):
                return
            time.sleep(0.002)


class Labeller:
    """Labels issues through the admin API (one client per thread)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.local = threading.local()
        self.clients: list[AdminClient] = []

    def admin(self) -> AdminClient:
        client: AdminClient | None = getattr(self.local, "admin", None)
        if client is None:
            client = self.local.admin = AdminClient(self.api, timeout=30)
            self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def label(self, repo: str, number: int) -> Sent:
        t0 = time.perf_counter()
        try:
            answer = self.admin().label(repo, number, [AGENT_LABEL], sender=SENDER)
        except Exception as exc:
            return Sent(repo, number, t0, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
        ack = time.perf_counter() - t0
        found = answer.get("deliveries") or []
        ours = [d for d in found if d.get("event") == "issues"] or found
        if not ours:
            return Sent(repo, number, t0, ack, error="no delivery in the admin answer")
        status = ours[-1].get("status_code")
        error = None if isinstance(status, int) and 200 <= status < 300 else f"webhook answered {status}"
        return Sent(repo, number, t0, ack, str(ours[-1]["guid"]), ours[-1].get("duration_ms"), error)


# -- the request log ------------------------------------------------------------------------------


def endpoint(entry: dict[str, Any]) -> str:
    path = re.sub(r"^/repos/[^/]+/[^/]+", "/repos/{o}/{r}", str(entry.get("path", "")))
    path = re.sub(r"/collaborators/[^/]+/", "/collaborators/{user}/", path)
    path = re.sub(r"/\d+(?=/|$)", "/{n}", path)
    return f"{entry.get('method')} {path} {entry.get('status')}"


def background(entry: dict[str, Any]) -> bool:
    return str(entry.get("path", "")).startswith(BACKGROUND_PATHS)


def counted(entry: dict[str, Any]) -> bool:
    if "counted" in entry:
        return bool(entry["counted"])
    return entry.get("status") != 304


def summarise_calls(entries: list[dict[str, Any]], labels: int) -> dict[str, Any]:
    ours = [e for e in entries if not background(e)]
    durations = [float(e["duration_ms"]) for e in ours if isinstance(e.get("duration_ms"), int | float)]
    per = max(1, labels)
    return {
        "calls_per_label": round(len(ours) / per, 2),
        "counted_per_label": round(sum(map(counted, ours)) / per, 2),
        "not_modified_per_label": round(sum(e.get("status") == 304 for e in ours) / per, 2),
        "emulator_ms_per_label": round(sum(durations) / per, 1) if durations else None,
        "background_calls": len(entries) - len(ours),
        "counted_from": "the log's counted field"
        if any("counted" in e for e in entries)
        else "status != 304",
    }


# -- the running system ---------------------------------------------------------------------------


@dataclass
class Bench:
    work: Path
    api: str
    admin: AdminClient
    rdb: redis.Redis
    redis_url: str
    w: world.World
    pool: IssuePool
    env: dict[str, str]
    pids: dict[str, list[int]]  # serve, emulator, redis
    workers: list[Proc]
    labeller: Labeller
    all_sent: list[Sent] = field(default_factory=list)

    def log_len(self) -> int:
        return len(self.admin.requests())

    def cpu(self) -> dict[str, float]:
        found = {name: tree_cpu_s(pids) for name, pids in self.pids.items()}
        found["worker"] = tree_cpu_s([p.popen.pid for p in self.workers])
        found["bench"] = time.process_time()  # this process: the senders and the tracker
        return found

    def measured(self, work: Callable[[], list[Sent]]) -> tuple[list[Sent], dict[str, Any]]:
        """``work()``, with each process's CPU over it: seconds, and % of one core."""
        cpu0, t0 = self.cpu(), time.perf_counter()
        sents = work()
        cpu1, wall = self.cpu(), time.perf_counter() - t0
        used = {name: cpu1[name] - cpu0[name] for name in cpu1}
        return sents, {
            "wall_s": round(wall, 1),
            "busy_pct": {k: round(v * 100 / wall) for k, v in used.items()},
            "cpu_s": {k: round(v, 2) for k, v in used.items()},
        }

    def one(self, repo: str, number: int) -> Sent:
        """Label, wait until done and its job has ended (so the next label's calls are its own)."""
        with Tracker(self.redis_url) as tracker:
            sent = self.labeller.label(repo, number)
            tracker.add(sent)
            tracker.wait([sent], TASK_TIMEOUT_S)
        self.all_sent.append(sent)
        self.settle([sent])
        return sent

    def warm(self, repo: str, number: int) -> None:
        sent = self.one(repo, number)
        if sent.done_at is None:
            raise RuntimeError(f"warm-up label {repo}#{number} not done ({sent.error or 'timed out'})")

    def many(
        self, issues: list[tuple[str, int]], *, threads: int, rate: float | None, wait_s: float
    ) -> list[Sent]:
        """Label every issue from ``threads`` threads at ``rate``/s (None: as fast as they go), then
        wait up to ``wait_s`` for the tasks."""
        with Tracker(self.redis_url) as tracker:
            start = time.perf_counter() + 0.05

            def send(i: int, repo: str, number: int) -> Sent:
                if rate is not None and (delay := start + i / rate - time.perf_counter()) > 0:
                    STOP.wait(delay)
                if STOP.is_set():
                    return Sent(repo, number, time.perf_counter(), error="not sent (stopped)")
                sent = self.labeller.label(repo, number)
                tracker.add(sent)
                return sent

            executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads)
            try:
                futures = [executor.submit(send, i, r, n) for i, (r, n) in enumerate(issues)]
                sents = [f.result(timeout=60 + len(issues)) for f in futures]
            finally:
                executor.shutdown(wait=True, cancel_futures=True)
            tracker.wait(sents, wait_s)
        self.all_sent += sents
        self.settle(sents)
        return sents

    def settle(self, sents: list[Sent]) -> bool:
        """Take the jobs of tasks not done off the control queue and wait until no job runs."""
        queue = Queue(CONTROL.name, connection=self.rdb)
        for sent in sents:
            if sent.task_id and sent.done_at is None:
                queue.remove(sent.task_id)
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        idle = False
        while time.monotonic() < deadline and not STOP.is_set() and not idle:
            idle = queue.count == 0 and queue.started_job_registry.get_job_count(cleanup=False) == 0
            if not idle:
                time.sleep(0.005)
        ids = [x.task_id for x in sents if x.task_id]
        statuses = self.rdb.pipeline(transaction=False)
        for task_id in ids:
            statuses.hget(Job.key_for(task_id), "status")
        ran = {
            task_id for task_id, status in zip(ids, statuses.execute(), strict=True) if status in JOB_ENDED
        }
        for sent in sents:
            sent.ran = sent.task_id in ran
        return idle

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


def start_worker(procs: Processes, env: dict[str, str], rdb: redis.Redis, n: int) -> Proc:
    """The n-th `baton worker --queues baton-control`, once RQ lists it (or a minute has passed)."""
    proc = procs.start(
        f"worker-{n}", [sys.executable, "-m", "baton", "worker", "--queues", CONTROL.name], env
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and not STOP.is_set():
        if proc.popen.poll() is not None:
            raise RuntimeError(f"baton worker exited with {proc.popen.returncode}; see {proc.log}")
        if rdb.scard(f"rq:workers:{CONTROL.name}") >= n:  # RQ's registry of a queue's workers
            break
        time.sleep(0.05)
    return proc  # if RQ no longer registers workers there, the warm-up labels prove it works


def start_redis_and_emulator(work: Path, procs: Processes) -> tuple[dict[str, str], EmbeddedRedis, Proc, str]:
    """A durable Redis and `baton emulator` under ``work``: the environment Baton's processes start
    from (none of this shell's Baton or GitHub settings), the server, the emulator's process and URL."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("BATON_", "GITHUB_"))}
    for name in ("REDIS_URL", "PRIVATE_KEY", "PRIVATE_KEY_PATH", "APP_ID", "WEBHOOK_SECRET", "PORT", "HOST"):
        base.pop(name, None)
    base["XDG_CACHE_HOME"] = str(work / "cache")
    server = EmbeddedRedis(data_dir=work / "redis", durable=True)
    procs.stop_hooks.append(server.stop)
    server.start()
    port_gh = free_port()
    argv = [
        sys.executable,
        "-m",
        "baton.cli",
        "emulator",
        "--port",
        str(port_gh),
        "--state",
        str(work / "github"),
    ]
    emulator = procs.start("emulator", argv, base)
    api = f"http://127.0.0.1:{port_gh}"
    wait_http(f"{api}/_emulator/health", emulator.popen, "the emulator", emulator.log)
    return base, server, emulator, api


def setup(work: Path, procs: Processes, labels: int) -> Bench:
    """Redis, the emulator and its world with every issue, `baton serve`, one `baton worker`."""
    base, server, emulator, api = start_redis_and_emulator(work, procs)
    admin = AdminClient(api, timeout=60)
    admin.settings(rate_limit=1_000_000_000)  # the emulator's 5,000/h would be spent by step 0 alone
    port = free_port()
    w = world.build(admin, api, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}", org_policy=org_policy())
    say(f"creating {labels} issues (and the repositories they need) ...")
    pool = IssuePool(admin, w)
    pool.prepare(labels)
    env = baton_env(base, work, w, redis_url=server.url, api=api, port=port)
    serve = procs.start("serve", [sys.executable, "-m", "baton", "serve"], env)
    wait_http(f"http://127.0.0.1:{port}/readyz", serve.popen, "baton serve", serve.log)
    rdb = redis.Redis.from_url(server.url)
    workers = [start_worker(procs, env, rdb, 1)]
    pids = {"serve": [serve.popen.pid], "emulator": [emulator.popen.pid], "redis": [server.pid or 0]}
    return Bench(work, api, admin, rdb, server.url, w, pool, env, pids, workers, Labeller(api))


# -- the steps ----------------------------------------------------------------------------------


def latency_summary(bench: Bench, sents: list[Sent]) -> dict[str, Any]:
    lat = [s.latency_ms for s in sents]
    acks = [s.ack_s * 1000 for s in sents if s.task_id]
    serve = [float(s.delivery_ms) for s in sents if isinstance(s.delivery_ms, int | float)]
    return {
        "labels": len(sents),
        "done": sum(1 for s in sents if s.done_at is not None),
        "p50_ms": rounded(pct(lat, 50)),
        "p95_ms": rounded(pct(lat, 95)),
        "max_ms": rounded(max(lat, default=None)),
        "admin_call_p50_ms": rounded(pct(acks, 50)),
        "webhook_answer_p50_ms": rounded(pct(serve, 50)),
        "end_markers": dict(Counter(s.marker or "not done" for s in sents)),
        "states": dict(Counter(s.state or "?" for s in sents)),
        "comments": bench.comments_present(sents),
        "errors": [f"{s.repo}#{s.number}: {s.error}" for s in sents if s.error][:5],
    }


def step_emulator_reads(api: str, token: str, seconds: float) -> dict[str, Any]:
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


def step_emulator_writes(bench: Bench, token: str, seconds: float = 2.0) -> dict[str, Any]:
    """PATCHes of one comment on the probe issue (made on the first call) for ``seconds``, no webhook:
    long enough to include the emulator's saving of its state, whenever that happens."""
    assert bench.pool.probe is not None
    repo, number = bench.pool.probe
    headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json"}
    times: list[float] = []
    with (
        events_without(bench.admin, bench.w, "issue_comment"),
        httpx.Client(base_url=bench.api, headers=headers, trust_env=False, timeout=30) as client,
    ):
        listed = client.get(f"/repos/{repo}/issues/{number}/comments").json()
        comment = listed[0]["id"] if listed else None
        if comment is None:
            made = client.post(f"/repos/{repo}/issues/{number}/comments", json={"body": "probe"})
            made.raise_for_status()
            comment = made.json()["id"]
        begin = time.perf_counter()
        for i in range(100_000):
            if STOP.is_set() or time.perf_counter() - begin > seconds:
                break
            t = time.perf_counter()
            client.patch(
                f"/repos/{repo}/issues/comments/{comment}", json={"body": f"probe {i}"}
            ).raise_for_status()
            times.append((time.perf_counter() - t) * 1000)
    state = bench.work / "github" / "state.json"
    size = state.stat().st_size if state.exists() else None
    return {
        "writes_per_s": round(len(times) / seconds),
        "p50_ms": rounded(pct(times, 50), 2),
        "p95_ms": rounded(pct(times, 95), 2),
        "max_ms": rounded(max(times, default=None), 2),
        "state_json_mb": None if size is None else round(size / 1e6, 2),
    }


def step_serial(bench: Bench, n: int) -> dict[str, Any]:
    """(1), (4) and (5): one label at a time, each one's calls, the CPU of each process."""
    issues = bench.pool.take(n)
    cpu0 = bench.cpu()
    start = bench.log_len()
    per_label: list[list[dict[str, Any]]] = []
    serial: list[Sent] = []
    for repo, number in issues:
        if STOP.is_set():
            raise KeyboardInterrupt
        serial.append(bench.one(repo, number))
        log = bench.admin.requests()
        per_label.append([e for e in log[start:] if not background(e)])
        start = len(log)
    cpu1 = bench.cpu()
    done = max(1, sum(1 for s in serial if s.done_at is not None))
    calls = summarise_calls([e for c in per_label for e in c], len(per_label))
    counts = [sum(map(counted, c)) for c in per_label]
    steady = per_label[-1] if per_label else []
    calls.update(
        per_label_min_max=[min(map(len, per_label), default=0), max(map(len, per_label), default=0)],
        counted_min_max=[min(counts, default=0), max(counts, default=0)],
        steady_label_endpoints=dict(Counter(endpoint(e) for e in steady).most_common()),
        steady_label_calls=len(steady),
        steady_label_counted=sum(map(counted, steady)),
    )
    return {
        "serial": latency_summary(bench, serial),
        "cpu_ms_per_task": {name: round((cpu1[name] - cpu0[name]) * 1000 / done, 1) for name in cpu1},
        "calls_serial": calls,
    }


def step_rate(bench: Bench, rate: float, seconds: float, wait_s: float) -> dict[str, Any]:
    """(2): labels at a fixed rate from a thread pool."""
    issues = bench.pool.take(round(rate * seconds))
    start = bench.log_len()
    sents, cpu = bench.measured(lambda: bench.many(issues, threads=16, rate=rate, wait_s=wait_s))
    t0s = [s.t0 for s in sents if s.task_id]
    span = max(t0s) - min(t0s) if len(t0s) > 1 else 0.0
    return {
        **latency_summary(bench, sents),
        "target_rate": rate,
        "sent_rate": rounded((len(t0s) - 1) / span if span > 0 else None),
        "wait_s": wait_s,
        "cpu": cpu,
        "calls": summarise_calls(bench.admin.requests()[start:], sum(s.ran for s in sents)),
    }


def step_throughput(bench: Bench, n: int, wait_s: float) -> dict[str, Any]:
    """(3): ``n`` labels from 8 threads as fast as they go, with the workers running now."""
    issues = bench.pool.take(n)
    start = bench.log_len()
    sents, cpu = bench.measured(lambda: bench.many(issues, threads=8, rate=None, wait_s=wait_s))
    done = [s for s in sents if s.done_at is not None]
    span = max(s.done_at or 0.0 for s in done) - min(s.t0 for s in sents) if done else None
    sending = max(s.t0 + s.ack_s for s in sents) - min(s.t0 for s in sents) if sents else None
    return {
        "workers": len(bench.workers),
        **latency_summary(bench, sents),
        "tasks_per_s": rounded(len(done) / span if span else None),
        "seconds": rounded(span, 2),
        "sending_s": rounded(sending, 2),
        "wait_s": wait_s,
        "worker_cpu_ms_per_task": round(cpu["cpu_s"]["worker"] * 1000 / max(1, sum(s.ran for s in sents)), 1),
        "cpu": cpu,
        "calls": summarise_calls(bench.admin.requests()[start:], sum(s.ran for s in sents)),
    }


# -- step 3h: the workers on several hosts ---------------------------------------------------------


def duty_runs(rdb: redis.Redis) -> dict[str, int]:
    """How often each periodic duty has run so far, across every worker (``baton:counters``)."""
    found = rdb.hgetall(COUNTERS_KEY)
    return {d.name: int(found.get(d.counter.encode(), 0)) for d in DUTIES}


def stop_workers(bench: Bench) -> None:
    """Step 3's loopback workers, each told to stop and waited for, before the hosts' start."""
    for proc in bench.workers:
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
    for proc in bench.workers:
        try:
            proc.popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait(timeout=STOP_GRACE_S)
    bench.workers = []


def start_host_worker(bench: Bench, host: Host, env: dict[str, str], n: int) -> Proc:
    """`baton worker --queues baton-control` on ``host``, once RQ lists n such workers."""
    argv = [sys.executable, "-m", "baton", "worker", "--queues", CONTROL.name]
    popen = host.start(argv, env, "worker.log")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and not STOP.is_set():
        if popen.poll() is not None:
            raise RuntimeError(
                f"baton worker on {host.name} exited with {popen.returncode}; see {host.log_dir}"
            )
        if bench.rdb.scard(f"rq:workers:{CONTROL.name}") >= n:
            break
        time.sleep(0.05)
    return Proc(f"worker on {host.name}", popen, host.log_dir / "worker.log")


def step_hosts(bench: Bench, n: int, wait_s: float) -> dict[str, Any]:
    """(3h): step 3 again with one worker process on each of 1, 2, then 4 hosts."""
    reason = why_not()
    if reason is not None:
        return {"skipped": reason}
    stop_workers(bench)
    try:
        net = Network(max(HOST_COUNTS), bench.work / "hosts")
    except Unavailable as exc:
        return {"skipped": str(exc)}
    steps: list[dict[str, Any]] = []
    phase, began_phase = duty_runs(bench.rdb), time.monotonic()
    try:
        with net:  # leaving it stops the hosts' workers, before Redis stops listening on the bridge
            bench.rdb.config_set("bind", f"127.0.0.1 {net.gateway}")  # the hosts reach Redis directly
            parts = urlsplit(bench.redis_url)
            userinfo, at, _ = parts.netloc.rpartition("@")
            redis_url = urlunsplit(parts._replace(netloc=f"{userinfo}{at}{net.gateway}:{parts.port}"))
            env = {k: v for k, v in bench.env.items() if k not in ("BATON_DATA_DIR", "XDG_CACHE_HOME")}
            env.update(REDIS_URL=redis_url, GITHUB_API_URL=net.reach(bench.api))
            bench.pids["forwarder"] = [f.proc.pid for f in net.forwarders]
            for count in HOST_COUNTS:
                while len(bench.workers) < count:
                    host = net.hosts[len(bench.workers)]
                    bench.workers.append(start_host_worker(bench, host, env, len(bench.workers) + 1))
                for repo, number in bench.pool.take(count):
                    bench.warm(repo, number)
                say(f"(3h) {n} labels from 8 threads, workers on {count} host(s) ...")
                before, began = duty_runs(bench.rdb), time.monotonic()
                result = step_throughput(bench, n, wait_s)
                took, after = time.monotonic() - began, duty_runs(bench.rdb)
                result.update(hosts=count, duty_runs={k: after[k] - before[k] for k in after},
                              duty_intervals=round(took / RENEW_EVERY_S, 1))  # fmt: skip
                steps.append(result)
            phase_s, ended = time.monotonic() - began_phase, duty_runs(bench.rdb)
    finally:
        bench.rdb.config_set("bind", "127.0.0.1")
        bench.pids.pop("forwarder", None)
        bench.workers = []
    return {
        "steps": steps,
        "duty_runs": {k: ended[k] - phase[k] for k in ended},  # the whole step, warm-ups included
        "duty_intervals": round(phase_s / RENEW_EVERY_S, 1),
        "gateway": "a bridge; Redis direct, the emulator through a forwarder",
    }


def scale_out(throughput: list[dict[str, Any]]) -> dict[str, Any]:
    """Step 3's tasks/s with n workers over one worker's, and the target's verdict for two."""
    rates = {x["workers"]: x["tasks_per_s"] for x in throughput}
    one = rates.get(1)
    ratio = {n: round(r / one, 2) if one and r is not None else None for n, r in rates.items() if n > 1}
    two = ratio.get(2)
    return {
        **{f"{n}/1": v for n, v in ratio.items()},
        "target_2_1": TARGET_SCALE_2,
        "met": two is not None and two >= TARGET_SCALE_2,
    }


def run(args: argparse.Namespace, work: Path, procs: Processes, out: dict[str, Any]) -> None:
    out.update(agent=check_agent_named(), quick=args.quick)
    n_serial, rate, seconds, n_burst = (10, 20.0, 3.0, 60) if args.quick else (30, 20.0, 10.0, 200)
    rate_wait, burst_wait = (15.0, 20.0) if args.quick else (45.0, 75.0)
    warmups = sum(n for n in WORKER_COUNTS if n > 1)  # each time workers are added: that many labels
    labels = n_serial + round(rate * seconds) + len(WORKER_COUNTS) * n_burst + warmups
    if why_not() is None:  # step 3h: each host count's labels, and as many warm-ups as workers
        labels += len(HOST_COUNTS) * n_burst + sum(HOST_COUNTS)
    bench = setup(work, procs, labels)
    try:
        say("(0) the emulator alone ...")
        token = installation_token(bench.api, bench.w)
        out["emulator"] = step_emulator_reads(bench.api, token, 3.0)
        out["emulator_writes_before"] = step_emulator_writes(bench, token)
        say(f"warm-up: one label on each of the {len(bench.pool.repos)} repositories ...")
        for repo, number in bench.pool.warmups:
            bench.warm(repo, number)
        say(f"(1) {n_serial} labels, one at a time ...")
        out.update(step_serial(bench, n_serial))
        say(f"(2) {round(rate * seconds)} labels at {rate:g}/s ...")
        out["rate"] = step_rate(bench, rate, seconds, rate_wait)
        out["throughput"] = []
        for count in WORKER_COUNTS:
            if count > len(bench.workers):
                while len(bench.workers) < count:
                    bench.workers.append(start_worker(procs, bench.env, bench.rdb, len(bench.workers) + 1))
                for repo, number in bench.pool.take(count):  # the new processes' first jobs
                    bench.warm(repo, number)
            say(f"(3) {n_burst} labels from 8 threads, {count} worker process(es) ...")
            out["throughput"].append(step_throughput(bench, n_burst, burst_wait))
        out["scale_out"] = scale_out(out["throughput"])
        out["hosts"] = step_hosts(bench, n_burst, burst_wait)
        if "skipped" in out["hosts"]:
            say(f"(3h) skipped: {out['hosts']['skipped']}")
        out["emulator_writes_after"] = step_emulator_writes(bench, installation_token(bench.api, bench.w))
        out["repositories"] = len(bench.pool.repos)
        out["never_done"] = [f"{s.repo}#{s.number} {s.task_id}" for s in bench.all_sent if s.done_at is None]
        out["outbox_pending_at_end"] = bench.rdb.zcard(OUTBOX_KEY)
    finally:
        bench.labeller.close()
        bench.rdb.close()
        bench.admin.close()


# -- output ---------------------------------------------------------------------------------------


def log_problems(work: Path) -> dict[str, list[str]]:
    """Error and warning lines (JSON ``level``, plain text, tracebacks) of each process's log."""
    pattern = re.compile(r'"level":\s*"(error|critical|warning)"|Traceback|\bERROR\b|\bWARNING\b')
    found: dict[str, list[str]] = {}
    for log in sorted(work.glob("*.log")) + sorted(work.glob("hosts/*/*.log")):
        lines = [line[:300] for line in log.read_text(errors="replace").splitlines() if pattern.search(line)]
        if lines:
            found[str(log.relative_to(work))] = lines
    return found


def cpu_ceiling(per_task: dict[str, float], cores: int) -> dict[str, float]:
    """The most labels a second this machine's cores could carry at step 1's CPU cost per label,
    with every process here (bench and emulator included), and with Baton's processes alone."""
    everything = sum(per_task.values())
    baton = sum(per_task.get(name, 0.0) for name in ("serve", "worker", "redis"))
    return {
        "cores": cores,
        "all_ms": round(everything, 1),
        "all_per_s": round(cores * 1000 / everything, 1) if everything else math.inf,
        "baton_ms": round(baton, 1),
        "baton_per_s": round(cores * 1000 / baton, 1) if baton else math.inf,
    }


def report(out: dict[str, Any]) -> None:
    e, s, r, c = out["emulator"], out["serial"], out["rate"], out["calls_serial"]
    t = {x["workers"]: x for x in out["throughput"]}
    cpu = out["cpu_ms_per_task"]["worker"]
    two = t.get(2, {}).get("tasks_per_s")
    wb, wa = out["emulator_writes_before"], out.get("emulator_writes_after") or {}
    rate_ok = r["done"] == r["labels"] and (r["p50_ms"] or math.inf) <= TARGET_P50_MS
    rate_ok = rate_ok and (r["p95_ms"] or math.inf) <= TARGET_P95_MS
    rows = [
        (
            "(0) emulator alone: GET /repos/{o}/{r}, 1 client",
            f"{e['rps']} req/s, p50 {ms(e['p50_ms'])}, p95 {ms(e['p95_ms'])}",
            "",
            "",
        ),
        (
            "    emulator alone: PATCH a comment (state.json MB)",
            f"{wb['writes_per_s']}/s, p95 {ms(wb['p95_ms'])} ({wb['state_json_mb']}) -> after step 3 "
            f"{wa.get('writes_per_s')}/s, p95 {ms(wa.get('p95_ms'))} ({wa.get('state_json_mb')})",
            "",
            "",
        ),
        (
            f"(1) label->done, one at a time ({s['done']}/{s['labels']} done)",
            f"p50 {ms(s['p50_ms'], TASK_TIMEOUT_S)}, p95 {ms(s['p95_ms'], TASK_TIMEOUT_S)}",
            "",
            "",
        ),
        (
            f"(2) label->done at {r['target_rate']:g}/s ({r['done']}/{r['labels']} done, "
            f"sent at {r['sent_rate']}/s)",
            f"p50 {ms(r['p50_ms'], r['wait_s'])}, p95 {ms(r['p95_ms'], r['wait_s'])}",
            f"p50 <= {TARGET_P50_MS:g} ms, p95 <= {TARGET_P95_MS:g} ms",
            verdict(rate_ok),
        ),
    ]
    for n, x in sorted(t.items()):
        rows.append(
            (
                f"(3) throughput, {n} worker process(es) ({x['done']}/{x['labels']} done)",
                f"{x['tasks_per_s']} tasks/s (p50 {ms(x['p50_ms'], x['wait_s'])}, "
                f"p95 {ms(x['p95_ms'], x['wait_s'])})",
                f">= {TARGET_TASKS_S:g} tasks/s" if n == 2 else "",
                verdict(two is not None and two >= TARGET_TASKS_S) if n == 2 else "",
            )
        )
    for x in (out.get("hosts") or {}).get("steps", []):
        rows.append(
            (
                f"(3h) throughput, workers on {x['hosts']} host(s) ({x['done']}/{x['labels']} done)",
                f"{x['tasks_per_s']} tasks/s (p50 {ms(x['p50_ms'], x['wait_s'])}, "
                f"p95 {ms(x['p95_ms'], x['wait_s'])})",
                "",
                "",
            )
        )
    if "skipped" in (out.get("hosts") or {}):
        rows.append(("(3h) workers on several hosts", f"skipped: {out['hosts']['skipped']}", "", ""))
    scale = out.get("scale_out") or {}
    rows.append(
        (
            "(3) scale-out: tasks/s over one worker's",
            ", ".join(f"{k} {v}x" for k, v in scale.items() if "/" in k),
            f"2/1 >= {TARGET_SCALE_2:g}x",
            verdict(bool(scale.get("met"))),
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
            f"{c['steady_label_calls']} calls, {c['steady_label_counted']} counted",
            f"<= {TARGET_COUNTED} counted",
            verdict(c["steady_label_counted"] <= TARGET_COUNTED),
        ),
        (
            "(5) worker CPU per task (step 1 mean)",
            f"{cpu} ms",
            f"<= {TARGET_CPU_MS:g} ms",
            verdict(cpu <= TARGET_CPU_MS),
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    print()
    print(f"{'step':<{widths[0]}}  {'figure':<{widths[1]}}  {'target':<{widths[2]}}")
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}".rstrip())
    print()
    print(
        "steady-state label's calls:", ", ".join(f"{n}x {k}" for k, n in c["steady_label_endpoints"].items())
    )
    print(
        f"calls per label, step 1: min/max {c['per_label_min_max']}, counted min/max {c['counted_min_max']} "
        f"({c['counted_from']}); step 2: {r['calls']['calls_per_label']} ({r['calls']['counted_per_label']} "
        f"counted); emulator time per label (step 1): {c['emulator_ms_per_label'] or 'not logged'}"
    )
    cpus = ", ".join(f"{k} {v}" for k, v in out["cpu_ms_per_task"].items())
    burst = ", ".join(f"{x['workers']} worker(s) {x['worker_cpu_ms_per_task']}" for x in out["throughput"])
    print(f"CPU ms per task, step 1: {cpus}; worker, step 3: {burst}")
    ceiling = cpu_ceiling(out["cpu_ms_per_task"], os.cpu_count() or 1)
    print(
        f"CPU ceiling on {ceiling['cores']} cores: every process together spends {ceiling['all_ms']} ms per "
        f"label, so at most {ceiling['all_per_s']} labels/s here; Baton's own (serve, worker, Redis) "
        f"{ceiling['baton_ms']} ms, {ceiling['baton_per_s']} labels/s were GitHub elsewhere"
    )
    for name, x in [("2", r), *((f"3/{x['workers']}", x) for x in out["throughput"])]:
        busy = ", ".join(f"{k} {v}%" for k, v in sorted(x["cpu"]["busy_pct"].items(), key=lambda kv: -kv[1]))
        print(f"CPU busy in step {name} (% of one core, over {x['cpu']['wall_s']} s): {busy}")
    hosts = out.get("hosts") or {}
    if "duty_runs" in hosts:
        runs = ", ".join(f"{k} {v}" for k, v in hosts["duty_runs"].items())
        print(f"periodic duties over step 3h ({hosts['duty_intervals']} intervals, up to 4 hosts): {runs}")
    for x in hosts.get("steps", []):
        runs = ", ".join(f"{k} {v}" for k, v in x["duty_runs"].items())
        print(f"periodic duties in step 3h/{x['hosts']} ({x['duty_intervals']} intervals): {runs}")
        busy = ", ".join(f"{k} {v}%" for k, v in sorted(x["cpu"]["busy_pct"].items(), key=lambda kv: -kv[1]))
        print(f"CPU busy in step 3h/{x['hosts']} (% of one core, over {x['cpu']['wall_s']} s): {busy}")
    steps = [("1", s), ("2", r), *((f"3/{n}", x) for n, x in sorted(t.items()))]
    print("end markers:", "; ".join(f"step {k} {v['end_markers']}" for k, v in steps))
    print(
        "status comments naming their task:",
        ", ".join(f"step {k} {v['comments']}/{v['labels']}" for k, v in steps),
    )
    print(
        f"admin label call p50 (includes the webhook delivery): {ms(s['admin_call_p50_ms'])} one at a time, "
        f"{ms(r['admin_call_p50_ms'])} at 20/s; serve answered the webhook in "
        f"{ms(s['webhook_answer_p50_ms'])}; "
        f"sending step 3's labels took {', '.join(str(x['sending_s']) for x in out['throughput'])} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer labels and shorter steps")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, state)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="baton-control-path-"))
    procs = Processes(work)

    def interrupted(_signum: int, _frame: object) -> None:
        if not STOP.is_set():  # once: the clean-up that follows must not be interrupted itself
            STOP.set()
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=False)
    out: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "code": {
            "head": head.stdout.strip(),
            "uncommitted": sorted(x[3:] for x in dirty.stdout.split("\n") if x),
        },
    }
    failed: str | None = None
    try:
        run(args, work, procs, out)
    except KeyboardInterrupt:
        failed = "interrupted"
    except Exception as exc:
        failed = f"{type(exc).__name__}: {exc}"
    finally:
        STOP.set()
        procs.stop_all()
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["seconds"] = round(time.monotonic() - BEGAN, 1)
    problems = log_problems(work)
    out["log_problems"] = {name: len(lines) for name, lines in problems.items()}
    out["error"] = failed
    if failed is None:
        out["cpu_ceiling"] = cpu_ceiling(out["cpu_ms_per_task"], os.cpu_count() or 1)
        report(out)
    else:
        print(f"bench/control_path: stopped: {failed}", file=sys.stderr)
    for name, lines in problems.items():
        print(f"{name}: {len(lines)} error/warning line(s); the first: {lines[0]}")
    if out.get("never_done"):
        print(f"labels never done: {len(out['never_done'])}, e.g. {out['never_done'][:3]}")
    close(out, work, keep=args.keep or failed is not None or bool(problems))
    return 1 if failed else 0


def close(out: dict[str, Any], work: Path, *, keep: bool) -> None:
    """A bench's last lines: how long it took at what load, where its logs are kept (or their
    removal), then the whole result as one JSON line (what `bench/all` reads)."""
    print(f"took {out['seconds']:.0f} s; load average {out['load_before']} -> {out['load_after']}")
    if keep:
        print(f"logs and state kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    sys.exit(main())
