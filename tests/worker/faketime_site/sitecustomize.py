"""Loaded only by the test processes ``tests/worker/test_clock_skew.py`` runs under libfaketime (this
directory is on their PYTHONPATH, and nowhere else).

Python 3.11's ``time.sleep`` waits with ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)``, which
libfaketime 0.9.10 (Debian 12's) turns into EINVAL when it leaves the monotonic clock alone
(wolfcw/libfaketime#426, fixed after 0.9.10). A lock's timed wait is not affected, so sleeping
waits on one. The process's wall clock stays skewed; that is all the tests want of libfaketime.
"""

from __future__ import annotations

import os
import threading
import time

if os.environ.get("FAKETIME") and os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1":

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        threading.Event().wait(seconds)

    time.sleep = _sleep
