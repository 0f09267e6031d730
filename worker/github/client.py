"""The GitHub App client: JWT, installation tokens narrowed per job, shared via Redis.

githubkit does the protocol (the RS256 JWT with a string ``iss``, ``iat`` a
minute back and ``exp`` within ten minutes; the token exchange). Baton adds:
tokens narrowed to the one repository and the permissions the job needs,
shared through Redis sealed under the App's key (``worker.github.tokens``; the
JWT never leaves the process); a time bound on every request, the token
exchange included; the bounded retry policy; invalidation when an installation
changes; and one connection pool per process for all of it (``transport``).

Timeouts: githubkit gives its ``timeout`` to the httpx client, and httpx applies
a client's timeout only to the request it was asked to send. The token
exchange is a second request, yielded by githubkit's auth flow inside that
send, and would go out with no timeout at all: a GitHub that accepts the
connection and never answers held the job until RQ's job timeout. A request
hook gives every request the client sends the same timeouts, each cut to what is
left of the work's deadline, if it has one (``worker.github.deadline``); with too
little left, the request is not sent.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis
from githubkit import AppAuthStrategy, GitHub
from githubkit.exception import GitHubException, RequestFailed

from baton import keys
from baton.errors import BatonError
from worker.github import deadline, transport
from worker.github.retry import MINT_PATH_END, RetryPolicy, unwrap
from worker.github.tokens import SealedTokenCache, SealedTokenStrategy

CACHE_PREFIX = keys.GITHUB_TOKENS_PREFIX
USER_AGENT = "Baton (+https://github.com/apps/baton)"

#: Per request. Connect (TCP and TLS): api.github.com answers in well under a second, so 5 s
#: fails a black-holed route fast. Read, write: GitHub ends any REST request it has worked on
#: for 10 s with an error, so waiting longer for a byte only waits for a GitHub that is gone.
#: Pool: a free connection from our own client (no contention: one call at a time per client).
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0, pool=5.0)

#: Every client of this process sends through one pool (``worker.github.transport``).
_TRANSPORT = transport.SharedTransport()

#: What each kind of job may do with its token; nothing more is ever asked for.
PERMISSIONS: dict[str, dict[str, str]] = {
    "read": {"metadata": "read", "contents": "read"},
    "report": {"metadata": "read", "contents": "read", "issues": "write", "checks": "write"},
    # The merge gate: read the pull request and its code, write its check run.
    "gate": {"metadata": "read", "contents": "read", "pull_requests": "read", "checks": "write"},
    # An umbrella: sub-issues made and labelled; its table read (sub-issues, pull requests, gates).
    "split": {"metadata": "read", "issues": "write"},
    "umbrella": {"metadata": "read", "issues": "write", "pull_requests": "read", "checks": "read"},
    # A follow-up: the pull request and its reviews read; Baton's replies in its review threads.
    "conversation": {"metadata": "read", "pull_requests": "read"},
    "reply": {"metadata": "read", "pull_requests": "write"},
    # Opening or updating a run's PR and its checks. Pushing is git's, with its own token (git_token).
    "pull-request": {
        "metadata": "read",
        "contents": "read",
        "issues": "write",
        "pull_requests": "write",
        "checks": "write",
    },
}


class GitHubError(BatonError):
    """A GitHub call failed after its retries; the message says which and why.

    ``status`` is GitHub's HTTP status when it answered (None: no answer, e.g. a timeout).
    ``retry_after`` is how many seconds GitHub asked Baton to wait before trying again: its
    ``Retry-After`` on a 403/429, or the time until ``x-ratelimit-reset`` once the primary
    rate limit is spent; None when GitHub named no time.
    """

    def __init__(
        self, code: str, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(code, message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class AppCredentials:
    app_id: str
    private_key: str = field(repr=False)
    api_url: str = "https://api.github.com"


def _bounded(timeout: httpx.Timeout) -> Callable[[httpx.Request], None]:
    """A request hook giving every request the client's timeouts, the token exchange included,
    each cut to what is left of the deadline; with too little left, the request is not sent."""
    limits = timeout.as_dict()

    def hook(request: httpx.Request) -> None:
        left = deadline.remaining()
        if not deadline.fits(0.0, left):
            raise deadline.DeadlineExceeded(
                f"{request.method} {request.url.path}: not sent, {deadline.describe()} ran out"
            )
        cut, shortened = deadline.limits(request.extensions.get("timeout", limits), left)
        request.extensions["timeout"] = cut
        if shortened:
            request.extensions[deadline.CUT] = True

    return hook


class GitHubApp:
    def __init__(
        self,
        credentials: AppCredentials,
        cache: redis.Redis,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.credentials = credentials
        self.retry = retry or RetryPolicy()
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        limits = (self.timeout.connect, self.timeout.write, self.timeout.read, self.timeout.pool)
        if any(limit is None or limit <= 0 for limit in limits):
            raise ValueError(f"every GitHub request needs a finite timeout, got {self.timeout}")
        #: Longest one request can wait without a byte moving (each phase at its limit).
        self.request_seconds = sum(limit for limit in limits if limit is not None)
        self._redis = cache
        tokens = SealedTokenCache(cache, CACHE_PREFIX, credentials.private_key)
        self._app: GitHub[AppAuthStrategy] = GitHub(
            AppAuthStrategy(credentials.app_id, credentials.private_key),
            base_url=credentials.api_url,
            user_agent=USER_AGENT,
            timeout=self.timeout,
            event_hooks={"request": [_bounded(self.timeout)], "response": [transport.count]},
            transport=_TRANSPORT,
            cache_strategy=SealedTokenStrategy(tokens),
            http_cache=False,
            auto_retry=self.retry,
        )

    @property
    def app(self) -> GitHub[AppAuthStrategy]:
        """Authenticated as the App itself (JWT): app and installation lookups only."""
        return self._app

    def worst_case_seconds(self) -> float:
        """Upper bound on one call through this App, retries and waits included (for job timeouts).

        An attempt of an installation call may make two requests: the token exchange, then the
        call. Not covered: a GitHub that keeps sending a byte just inside each read timeout."""
        return self.retry.worst_case_seconds(2 * self.request_seconds)

    def for_repository(self, installation_id: int, full_name: str, access: str) -> GitHub[Any]:
        """A client whose token reaches only ``full_name``, with ``access`` (a PERMISSIONS key)."""
        permissions = PERMISSIONS[access]
        name = full_name.split("/", 1)[1]
        return self._app.with_auth(
            self._app.auth.as_installation(installation_id, repositories=[name], permissions=permissions)  # type: ignore[arg-type]
        )

    def git_token(self, installation_id: int, full_name: str, *, write: bool = False) -> str:
        """A fresh installation token for git alone: ``contents`` read (or write) on ``full_name``.

        Minted for one fetch or one push and never cached: it reaches git through that one
        process's environment (``worker.runs.mirror``), so the narrowest token is the right one."""
        path = f"/app/installations/{installation_id}/access_tokens"
        body = {"repositories": [full_name.split("/", 1)[1]],
                "permissions": {"contents": "write" if write else "read"}}  # fmt: skip
        try:
            data = self._app.request("POST", path, json=body).json()
        except GitHubException as exc:
            raise github_error(exc, f"minting a git token for {full_name}") from unwrap(exc)
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise GitHubError("token-refused", f"GitHub answered no token for {full_name}")
        return token

    def invalidate(self, installation_id: int) -> int:
        """Forget every cached token of an installation (it changed or was removed)."""
        pattern = f"{CACHE_PREFIX}:*installation:{installation_id}:*"
        keys = list(self._redis.scan_iter(match=pattern, count=500))
        return int(self._redis.delete(*keys)) if keys else 0


