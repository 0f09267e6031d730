"""The line: agent runs waiting for a free run slot in their repository, oldest first.

A run refused only because its repository or its installation already has as many runs in
progress as ``max_concurrent_runs`` allows waits here instead, and so does a run that arrives while
anyone waits (nobody overtakes, even past a slot that came free). A waiting run's task is
``queued`` with no run job yet: it holds its issue's run lock (a second request on the issue is
told "busy") but counts in no budget and takes no slot; the daily budgets are judged when its turn
comes, not when it joins.

Its turn comes when a slot frees, in the same Redis transaction as the freeing: the worker whose
run ends frees its slots (``release``) and starts the line's oldest run if the budgets allow it
now (counted, its slots taken, its lock kept, its run job on the agents queue as
``worker.runs.admit.hand_off`` puts one). A run a daily budget refuses then ends refused, one
cancelled meanwhile ends cancelled, each with its status in the outbox, and the next is
considered; the first that finds no free slot stops the line. So a crash cannot fall between a
slot freed and the next run started. Slots that free some other way (a dead run's lapsed lease, a
run ending in another repository of the installation) are found by a periodic duty (``sweep``,
run by ``worker.rqworker``) that moves every line with anyone in it, and frees first the slots
that runs which already ended still hold (``reap``: a worker that died between a run's end and
its release).

``decide`` is the pure decision for one waiting run; ``_advance`` reads what it needs in one
optimistic transaction (WATCH / MULTI, retried on a conflict), so two workers racing to start the
same run never both do. After the commit, best effort: each started run's issue says it is
queued, each ended run's status is published, and each run still waiting whose place changed is
told its new place.

Keys (``baton.keys``): ``line(repo id)`` the line, ``LINE_ENTRY_PREFIX`` + task id what a waiting
run starts with, ``LINES_KEY`` the repositories whose line holds anyone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson
import redis
from redis.client import Pipeline

from baton import keys, records
from baton.tasks import Outcome, Task
from worker import clock, lifecycle, outbox
from worker.context import Context
from worker.lifecycle import State
from worker.policy import Policy
from worker.publish import Publication, status_now
from worker.runs import admit, budget, report
from worker.runs import cancel as stopping
from worker.runs.record import Record
from worker.status import Status
from worker.trigger import where

log = logging.getLogger("baton.runs")

ENTRY_PREFIX = keys.LINE_ENTRY_PREFIX
LINES = keys.LINES_KEY
#: An entry lives as long as its task's record could (a waiting run is written nowhere else).
ENTRY_TTL_S = lifecycle.RECORD_TTL_S
_LOCK_MS = int(admit.QUEUED_LOCK_S * 1000)


@dataclass(frozen=True)
class Entry:
    """What a waiting run starts with: the task its run job gets, its budget scopes (with the limits
    of the policy it was admitted under) and what its issue says once it is on the agents queue."""

    task: Task
    scopes: tuple[budget.Scope, ...]
    queued: Status

    def to_json(self) -> bytes:
        data = {"task": self.task.to_dict(), "scopes": [asdict(s) for s in self.scopes],
                "queued": asdict(self.queued)}  # fmt: skip
        return orjson.dumps(data)

    @classmethod
    def from_json(cls, raw: bytes | str) -> Entry:
        data: dict[str, Any] = orjson.loads(raw)
        said = dict(data["queued"])
        for name in ("details", "next_steps", "notices"):
            said[name] = tuple(said[name])
        status = Status(**{**said, "state": State(said["state"])})
        return cls(Task.from_dict(data["task"]), tuple(budget.Scope(**s) for s in data["scopes"]), status)


# -- the pure parts -----------------------------------------------------------------------------


class Turn(StrEnum):
    """What a waiting run's turn brings."""

    START = "start"  # the budgets allow it now: counted, its run job on the agents queue
    WAIT = "wait"  # no free slot: it waits on, and so does everyone behind it
    REFUSE = "refuse"  # a daily budget is spent: it ends refused, over budget
    BUSY = "busy"  # its lock lapsed while it waited and another run holds the issue now
    CANCEL = "cancel"  # a cancel was asked for after it
    GONE = "gone"  # it is not waiting any more (it ended another way): it only leaves the line


