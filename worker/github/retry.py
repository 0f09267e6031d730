"""When to retry a GitHub call, and for how long: bounded, and never on a plain 4xx.

Retried: 5xx and network failures (exponential backoff, capped), secondary rate
limits (403/429 with Retry-After) and the primary rate limit (until
x-ratelimit-reset), each only while the wait fits ``max_wait``. A wait longer
than that fails the call at once: a job that sleeps for an hour holds a worker
and tells nobody, while a recorded failure can be seen and retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from githubkit.exception import GitHubException, RateLimitExceeded, RequestError, RequestFailed
from githubkit.retry import RetryOption


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: Longest rate-limit wait Baton sits out inside one call, in seconds.
    max_wait: float = 60.0

    def __call__(self, exc: GitHubException, retry_count: int) -> RetryOption:
        if retry_count >= self.max_retries:
            return RetryOption(False)
        if isinstance(exc, RateLimitExceeded):
            wait = exc.retry_after.total_seconds()
            return RetryOption(True, exc.retry_after) if wait <= self.max_wait else RetryOption(False)
        if isinstance(exc, RequestFailed):
            if exc.response.status_code < 500:
                return RetryOption(False)
            return RetryOption(True, self.backoff(retry_count))
        if isinstance(exc, RequestError):  # connection refused, reset, timeout
            return RetryOption(True, self.backoff(retry_count))
        return RetryOption(False)

    def backoff(self, retry_count: int) -> timedelta:
        return timedelta(seconds=min(self.max_delay, self.base_delay * 2**retry_count))

    def worst_case_seconds(self, request_timeout: float) -> float:
        """Upper bound on one call's duration, for job timeouts and the docs."""
        waits = max(self.max_wait, self.max_delay)
        return (self.max_retries + 1) * request_timeout + self.max_retries * waits
