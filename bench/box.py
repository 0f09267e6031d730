"""Start-to-exit of `true` in the box vs bare (target: box median <= 50 ms).

Run from the repository root:  python bench/box.py [--runs N]

Each case runs `true` N times (default 50, after 3 warm-up runs) and reports the
median and p90 wall time of the whole call as the worker makes it: for the box,
`box.run()` from building bwrap's arguments to the box's last process gone
(bwrap, namespaces, mounts, the check of its first process, prlimit, `true`);
for bare, `subprocess.run(["true"])`. The proxy case adds the socat forwarder
the box starts, and waits for, before the agent (against a stand-in socket
nobody connects to).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.runner import box


def timed(call: Callable[[], object], runs: int) -> list[float]:
    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton-bench-box-") as tmp:
        work, home, sock_path = Path(tmp, "w"), Path(tmp, "h"), Path(tmp, "p.sock")
        work.mkdir()
        home.mkdir()
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(sock_path))
        listener.listen()
        none = box.BoxSpec(argv=["true"], workspace=work, home=home)
        proxied = box.BoxSpec(
            argv=["true"], workspace=work, home=home, network="proxy", proxy_socket=sock_path
        )
        cases: dict[str, Callable[[], object]] = {
            "bare: subprocess.run(['true'])": lambda: subprocess.run(["true"], check=True),
            'box: network="none"': lambda: box.run(none),
            'box: network="proxy" (forwarder started)': lambda: box.run(proxied),
        }
        machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        print(f"{machine}, runs={args.runs}")
        figures = {}
        for name, call in cases.items():
            times = timed(call, args.runs)
            p90 = statistics.quantiles(times, n=10)[-1]
            print(f"{name:45} median {statistics.median(times):6.2f} ms   p90 {p90:6.2f} ms")
            figures[name] = {"median_ms": round(statistics.median(times), 2), "p90_ms": round(p90, 2)}
        listener.close()
    print(json.dumps({"runs": args.runs, "cases": figures}))


if __name__ == "__main__":
    main()
