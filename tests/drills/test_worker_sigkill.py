"""Drill: workers and job processes killed with SIGKILL while labels stream in.

Real processes throughout: Baton's endpoint (``baton serve``'s app under uvicorn) receiving the
GitHub emulator's signed deliveries, two ``baton worker`` processes serving every queue (so each
forks a job process per job), and the ``script`` agent in the bubblewrap box making a small commit
for each labelled issue, pushed over git smart HTTP and opened as a pull request (whose merge gate
runs too). While the labels arrive, every few seconds a random busy job process is killed
(SIGKILL, the OOM killer's way), or a random worker is killed outright and started again (as a
platform restarts a crashed machine's process, on the same data directory).

Figures, scaled to the suite's budget (the issue's figure in brackets): ``N_RUNS`` labels [200],
at most ``IN_FLIGHT`` unfinished at once (the org's concurrent-run budget is 8: beyond it a label
waits in line, drilled on its own at the end of this module); ``len(KILLS)`` kills, one every
``KILL_EVERY_S`` seconds [every few seconds, for the whole stream]. The drill takes about a minute
on a busy 2-core machine, half of it the 30 s lease a killed worker's task must outlive.

What must hold:

1. the accounting (``tests.drills.accounting``): every label is a finished task with its status
   comment and check runs, nothing left running, no second pull request, no receipt missing;
2. the task a killed process was running leaves it within ``TARGET_S`` (60 s) of the kill: it is
   terminal, or its run was handed to a new attempt (a lost run is retried once, at the back of the
   agents queue); it is terminal within twice that; no run is tried more than twice;
3. no orphan: every process descending from a killed worker or job process at the moment of the
   kill is gone within ``ORPHAN_S``, and at the end no live process carries the environment mark
   of a killed worker (what its job processes and their git and box children inherit).

Three moments the stream meets only by chance are then made certain, each a Baton bug the stream
found (now fixed): a worker killed after RQ started a job but before its task was ``running`` (no
lease: the task stayed ``queued`` for RQ's 10-minute registry cleanup); a worker killed while
writing a status comment (its 5-minute lock silenced the issue); and a job process killed between
GitHub making the merge-gate check run and the task recording its id (the run stayed
``in_progress`` for ever: nobody knew its id).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from baton import keys, queues, records
from emulator import world
from tests.conftest import EvidenceKeys
from tests.drills import accounting, known_bugs
from tests.drills.procs import (
    Proc,
    alive,
    children,
    descendants,
    marked,
    processes,
    registered,
    running_task,
    wait_for,
    worker_env,
    worker_pool,
)
from tests.worker.conftest import ONE_RUN_SLOT, Stage, Workers, make_stage
from worker import lifecycle, publish, requeue
from worker.gates import evaluate as gates
from worker.lifecycle import State
from worker.rqworker import RENEW_EVERY_S
from worker.runner.run import PROMPT_IN_BOX
from worker.runs import admit

pytestmark = pytest.mark.drill

N_RUNS = 12
IN_FLIGHT = 5
KILLS = ("job", "worker", "job", "worker", "job")
KILL_EVERY_S = 4.0
#: Kills wait for a busy process; after this long into the drill, the ones not made are skipped.
KILL_PHASE_S = 60.0
TARGET_S = 60.0
ORPHAN_S = 10.0
SETTLE_S = 150.0
#: Every worker serves every queue, control first: each forks a job process per job.
EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"
HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}


@dataclass
class Kill:
    kind: str  # "job" (a job process) or "worker"
    victim: int
    task: str | None  # the task it was running
    attempt: str | None  # that task's run attempt at the kill
    at: float
    tree: list[Proc]  # the victim and its descendants at the kill
    left_at: float | None = None  # when the task left the killed attempt
    terminal_at: float | None = None
    gone_at: float | None = None

    def track(self, rdb: redis.Redis, now: float) -> None:
        if self.gone_at is None and not alive(self.tree):
            self.gone_at = now
        if self.task is None:
            self.left_at = self.terminal_at = self.left_at or now
            return
        state = lifecycle.current(rdb, self.task)
        if state in lifecycle.TERMINAL and self.terminal_at is None:
            self.terminal_at = now
        moved_on = lifecycle.field(rdb, self.task, admit.ATTEMPT) != self.attempt
        if self.left_at is None and (state in lifecycle.TERMINAL or moved_on):
            self.left_at = now

    def line(self) -> str:
        def took(t: float | None) -> str:
            return "never" if t is None else f"{t - self.at:.1f}s"

        return (f"{self.kind} {self.victim} (task {self.task}, attempt {self.attempt}): left it after "
                f"{took(self.left_at)}, terminal after {took(self.terminal_at)}, "
                f"{len(self.tree)} process(es) gone after {took(self.gone_at)}")  # fmt: skip


class Chaos:
    """Two workers, ``a`` and ``b``, killed and restarted on demand."""

    def __init__(self, stage: Stage, pool: Workers, rng: random.Random) -> None:
        self.stage, self.pool, self.rng = stage, pool, rng
        self.generation = {"a": 0, "b": 0}
        self.procs = {name: self._start(name) for name in self.generation}
        self.killed_marks: set[str] = set()
        self.kills: list[Kill] = []

    def _start(self, name: str) -> subprocess.Popen[bytes]:
        mark = f"{name}.{self.generation[name]}"
        return self.pool.start(name, queues=EVERY_QUEUE, env=worker_env(mark))

    def _busy(self) -> list[tuple[str, Proc]]:
        """(worker name, its job process) for each worker running a job now."""
        found = []
        for name, proc in self.procs.items():
            found += [(name, horse) for horse in children(proc.pid)]
        return found

    def kill(self, kind: str) -> bool:
        """Kill a random busy job process, or a random (busy, if any) worker; False: none busy."""
        busy = self._busy()
        if kind == "job":
            if not busy:
                return False
            name, horse = self.rng.choice(busy)
            return self._kill(kind, horse.pid, [horse, *descendants(horse.pid)], self.procs[name].pid)
        name = self.rng.choice([n for n, _ in busy] or sorted(self.procs))
        proc = self.procs[name]
        table = processes()
        tree = [table[proc.pid], *descendants(proc.pid, table)] if proc.pid in table else []
        self._kill(kind, proc.pid, tree, proc.pid)
        proc.wait(timeout=10)
        self.killed_marks.add(f"{name}.{self.generation[name]}")
        self.generation[name] += 1
        self.procs[name] = self._start(name)  # the platform restarts it
        return True

    def _kill(self, kind: str, pid: int, tree: list[Proc], worker_pid: int) -> bool:
        task = running_task(self.stage.rdb, worker_pid)
        attempt = lifecycle.field(self.stage.rdb, task, admit.ATTEMPT) if task else None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # its job ended meanwhile
            return False
        self.kills.append(Kill(kind, pid, task, attempt, time.monotonic(), tree))
        return True

    def track(self) -> None:
        now = time.monotonic()
        for k in self.kills:
            k.track(self.stage.rdb, now)


def test_sigkilled_workers_and_job_processes_lose_nothing(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    seed = random.randrange(2**32)
    chaos = Chaos(stage, workers, random.Random(seed))
    pids = {p.pid for p in chaos.procs.values()}
    wait_for(lambda: registered(rdb, pids), 60, "the workers to start", workers.log)
    sent: list[str] = []
    plan = list(KILLS)
    started = time.monotonic()
    next_kill = started + KILL_EVERY_S
    while len(sent) < N_RUNS or (plan and time.monotonic() - started < KILL_PHASE_S):
        now = time.monotonic()
        if len(sent) < N_RUNS and len(accounting.pending(rdb, sent)) < IN_FLIGHT:
            number = stage.issue_with(HELLO, title=f"Say hello {len(sent)}")
            deliveries = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"]
            sent.append(deliveries[-1]["guid"])
        if plan and now >= next_kill:
            if chaos.kill(plan[0]):
                plan.pop(0)
                next_kill = now + KILL_EVERY_S
            else:
                next_kill = now + 0.3  # nothing busy to kill yet
        chaos.track()
        time.sleep(0.2)

    deadline = time.monotonic() + SETTLE_S
    while (left := accounting.pending(rdb, sent) + accounting.unsettled(rdb)) and time.monotonic() < deadline:
        chaos.track()
        time.sleep(0.25)
    chaos.track()
    took = time.monotonic() - started
    lines = "\n".join(k.line() for k in chaos.kills)
    figures = f"seed {seed}; {len(sent)} labels; {took:.0f}s; kills not made: {plan}\n{lines}"
    print(f"\n{figures}")
    context = f"{figures}\n{workers.log()}"
    # 3. No orphans: what descended from a killed process died with it, and nothing marked survives.
    for k in chaos.kills:
        assert k.gone_at is not None, f"{alive(k.tree)} survived\n{context}"
        assert k.gone_at - k.at < ORPHAN_S, context
    assert marked(chaos.killed_marks) == [], context
    assert not left, f"{accounting.describe(rdb, left)}\n{context}"

    # 1. The accounting.
    report = known_bugs.check(accounting.collect(stage.admin, rdb, sent))
    print(report.summary())

    # 2. Each killed attempt was over within the target; no run tried more than twice.
    assert [k.kind for k in chaos.kills].count("worker") >= 1, context
    assert any(k.kind == "job" and k.task for k in chaos.kills), context
    for k in chaos.kills:
        assert k.left_at is not None, context
        assert k.left_at - k.at < TARGET_S, context
        assert k.terminal_at is not None, context
        assert k.terminal_at - k.at < 2 * TARGET_S, context  # with its one retry, if it had one
    attempts = [int(lifecycle.field(rdb, t, admit.ATTEMPT) or 0) for t in sent]
    assert max(attempts) <= admit.MAX_ATTEMPTS, attempts
    # The drill drilled something: runs opened pull requests despite the kills.
    assert report.counts()[State.PR_OPENED.value] >= N_RUNS // 2, report.summary()


# -- the moments a worker may die at that the stream above rarely hits, made certain -----------------

#: A dead worker's task is terminal within its lease plus a sweep or two (``worker.rqworker``).
SWEPT_S = lifecycle.LEASE_S + 3 * RENEW_EVERY_S

#: What a ``baton worker`` does from taking a job up to the job's first line, then its death: RQ's own
#: dequeue and start (the job is in its queue's started registry), then SIGKILL (the horse would be
#: forked next, and the task moved to ``running``).
DIES_AFTER_RQ_STARTED_THE_JOB = """
import os, signal, sys
import redis
from rq import Queue
from rq.serializers import JSONSerializer
from worker.rqworker import BatonWorker

