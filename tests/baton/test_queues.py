"""The queues' time limits agree: RQ's job timeout never cuts short what a job's GitHub deadline allows."""

from __future__ import annotations

import pytest

from baton import queues
from worker.github import deadline
from worker.rqworker import SWEEP_GITHUB_S


@pytest.mark.parametrize("spec", [q for q in queues.ALL if q.github_deadline_s is not None], ids=str)
def test_rqs_job_timeout_stays_above_the_github_deadline(spec: queues.QueueSpec) -> None:
    """The deadline cuts each phase of a request (connect, write, read, pool) to what is left, so the
    last request may take up to four times that: RQ must not stop the job first, and end it
    `timed-out` where it should have ended `github-deadline`."""
    assert spec.github_deadline_s is not None
    assert spec.github_deadline_s >= 10 * deadline.MIN_ATTEMPT_S  # room for a few requests at least
    assert spec.job_timeout >= 4 * spec.github_deadline_s


def test_control_tasks_have_a_deadline_that_ends_them_within_a_minute() -> None:
    """The contract: a frozen GitHub ends a control task within 60 s of its arrival, after waiting for
    at most one idle sweep of its worker (``worker.rqworker.SWEEP_GITHUB_S``)."""
    assert queues.CONTROL.github_deadline_s is not None
    assert queues.CONTROL.github_deadline_s + SWEEP_GITHUB_S <= 45.0  # a quarter left for the rest
