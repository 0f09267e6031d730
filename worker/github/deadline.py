"""One deadline for a whole piece of work's GitHub calls: a control task, an idle worker's sweep.

Each call is bounded on its own (a request's timeouts, the retry policy's attempts), but the bounds
add up: against a GitHub that takes connections and never answers, one call costs 4 x 10 s of read
timeouts plus back-off, and a task makes several calls. ``within(seconds)`` sets one deadline
around the work; every GitHub request made inside it, the installation-token exchange included,
obeys it (``worker.github.client`` and ``worker.github.retry``):

- no request is started with less than ``MIN_ATTEMPT_S`` left;
- a request waits at most what is left: each of its timeouts is cut to it (``limits``);
- a retry is made only if its wait and one more request fit (``fits``), never more;
- what the deadline stops raises ``DeadlineExceeded`` (``github-deadline``): a ``BatonError`` and
  not a ``GitHubError``, so no caller mistakes it for an answer (a permission lookup that ran out
  of time is not a refusal of the sender) and the task ends ``failed`` with it.

The deadline lives in a context variable: it holds for the thread (or job process) that set it,
and a nested ``within`` can only bring it closer. The decisions (``limits``, ``fits``) are pure;
``remaining`` reads the clock.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from baton import codes
from baton.errors import BatonError

#: The least time worth starting a request in: GitHub answers most in well under a second.
MIN_ATTEMPT_S = 1.0
#: Set on a request whose timeouts the deadline shortened: a timeout there is the deadline's doing.
CUT = "baton_deadline_cut"

#: (when it runs out on the monotonic clock, the seconds it gave), or None: no deadline.
_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "baton_github_deadline", default=None
)


class DeadlineExceeded(BatonError):
    """The work's deadline stopped a GitHub call. ``retry_after``: what GitHub asked to wait, if it
    asked (a rate limit whose wait did not fit), for whoever tries again (``worker.outbox``)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(codes.GITHUB_DEADLINE, message)
        self.retry_after = retry_after


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """GitHub calls made inside end within ``seconds`` (None: no deadline of this work's own). A
    deadline already set that runs out sooner stays in force."""
    if seconds is None:
        yield
        return
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a deadline must be a positive number of seconds, got {seconds!r}")
    end = time.monotonic() + seconds
    current = _DEADLINE.get()
    if current is not None and current[0] <= end:
        yield
        return
    token = _DEADLINE.set((end, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline (negative once past it); None when there is none."""
    current = _DEADLINE.get()
    return None if current is None else current[0] - time.monotonic()


def spent() -> bool:
    """Is too little left to start a request in?"""
    return not fits(0.0, remaining())


def describe() -> str:
    """The deadline in force, for a message: ``the 30 s deadline for its GitHub calls``."""
    current = _DEADLINE.get()
    given = f"{current[1]:g} s " if current is not None else ""
    return f"the {given}deadline for its GitHub calls"


# -- the decisions ------------------------------------------------------------------------------


def fits(wait: float, left: float | None) -> bool:
    """May a request start after waiting ``wait`` seconds, with ``left`` seconds left (None: no
    deadline)? Only if at least ``MIN_ATTEMPT_S`` would remain for it."""
    return left is None or wait + MIN_ATTEMPT_S <= left


def limits(timeouts: Mapping[str, float | None], left: float | None) -> tuple[dict[str, float | None], bool]:
    """A request's timeouts (httpx's ``connect``, ``read``, ``write``, ``pool``), each cut to the
    ``left`` seconds; and whether any was cut."""
    if left is None:
        return dict(timeouts), False
    cut: dict[str, float | None] = {
        name: left if limit is None or limit > left else limit for name, limit in timeouts.items()
    }
    return cut, cut != dict(timeouts)
