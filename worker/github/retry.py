"""When to retry a GitHub call, and for how long: bounded, and never on a plain 4xx.

Retried: 5xx and network failures (connect and read timeouts, refused and reset
connections; exponential backoff, capped), except a POST whose request may have
reached GitHub (``maybe_done``: it was sent and no answer came back): GitHub may
have created the comment or check run, and a second POST would make a second one,
so the caller finds what it made instead. Secondary rate limits (403/429 with
Retry-After) and the primary rate limit (until x-ratelimit-reset), each only
while the wait fits ``max_wait``. A wait longer than that fails the call at
once: a job that sleeps for an hour holds a worker and tells nobody, while a
recorded failure can be seen and retried.

Inside a deadline (``worker.github.deadline``) a retry is made only if its wait
and one more request fit in what is left; a retry that does not fit, or an attempt
whose timeout the deadline had shortened and that timed out, raises
``DeadlineExceeded`` instead of failing the call: the deadline, not GitHub's
answer, is what ended it.

What failed is read from the exception githubkit wraps, never from whether it
has a response: githubkit reports everything that fails inside a request (the
installation-token exchange's own 422, a rate limit on it, a JWT that cannot be
signed, even RQ's job timeout firing mid-request) as a bare ``RequestError``
around the real failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import httpx
from githubkit.exception import GitHubException, RateLimitExceeded, RequestError, RequestFailed
from githubkit.retry import RetryOption
from rq.timeouts import BaseTimeoutException

from worker.github import deadline
from worker.github.deadline import DeadlineExceeded


def unwrap(exc: BaseException) -> BaseException:
    """The failure itself: a GitHub answer (``RequestFailed``), an httpx transport error, or
    whatever else was raised inside the request, with githubkit's ``RequestError`` wrappers removed."""
    while isinstance(exc, RequestError) and not isinstance(exc, RequestFailed):
        exc = exc.exc
    return exc


#: Failures before anything was sent: GitHub cannot have acted on the request.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
#: How the path that mints installation tokens ends. Minting twice is harmless; every other POST
#: creates something.
MINT_PATH_END = "/access_tokens"


def maybe_done(cause: BaseException | None) -> bool:
    """True if a request was sent and no answer came back: GitHub may have acted on it."""
    return isinstance(cause, httpx.TransportError) and not isinstance(cause, _NOT_SENT)


def _creates(cause: httpx.TransportError) -> bool:
    try:
        sent = cause.request
    except RuntimeError:  # httpx raised it with no request attached: assume the worst
        return True
    return sent.method == "POST" and not sent.url.path.endswith(MINT_PATH_END)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: Longest rate-limit wait Baton sits out inside one call, in seconds.
    max_wait: float = 60.0

    def __call__(self, exc: GitHubException, retry_count: int) -> RetryOption:
        return self.decide(unwrap(exc), retry_count, deadline.remaining())

    def decide(self, cause: BaseException, retry_count: int, left: float | None) -> RetryOption:
        """Retry after the ``retry_count``-th failed retry, whose failure is ``cause``, with ``left``
        seconds left of the deadline (None: none)? Raises what must not be taken for GitHub's answer."""
        if isinstance(cause, BaseTimeoutException | DeadlineExceeded):
            # RQ stopped the job (its timeout) while it waited on GitHub, and githubkit wrapped that
            # as a failed request; or the deadline kept a request from being sent. Let it through:
            # the job must end `timed-out` or `github-deadline`, not "GitHub failed".
            raise cause
        if left is not None and _cut_short(cause):
            raise DeadlineExceeded(
                f"{_where(cause)}: {type(cause).__name__} as {deadline.describe()} ran out"
            ) from cause
        option = self._decide(cause, retry_count)
        wait = option.retry_after.total_seconds() if option.retry_after is not None else 0.0
        if option.do_retry and not deadline.fits(wait, left):
            asked = wait if isinstance(cause, RateLimitExceeded) else None
            raise DeadlineExceeded(
                f"{_where(cause)}: {_what_failed(cause)}; a retry in {wait:g} s would not fit in what is "
                f"left of {deadline.describe()}",
                retry_after=asked,
            ) from cause
        return option

    def _decide(self, cause: BaseException, retry_count: int) -> RetryOption:
        if retry_count >= self.max_retries:
            return RetryOption(False)
        if isinstance(cause, RateLimitExceeded):
            wait = cause.retry_after.total_seconds()
            return RetryOption(True, cause.retry_after) if wait <= self.max_wait else RetryOption(False)
        if isinstance(cause, RequestFailed):
            if cause.response.status_code < 500:
                return RetryOption(False)
            return RetryOption(True, self.backoff(retry_count))
        if isinstance(cause, httpx.TransportError):  # timeouts, refused, reset, protocol errors
            if maybe_done(cause) and _creates(cause):
                return RetryOption(False)
            return RetryOption(True, self.backoff(retry_count))
        return RetryOption(False)

    def backoff(self, retry_count: int) -> timedelta:
        return timedelta(seconds=min(self.max_delay, self.base_delay * 2**retry_count))

    def worst_case_seconds(self, request_timeout: float) -> float:
        """Upper bound on one call's duration, for job timeouts and the docs.

        ``request_timeout`` bounds one attempt (all the requests it makes)."""
        waits = max(self.max_wait, self.max_delay)
        return (self.max_retries + 1) * request_timeout + self.max_retries * waits


def _cut_short(cause: BaseException) -> bool:
    """A timeout of a request whose timeouts the deadline had shortened."""
    if not isinstance(cause, httpx.TimeoutException):
        return False
    try:
        return bool(cause.request.extensions.get(deadline.CUT))
    except RuntimeError:  # raised with no request attached
        return False


def _where(cause: BaseException) -> str:
    try:
        request = getattr(cause, "request", None)  # httpx raises RuntimeError when it has none
    except RuntimeError:
        request = None
    return f"{request.method} {request.url.path}" if isinstance(request, httpx.Request) else "GitHub request"


def _what_failed(cause: BaseException) -> str:
    if isinstance(cause, RequestFailed):
        return f"answered {cause.response.status_code}"
    return type(cause).__name__
