"""Start-to-exit of `true` in the box vs bare (target: box median <= 50 ms).

Run from the repository root:  python bench/box.py [--runs N]

Each case runs `true` N times (default 50, after 3 warm-up runs) and reports the
median and p90 wall time of the whole call as the worker makes it: for the box,
`box.run()` from building bwrap's arguments to the box's last process gone
(bwrap, namespaces, mounts, the check of its first process, Baton's init on the
box's python3 with its rlimits and seccomp filter, `true`); for bare,
`subprocess.run(["true"])`. The proxy case adds the init's forwarders (against a
stand-in socket nobody connects to); the supervised case asks for a memory and a
disk limit, which the supervisor measures from the host.

Then the supervisor's cost per sample: the memory of a box's processes (PSS) and
the disk of a workspace of 1,000, 10,000 and 100,000 files.
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
from worker.runner.supervise import disk_of, memory_of


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
        supervised = box.BoxSpec(argv=["true"], workspace=work, home=home, memory_bytes=1 << 30,
                                 max_disk_bytes=1 << 30)  # fmt: skip
        cases: dict[str, Callable[[], object]] = {
            "bare: subprocess.run(['true'])": lambda: subprocess.run(["true"], check=True),
            'box: network="none"': lambda: box.run(none),
            'box: network="proxy" (forwarders listening)': lambda: box.run(proxied),
            "box: memory and disk supervised": lambda: box.run(supervised),
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
        figures.update(supervisor_costs(Path(tmp)))
    print(json.dumps({"runs": args.runs, "cases": figures}))


def supervisor_costs(tmp: Path) -> dict[str, dict[str, float]]:
    """One sample's cost: memory over the processes of a running box, disk over workspaces."""
    figures = {}
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(4)]  # as many as a small agent's
    pids = [os.getpid(), *(p.pid for p in sleepers)]
    times = timed(lambda: memory_of(pids), 200)
    name = f"supervisor: memory of {len(pids)} processes"
    figures[name] = {"median_ms": round(statistics.median(times), 3)}
    print(f"{name:45} median {statistics.median(times):6.3f} ms")
    for sleeper in sleepers:
        sleeper.kill()
        sleeper.wait()
    for count in (1_000, 10_000, 100_000):
        tree = tmp / f"tree-{count}"
        for n in range(count):
            directory = tree / f"d{n // 1000}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"f{n}").write_bytes(b"x" * (n % 3000))
        times = timed(lambda tree=tree: disk_of([tree]), 5)  # type: ignore[misc]
        name = f"supervisor: disk of {count:,} files"
        figures[name] = {"median_ms": round(statistics.median(times), 2)}
        print(f"{name:45} median {statistics.median(times):8.2f} ms")
    return figures


if __name__ == "__main__":
    main()