conn = redis.Redis.from_url(sys.argv[1])
worker = BatonWorker([Queue(sys.argv[2], connection=conn, serializer=JSONSerializer)],
                     connection=conn, serializer=JSONSerializer)
worker.register_birth()
job, queue = worker.dequeue_job_and_maintain_ttl(timeout=20)
worker.prepare_execution(job)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_worker_killed_as_it_starts_a_job_has_its_task_ended_within_the_lease(
    stage: Stage, workers: Workers, rdb: redis.Redis, redis_url: str
) -> None:
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task_id = delivery["guid"]
    argv = [sys.executable, "-c", DIES_AFTER_RQ_STARTED_THE_JOB, redis_url, queues.CONTROL.name]
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert lifecycle.current(rdb, task_id) is State.QUEUED
    assert "started registry" in accounting.describe(rdb, [task_id])
    killed = time.monotonic()

    proc = workers.start("a", queues=queues.CONTROL.name)
    wait_for(lambda: registered(rdb, {proc.pid}), 60, "the worker to start", workers.log)
    left = SWEPT_S - (time.monotonic() - killed)
    wait_for(lambda: lifecycle.current(rdb, task_id) in lifecycle.TERMINAL, max(left, 1.0),
             f"task {task_id} to end ({accounting.describe(rdb, [task_id])})", workers.log)  # fmt: skip


