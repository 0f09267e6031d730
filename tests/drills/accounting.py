"""The accounting that ends every reliability drill: nothing GitHub sent is lost, stuck or doubled.

``account(admin, rdb, sent)`` reads the emulator (deliveries, comments, check runs, pull
requests) and Redis (dedupe keys, task records, the outbox, leases, receipts, the transparency
logs) and asserts, naming the offending delivery or task:

1. every delivery in ``sent`` was answered 2xx at least once (else it is *lost*), and Redis
   knows it (``baton:delivery:<guid>``): it is a task of its own, or a duplicate of another task
   (a redelivery, or the same body under another id);
2. every task those deliveries made, and any other the emulator's deliveries made, is terminal;
   nothing is ``queued``/``running``, no lease is held, the outbox is empty;
3. what each task had to publish is published: its issue has exactly one Baton status comment,
   which shows a final state (a follow-up's pull request too), each check run it had to complete is
   ``completed``, and each review thread it answers holds its reply exactly once; no Baton check
   run on GitHub is left ``queued``/``in_progress``, and no task made two of one name on one commit;
4. no branch has two pull requests;
5. no receipt is missing from the log: every receipt a task remembered (``worker.replay``) and every
   receipt on a completed check run is the entry at its index in its installation's log
   (``evidence.log``), byte for byte.

``collect`` gathers the same report without asserting. While a drill waits for everything to
settle it polls the cheap Redis-only questions, ``pending`` (its own tasks) and ``unsettled`` (any
task), or ``wait_settled``; ``describe`` says why a task has not settled, for the failure message.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from baton import queues, records
from emulator.admin.client import AdminClient
from evidence.log import Log
from evidence.verify import entry_bytes
from worker import lifecycle, publish, replay
from worker.lifecycle import State
from worker.runs import admit
from worker.status import is_status_comment

#: A receipt bundle inside a check run's text (``worker.receipts.Receipt.text``).
_BUNDLE = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
#: The status comment's footer: ``state `running```.
_FOOTER_STATE = re.compile(r"state `([a-z_-]+)`</sub>\s*$")
_TERMINAL = {s.value for s in lifecycle.TERMINAL}


@dataclass
class Report:
    """What the accounting found. ``problems`` is empty when every invariant holds."""

    #: guid -> "task", "duplicate of <task>", "ignored" (2xx, no task: routing ignored it) or "lost: …"
    deliveries: dict[str, str] = field(default_factory=dict)
    #: task id -> its state ("missing" when it has no record)
    states: dict[str, str] = field(default_factory=dict)
    #: head branch -> the numbers of the pull requests opened from it
    pulls: dict[str, list[int]] = field(default_factory=dict)
    status_comments: int = 0
    check_runs_completed: int = 0
    receipts_checked: int = 0
    problems: list[str] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        return Counter(self.states.values())

    def summary(self) -> str:
        kinds = Counter(v.split(":")[0].split(" of ")[0] for v in self.deliveries.values())
        return (
            f"deliveries {dict(sorted(kinds.items()))}; tasks {dict(sorted(self.counts().items()))}; "
            f"{len(self.pulls)} branch(es) with pull requests; {self.status_comments} status comments; "
            f"{self.check_runs_completed} check runs completed; {self.receipts_checked} receipts in the log"
        )

    def check(self) -> Report:
        assert not self.problems, (
            f"{len(self.problems)} accounting problem(s):\n  " + "\n  ".join(self.problems[:40])
            + ("\n  …" if len(self.problems) > 40 else "") + f"\n({self.summary()})"
        )  # fmt: skip
        return self


def account(admin: AdminClient, rdb: redis.Redis, sent: Iterable[str]) -> Report:
    """Collect the report and assert every invariant (the module docstring lists them)."""
    return collect(admin, rdb, sent).check()


def pending(rdb: redis.Redis, task_ids: Iterable[str]) -> list[str]:
    """Tasks (of ``task_ids``) not settled yet, with why: not terminal, or still in the outbox.
    Redis only, cheap enough to poll."""
    waiting = []
    for task_id in task_ids:
        state = lifecycle.current(rdb, task_id)
        if state not in lifecycle.TERMINAL:
            waiting.append(f"{task_id}: {state}")
        elif rdb.zscore(records.OUTBOX_KEY, task_id) is not None:
            waiting.append(f"{task_id}: in the outbox")
    return waiting


def unsettled(rdb: redis.Redis) -> list[str]:
    """Any task at all still queued or running, holding a lease, or waiting in the outbox (Redis only)."""
    found = []
    for key, what in ((lifecycle.REGISTRY + State.QUEUED.value, "queued"),
                      (lifecycle.REGISTRY + State.RUNNING.value, "running"),
                      (lifecycle.LEASES, "leased"), (records.OUTBOX_KEY, "in the outbox")):  # fmt: skip
        found += [f"{_text(raw)}: {what}" for raw in rdb.zrange(key, 0, -1)]
    return found


def describe(rdb: redis.Redis, entries: Iterable[str]) -> str:
    """The records behind ``pending``/``unsettled`` lines ("<task>: why"), for a failure message:
    the task's record, when its outbox entry and lease are due, where its RQ jobs are, and who
    holds its issue's status-comment lock."""
    lines, now = [], time.time()
    for entry in dict.fromkeys(list(entries)[:10]):
        task_id = entry.split(":", 1)[0]
        record = {_text(k): _text(v) for k, v in rdb.hgetall(lifecycle.PREFIX + task_id).items()}
        raw = record.pop("publication", None)
        when = {"outbox due in": rdb.zscore(records.OUTBOX_KEY, task_id),
                "lease runs out in": rdb.zscore(lifecycle.LEASES, task_id)}  # fmt: skip
        facts = [f"{k} {v - now:.1f}s" for k, v in when.items() if v is not None]
        for job in (task_id, record.get(admit.JOB)):
            if job:
                facts.append(f"job {job}: {_where_job(rdb, job)}")
        if raw is not None:
            pub = orjson.loads(raw)
            lock = f"{publish.LOCK_PREFIX}{pub['repo_id']}:{pub.get('number')}"
            if (ttl := rdb.pttl(lock)) > 0:
                facts.append(f"issue #{pub.get('number')}'s status-comment lock held, {ttl / 1000:.0f}s left")
        lines.append(f"{entry} [{'; '.join(facts)}] {record}")
    return "\n".join(lines)


