"""The box's supervisor: memory and disk measured from the host, for limits the kernel does not hold.

Where the machine delegates a cgroup v2 group, ``memory.max`` holds the box's memory and this
only reads what the kernel did. Elsewhere (cgroup v1, containers without delegation) the
supervisor sums the memory of every process in the box's pid namespace (PSS, so pages shared
between them count once) and the disk its workspace, HOME and /tmp take, and says when one
passed its limit; the box then kills its whole pid namespace.

It samples, so it can be passed for up to one interval: memory every :data:`MEMORY_EVERY_S`,
disk every :data:`DISK_EVERY_S` or ten times as long as the last walk took, whichever is longer
(a workspace of a million files costs a second to walk; the box must not spend its time being
measured). Each file counts at least one block of :data:`MIN_FILE_BYTES`, so a flood of empty
files fills the limit too. What it spent measuring is in :attr:`Supervisor.spent_s`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MEMORY_EVERY_S = 0.25
DISK_EVERY_S = 1.0
#: A disk walk may take this share of the box's time at most (the interval grows to keep it).
DISK_SHARE = 0.1
MIN_FILE_BYTES = 4096
_PAGE = os.sysconf("SC_PAGE_SIZE")

Kind = Literal["memory", "disk"]


def size(n: int) -> str:
    """Bytes as people write them: 4 GiB, 512 MiB, 1.5 GiB, 900 KiB."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Limit:
    """A limit the box passed: which, the limit, what was measured, and what held it."""

    kind: Kind
    limit_bytes: int
    used_bytes: int
    mechanism: Literal["supervisor", "cgroup"]
    #: A directory of the box's that could not be measured (the box is stopped for it: fail closed).
    unmeasured: str = ""

    def describe(self) -> str:
        what = {"memory": "memory", "disk": "disk (workspace, HOME and /tmp)"}[self.kind]
        if self.unmeasured:
            return (
                f"Baton's supervisor could not measure its {what} ({self.unmeasured}), so it "
                f"stopped the box rather than let it pass its limit of {size(self.limit_bytes)} unseen"
            )
        if self.mechanism == "cgroup":
            return f"it passed its {what} limit of {size(self.limit_bytes)} (the kernel's cgroup stopped it)"
        return (
            f"it passed its {what} limit of {size(self.limit_bytes)}: {size(self.used_bytes)} "
            "measured by Baton's supervisor, which stopped the box"
        )

    def to_data(self) -> dict[str, object]:
        data: dict[str, object] = {"kind": self.kind, "limit_bytes": self.limit_bytes,
                                   "used_bytes": self.used_bytes, "mechanism": self.mechanism}  # fmt: skip
        return data | ({"unmeasured": self.unmeasured} if self.unmeasured else {})


def memory_of(pids: Sequence[int]) -> int:
    """The memory of these processes in bytes: the sum of their PSS (RSS where the kernel has no
    ``smaps_rollup``). A process that is gone counts nothing."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_bytes()
        except FileNotFoundError:
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int(Path(f"/proc/{pid}/statm").read_bytes().split()[1]) * _PAGE
            continue
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(b"Pss:"):
                with contextlib.suppress(IndexError, ValueError):
                    total += int(line.split()[1]) * 1024
                break
    return total


class Unmeasured(Exception):
    """A directory in the box's trees that cannot be walked (made unreadable, or deeper than a path
    can name): what it holds cannot be counted."""


def disk_of(roots: Sequence[Path]) -> int:
    """The bytes these trees take on disk, each inode once, each at least ``MIN_FILE_BYTES``.
    Links are not followed; what vanishes while it is walked counts nothing. A directory that
    cannot be read raises :class:`Unmeasured` (an agent can hide bytes there otherwise)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(r) for r in roots]
    while stack:
        path = stack.pop()
        try:
            entries = os.scandir(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise Unmeasured(f"{exc.strerror}: a directory {len(path)} characters deep") from exc
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise Unmeasured(f"{exc.strerror}: an entry {len(entry.path)} characters deep") from exc
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_blocks * 512, MIN_FILE_BYTES)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return total


def filesystem_used(path: str) -> int:
    """What a (tmpfs) mount holds, from statvfs; 0 if it cannot be read."""
    try:
        vfs = os.statvfs(path)
    except OSError:
        return 0
    return (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize


class Supervisor:
    """Samples one box. ``pids()`` lists its processes; ``mounts()`` its /tmp and /dev/shm as the
    host reaches them (``/proc/<init>/root/...``), or nothing before the box exists."""

    def __init__(
        self,
        *,
        memory_bytes: int | None,
        disk_bytes: int | None,
        trees: Sequence[Path],
        pids: Callable[[], list[int]],
        mounts: Callable[[], list[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory_bytes, self.disk_bytes = memory_bytes, disk_bytes
        self.trees, self.pids, self.mounts, self.clock = tuple(trees), pids, mounts, clock
        start = clock()
        self.memory_at = start if memory_bytes is not None else float("inf")
        self.disk_at = start if disk_bytes is not None else float("inf")
        self.peak_memory = self.peak_disk = 0
        self.spent_s = 0.0
        self.samples = 0

    @property
    def active(self) -> bool:
        return self.memory_bytes is not None or self.disk_bytes is not None

    def due(self) -> float:
        """When the next sample is due (``inf``: never)."""
        return min(self.memory_at, self.disk_at)

    def sample(self) -> Limit | None:
        """Measure what is due; the limit passed, if one was."""
        began = self.clock()
        passed: Limit | None = None
        if self.memory_bytes is not None and began >= self.memory_at:
            used = memory_of(self.pids())
            self.peak_memory = max(self.peak_memory, used)
            if used > self.memory_bytes:
                passed = Limit("memory", self.memory_bytes, used, "supervisor")
            self.memory_at = began + MEMORY_EVERY_S
        if passed is None and self.disk_bytes is not None and began >= self.disk_at:
            walk_began = self.clock()
            try:
                used = disk_of(self.trees) + sum(filesystem_used(m) for m in self.mounts())
            except Unmeasured as exc:
                used = 0
                passed = Limit("disk", self.disk_bytes, 0, "supervisor", unmeasured=str(exc))
            took = self.clock() - walk_began
            self.peak_disk = max(self.peak_disk, used)
            if passed is None and used > self.disk_bytes:
                passed = Limit("disk", self.disk_bytes, used, "supervisor")
            self.disk_at = self.clock() + max(DISK_EVERY_S, took / DISK_SHARE)
        self.spent_s += self.clock() - began
        self.samples += 1
        return passed

    def measured(self) -> dict[str, float]:
        return {"samples": self.samples, "spent_s": round(self.spent_s, 4),
                "peak_memory_bytes": self.peak_memory, "peak_disk_bytes": self.peak_disk}  # fmt: skip
