"""Primary rate limits: ``x-ratelimit-*`` headers on every answer, per credential, per hour.

GitHub counts requests per installation (or App, or anonymous IP) in a rolling
hourly window and answers 403 once the budget is spent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

WINDOW_SECONDS = 3600
ANONYMOUS_LIMIT = 60


@dataclass
class Window:
    limit: int
    used: int
    reset: int


class RateLimiter:
    def __init__(self) -> None:
        self._windows: dict[str, Window] = {}
        self._lock = threading.Lock()

    def hit(self, key: str, limit: int) -> Window:
        """Count one request; the returned window says whether budget remains."""
        now = int(time.time())
        limit = _limit(key, limit)
        with self._lock:
            window = self._windows.get(key)
            if window is None or window.reset <= now:
                window = Window(limit=limit, used=0, reset=now + WINDOW_SECONDS)
                self._windows[key] = window
            window.limit = limit
            window.used += 1
            return Window(window.limit, window.used, window.reset)

    def refund(self, key: str, limit: int) -> Window:
        """Take back one counted request: GitHub does not count a conditional request answered 304."""
        now = int(time.time())
        with self._lock:
            window = self._windows.get(key)
            if window is None or window.reset <= now:  # the window it was counted in is gone
                return Window(limit=_limit(key, limit), used=0, reset=now + WINDOW_SECONDS)
            window.used = max(0, window.used - 1)
            return Window(window.limit, window.used, window.reset)

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()


def _limit(key: str, limit: int) -> int:
    """Unauthenticated callers get GitHub's 60 an hour whatever the setting."""
    return ANONYMOUS_LIMIT if key == "anonymous" else limit


def headers(window: Window) -> dict[str, str]:
    return {
        "x-ratelimit-limit": str(window.limit),
        "x-ratelimit-remaining": str(max(0, window.limit - window.used)),
        "x-ratelimit-reset": str(window.reset),
        "x-ratelimit-used": str(min(window.used, window.limit)),
        "x-ratelimit-resource": "core",
    }
