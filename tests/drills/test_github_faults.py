"""Drill: GitHub failing the way it fails, under real ``baton worker`` processes.

The GitHub emulator injects its faults (``emulator.faults``): 5xx answers, secondary rate limits
with ``Retry-After``, the primary rate limit spent (``x-ratelimit-remaining: 0`` until its reset),
slow answers, and a short freeze of every call. Baton's endpoint (``baton serve``'s app under
uvicorn) receives the emulator's signed deliveries; two ``baton worker`` processes serve every queue
and call GitHub with their production settings (``worker.github.retry.RetryPolicy()``: a call is
tried at most ``max_retries + 1`` times, its *budget*; after that the outbox tries the
publication again later).

Two phases (figures scaled to the suite's budget; the issue gives none):

1. *Budgets, exactly.* One label per fault case (``CASES``), refused for its sender (the one call
   it must make is its status comment); the case's fault is put on that issue's comment path
   alone, so the emulator's request log counts exactly the attempts Baton made: a fault within
   the budget costs its retries and no more, one past the budget fails the call at the budget
   and the outbox's next attempt posts it. These settle before phase 2 starts.
2. *A share of calls.* ``N_NOISE`` labels (every ``RUN_EVERY``-th a ``script`` agent run that opens
   a pull request, the others refused by the capability gate) while one fault of a random kind at
   a time waits on a random GitHub path Baton calls (at most ``OUTSTANDING`` waiting at once),
   and midway every call freezes for ``FREEZE_MS`` (``FREEZE_CALLS`` calls).

What must hold: every status comment is on its issue, showing a final state, within ``BOUND_S`` of
the label; no call went past its budget (phase 1 exactly; phase 2, no issue's comment path saw
more requests than the writes its task made times the budget); and the accounting
(``tests.drills.accounting``): every label a finished task, nothing running, no second pull
request or status comment, no receipt missing.

A frozen GitHub is drilled on its own: it takes every connection and request and never answers
(the emulator's ``freeze``), and the label arrives while its idle worker waits on GitHub too. The
label's control task must end ``failed`` within ``CONTRACT_S`` of arriving, measured from its own
record, naming the reason (``github-deadline``), and having said nothing; once GitHub answers
again, the outbox puts that failure on the issue, once.

One more fault is drilled on its own: an answer slower than the worker's read timeout
(``FROZEN_MS``) to a create GitHub acted on at once (the emulator's ``late_answer``). Baton used to
retry the create and GitHub made a second (found by this drill); now a POST whose answer was lost
is not sent again: a check run is found by its external id, a status comment by the issue record's
"creating" mark. A create the emulator makes only after the timeout (its ``latency`` fault sleeps
first) can still be doubled; GitHub ends a request after 10 s, so that one is the emulator's.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import redis

from baton import codes, queues
from emulator import world
from tests.drills import accounting
from tests.drills.procs import registered, wait_for
from tests.worker.conftest import Stage, Workers
from worker import lifecycle
from worker.github.client import DEFAULT_TIMEOUT
from worker.github.retry import RetryPolicy

pytestmark = pytest.mark.drill

#: What one call may cost: Baton's production retry policy.
BUDGET = RetryPolicy().max_retries + 1
#: Generous: the machine running the suite is busy; what matters is that there is a bound.
BOUND_S = 90.0
#: Longer than a worker waits for an answer (its read timeout): the call times out, GitHub acts.
FROZEN_MS = int((DEFAULT_TIMEOUT.read or 10.0) * 1000) + 1500
EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"
HELLO = {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\n"}]}


@dataclass(frozen=True)
class Case:
    name: str
    fault: dict[str, Any]
    requests: int  # POSTs to the issue's comments the emulator must see, in all
    outbox_attempts: int  # publications that failed whole and were tried again by the outbox


CASES = (
    Case("5xx within the budget", {"kind": "status", "status": 503, "count": BUDGET - 1}, BUDGET, 0),
    Case("5xx past the budget", {"kind": "status", "status": 502, "count": BUDGET + 1}, BUDGET + 2, 1),
    Case(
        "secondary rate limit",
        {"kind": "secondary_rate_limit", "status": 403, "retry_after": 1, "count": 2},
        3,
        0,
    ),
    Case(
        "secondary rate limit (429)",
        {"kind": "secondary_rate_limit", "status": 429, "retry_after": 1, "count": 1},
        2,
        0,
    ),
    Case(
        "primary rate limit spent",
        {"kind": "primary_rate_limit", "status": 403, "reset_in": 2, "count": 1},
        2,
        0,
    ),
    Case("slow answer", {"kind": "latency", "latency_ms": 3000, "count": 1}, 1, 0),
)

N_NOISE = 14
RUN_EVERY = 7
SEND_EVERY_S = 0.5
OUTSTANDING = 5
NOISE_EVERY_S = 0.25
STALE_S = 2.0
FREEZE_MS = 3000
FREEZE_CALLS = 12
#: The paths Baton calls while it decides and publishes (phase 2's faults wait on these).
NOISE_PATHS = (
    f"/repos/{world.REPO}",
    f"/repos/{world.REPO}/collaborators/*/permission",
    f"/repos/{world.REPO}/collaborators/*/permission",  # every task calls it: twice the share
    f"/repos/{world.REPO}/branches/*",
    "/repos/*/contents/*",
    "/repos/*/contents/*",
    "/app/installations/*/access_tokens",
    f"/repos/{world.REPO}/issues/*",  # an issue, its comments, a comment
    f"/repos/{world.REPO}/issues/*",
    f"/repos/{world.REPO}/check-runs*",
    f"/repos/{world.REPO}/commits/*/check-runs",
    f"/repos/{world.REPO}/pulls*",
)
NOISE = (
    {"kind": "status", "status": 500},
    {"kind": "status", "status": 502},
    {"kind": "status", "status": 503},
    {"kind": "status", "status": 504},
    {"kind": "secondary_rate_limit", "status": 403, "retry_after": 1},
    {"kind": "secondary_rate_limit", "status": 429, "retry_after": 1},
    {"kind": "primary_rate_limit", "status": 403, "reset_in": 1},
    {"kind": "latency", "latency_ms": 1500},
)


@dataclass
class Label:
    guid: str
    number: int
    sent_at: float
    run: bool
    case: Case | None = None
    shown_at: float | None = None  # when its status comment first showed a final state


class Noise(threading.Thread):
    """One fault at a time (at most ``OUTSTANDING`` waiting) on a random path Baton calls; faults no
    call met within ``STALE_S`` are dropped for fresh ones. ``freeze()``: every call waits a while."""

    def __init__(self, stage: Stage, rng: random.Random) -> None:
        super().__init__(name="drill-noise", daemon=True)
        self.stage, self.rng = stage, rng
        self.stop = threading.Event()
        self.freezing = threading.Event()
        self.added = 0
        self.hit: Counter[str] = Counter()
        self.error: Exception | None = None

    def freeze(self) -> None:
        self.freezing.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # the drill goes on with the faults made so far, and says so
            self.error = exc

    def _run(self) -> None:
        admin, cleared, froze = self.stage.admin, time.monotonic(), 0.0
        admin.clear_faults()  # phase 1's, all met by now
        while not self.stop.wait(NOISE_EVERY_S):
            faults = admin.call("GET", "/faults")
            if self.freezing.is_set() and not froze:
                self._count(faults)
                admin.clear_faults()
                admin.add_fault("/*", kind="latency", latency_ms=FREEZE_MS, count=FREEZE_CALLS)
                self.added, froze = self.added + 1, time.monotonic()
                continue
            if froze and self.freezing.is_set():
                if any(f["remaining"] for f in faults) and time.monotonic() - froze < 2 * FREEZE_MS / 1000:
                    continue  # the freeze lasts until its calls met it, or twice its length
                self.freezing.clear()
            waiting = [f for f in faults if f["remaining"] > 0]
            if time.monotonic() - cleared > STALE_S:
                self._count(faults)
                admin.clear_faults()
                cleared = time.monotonic()
            elif len(waiting) < OUTSTANDING:
                path, fault = self.rng.choice(NOISE_PATHS), self.rng.choice(NOISE)
                admin.add_fault(path, count=1, **fault)
                self.added += 1
        self._count(admin.call("GET", "/faults"))

    def _count(self, faults: list[dict[str, Any]]) -> None:
        for f in faults:
            if f["hits"]:
                self.hit[f"{f['kind']} {f['status']}" if f["kind"] != "latency" else "latency"] += f["hits"]


def _shown(stage: Stage, labels: list[Label]) -> None:
    """Stamp each label whose issue's status comment now shows a final state."""
    now = time.monotonic()
    final = tuple(f"state `{s.value}`</sub>" for s in lifecycle.TERMINAL)
    for c in _comments(stage):
        for label in labels:
            if label.shown_at is None and c["issue_number"] == label.number and c["body"].endswith(final):
                label.shown_at = now