@dataclass(frozen=True)
class Decision:
    turn: Turn
    verdict: budget.Verdict | None = None  # START, WAIT, REFUSE: the budgets' verdict
    cancel: stopping.Cancel | None = None
    holder: str | None = None  # BUSY: the task whose run holds the issue


def standing(
    task_id: str, *, waiting: bool, cancelled: stopping.Cancel | None, lock: str | None
) -> Decision | None:
    """What ends a waiting run whatever the budgets say (gone, cancelled, its issue taken), in that
    order; None: it is still waiting for its turn. ``lock``: who holds its issue (None: nobody)."""
    if not waiting:
        return Decision(Turn.GONE)
    if cancelled is not None:
        return Decision(Turn.CANCEL, cancel=cancelled)
    if lock is not None and lock != task_id:
        return Decision(Turn.BUSY, holder=lock)
    return None


def decide(
    task_id: str,
    *,
    waiting: bool,
    cancelled: stopping.Cancel | None,
    lock: str | None,
    scopes: Sequence[tuple[budget.Scope, budget.Usage]],
    now: datetime,
) -> Decision:
    """A waiting run's turn at the head of its line: ``standing``, then the budgets as they are now.
    Only a full slot keeps it waiting; a spent daily budget refuses it."""
    found = standing(task_id, waiting=waiting, cancelled=cancelled, lock=lock)
    if found is not None:
        return found
    verdict = budget.judge(scopes, now)
    if verdict.allowed:
        return Decision(Turn.START, verdict)
    return Decision(Turn.WAIT if verdict.code == budget.CONCURRENT_RUNS else Turn.REFUSE, verdict)


def ahead(line: Sequence[str], task_id: str) -> int | None:
    """How many runs wait ahead of ``task_id`` in ``line`` (oldest first); None: it is not in it."""
    return line.index(task_id) if task_id in line else None


def moved_places(before: Sequence[str], after: Sequence[str]) -> list[tuple[str, int]]:
    """The runs of ``after`` (the line now) whose place differs from theirs in ``before`` (or that
    were not in it), with their new number ahead: whose status to update."""
    return [(task_id, i) for i, task_id in enumerate(after) if ahead(before, task_id) != i]


def why(verdict: budget.Verdict | None) -> tuple[str, str]:
    """The limit that holds a line back, as its status names it: the baton.yml field, and the counts."""
    if verdict is None or verdict.setting is None or verdict.scope is None:
        return "limits.max_concurrent_runs", "no run slot is free."
    used = math.floor(verdict.used or 0)
    limit = int(verdict.limit or 0)
    return verdict.setting, f"{verdict.scope} has {used} of its {limit} concurrent runs in progress."


# -- the transaction ----------------------------------------------------------------------------

#: What a refused waiting run's status says before the counts.
WAITED = (
    "It waited in this repository's line for a free run slot; when its turn came, a daily budget was spent."
)


@dataclass(frozen=True)
class _Releasing:
    task: Task
    on: str | None  # the day the run started (None: today)
    agent_seconds: float


@dataclass(frozen=True)
class _Joining:
    entry: Entry
    detail: str
    holder: str | None
    fields: Mapping[str, str]


@dataclass
class Moved:
    """What one transaction did to a line: for the statuses after it, and the tests."""

    started: list[Entry] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # task ids whose publication is in the outbox
    waiting: list[str] = field(default_factory=list)  # the line after it, oldest first
    places: list[tuple[str, int]] = field(default_factory=list)  # changed places (``moved_places``)
    holding: budget.Verdict | None = None  # what holds the line back: its head's verdict
    holding_scope: str | None = None  # the key of the scope whose slots are full
    entries: dict[str, Entry] = field(default_factory=dict)  # those read, by task id


