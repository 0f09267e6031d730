"""Renewing something (a lease, a lock, RQ's heartbeats) while a blocking call runs.

A renewed thing can expire soon, so a holder that dies (SIGKILL, a lost machine)
holds it only briefly, while a living holder keeps it for as long as its call
takes. One daemon thread per block; it never outlives the block by more than one
interval, and a process that dies takes it along.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every(interval_s: float, renew: Callable[[], bool], *, name: str) -> Iterator[None]:
    """Call ``renew`` every ``interval_s`` seconds while the block runs, until it returns False
    (nothing left to renew). ``renew`` handles its own errors: one that escapes ends the renewals."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(interval_s):
            if not renew():
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=interval_s)
