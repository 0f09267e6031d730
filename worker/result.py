"""What a handler decides: how the task ends (``Result``), or that it goes on (``HandOff``).

``worker.handlers`` and the run itself (``worker.runs.execute``) return one; ``worker.jobs``
commits a Result's state together with what to publish, and hands a HandOff to the agents
queue. ``failed`` is the Result of a task that could not finish, whatever stopped it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from baton.errors import BatonError
from baton.tasks import Kind, Task
from worker.context import Context
from worker.lifecycle import State
from worker.messages import failure
from worker.policy import Policy
from worker.publish import CheckRunEnd, Reply
from worker.status import Status


@dataclass(frozen=True)
class Result:
    state: State
    detail: str  # for the record and the log; may hold exception text, so never published
    status: Status | None = None  # the status comment, when the task has an issue
    check_runs: tuple[CheckRunEnd, ...] = ()
    fields: dict[str, str] = field(default_factory=dict)
    #: A follow-up's answers in the review threads it was asked in (``Task.pull_request``).
    replies: tuple[Reply, ...] = ()


@dataclass(frozen=True)
class HandOff:
    """An admitted run: not over. ``worker.jobs`` moves the task back to ``queued`` with its run
    job on the agents queue (``worker.runs.admit.hand_off``), and says ``status`` on the issue.

    ``wait``: no run slot is free, or others wait for one: the run waits in its repository's line
    instead (``worker.runs.line``), judged by this policy's limits when its turn comes; ``status``
    is what the issue says once it is on the agents queue."""

    detail: str
    status: Status
    fields: dict[str, str] = field(default_factory=dict)
    #: The task the run job runs; None: the handler's (an iteration's names its issue and pull request).
    task: Task | None = None
    wait: Policy | None = None


#: What a handler decides: how the task ends, or that it goes on in the agents queue.
Decided = Result | HandOff
Handler = Callable[[Context, Task], Decided]


def failed(
    task: Task,
    exc: BatonError,
    *,
    speak: bool,
    check_run_ids: Sequence[int] = (),
    unanswered: Sequence[tuple[str, str, float]] = (),
) -> Result:
    """The task could not finish: a fixed sentence for its error code, never the exception text.

    ``speak``: whether the issue may hear about it (only once the sender was authorised,
    or for a label). Check runs the task opened are completed whatever happened, those whose
    create went unanswered (``unanswered``: name, head, when sent) too, found by the task's external id.
    """
    state = State.TIMED_OUT if exc.code == "timed-out" else State.FAILED
    status = None
    if speak and task.kind in (Kind.AGENT_RUN, Kind.COMMAND, Kind.ITERATE) and task.number is not None:
        status = Status(state, task.id, task.agent, failure(exc.code), details=(f"error code `{exc.code}`",),
                        next_steps=("Comment `/baton retry` once the cause is fixed.",))  # fmt: skip
    title = "Baton timed out" if state is State.TIMED_OUT else "Baton could not finish"
    conclusion = "timed_out" if state is State.TIMED_OUT else "failure"
    summary = f"{failure(exc.code)} (error code `{exc.code}`)"
    runs = tuple(CheckRunEnd(i, conclusion, title, summary) for i in check_run_ids) + tuple(
        CheckRunEnd(None, conclusion, title, summary, name=name, head_sha=head, sent_at=at)
        for name, head, at in unanswered
    )
    return Result(state, f"{exc.code}: {exc.message}", status, runs)