@dataclass
class _Delta:
    """What the transaction changes in one scope before its commit: runs counted, slots taken (or
    freed), agent seconds recorded today."""

    runs: int = 0
    active: int = 0
    seconds: float = 0.0

    def applied(self, use: budget.Usage) -> budget.Usage:
        return budget.Usage(use.runs_today + self.runs, use.agent_seconds_today + self.seconds,
                            use.active + self.active, use.model_usd_today)  # fmt: skip


@dataclass(frozen=True)
class _Head:
    """A run of the line as the transaction read it, each key WATCHed as it was read. ``seen`` is
    its record (a joining run's: still running, its move to queued is in this transaction)."""

    task_id: str
    seen: lifecycle.Seen
    entry: Entry | None
    waiting: bool
    lock: str | None = None
    cancelled: stopping.Cancel | None = None

    @classmethod
    def read(cls, pipe: Pipeline, repo_id: int, task_id: str) -> _Head:
        pipe.watch(ENTRY_PREFIX + task_id)  # type: ignore[no-untyped-call]
        raw = pipe.get(ENTRY_PREFIX + task_id)
        seen = lifecycle.watch(pipe, task_id)
        try:
            entry = Entry.from_json(raw) if raw is not None else None
        except (ValueError, TypeError, KeyError):
            log.error("a waiting run's entry cannot be read; it leaves the line", extra={"task": task_id})
            entry = None
        if entry is None or seen.state is not State.QUEUED:
            return cls(task_id, seen, entry, waiting=False)
        return cls(task_id, seen, entry, True, *_claims(pipe, repo_id, entry.task))

    @classmethod
    def joining(cls, pipe: Pipeline, repo_id: int, joining: _Joining, seen: lifecycle.Seen) -> _Head:
        task = joining.entry.task
        return cls(task.id, seen, joining.entry, True, *_claims(pipe, repo_id, task))


def _claims(pipe: Pipeline, repo_id: int, task: Task) -> tuple[str | None, stopping.Cancel | None]:
    """Who holds the run's issue, and a cancel asked for after the run (all WATCHed): on its issue,
    or on the pull request a follow-up works on."""
    lock = admit.lock_key(task)
    numbers = (task.number or 0, *((task.pull_request,) if task.pull_request is not None else ()))
    pipe.watch(lock, *(stopping.key(repo_id, n) for n in numbers))  # type: ignore[no-untyped-call]
    holder = pipe.get(lock)
    return (None if holder is None else records.text(holder),
            stopping.applies_to(pipe, repo_id, numbers, task.received_at))  # fmt: skip


Write = Callable[[Pipeline], object]


def _advance(
    ctx: Context,
    repo_id: int,
    *,
    releasing: _Releasing | None = None,
    joining: _Joining | None = None,
    leaving: str | None = None,
) -> Moved:
    """One transaction on a repository's line: a run's end (``releasing``: its slots freed), a run
    joining (``joining``: its own move from running), a waiting run cancelled wherever it stands
    (``leaving``), then the heads' turns until one finds no free slot. Raises lifecycle.IllegalMove
    if ``joining`` is not its job's any more (then nothing was written)."""
    with ctx.redis.pipeline() as pipe:
        while True:
            try:
                return _Transaction(ctx.redis, pipe, repo_id).run(releasing, joining, leaving)
            except redis.WatchError:
                continue