def _comments(stage: Stage) -> list[dict[str, Any]]:
    return [c for c in stage.admin.comments()
            if (c.get("performed_via_github_app") or {}).get("id") == stage.world.app_id]  # fmt: skip


def _label(stage: Stage, number: int, agent: str, sender: str, *, run: bool = False) -> Label:
    [delivery] = stage.admin.label(world.REPO, number, [f"agent:{agent}"], sender=sender)["deliveries"]
    return Label(delivery["guid"], number, time.monotonic(), run)


def test_github_faults_cost_bounded_retries_and_every_status_is_posted(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    procs = [workers.start(name, queues=EVERY_QUEUE) for name in ("a", "b")]
    wait_for(lambda: registered(rdb, {p.pid for p in procs}), 60, "the workers to start", workers.log)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    started = time.monotonic()

    # 1. One fault case per issue, on that issue's comment path alone; rita may not trigger Baton.
    labels: list[Label] = []
    for case in CASES:
        number = stage.issue(title=case.name)
        stage.admin.add_fault(f"/repos/{world.REPO}/issues/{number}/comments", method="POST", **case.fault)
        labels.append(_label(stage, number, "script", "rita"))
        labels[-1].case = case
    # Settled before phase 2's faults start, so nothing but its own fault touches a case's calls.
    accounting.wait_settled(rdb, [lb.guid for lb in labels], BOUND_S, log=workers.log())
    _shown(stage, labels)

    # 2. A share of every call fails, a stream of labels arrives, and midway GitHub freezes.
    noise = Noise(stage, rng)
    noise.start()
    phase2, since = time.monotonic(), len(stage.admin.requests())
    try:
        for i in range(N_NOISE):
            run = i % RUN_EVERY == RUN_EVERY - 1
            number = (
                stage.issue_with(HELLO, title=f"Say hello {i}") if run else stage.issue(title=f"Look {i}")
            )
            labels.append(_label(stage, number, "script" if run else "researcher", "maria", run=run))
            if i == N_NOISE // 2:
                noise.freeze()
            _shown(stage, labels)
            time.sleep(SEND_EVERY_S)
    finally:
        noise.stop.set()
        noise.join(timeout=10)
    phase2 = time.monotonic() - phase2
    calls = [r for r in stage.admin.requests()[since:] if not r["path"].startswith("/_emulator")]
    failed_calls = [
        r for r in calls if r["status"] >= 500 or (r["status"] in (403, 429) and not r["counted"])
    ]

    guids = [label.guid for label in labels]
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        _shown(stage, labels)
        if all(lb.shown_at for lb in labels) and not accounting.pending(rdb, guids) + accounting.unsettled(
            rdb
        ):
            break
        time.sleep(0.5)
    took = time.monotonic() - started
    figures = (f"seed {seed}; {len(labels)} labels ({len(CASES)} budget cases); {took:.0f}s; "
               f"phase 2: {phase2:.0f}s, {len(failed_calls)} of {len(calls)} calls failed, "
               f"{noise.added} faults added, met: {dict(noise.hit)}; error: {noise.error!r}")  # fmt: skip
    print(f"\n{figures}")
    context = f"{figures}\n{workers.log()}"

    # Every status comment was posted, within the bound.
    late = [(lb.number, lb.guid, None if lb.shown_at is None else round(lb.shown_at - lb.sent_at, 1))
            for lb in labels if lb.shown_at is None or lb.shown_at - lb.sent_at > BOUND_S]  # fmt: skip
    assert late == [], context
    slowest = max(labels, key=lambda lb: (lb.shown_at or 0.0) - lb.sent_at)
    print(f"slowest status comment: {(slowest.shown_at or 0.0) - slowest.sent_at:.1f}s after its label "
          f"({slowest.case.name if slowest.case else 'phase 2'})")  # fmt: skip

    # No call went past its budget.
    requests = stage.admin.requests()
    for lb in labels:
        path = f"/repos/{world.REPO}/issues/{lb.number}/comments"
        posts = [r for r in requests if r["method"] == "POST" and r["path"] == path]
        failed = int(lifecycle.field(rdb, lb.guid, "publish_attempts") or 0)
        statuses = [r["status"] for r in posts]
        if lb.case is not None:
            assert (len(posts), failed) == (lb.case.requests, lb.case.outbox_attempts), (lb.case, statuses)
            assert statuses[-1] == 201, (lb.case, statuses)
        else:
            writes = (3 if lb.run else 1) + failed  # queued and running statuses, then the outcome
            assert len(posts) <= writes * BUDGET, (lb.number, statuses, failed)

    report = accounting.account(stage.admin, rdb, guids)
    print(report.summary())
    assert report.counts()["refused"] == len(CASES), report.summary()


def test_a_create_whose_answer_is_lost_is_made_once(stage: Stage, workers: Workers, rdb: redis.Redis) -> None:
    """GitHub acts on a create but its answer never arrives in time (a frozen connection, a reset
    after the commit): the issue still gets one status comment, the pull request one merge gate."""
    proc = workers.start("a", queues=f"{queues.CONTROL.name},{queues.GATES.name}")
    wait_for(lambda: registered(rdb, {proc.pid}), 60, "the worker to start", workers.log)
    number = stage.issue()
    comments, runs = f"/repos/{world.REPO}/issues/{number}/comments", f"/repos/{world.REPO}/check-runs"
    # GitHub ends a request it has not answered within 10 s: a create that reaches it is made (or not)
    # by then. So: made at once, and the answer (past Baton's read timeout) lost.
    stage.admin.add_fault(comments, method="POST", kind="late_answer", latency_ms=FROZEN_MS, count=1)
    stage.admin.add_fault(runs, method="POST", kind="late_answer", latency_ms=FROZEN_MS, count=1)
    label = _label(stage, number, "researcher", "maria")
    stage.admin.commit(world.REPO, "feature", {"src/widgets.py": "def spin():\n    return 43\n"}, base="main")
    opened = stage.admin.open_pull(world.REPO, head="feature", user="wes", title="A change")
    gate = next(d for d in opened["deliveries"] if d["event"] == "pull_request")["guid"]
    accounting.wait_settled(rdb, [label.guid, gate], BOUND_S, log=workers.log())

    # The emulator logs a request once it has answered it: count once both frozen creates are answered.
    def frozen() -> bool:
        slow = [r for r in stage.admin.requests() if r["method"] == "POST" and r["duration_ms"] >= FROZEN_MS]
        return {r["path"] for r in slow} == {comments, runs}

    wait_for(frozen, BOUND_S, "the frozen creates to be answered", workers.log)
    accounting.account(stage.admin, rdb, [label.guid, gate])


#: The issue's contract: a frozen GitHub ends a control task within this, from the task's start.
CONTRACT_S = 60.0


def _at(event: dict[str, str]) -> float:
    """A history event's time (``baton.logs.timestamp``), as epoch seconds."""
    return datetime.fromisoformat(event["at"]).timestamp()


def test_a_frozen_github_fails_a_label_within_a_minute_and_says_so_once_it_answers(
    stage: Stage, workers: Workers, rdb: redis.Redis
) -> None:
    number = stage.issue()
    # Every API call held unanswered, the token exchange too; from before the worker starts, so its
    # first idle sweep (a redelivery pass is due) is waiting on GitHub when the label arrives.
    stage.admin.add_fault("/*", kind="freeze", count=10_000)
    try:
        proc = workers.start("a", queues=queues.CONTROL.name)
        wait_for(lambda: registered(rdb, {proc.pid}), 60, "the worker to start", workers.log)
        wait_for(lambda: stage.admin.faults()[0]["hits"], 60, "the idle worker to call GitHub", workers.log)
        label = _label(stage, number, "researcher", "maria")
        # Bounded well past the contract: the assertion is on the task's own timestamps, below.
        wait_for(lambda: lifecycle.current(rdb, label.guid) in lifecycle.TERMINAL, 3 * CONTRACT_S,
                 "the task to end while GitHub is frozen", workers.log)  # fmt: skip
        ended = lifecycle.history(rdb, label.guid)
        frozen_comments = _comments(stage)
    finally:
        stage.admin.clear_faults()
    thawed = time.monotonic()
    context = f"{ended}\n{workers.log()}"
    assert [e["to"] for e in ended] == ["queued", "running", "failed"], context
    took, waited = _at(ended[-1]) - _at(ended[1]), _at(ended[1]) - _at(ended[0])
    print(f"\nfrozen GitHub: the task ended {took:.1f}s after it started, {waited:.1f}s in the queue before")
    assert took + waited < CONTRACT_S, context  # from the label's arrival: what its author waits
    detail = lifecycle.field(rdb, label.guid, "detail") or ""
    code = detail.split(":", 1)[0]
    assert code == "github-deadline", context
    assert code in codes.REGISTRY
    assert frozen_comments == []  # nothing reached GitHub while it was frozen

    def published() -> bool:
        return any(c["issue_number"] == number for c in _comments(stage))

    waited = wait_for(published, BOUND_S, "the status comment once GitHub answers again", workers.log)
    print(f"status comment on the issue {waited:.1f}s after GitHub answered again "
          f"({time.monotonic() - thawed:.1f}s)")  # fmt: skip
    [comment] = [c for c in _comments(stage) if c["issue_number"] == number]
    assert comment["body"].endswith("state `failed`</sub>"), comment["body"]
    assert "error code `github-deadline`" in comment["body"]
    assert codes.REGISTRY["github-deadline"].sentence in comment["body"]
    assert [e["to"] for e in lifecycle.history(rdb, label.guid)] == ["queued", "running", "failed"]
    accounting.account(stage.admin, rdb, [label.guid])