def _where_job(rdb: redis.Redis, job_id: str) -> str:
    status = _text(rdb.hget(f"rq:job:{job_id}", "status")) or "no job hash"
    found = [status]
    for name in (q.name for q in queues.ALL):
        key = f"rq:queue:{name}"
        for where, lst in (("queued in", key), ("in the intermediate queue of", f"{key}:intermediate")):
            if job_id.encode() in rdb.lrange(lst, 0, -1):
                found.append(f"{where} {name}")
        for registry in ("started", "failed", "finished"):  # started: "<job id>:<execution id>"
            members = rdb.zrange(
                f"rq:wip:{name}" if registry == "started" else f"rq:{registry}:{name}", 0, -1
            )
            if any((_text(m) or "").split(":")[0] == job_id for m in members):
                found.append(f"{registry} registry of {name}")
    return ", ".join(found)


def wait_settled(rdb: redis.Redis, task_ids: Iterable[str], timeout: float, *, log: str = "") -> float:
    """Poll until ``task_ids`` and every other task have settled (bounded); returns the seconds it took."""
    ids, started = list(task_ids), time.monotonic()
    while left := pending(rdb, ids) + unsettled(rdb):
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not settled after {timeout:g}s:\n{describe(rdb, left)}\n{log}")
        time.sleep(0.25)
    return time.monotonic() - started


def _text(raw: bytes | str | None) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


def collect(admin: AdminClient, rdb: redis.Redis, sent: Iterable[str]) -> Report:
    """The report, without asserting (see ``account``)."""
    return _Accounting(admin, rdb).run(list(dict.fromkeys(sent)))