class _Transaction:
    """One attempt of ``_advance``: reads in the watch phase, the writes gathered, one commit."""

    def __init__(self, client: redis.Redis, pipe: Pipeline, repo_id: int) -> None:
        self.client, self.pipe, self.repo_id = client, pipe, repo_id
        self.key = keys.line(repo_id)
        pipe.watch(self.key)  # type: ignore[no-untyped-call]
        self.now = clock.of(pipe.time())
        self.at = datetime.fromtimestamp(self.now, UTC)
        self.today = budget.day(self.at)
        self.before = [records.text(m) for m in pipe.zrange(self.key, 0, -1)]
        self.line = list(self.before)
        self.deltas: dict[str, _Delta] = {}
        self.writes: list[Write] = []
        self.moved = Moved()
        self.joining: _Joining | None = None
        self.joiner: lifecycle.Seen | None = None

    def run(self, releasing: _Releasing | None, joining: _Joining | None, leaving: str | None) -> Moved:
        if releasing is not None:
            self.writes.append(_release(self.pipe, releasing, self.now, self.today, self.deltas))
            if releasing.task.id in self.line:  # it ended another way while it waited
                self.line.remove(releasing.task.id)
                self.writes.append(_leave(self.key, releasing.task.id))
        if joining is not None:
            self.joining = joining
            self.joiner = lifecycle.watch(self.pipe, joining.entry.task.id)
            lifecycle.allowed(self.joiner, State.QUEUED, holder=joining.holder)
            self.line.append(joining.entry.task.id)
            self.moved.entries[joining.entry.task.id] = joining.entry
        if leaving is not None and leaving in self.line and leaving != self._joining_id():
            head = _Head.read(self.pipe, self.repo_id, leaving)
            found = standing(leaving, waiting=head.waiting, cancelled=head.cancelled, lock=head.lock)
            if found is not None:
                self.line.remove(leaving)
                self.writes.append(_end(self.key, head, found, self.moved, None))
        for task_id in list(self.line):
            if not self._turn(task_id):
                break
        return self._commit()

    def _joining_id(self) -> str | None:
        return self.joining.entry.task.id if self.joining is not None else None

    def _turn(self, task_id: str) -> bool:
        """The turn of the line's head; False: it waits, and so does everyone behind it."""
        mine = self.joining if task_id == self._joining_id() else None
        if mine is not None and self.joiner is not None:
            head = _Head.joining(self.pipe, self.repo_id, mine, self.joiner)
        else:
            head = _Head.read(self.pipe, self.repo_id, task_id)
        if head.entry is not None:
            self.moved.entries[task_id] = head.entry
        found = standing(task_id, waiting=head.waiting, cancelled=head.cancelled, lock=head.lock)
        if found is None and head.entry is not None:
            scopes = head.entry.scopes
            self.pipe.watch(*budget.watched(scopes, self.today))  # type: ignore[no-untyped-call]
            read = budget.read(self.pipe, scopes, task_id=task_id, now=self.at)
            usage = [(s, self._delta(s).applied(u)) for s, (u, _) in zip(scopes, read, strict=True)]
            found = decide(task_id, waiting=True, cancelled=None, lock=head.lock, scopes=usage, now=self.at)
            if found.turn is Turn.WAIT and found.verdict is not None:
                self.moved.holding = found.verdict
                self.moved.holding_scope = next(
                    (s.key for s in scopes if s.label == found.verdict.scope), None
                )
                return False
            if found.turn is Turn.START:
                for scope, (_, counted) in zip(scopes, read, strict=True):
                    self._delta(scope).active += 1
                    self._delta(scope).runs += 0 if counted else 1
                counts = [c for _, c in read]
                self.writes.append(_start(self.client, self.key, head, counts, self.at, joining=mine))
                self.moved.started.append(head.entry)
                self.line.remove(task_id)
                return True
        self.line.remove(task_id)
        self.writes.append(_end(self.key, head, found or Decision(Turn.GONE), self.moved, mine))
        return True

    def _delta(self, scope: budget.Scope) -> _Delta:
        return self.deltas.setdefault(scope.key, _Delta())

    def _commit(self) -> Moved:
        pipe = self.pipe
        pipe.multi()
        for write in self.writes:
            write(pipe)
        if self.joining is not None and self.joiner is not None and self._joining_id() in self.line:
            _join(pipe, self.key, self.joiner, self.joining, self.now)
        if self.line:
            pipe.sadd(LINES, str(self.repo_id))
        else:
            pipe.srem(LINES, str(self.repo_id))
        pipe.execute()
        self.moved.waiting = self.line
        self.moved.places = moved_places(self.before, self.line)
        return self.moved


