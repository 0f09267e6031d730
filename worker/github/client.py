"""The GitHub App client: JWT, installation tokens narrowed per job, shared via Redis.

githubkit does the protocol (the RS256 JWT with a string ``iss``, ``iat`` a
minute back and ``exp`` within ten minutes; the token exchange). Baton adds:
tokens narrowed to the one repository and the permissions the job needs,
cached in Redis so every worker shares them until shortly before expiry; a
time bound on every call; the bounded retry policy; and invalidation when an
installation changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import redis
from githubkit import AppAuthStrategy, GitHub
from githubkit.cache.redis import RedisCache, RedisCacheStrategy

from bot.errors import BatonError
from worker.github.retry import RetryPolicy

CACHE_PREFIX = "baton:github"
USER_AGENT = "Baton (+https://github.com/apps/baton)"

#: What each kind of job may do with its token; nothing more is ever asked for.
PERMISSIONS: dict[str, dict[str, str]] = {
    "read": {"metadata": "read", "contents": "read"},
    "report": {"metadata": "read", "contents": "read", "issues": "write", "checks": "write"},
    "push": {
        "metadata": "read",
        "contents": "write",
        "issues": "write",
        "pull_requests": "write",
        "checks": "write",
    },
}


class _TokenCache(RedisCache):
    """githubkit's Redis cache, minus one failure: a token minted with under a
    minute of life gets a zero or negative expiry, which Redis refuses. Such a
    token is used for this call and simply not cached."""

    def set(self, key: str, value: str, ex: timedelta) -> None:
        if ex.total_seconds() >= 1:
            super().set(key, value, ex)


class _TokenCacheStrategy(RedisCacheStrategy):
    def get_cache_storage(self) -> RedisCache:
        return _TokenCache(self.client, self.prefix)


class GitHubError(BatonError):
    """A GitHub call failed after its retries; the message says which and why."""


@dataclass(frozen=True, slots=True)
class AppCredentials:
    app_id: str
    private_key: str = field(repr=False)
    api_url: str = "https://api.github.com"


class GitHubApp:
    def __init__(
        self,
        credentials: AppCredentials,
        cache: redis.Redis,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.credentials = credentials
        self.retry = retry or RetryPolicy()
        self._redis = cache
        self._app: GitHub[AppAuthStrategy] = GitHub(
            AppAuthStrategy(credentials.app_id, credentials.private_key),
            base_url=credentials.api_url,
            user_agent=USER_AGENT,
            timeout=timeout,
            cache_strategy=_TokenCacheStrategy(cache, prefix=CACHE_PREFIX),
            http_cache=False,
            auto_retry=self.retry,
        )

    @property
    def app(self) -> GitHub[AppAuthStrategy]:
        """Authenticated as the App itself (JWT): app and installation lookups only."""
        return self._app

    def for_repository(self, installation_id: int, full_name: str, access: str) -> GitHub[Any]:
        """A client whose token reaches only ``full_name``, with ``access`` (a PERMISSIONS key)."""
        permissions = PERMISSIONS[access]
        name = full_name.split("/", 1)[1]
        return self._app.with_auth(
            self._app.auth.as_installation(installation_id, repositories=[name], permissions=permissions)  # type: ignore[arg-type]
        )

    def invalidate(self, installation_id: int) -> int:
        """Forget every cached token of an installation (it changed or was removed)."""
        pattern = f"{CACHE_PREFIX}:*installation:{installation_id}:*"
        keys = list(self._redis.scan_iter(match=pattern, count=500))
        return int(self._redis.delete(*keys)) if keys else 0


def error_detail(exc: Exception) -> str:
    """A one-line account of a failed call: method, path, status and GitHub's message."""
    response = getattr(exc, "response", None)
    request = getattr(exc, "request", None)
    where = f"{request.method} {request.url.path}" if request is not None else "GitHub request"
    if response is None:
        return f"{where}: {type(exc).__name__}: {exc}"
    message = ""
    try:
        body: Mapping[str, Any] | Any = response.json()
        if isinstance(body, Mapping):
            message = str(body.get("message", ""))
    except ValueError:
        pass
    return f"{where}: {response.status_code} {message}".rstrip()