class _Accounting:
    def __init__(self, admin: AdminClient, rdb: redis.Redis) -> None:
        self.rdb = rdb
        self.report = Report()
        self.state: dict[str, Any] = admin.call("GET", "/state")
        apps = {int(a["id"]) for a in self.state["apps"]}
        self.by_issue: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for c in admin.comments():
            ours = (c.get("performed_via_github_app") or {}).get("id") in apps
            if ours and is_status_comment(c.get("body")):
                self.by_issue.setdefault((str(c["repository"]), int(c["issue_number"])), []).append(c)
        self.runs = {int(r["id"]): r for r in admin.check_runs() if (r.get("app") or {}).get("id") in apps}
        self.tasks: dict[str, str] = {}  # task id -> the delivery that led to it

    def problem(self, text: str) -> None:
        self.report.problems.append(text)

    def run(self, sent: list[str]) -> Report:
        self.deliveries(sent)
        for task_id, guid in self.tasks.items():
            self.task(task_id, guid)
        self.leftovers()
        self.status_comments()
        self.check_runs()
        self.pulls()
        return self.report

    def deliveries(self, sent: list[str]) -> None:
        """1. Each delivery is a task, a duplicate, or (outside ``sent`` only) ignored or lost."""
        attempts: dict[str, list[int | None]] = {}
        for d in sorted(self.state["deliveries"], key=lambda d: int(d["id"])):
            attempts.setdefault(str(d["guid"]), []).append(d.get("status_code"))
        ours = set(sent)
        for guid in [*sent, *(g for g in attempts if g not in ours)]:
            codes = attempts.get(guid)
            if not codes:
                self.problem(f"delivery {guid}: the emulator never sent it")
                self.report.deliveries[guid] = "lost: never sent"
                continue
            accepted = any(c is not None and 200 <= c < 300 for c in codes)
            known = _text(self.rdb.get(queues.DEDUPE_PREFIX + guid))
            if not accepted:
                self.report.deliveries[guid] = f"lost: answered {codes}"
                if guid in ours or known is not None:
                    self.problem(f"delivery {guid}: never answered 2xx (answers {codes}): lost")
            elif known is None:
                self.report.deliveries[guid] = "ignored"
                if guid in ours:
                    self.problem(f"delivery {guid}: answered {codes} but Redis has no record of it")
            else:
                self.report.deliveries[guid] = "task" if known == guid else f"duplicate of {known}"
                self.tasks.setdefault(known, guid)

    def task(self, task_id: str, guid: str) -> None:
        """2. Terminal, and what it had to publish is on GitHub; its receipts are in the log."""
        record = {_text(k): _text(v) for k, v in self.rdb.hgetall(lifecycle.PREFIX + task_id).items()}
        current = record.get("state")
        self.report.states[task_id] = current or "missing"
        if current is None:
            self.problem(f"task {task_id} (delivery {guid}): no record in Redis")
            return
        if current not in _TERMINAL:
            self.problem(f"task {task_id} (delivery {guid}): still {current} ({record.get('detail')})")
            return
        for check, where in self.rdb.hgetall(replay.RECEIPTS_PREFIX + task_id).items():
            installation, _, index = (_text(where) or "").partition(":")
            size = Log(self.rdb, int(installation)).size()
            if int(index) >= size:
                self.problem(f"task {task_id}: its {_text(check)} receipt is entry {index} of installation "
                             f"{installation}'s log, which has {size} entries")  # fmt: skip
        raw = record.get("publication")
        if raw is None:
            return
        published = record.get("published") or ""
        if not published or published.startswith("gave up"):
            self.problem(f"task {task_id}: {current}, but its publication is not on GitHub "
                         f"({published or 'not published'}; {record.get('publish_error')})")  # fmt: skip
            return
        pub: dict[str, Any] = orjson.loads(raw)
        numbers = [pub.get("number"), *([pub["pull_request"]] if pub.get("pull_request") else [])]
        for number in numbers:
            issue = (str(pub["full_name"]), int(number or 0))
            if pub.get("comment") is not None and not self.by_issue.get(issue):
                self.problem(f"task {task_id}: {current}, but #{issue[1]} has no Baton status comment")
        self.replies(task_id, pub)
        for end in pub.get("check_runs") or ():
            run_id = end["check_run_id"]
            if run_id is None:  # its create went unanswered: found by the task's external id, if made
                key = (task_id, end["name"], end["head_sha"])
                made = [r for r in self.runs.values() if (r["external_id"], r["name"], r["head_sha"]) == key]
                if not made:
                    continue  # GitHub never made it; check_runs() reports any run left open
                run_id = made[0]["id"]
            run = self.runs.get(int(run_id))
            if run is None or run["status"] != "completed" or run["conclusion"] != end["conclusion"]:
                seen = "missing" if run is None else f"{run['status']}/{run['conclusion']}"
                self.problem(f"task {task_id}: check run {run_id} should be completed/"
                             f"{end['conclusion']}, is {seen}")  # fmt: skip

    def replies(self, task_id: str, pub: dict[str, Any]) -> None:
        """3. Each review thread a follow-up answers holds its reply exactly once."""
        marker = publish.REPLY_MARKER.format(task_id=task_id)
        for reply in pub.get("replies") or ():
            thread = reply["comment_id"]
            made = [c for c in self.state["review_comments"]
                    if c.get("in_reply_to_id") == thread and marker in str(c.get("body"))]  # fmt: skip
            if len(made) != 1:
                self.problem(f"task {task_id}: {len(made)} replies in review thread {thread}, not one")

    def leftovers(self) -> None:
        """2. Nothing queued or running (from any delivery), no lease held, nothing in the outbox."""
        for state in (State.QUEUED, State.RUNNING):
            for raw in self.rdb.zrange(lifecycle.REGISTRY + state.value, 0, -1):
                task_id = _text(raw) or ""
                if task_id not in self.tasks:
                    self.problem(f"task {task_id}: still {state} (from no delivery the emulator lists)")
        for raw in self.rdb.zrange(lifecycle.LEASES, 0, -1):
            self.problem(f"task {_text(raw)}: still holds a lease")
        for raw in self.rdb.zrange(records.OUTBOX_KEY, 0, -1):
            self.problem(f"task {_text(raw)}: its publication is still in the outbox")

    def status_comments(self) -> None:
        """3. One status comment per issue, showing a final state."""
        for (repo, number), found in sorted(self.by_issue.items()):
            self.report.status_comments += len(found)
            if len(found) > 1:
                self.problem(f"issue {repo}#{number}: {len(found)} Baton status comments "
                             f"{[c['id'] for c in found]}")  # fmt: skip
            footer = _FOOTER_STATE.search(found[-1]["body"])
            if footer is None or footer.group(1) not in _TERMINAL:
                shown = footer.group(1) if footer else "no state"
                self.problem(f"issue {repo}#{number}: its status comment still shows {shown}")

    def check_runs(self) -> None:
        """3. No check run left open, none doubled; 5. each completed one's receipt is its log's entry."""
        seen: dict[tuple[str, str, str], list[int]] = {}
        for run in self.runs.values():
            task = str(run["external_id"])
            seen.setdefault((task, str(run["name"]), str(run["head_sha"])), []).append(int(run["id"]))
            what = f"check run {run['id']} ({run['name']}, task {task})"
            if run["status"] != "completed":
                record = {_text(k): _text(v) for k, v in self.rdb.hgetall(lifecycle.PREFIX + task).items()}
                facts = {k: record.get(k) for k in ("state", "detail", "check_run_ids")}
                self.problem(f"{what}: still {run['status']} (the task's record: {facts})")
                continue
            self.report.check_runs_completed += 1
            found = _BUNDLE.search((run.get("output") or {}).get("text") or "")
            if found is not None:
                self.receipt(what, found.group(1))
        for (task, name, sha), ids in sorted(seen.items()):
            if len(ids) > 1:
                self.problem(f"task {task}: {len(ids)} {name} check runs on {sha[:12]}: {sorted(ids)}")

    def receipt(self, what: str, text: str) -> None:
        try:
            bundle = orjson.loads(text)
            envelope, entry = bundle["dsseEnvelope"], bundle["logEntry"]
            installation, index = int(entry["installation"]), int(entry["logIndex"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            self.problem(f"{what}: its receipt bundle does not parse: {exc!r}")
            return
        log = Log(self.rdb, installation)
        size = log.size()
        if index >= size:
            self.problem(f"{what}: its receipt is entry {index} of installation {installation}'s log, "
                         f"which has {size} entries")  # fmt: skip
        elif log.entries(index, index + 1)[0] != entry_bytes(envelope):
            self.problem(f"{what}: entry {index} of installation {installation}'s log is another receipt")
        elif (fork := _forked(log, entry.get("checkpoint"))) is not None:
            self.problem(f"{what}: installation {installation}'s log {fork}")
        else:
            self.report.receipts_checked += 1

    def pulls(self) -> None:
        """4. One pull request per branch."""
        for pull in self.state["pulls"]:
            head = f"{pull['head_repo'] or pull['repo']}:{pull['head_ref']}"
            self.report.pulls.setdefault(head, []).append(int(pull["number"]))
        for head, numbers in sorted(self.report.pulls.items()):
            if len(numbers) > 1:
                self.problem(f"branch {head}: {len(numbers)} pull requests {sorted(numbers)}")


def _forked(log: Log, checkpoint: object) -> str | None:
    """Does the log still have, at the receipt's tree size, the root its signed checkpoint names? A
    log that lost entries and was written again (a primary lost unreplicated) would not."""
    if not isinstance(checkpoint, dict):
        return "receipt has no checkpoint"
    size, root = checkpoint.get("treeSize"), checkpoint.get("rootHash")
    if not isinstance(size, int) or not isinstance(root, str):
        return "receipt's checkpoint has no treeSize or rootHash"
    if size > log.size():
        return f"has {log.size()} entries, fewer than the {size} the receipt's checkpoint signed"
    if log.root(size).hex() != root:
        return f"at size {size} has another root than the receipt's checkpoint signed: a fork"
    return None