def _release(
    pipe: Pipeline, releasing: _Releasing, now: float, today: str, deltas: dict[str, _Delta]
) -> Write:
    """The ended run's part (read now, written at the commit): its agent time on the day it started,
    its slots freed, its lock deleted if still its own."""
    task, on = releasing.task, releasing.on or today
    scopes, lock = admit.scopes(task, None), admit.lock_key(task)
    pipe.watch(lock, *(budget.active_key(s) for s in scopes))  # type: ignore[no-untyped-call]
    held = pipe.get(lock)
    mine = held is not None and records.text(held) == task.id
    for scope in scopes:
        own = pipe.zscore(budget.active_key(scope), task.id)
        delta = deltas.setdefault(scope.key, _Delta())
        delta.active -= 1 if own is not None and float(own) > now else 0
        delta.seconds += releasing.agent_seconds if on == today else 0.0

    def write(p: Pipeline) -> None:
        budget.uncount(p, scopes, task_id=task.id, on=on, agent_seconds=releasing.agent_seconds)
        if mine:
            p.delete(lock)

    return write


def _leave(line_key: str, task_id: str) -> Write:
    def write(p: Pipeline) -> None:
        p.zrem(line_key, task_id)
        p.delete(ENTRY_PREFIX + task_id)

    return write


def _start(
    client: redis.Redis,
    line_key: str,
    head: _Head,
    counted: list[bool],
    at: datetime,
    *,
    joining: _Joining | None,
) -> Write:
    """Its turn came: counted, its slots and lock taken, its run job on the agents queue."""
    entry, task_id = head.entry, head.task_id
    if entry is None:
        raise ValueError("a run with no entry cannot start")
    job = admit.job_id(task_id, 1)
    fields = dict(joining.fields) if joining else {admit.ATTEMPT: "1", admit.JOB: job}
    detail = "admitted: a run slot came free" if joining else "its turn came in the line: a run slot is free"

    def write(p: Pipeline) -> None:
        lifecycle.write(p, head.seen, State.QUEUED, detail, publication=None,
                        holder=joining.holder if joining else None, **fields)  # fmt: skip
        budget.count(p, entry.scopes, task_id=task_id, now=at, lease_s=admit.QUEUED_LOCK_S, counted=counted)
        p.set(admit.lock_key(entry.task), task_id, px=_LOCK_MS)
        admit.enqueue(p, client, entry.task, job)
        p.zrem(line_key, task_id)
        p.delete(ENTRY_PREFIX + task_id)

    return write


def _end(line_key: str, head: _Head, decision: Decision, moved: Moved, joining: _Joining | None) -> Write:
    """It leaves the line without starting: refused, busy or cancelled (its status in the outbox), or
    gone (it had ended another way: it only leaves)."""
    leave = _leave(line_key, head.task_id)
    if decision.turn is Turn.GONE or head.entry is None:
        return leave
    entry, task_id = head.entry, head.task_id
    state, detail, status = _ending(entry, decision)
    publication = Publication.about(entry.task, status)
    stored = publication.to_json() if publication is not None else None
    if stored is not None:
        moved.ended.append(task_id)
    fields = {
        k: v for k, v in (joining.fields if joining else {}).items() if k not in (admit.ATTEMPT, admit.JOB)
    }
    frees = head.lock == task_id

    def write(p: Pipeline) -> None:
        lifecycle.write(p, head.seen, state, detail, publication=stored,
                        holder=joining.holder if joining else None, **fields)  # fmt: skip
        leave(p)
        if frees:
            p.delete(admit.lock_key(entry.task))

    return write


