"""Every GitHub call is bounded in time, the installation-token exchange included, and so is a
whole task's: one deadline for all its calls (``worker.github.deadline``).

The GitHub here is frozen: a loopback TCP server that accepts every connection and never
answers a byte (or the emulator holding requests unanswered, its ``freeze``). Each call must
fail with a GitHubError within the bound that the configured timeout and the retry policy give,
and never wait for RQ's job timeout; inside a deadline, it fails with ``DeadlineExceeded`` when
the deadline runs out, having made no retry the deadline could not hold.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

import httpx
import pytest
import redis

from emulator import world
from tests.worker.conftest import Stage
from worker.github import api, deadline
from worker.github.client import AppCredentials, GitHubApp, GitHubError
from worker.github.deadline import DeadlineExceeded
from worker.github.retry import RetryPolicy

#: Seconds, for each of connect, write, read and pool: a frozen call costs one read timeout.
TIMEOUT = 0.5
POLICY = RetryPolicy(max_retries=2, base_delay=0.05, max_delay=0.1, max_wait=1.0)
#: An installation call may make two requests per attempt (the token exchange, then the call),
#: each bounded by connect + write + read + pool.
BOUND = POLICY.worst_case_seconds(2 * 4 * TIMEOUT)


class FrozenGitHub:
    """Accepts connections and holds them, silent, until closed (at most ``lifetime`` seconds)."""

    def __init__(self, lifetime: float = 60.0) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._deadline = time.monotonic() + lifetime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self._held.append(conn)
            self.accepted += 1

    def __enter__(self) -> FrozenGitHub:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._listener.close()


def bounded(call: Callable[[], object], limit: float) -> tuple[BaseException | None, float]:
    """Run ``call`` in a thread; fail the test if it is still waiting after ``limit`` seconds."""
    outcome: dict[str, object] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            call()
        except BaseException as exc:
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        pytest.fail(f"the call was still waiting for GitHub after {limit:.1f} s")
    error = outcome.get("error")
    assert error is None or isinstance(error, BaseException)
    elapsed = outcome["elapsed"]
    assert isinstance(elapsed, float)
    return error, elapsed


def frozen_app(url: str, rdb: redis.Redis) -> GitHubApp:
    private_key, _ = world.keypair()
    return GitHubApp(AppCredentials("1001", private_key, url), rdb, timeout=TIMEOUT, retry=POLICY)


def assert_timed_out(error: BaseException | None, elapsed: float, frozen: FrozenGitHub, path: str) -> None:
    assert isinstance(error, GitHubError), repr(error)
    assert error.code == "github-call-failed"
    assert path in error.message
    assert "Timeout" in error.message
    assert "\n" not in error.message
    assert (error.status, error.retry_after) == (None, None)
    attempts = POLICY.max_retries + 1
    assert frozen.accepted == attempts  # each attempt was cut off by the read timeout, then retried
    assert attempts * TIMEOUT * 0.9 <= elapsed < BOUND


def test_the_installation_token_exchange_times_out(rdb: redis.Redis) -> None:
    with FrozenGitHub() as frozen:
        app = frozen_app(frozen.url, rdb)
        client = app.for_repository(1008, world.REPO, "read")
        error, elapsed = bounded(lambda: api.repo_head(client, world.REPO), BOUND)
    assert_timed_out(error, elapsed, frozen, "/app/installations/1008/access_tokens")
    assert app.worst_case_seconds() == BOUND  # what job timeouts can be derived from


def test_an_app_jwt_call_times_out(rdb: redis.Redis) -> None:
    with FrozenGitHub() as frozen:
        app = frozen_app(frozen.url, rdb)
        error, elapsed = bounded(lambda: api.request(app.app, "GET", "/app/installations"), BOUND)
    assert_timed_out(error, elapsed, frozen, "/app/installations")


def test_every_client_needs_a_finite_timeout(rdb: redis.Redis) -> None:
    private_key, _ = world.keypair()
    with pytest.raises(ValueError, match="timeout"):
        GitHubApp(AppCredentials("1", private_key), rdb, timeout=httpx.Timeout(5.0, read=None))


# -- one deadline for a whole task's calls (worker.github.deadline) ------------------------------------

#: Long enough that a frozen request is cut by the deadline, not by its own read timeout.
SLOW = 2.0


def slow_app(url: str, rdb: redis.Redis, policy: RetryPolicy = POLICY) -> GitHubApp:
    private_key, _ = world.keypair()
    return GitHubApp(AppCredentials("1001", private_key, url), rdb, timeout=SLOW, retry=policy)


def test_a_deadline_ends_a_frozen_call_when_it_runs_out(rdb: redis.Redis) -> None:
    """3.5 s: the first attempt waits its whole 2 s read timeout; the retry gets the 1.45 s left."""
    limit = 3.5
    with FrozenGitHub() as frozen:
        app = slow_app(frozen.url, rdb)
        client = app.for_repository(1008, world.REPO, "read")

        def call() -> None:
            with deadline.within(limit):
                api.repo_head(client, world.REPO)

        error, elapsed = bounded(call, limit + 5)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert error.code == "github-deadline"
    assert "/app/installations/1008/access_tokens" in error.message
    assert "3.5 s deadline" in error.message
    assert frozen.accepted == 2  # no third attempt: the deadline left no time for it
    assert limit * 0.95 <= elapsed < limit + 1.0
    assert elapsed < POLICY.worst_case_seconds(SLOW)  # what the call alone would have been allowed


def test_no_request_is_sent_with_less_than_the_least_attempt_left(rdb: redis.Redis) -> None:
    with FrozenGitHub() as frozen:
        app = slow_app(frozen.url, rdb)

        def call() -> None:
            with deadline.within(deadline.MIN_ATTEMPT_S / 2):
                api.request(app.app, "GET", "/app/installations")

        error, elapsed = bounded(call, 5)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert "GET /app/installations: not sent" in error.message
    assert frozen.accepted == 0
    assert elapsed < 0.5


def test_a_retry_that_would_not_fit_is_not_made(rdb: redis.Redis) -> None:
    """The first attempt times out at 2 s; its retry would wait 2 s more, and 4 s are not left."""
    patient = RetryPolicy(max_retries=3, base_delay=2.0, max_delay=2.0, max_wait=1.0)
    with FrozenGitHub() as frozen:
        app = slow_app(frozen.url, rdb, patient)

        def call() -> None:
            with deadline.within(4.5):
                api.request(app.app, "GET", "/app/installations")

        error, elapsed = bounded(call, 10)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert "a retry in 2 s would not fit" in error.message
    assert frozen.accepted == 1
    assert SLOW * 0.95 <= elapsed < SLOW + 1.0


def test_a_deadline_bounds_many_calls_whose_every_answer_comes_late(stage: Stage, rdb: redis.Redis) -> None:
    """Each call is answered, but only on its third attempt (the first two are held unanswered): each
    call alone stays within its budget, and together they would take 3 x 4.2 s. The deadline ends
    them at 6 s, and the call it stopped names it."""
    private_key = stage.world.private_key
    app = GitHubApp(AppCredentials(str(stage.world.app_id), private_key, stage.server.url), rdb,
                    timeout=SLOW, retry=POLICY)  # fmt: skip
    client = app.for_repository(stage.world.installation_id, world.REPO, "read")
    api.request(client, "GET", f"/repos/{world.REPO}")  # the token, minted before the freeze
    paths = [f"/repos/{world.REPO}", f"/repos/{world.REPO}/branches/main",
             f"/repos/{world.REPO}/collaborators/maria/permission"]  # fmt: skip
    for path in paths:
        stage.admin.add_fault(path, kind="freeze", count=2, latency_ms=int(2 * SLOW * 1000))
    limit = 6.0
    answered: list[str] = []

    def calls() -> None:
        with deadline.within(limit):
            for path in paths:
                api.request(client, "GET", path)
                answered.append(path)

    error, elapsed = bounded(calls, limit + 10)
    assert isinstance(error, DeadlineExceeded), repr(error)
    assert answered == paths[:1]  # the first call got its answer, 4.15 s in; the second ran out
    assert f"GET {paths[1]}" in error.message
    assert limit * 0.95 <= elapsed < limit + 1.0
