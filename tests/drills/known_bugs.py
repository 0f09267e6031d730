"""Baton bugs the drills have found and not yet seen fixed, recognised where a drill meets them by chance.

Each has a deterministic drill of its own, marked ``xfail(strict=True)`` (named below). The stream
drills (SIGKILL, Redis restarts) meet them only when a kill, an outage or a stall of the loaded
machine lands in a narrow window. When everything they wait for is stuck in one of these ways, and
stays so for ``STUCK_S`` (``Watch``), or when every accounting problem is the doubled create
(``check``), they end with ``pytest.xfail`` naming the bug, rather than waiting minutes for the lock
or registry cleanup that eventually frees it, or failing on what is already known.
"""

from __future__ import annotations

import re
import time

import pytest
import redis

from tests.drills import accounting
from worker import lifecycle
from worker.lifecycle import State

#: Longer than any live worker keeps a task in either state in these drills (no GitHub faults there).
STUCK_S = 30.0

STARTED_NOT_RUNNING = (
    "Baton bug (test_worker_sigkill.py::test_a_worker_killed_as_it_starts_a_job_has_its_task_ended_within_"
    "the_lease): task {task} is queued while RQ has started its job: its worker died before the task "
    "was running, so it has no lease"
)
DOUBLED_CREATE = (
    "the emulator's latency fault made a create past Baton's read timeout (GitHub itself ends a request "
    "after 10 s; a create it made in time is found again: test_a_create_whose_answer_is_lost_is_made_once), "
    "and a second was made: {problems}"
)


_DOUBLED = (
    re.compile(r"issue \S+: \d+ Baton status comments"),
    re.compile(r"task (\S+): \d+ \S+ check runs on"),
)
_LEFT_OPEN = re.compile(
    r"check run (\d+) \(\S+, task (\S+)\): still in_progress .*'check_run_ids': '([\d,]*)'"
)


def check(report: accounting.Report) -> accounting.Report:
    """``report.check()``, unless every problem is the known doubled create: then ``pytest.xfail``."""
    doubled = {m.group(1) for p in report.problems if (m := _DOUBLED[1].match(p))}
    known = []
    for problem in report.problems:
        left_open = _LEFT_OPEN.match(problem)
        if _DOUBLED[0].match(problem) or _DOUBLED[1].match(problem):
            known.append(problem)
        elif (
            left_open
            and left_open.group(2) in doubled
            and left_open.group(1) not in left_open.group(3).split(",")
        ):
            known.append(problem)  # the first of the two, which the task never knew it made
    if report.problems and len(known) == len(report.problems):
        print(report.summary())
        pytest.xfail(DOUBLED_CREATE.format(problems="; ".join(known)))
    return report.check()


class Watch:
    """Call ``stuck(entries)`` while waiting: the known bugs behind *all* of ``entries`` once each has
    been stuck so for ``STUCK_S``, else None (keep waiting, or fail as usual)."""

    def __init__(self, rdb: redis.Redis) -> None:
        self.rdb = rdb
        self.first: dict[str, tuple[float, str]] = {}  # entry -> (when first seen, what was seen)

    def stuck(self, entries: list[str]) -> list[str] | None:
        now, found = time.monotonic(), []
        for entry in entries:
            seen = self._why(entry.split(":", 1)[0])
            if seen is None:
                self.first.pop(entry, None)
                return None
            since, before = self.first.setdefault(entry, (now, seen))
            if before != seen:
                self.first[entry] = (now, seen)
                return None
            if now - since < STUCK_S:
                return None
            found.append(seen.split("\n", 1)[0])
        return found or None

    def _why(self, task_id: str) -> str | None:
        """What keeps ``task_id`` from settling, if it is a known bug (with what identifies the instance)."""
        state = lifecycle.current(self.rdb, task_id)
        if state is State.QUEUED and "started registry" in accounting.describe(self.rdb, [task_id]):
            return STARTED_NOT_RUNNING.format(task=task_id)
        return None