# -- what failed ------------------------------------------------------------------------------


def github_error(exc: GitHubException, what: str) -> GitHubError:
    """The GitHubError for a call that failed (after its retries): a stable code, a one-line
    message, GitHub's status and when to come back. Raise it ``from unwrap(exc)``.

    Codes: ``token-refused`` when GitHub would not mint the installation token (a 4xx from
    the token endpoint that is not a rate limit: repository or permission outside the
    installation, installation suspended or gone, JWT refused); else ``github-call-failed``.
    """
    cause = unwrap(exc)
    status: int | None = None
    retry_after: float | None = None
    code = "github-call-failed"
    if isinstance(cause, RequestFailed):
        status = cause.response.status_code
        retry_after = retry_after_seconds(status, cause.response.headers)
        refused = 400 <= status < 500 and status != 429 and retry_after is None
        if refused and cause.request.url.path.endswith(MINT_PATH_END):  # a refusal to mint
            code = "token-refused"
    return GitHubError(code, f"{what}: {error_detail(exc)}", status=status, retry_after=retry_after)


def retry_after_seconds(status: int, headers: Mapping[str, str]) -> float | None:
    """Seconds GitHub asked for before the next attempt, if it named a time (403/429 only)."""
    if status not in (403, 429):
        return None
    if (value := headers.get("retry-after")) is not None:
        return _seconds_until(value, relative=True)
    reset = headers.get("x-ratelimit-reset")
    if headers.get("x-ratelimit-remaining") == "0" and reset is not None:
        return _seconds_until(reset, relative=False)
    return None


def _seconds_until(value: str, *, relative: bool) -> float | None:
    """A ``Retry-After`` (seconds, or an HTTP date) or an epoch time, as seconds from now."""
    try:
        number = float(value)
    except ValueError:
        try:
            number = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return None
        relative = False
    if not math.isfinite(number):
        return None
    return max(0.0, number if relative else number - time.time())


def error_detail(exc: BaseException) -> str:
    """A one-line account of a failed call: method, path, and status with GitHub's message,
    or what went wrong on the way (``ReadTimeout: timed out``)."""
    cause = unwrap(exc)
    where = "GitHub request"
    try:
        request = getattr(cause, "request", None)  # httpx raises RuntimeError when it has none
    except RuntimeError:
        request = None
    if isinstance(request, httpx.Request):
        where = f"{request.method} {request.url.path}"
    if isinstance(cause, RequestFailed):
        message = ""
        try:
            body: Mapping[str, Any] | Any = cause.response.json()
            if isinstance(body, Mapping):
                message = str(body.get("message", ""))
        except ValueError:
            pass
        text = f"{where}: {cause.response.status_code} {message}"
    else:
        text = f"{where}: {type(cause).__name__}: {cause}"
    return _one_line(text)


def _one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
