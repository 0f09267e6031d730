"""What the stream drills may meet by chance that is the emulator's, not Baton's.

The drills found four Baton defects (a create retried after its answer was lost, a task left queued
by a worker that died as its job started, an issue's status lock held for minutes by a dead writer,
a merge-gate check run left in progress by a job process killed before it heard the run's id);
each is fixed and has a deterministic drill of its own. One thing remains: the emulator's ``latency``
fault sleeps before it acts, so a create can land after Baton's read timeout and be made twice,
which GitHub (it ends a request after 10 s) does not do. ``check`` ends a drill whose only accounting
problems are such doubles with ``pytest.xfail`` naming it.
"""

from __future__ import annotations

import re

import pytest

from tests.drills import accounting

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
