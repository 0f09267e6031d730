"""Write-behind for ``state.json``: changes are saved at most ``FLUSH_DELAY_SECONDS`` later.

Dumping the whole state on every request cost most of the emulator's CPU
(260 KB of JSON per call after the demo). Instead the first change after a save
arms one timer on the event loop that made it; when it fires, the state is
saved once, however many changes came in between. Stopping the server (and
the CLI's SIGINT/SIGTERM) flushes, so only a hard kill loses anything: the
changes of at most the last ``delay`` (plus any time the event loop spends
blocked in a handler before the timer can run). The delay is ``FLUSH_DELAY_SECONDS``
or, once the state is large, ``SAVE_SHARE`` times the last save's duration (at
most ``MAX_DELAY_SECONDS``), so saving never takes more than a tenth of the
emulator's time however large a benchmark makes the state.

The timer runs on the loop that mutates the state, so the dump never races a
handler that is half-way through changing a dict.
"""

from __future__ import annotations

import asyncio
import threading
import time

from emulator.state import State

#: How long a change may wait in memory before ``state.json`` is rewritten.
FLUSH_DELAY_SECONDS = 0.2
#: A save may take this share of the time between saves, at most.
SAVE_SHARE = 0.1
MAX_DELAY_SECONDS = 2.0


class Persister:
    """Saves ``state`` once per burst of changes, and on demand (``flush``)."""

    def __init__(self, state: State, delay: float = FLUSH_DELAY_SECONDS) -> None:
        self.state = state
        self.base_delay = self.delay = delay
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def dirty(self) -> bool:
        return self._dirty

    def changed(self) -> None:
        """Note a change; it reaches disk within ``delay`` (at once when no loop is running here)."""
        loop = _running_loop()
        if loop is None:
            self._dirty = True
            self.flush()
            return
        with self._lock:
            self._dirty = True
            if self._timer is None or self._timer_loop is not loop:  # none armed, or on a loop now gone
                self._timer, self._timer_loop = loop.call_later(self.delay, self._fire), loop

    def _fire(self) -> None:
        with self._lock:
            self._timer, self._timer_loop = None, None
        self.flush()

    def flush(self) -> None:
        """Write now if anything changed since the last write (idempotent, cheap when clean)."""
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
        started = time.monotonic()
        try:
            self.state.save()
        except BaseException:
            self._dirty = True  # try again on the next change or flush
            raise
        took = time.monotonic() - started
        self.delay = min(MAX_DELAY_SECONDS, max(self.base_delay, took / SAVE_SHARE))

    def close(self) -> None:
        """Disarm the timer and write what is left (server shutdown; any thread, loop running or not).

        The timer is cancelled only from its own loop: another thread must not touch it.
        """
        with self._lock:
            timer, loop = self._timer, self._timer_loop
            self._timer, self._timer_loop = None, None
        if timer is not None and _running_loop() is loop:
            timer.cancel()
        self.flush()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