def _ending(entry: Entry, decision: Decision) -> tuple[State, str, Status]:
    """How a run that leaves the line without starting ends, and what its issue says."""
    task_id, number = entry.task.id, entry.task.number
    agent = entry.queued.agent or entry.task.agent or ""
    if decision.turn is Turn.CANCEL and decision.cancel is not None:
        reason = decision.cancel.reason()
        status = report.ended(task_id, agent, Record(agent, Outcome.CANCELLED, reason))
        return State.CANCELLED, f"cancelled while waiting in line: {reason}", status
    if decision.turn is Turn.BUSY:
        holder = decision.holder or "?"
        return State.REFUSED, f"busy: run {holder} holds #{number}", report.busy(task_id, agent, holder)
    verdict = decision.verdict or budget.Verdict(False)
    status = report.over_budget(task_id, agent, [WAITED, *verdict.lines()])
    return State.REFUSED, f"over-budget at its turn: {verdict.code} ({verdict.scope})", status


def _join(pipe: Pipeline, line_key: str, joiner: lifecycle.Seen, joining: _Joining, now: float) -> None:
    """RUNNING -> QUEUED with no run job yet, and into the line at its end."""
    task_id = joining.entry.task.id
    lifecycle.write(pipe, joiner, State.QUEUED, joining.detail, publication=None, holder=joining.holder,
                    **joining.fields)  # fmt: skip
    pipe.set(ENTRY_PREFIX + task_id, joining.entry.to_json(), ex=ENTRY_TTL_S)
    pipe.zadd(line_key, {task_id: now})


# -- what the others call -------------------------------------------------------------------------


def join(
    ctx: Context,
    task: Task,
    *,
    status: Status,
    policy: Policy,
    detail: str,
    holder: str | None,
    fields: Mapping[str, str],
) -> str:
    """RUNNING -> QUEUED with no run job yet: ``task`` (the task its run job will get) waits at the
    end of its repository's line, judged by ``policy``'s limits when its turn comes, and says
    ``status`` on its issue once it is on the agents queue. If a slot is free and nobody waits
    ahead, it starts in the same transaction. Returns the id its run job has (or will have).

    Raises lifecycle.IllegalMove if the task ended meanwhile, or (``holder``: the admitting job's
    move) is not that job's any more; then nothing was written."""
    repo = _repo(task)
    job = admit.job_id(task.id, 1)
    entry = Entry(task, tuple(admit.scopes(task, policy)), status)
    joining = _Joining(entry, detail, holder, {**fields, admit.ATTEMPT: "1", admit.JOB: job})
    moved = _advance(ctx, repo, joining=joining)
    _tell(ctx, moved, publish=True)
    return job


def release(
    ctx: Context, task: Task, *, started: str | None, agent_seconds: float = 0.0, publish: bool = True
) -> Moved:
    """The run is over: its minutes counted on the day it started, its lock and slots freed (its
    model dollars were counted as its calls ended), and in the same transaction the oldest runs
    waiting in its repository's line start while the budgets allow. ``publish``: tell GitHub now
    (else the outbox keeps what ended, and the waiting runs' places are not updated)."""
    releasing = _Releasing(task, started[:10] if started else None, agent_seconds)
    moved = _advance(ctx, _repo(task), releasing=releasing)
    _tell(ctx, moved, publish=publish)
    return moved


def cancel(ctx: Context, repo_id: int, task_id: str) -> bool:
    """A cancel was recorded for ``task_id``'s issue (``worker.runs.cancel``): if that run waits in
    the line it leaves it now, cancelled, its lock freed. Whether it did."""
    if ctx.redis.zscore(keys.line(repo_id), task_id) is None:
        return False
    moved = _advance(ctx, repo_id, leaving=task_id)
    _tell(ctx, moved, publish=True)
    return task_id in moved.ended