#: A worker that serves several queues takes a job with ``BLPOP``: from that reply until RQ records
#: the job as started, the job is in no list and no registry. A worker that dies there (SIGKILL here;
#: in the Redis-restart drill, Redis itself going away) leaves a job only its hash remembers.
DIES_AFTER_TAKING_THE_JOB = """
import os, signal, sys
import redis
from rq import Queue
from rq.serializers import JSONSerializer
from worker.rqworker import BatonWorker

conn = redis.Redis.from_url(sys.argv[1])
worker = BatonWorker([Queue(name, connection=conn, serializer=JSONSerializer) for name in sys.argv[2:]],
                     connection=conn, serializer=JSONSerializer)
worker.register_birth()
job, queue = worker.dequeue_job_and_maintain_ttl(timeout=20)
os.kill(os.getpid(), signal.SIGKILL)
"""

#: A job taken by a worker that died before starting it is queued again once its task has waited
#: ``LEASE_S`` and two sweeps ``LOST_S`` apart found the job nowhere (``worker.requeue``).
REQUEUED_S = lifecycle.LEASE_S + requeue.LOST_S + 3 * RENEW_EVERY_S
RUN_SLACK_S = 20.0


def test_a_job_taken_by_a_worker_that_died_before_starting_it_is_run(
    stage: Stage, workers: Workers, rdb: redis.Redis, redis_url: str
) -> None:
    number = stage.issue()
    [delivery] = stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")["deliveries"]
    task_id = delivery["guid"]
    served = [queues.CONTROL.name, queues.GATES.name]  # two queues: RQ takes a job with BLPOP
    argv = [sys.executable, "-c", DIES_AFTER_TAKING_THE_JOB, redis_url, *served]
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert lifecycle.current(rdb, task_id) is State.QUEUED
    assert accounting.describe(rdb, [task_id]).startswith(f"{task_id} [job {task_id}: queued]")
    taken = time.monotonic()

    proc = workers.start("a", queues=",".join(served))
    wait_for(lambda: registered(rdb, {proc.pid}), 60, "the worker to start", workers.log)
    # Requeued by then, plus what running it takes a loaded machine (the suite runs four at once).
    left = REQUEUED_S + RUN_SLACK_S - (time.monotonic() - taken)
    wait_for(lambda: lifecycle.current(rdb, task_id) in lifecycle.TERMINAL, max(left, 1.0),
             f"task {task_id} to end ({accounting.describe(rdb, [task_id])})", workers.log)  # fmt: skip
    # It ran, once: the trifecta gate denied it, as it denies every researcher run here.
    assert lifecycle.current(rdb, task_id) is State.DENIED, accounting.describe(rdb, [task_id])
    assert [m["to"] for m in lifecycle.history(rdb, task_id)].count(State.RUNNING.value) == 1
    accounting.account(stage.admin, rdb, [task_id])  # its status comment, no other task left


