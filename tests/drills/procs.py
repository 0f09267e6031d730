"""What the real-process drills share: the process table read from /proc, bounded waits, the
worker pool as a context manager (``tests.worker.conftest.Workers``), and which task a worker runs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Worker
from rq.serializers import JSONSerializer

from tests.conftest import EvidenceKeys
from tests.worker.conftest import Stage, Workers
from worker.runs import admit

#: The environment variable that marks every process a drill's worker starts (and what they
#: fork and spawn, unless it scrubs its environment), so that an orphan can be found by it.
MARK = "DRILL_WORKER"


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # the start time in clock ticks: (pid, start) names one process, pids are reused
    ppid: int
    cmdline: str


def processes() -> dict[int, Proc]:
    """Every live (non-zombie) process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[-1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            pid = int(entry.name)
            found[pid] = Proc(pid, int(fields[19]), int(fields[1]), cmdline.strip())
    return found


def descendants(pid: int, table: dict[int, Proc] | None = None) -> list[Proc]:
    table = processes() if table is None else table
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    frontier = [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child.pid)
    return found


def alive(procs: list[Proc]) -> list[Proc]:
    """Those of ``procs`` still alive (the same process: pid and start time)."""
    table = processes()
    return [p for p in procs if (now := table.get(p.pid)) is not None and now.start == p.start]


def marked(values: set[str]) -> list[tuple[Proc, str]]:
    """Live processes whose environment has ``MARK`` set to one of ``values``."""
    found = []
    for proc in processes().values():
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            name, _, value = item.decode(errors="replace").partition("=")
            if name == MARK and value in values:
                found.append((proc, value))
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, log: Callable[[], str] = str) -> float:
    """Poll ``predicate`` until it holds (bounded); returns the seconds it took."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{log()}")
        time.sleep(0.2)
    return time.monotonic() - started


@contextlib.contextmanager
def worker_pool(stage: Stage, redis_url: str, tmp_path: Path, keys: EvidenceKeys) -> Iterator[Workers]:
    """``tests.worker.conftest.Workers``, every process killed and reaped on the way out."""
    pool = Workers(stage, redis_url, tmp_path, keys)
    try:
        yield pool
    finally:
        for proc in pool.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def running_task(rdb: redis.Redis, pid: int) -> str | None:
    """The task the RQ worker with this pid runs now (its current job's task), if any."""
    for worker in Worker.all(connection=rdb, serializer=JSONSerializer):
        if worker.pid == pid:
            job = worker.get_current_job_id()
            return admit.task_id_of(job) if job else None
    return None


def registered(rdb: redis.Redis, pids: set[int]) -> bool:
    """Have the RQ workers with these pids registered (so they are taking jobs)?"""
    return pids <= {w.pid for w in Worker.all(connection=rdb, serializer=JSONSerializer)}


def worker_env(name: str) -> dict[str, str]:
    return {MARK: name}


def children(pid: int) -> list[Proc]:
    return [p for p in processes().values() if p.ppid == pid]