def waiting_for_pull(ctx: Context, repo_id: int, number: int) -> list[str]:
    """The follow-ups waiting in a repository's line that work on pull request ``number``."""
    found = []
    for raw in ctx.redis.zrange(keys.line(repo_id), 0, -1):
        entry = _entry(ctx.redis, records.text(raw))
        if entry is not None and entry.task.pull_request == number:
            found.append(entry.task.id)
    return found


def advance(ctx: Context, repo_id: int, *, publish: bool = True) -> Moved:
    """Start what can start in a repository's line now (a slot freed without a release: a lapsed
    lease, another repository's run of the installation, a crash)."""
    moved = _advance(ctx, repo_id)
    _tell(ctx, moved, publish=publish)
    return moved


def sweep(ctx: Context, *, publish: bool, stop: Callable[[], bool] = lambda: False) -> int:
    """Every line with anyone in it, moved once (the periodic duty's work); how many runs started. A
    line held back by slots that runs which ended still hold (their worker died between the end and
    the release) has those freed, and moves again."""
    started = 0
    for raw in sorted(records.text(m) for m in ctx.redis.smembers(LINES)):
        if stop():
            break
        moved = advance(ctx, int(raw), publish=publish)
        if moved.holding_scope is not None and reap(ctx.redis, moved.holding_scope):
            moved = advance(ctx, int(raw), publish=publish)
        started += len(moved.started)
    return started


#: Slots a reap looks at, at most (a scope allows at most 4096 at once: an installation's cap).
REAP_BATCH = 100


def reap(client: redis.Redis, scope_key: str) -> int:
    """Free the slots of ``scope_key`` (``budget.Scope.key``) held by runs that ended: a run's end and
    its release are two steps, and a worker that dies between them leaves its slot held until its
    lease lapses (hours, for a run that never started). An ended run never holds a slot again, so
    freeing it early is safe. Returns how many were freed."""
    active = budget.ACTIVE_PREFIX + scope_key
    live = client.zrangebyscore(active, f"({clock.now(client):.6f}", "+inf", start=0, num=REAP_BATCH)
    members = [records.text(m) for m in live]
    with client.pipeline(transaction=False) as pipe:
        for member in members:
            pipe.hget(lifecycle.PREFIX + member, "state")
        states = pipe.execute()
    ended = [
        m
        for m, state in zip(members, states, strict=True)
        if lifecycle.state_named(state) in lifecycle.TERMINAL
    ]
    if ended:
        log.warning(
            "freed run slots still held by runs that ended", extra={"scope": scope_key, "slots": len(ended)}
        )
        client.zrem(active, *ended)
    return len(ended)


def _repo(task: Task) -> int:
    repo, _ = where(task)
    return repo.id


def _tell(ctx: Context, moved: Moved, *, publish: bool) -> None:
    """After the commit, best effort: who started, who ended, who moved up."""
    for entry in moved.started:
        log.info("run started from the line", extra={"task": entry.task.id, "waiting": len(moved.waiting)})
    if not publish:
        return
    for task_id in moved.ended:
        outbox.publish_now(ctx, task_id)
    for entry in moved.started:
        status_now(ctx, entry.task, entry.queued)
    limit, counts = why(moved.holding)
    running = math.floor(moved.holding.used or 0) if moved.holding is not None else 0
    for task_id, place in moved.places:
        found = moved.entries.get(task_id) or _entry(ctx.redis, task_id)
        if found is not None:
            said = report.waiting(found.queued, waiting=place, running=running, limit=limit, why=counts)
            status_now(ctx, found.task, said)


def _entry(client: redis.Redis, task_id: str) -> Entry | None:
    raw = client.get(ENTRY_PREFIX + task_id)
    try:
        return None if raw is None else Entry.from_json(records.text(raw))
    except (ValueError, TypeError, KeyError):
        return None