def test_a_worker_killed_while_writing_a_status_comment_does_not_silence_the_issue(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    number = stage.issue()
    path = f"/repos/{world.REPO}/issues/{number}/comments"
    # GitHub takes long to answer this one create: the worker is killed while it waits (the create
    # lands later, as GitHub's would: by the end of the drill, so nothing is left in flight).
    stage.admin.add_fault(path, method="POST", kind="latency", latency_ms=15_000, count=1)
    first = workers.start("a", queues=queues.CONTROL.name)
    stage.admin.label(world.REPO, number, ["agent:researcher"], sender="maria")
    locks = f"{publish.LOCK_PREFIX}*:{number}"
    wait_for(lambda: list(rdb.scan_iter(locks)), 60, "the worker to take the lock", workers.log)
    # Killed once GitHub has the create, not merely once the lock is taken: a kill in between
    # would leave the slow answer to the next writer, which must wait for it (a drill of nothing).
    wait_for(lambda: _hit(stage, path), 60, "the status comment's create to reach GitHub", workers.log)
    first.kill()
    first.wait(timeout=10)

    second = workers.start("b", queues=queues.CONTROL.name)
    wait_for(lambda: registered(rdb, {second.pid}), 60, "the worker to start", workers.log)
    # A later request on the same issue: a read-only user's label, refused, and told so.
    [delivery] = stage.admin.label(world.REPO, number, ["agent:script"], sender="rita")["deliveries"]
    task_id = delivery["guid"]
    wait_for(lambda: lifecycle.current(rdb, task_id) in lifecycle.TERMINAL, 60, "the refusal", workers.log)
    told = lambda: any("state `refused`" in c["body"] for c in stage.baton_comments(number))  # noqa: E731
    why = f"the refusal on the issue ({accounting.describe(rdb, [task_id])})"
    wait_for(told, 4 * RENEW_EVERY_S, why, workers.log)


def test_a_job_process_killed_while_opening_the_merge_gate_check_run_leaves_none_in_progress(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    # GitHub makes the check run at once and answers late: the job process dies with the run made
    # and its id never heard. The failure path must find the run by its external id and complete it.
    path = f"/repos/{world.REPO}/check-runs"
    stage.admin.add_fault(path, method="POST", kind="late_answer", latency_ms=20_000, count=1)
    worker = workers.start("a", queues=f"{queues.GATES.name},{queues.AGENTS.name}")  # forks per job
    wait_for(lambda: registered(rdb, {worker.pid}), 60, "the worker to start", workers.log)
    head = stage.admin.commit(world.REPO, "feature", {"notes.txt": "a note\n"}, base="main")
    opened = stage.admin.open_pull(world.REPO, head="feature", user="maria", title="A note")
    task_id = next(d["guid"] for d in opened["deliveries"] if d["event"] == "pull_request")
    wait_for(lambda: _hit(stage, path), 60, "the check run's create to reach GitHub", workers.log)
    [horse] = children(worker.pid)
    os.kill(horse.pid, signal.SIGKILL)

    def gate_runs() -> list[dict[str, Any]]:
        return [c for c in stage.admin.check_runs() if c["head_sha"] == head and c["name"] == gates.CHECK]

    def completed() -> bool:
        return bool(gate_runs()) and all(c["status"] == "completed" for c in gate_runs())

    wait_for(lambda: lifecycle.current(rdb, task_id) in lifecycle.TERMINAL, 30, "the task's end", workers.log)
    why = f"the merge-gate check run to be completed ({accounting.describe(rdb, [task_id])})"
    took = wait_for(completed, 15, why, workers.log)
    print(f"\nthe merge-gate check run completed {took:.1f}s after its task ended")
    [run] = gate_runs()
    assert run["conclusion"] == "failure", run
    assert run["external_id"] == task_id
    assert "stopped before it finished" in run["output"]["summary"], run["output"]


def _hit(stage: Stage, path: str) -> bool:
    """Has GitHub (the emulator) met the request the fault on ``path`` waits for?"""
    return any(f["path"] == path and f["hits"] for f in stage.admin.faults())


def test_a_worker_killed_mid_follow_up_runs_it_again_once_with_one_commit_and_one_reply_a_thread(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    """A review on Baton's pull request calls it; the worker running the follow-up is SIGKILLed while
    the agent works in its box. The follow-up is run again (once) by the other worker: one commit on
    the branch on top of the first, one reply in each of the review's threads, both status comments
    final, and the accounting holds for the label and the review alike."""
    first = workers.start("a", queues=EVERY_QUEUE, env=worker_env("a.0"))
    number = stage.issue_with(HELLO)
    label = stage.admin.label(world.REPO, number, ["agent:script"], sender="maria")["deliveries"][-1]["guid"]
    wait_for(
        lambda: lifecycle.current(rdb, label) is State.PR_OPENED, 90, "the label's pull request", workers.log
    )
    [pr] = [p for p in stage.admin.call("GET", "/state")["pulls"] if p["head_ref"] == f"baton/issue-{number}"]
    before = lifecycle.field(rdb, label, "head_sha")
    slow = {"steps": [{"op": "sleep", "seconds": 5}, {"op": "write", "path": "hello.txt", "content": "HI\n"}]}
    body = f"/baton louder\n\n```baton-recipe\n{orjson.dumps(slow).decode()}\n```"
    lines = [
        {"path": "hello.txt", "line": 1, "body": "louder"},
        {"path": "hello.txt", "line": 1, "body": "!"},
    ]
    review = stage.admin.review(world.REPO, pr["number"], user="maria", body=body, comments=lines)
    [asked] = [d["guid"] for d in review["deliveries"] if d["event"] == "pull_request_review"]

    def in_box() -> bool:
        return any(PROMPT_IN_BOX in p.cmdline for p in descendants(first.pid))

    wait_for(in_box, 90, "the follow-up's agent to start in its box", workers.log)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    workers.start("b", queues=EVERY_QUEUE, env=worker_env("b.0"))
    wait_for(lambda: lifecycle.current(rdb, asked) in lifecycle.TERMINAL, SWEPT_S + 60,
             f"the follow-up to end ({accounting.describe(rdb, [asked])})", workers.log)  # fmt: skip
    assert lifecycle.current(rdb, asked) is State.PR_OPENED, workers.log()
    assert lifecycle.field(rdb, asked, admit.ATTEMPT) == "2"
    head = lifecycle.field(rdb, asked, "head_sha")
    bare = stage.server.directory / "repos" / f"{world.REPO}.git"
    made = subprocess.run(["git", "-C", str(bare), "rev-list", f"{before}..{head}"], capture_output=True,
                          text=True, check=True).stdout.split()  # fmt: skip
    assert made == [head]  # one commit on top of the label's, by the run that finished
    assert lifecycle.current(rdb, asked) is State.PR_OPENED
    settled = "every task to settle (the merge gates of both heads)"
    wait_for(lambda: not accounting.unsettled(rdb), SETTLE_S, settled, workers.log)
    accounting.account(stage.admin, rdb, [label, asked])  # one reply a thread, both comments final


# -- a worker killed mid-run while other runs wait in line for its slot -------------------------------

#: How long the line may take to drain after the kill: the lease, the retry and three runs in turn.
LINE_SETTLE_S = lifecycle.LEASE_S + 3 * RENEW_EVERY_S + 90.0


@pytest.fixture
def one_slot(tmp_path: Path, redis_url: str, rdb: redis.Redis) -> Iterator[Stage]:
    yield from make_stage(tmp_path, redis_url, rdb, repo_policy=ONE_RUN_SLOT)


@pytest.fixture
def one_slot_workers(
    one_slot: Stage, redis_url: str, tmp_path: Path, evidence_keys: EvidenceKeys
) -> Iterator[Workers]:
    with worker_pool(one_slot, redis_url, tmp_path, evidence_keys) as pool:
        yield pool


def test_a_worker_killed_mid_run_while_others_wait_in_line_loses_none_of_them(
    one_slot: Stage, one_slot_workers: Workers, rdb: redis.Redis
) -> None:
    stage, workers = one_slot, one_slot_workers
    workers.start("control", queues=f"{queues.CONTROL.name},{queues.GATES.name}")  # the PRs' gates too
    numbers, sent = [], []
    for i in range(3):
        numbers.append(stage.issue_with(HELLO, title=f"Say hello {i}"))
        deliveries = stage.admin.label(world.REPO, numbers[-1], ["agent:script"], sender="maria")[
            "deliveries"
        ]
        sent.append(str(deliveries[-1]["guid"]))
    repository = stage.task(deliveries[-1]).repository
    assert repository is not None
    line = keys.line(repository.id)

    def in_line() -> list[str]:
        return [records.text(m) for m in rdb.zrange(line, 0, -1)]

    wait_for(lambda: in_line() == sent[1:], 60, "two runs waiting in line", workers.log)
    victim = workers.start("a", queues=queues.AGENTS.name, env=worker_env("a.0"))
    working = lambda: "Working on it" in stage.baton_comments(numbers[0])[0]["body"]  # noqa: E731
    wait_for(working, 60, "the first run to start its box", workers.log)
    tree = descendants(victim.pid)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    killed = time.monotonic()
    workers.start("b", queues=queues.AGENTS.name, env=worker_env("b.0"))  # the platform restarts it

    accounting.wait_settled(rdb, sent, LINE_SETTLE_S, log=workers.log())
    print(f"\nthe line drained {time.monotonic() - killed:.1f}s after the kill")
    assert alive(tree) == []
    assert marked({"a.0"}) == []
    report = accounting.account(stage.admin, rdb, sent)  # one terminal state, one status comment each
    print(report.summary())
    assert [str(lifecycle.current(rdb, t)) for t in sent] == ["pr_opened"] * 3, workers.log()
    attempts = [lifecycle.field(rdb, t, admit.ATTEMPT) for t in sent]
    assert attempts == ["2", "1", "1"]  # the killed run was retried; the others ran once
    assert in_line() == []
    assert not rdb.exists(keys.LINES_KEY)
    # One after another, the retry included: each started after the one before had ended.
    spans = [_span(rdb, t) for t in sent]
    assert spans[0][1] <= spans[1][0], spans
    assert spans[1][1] <= spans[2][0], spans


def _span(rdb: redis.Redis, task_id: str) -> tuple[str, str]:
    """When the run last went to running, and when it ended (its history's times)."""
    moves = lifecycle.history(rdb, task_id)
    return [m["at"] for m in moves if m["to"] == "running"][-1], moves[-1]["at"]
