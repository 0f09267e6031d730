"""The policy's command gates, run on one commit, each in Baton's box.

A gate runs the PR's own code, so it gets what an agent gets and less: a fresh
plain copy of the commit (no ``.git``), a fresh empty HOME, no network
(``network="none"``), an environment that is an allow-list (nothing of the
worker's), output capped by the box. Gates run in the policy's order and every
one runs even after a failure, so the first failure does not hide the rest.

The copy is written from the commit's tree object by object, not by ``git
archive``: archive obeys the commit's own ``.gitattributes`` (``export-ignore``,
``export-subst``), which would let a PR hide its failing tests from the gate.

Outcomes (:class:`Outcome`): a gate that could not start is a failed result with
the reason in its tail, never an exception; ``stop`` set while a gate runs stops
it (``stopped``) and the gates after it are ``not-run``; none of these pass.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from worker.gates.annotations import parse as parse_annotations
from worker.github.limits import Annotation
from worker.policy.model import Gate
from worker.runner import box, inspect_git

__all__ = ["GRACE_S", "TAIL_CHARS", "TAIL_LINES", "GateResult", "Outcome", "run_gates"]

#: Between the timeout's SIGTERM and SIGKILL: enough for a test runner to print its summary.
GRACE_S = 5.0
TAIL_LINES = 40
TAIL_CHARS = 4000
#: The whole gate's output the box keeps (stdout and stderr are one stream, see ``_argv``).
MAX_OUTPUT_BYTES = box.MiB
#: A gate's memory (cgroup v2, where the machine delegates one; the box report says if it held).
MEMORY_BYTES = 4 * 1024 * box.MiB
#: Set for every gate; nothing else of the worker's environment reaches it.
_ENV = {"LANG": "C.UTF-8", "NO_COLOR": "1", "TERM": "dumb"}


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # exited non-zero or by a signal
    TIMED_OUT = "timed-out"
    ERROR = "error"  # the box could not start the gate; the reason is the tail
    STOPPED = "stopped"  # ``stop`` ended it while it ran
    NOT_RUN = "not-run"  # ``stop`` was set before it started


@dataclass(frozen=True)
class GateResult:
    name: str
    command: str
    passed: bool
    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration_s: float
    #: The last lines of the output (stdout and stderr interleaved), safe printable text.
    tail: str
    #: Parsed from the whole captured output; only for gates that failed or timed out.
    annotations: tuple[Annotation, ...]
    outcome: Outcome
    #: What the box held the gate to; None when no box ran (``error``, ``not-run``).
    box_report: box.BoxReport | None = None

    def __post_init__(self) -> None:
        if self.passed != (self.outcome is Outcome.PASSED):
            raise ValueError(f"passed={self.passed} contradicts outcome {self.outcome}")
        object.__setattr__(self, "annotations", tuple(self.annotations))

    def to_data(self) -> dict[str, object]:
        return {
            "name": self.name,
            "command": self.command,
            "outcome": str(self.outcome),
            "passed": self.passed,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "tail": self.tail,
            "annotations": [a.to_api() for a in self.annotations],
            "box": self.box_report.to_data() if self.box_report is not None else None,
        }


def run_gates(
    repo: Path,
    commit: str,
    gates: Sequence[Gate],
    *,
    stop: threading.Event | None = None,
    search_path: str = box.SYSTEM_PATH,
    max_disk_bytes: int | None = None,
) -> list[GateResult]:
    """One result per gate, in order. Raises ``InspectError`` if ``commit`` is not a commit of ``repo``.

    ``search_path`` is the gates' PATH inside the box; only what the box shows (``/usr`` and the
    root's links into it) is there, nothing is bound in for it. ``max_disk_bytes``: what each
    gate may write (workspace, HOME and /tmp together), the policy's ``limits.max_workspace_bytes``.
    """
    if stop is not None and stop.is_set():
        return [_not_run(gate) for gate in gates]
    archive, known = inspect_git.tree_tar(repo, commit)
    results: list[GateResult] = []
    for gate in gates:
        if stop is not None and stop.is_set():
            results.append(_not_run(gate))
        else:
            results.append(_run_one(gate, archive, known, stop=stop, search_path=search_path,
                                    max_disk_bytes=max_disk_bytes))  # fmt: skip
    return results


def _run_one(
    gate: Gate, archive: bytes, known: frozenset[str], *, stop: threading.Event | None, search_path: str,
    max_disk_bytes: int | None,
) -> GateResult:  # fmt: skip
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="baton-gate-") as tmp:
        workspace, home = Path(tmp) / "workspace", Path(tmp) / "home"
        home.mkdir()
        workspace.mkdir()
        try:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(workspace, filter="tar")  # our own tar, but no path may leave the workspace
            spec = box.BoxSpec(argv=_argv(gate), workspace=workspace, home=home,
                               env={**_ENV, "PATH": search_path}, network="none",
                               timeout_s=float(gate.timeout), grace_s=GRACE_S,
                               max_output_bytes=MAX_OUTPUT_BYTES, memory_bytes=MEMORY_BYTES,
                               max_disk_bytes=max_disk_bytes)  # fmt: skip
            result = box.run(spec, stop=stop)
        except (box.BoxError, tarfile.TarError, ValueError, OSError) as exc:
            return _result(gate, Outcome.ERROR, duration_s=time.monotonic() - started,
                           tail=f"could not start the gate: {exc}")  # fmt: skip
    if result.cancelled and result.exit_code is None and result.signal is None:
        return _not_run(gate)
    output = result.stdout + result.stderr
    outcome = (
        Outcome.STOPPED if result.cancelled
        else Outcome.TIMED_OUT if result.timed_out
        else Outcome.PASSED if result.exit_code == 0
        else Outcome.FAILED
    )  # fmt: skip
    found: list[Annotation] = []
    if outcome in (Outcome.FAILED, Outcome.TIMED_OUT):
        found = parse_annotations(output.decode("utf-8", "replace"), known_paths=known, title=gate.name)
    return _result(gate, outcome, exit_code=result.exit_code, signal=result.signal,
                   duration_s=result.duration_s, found=tuple(found), report=result.report,
                   tail=_tail(output, result.stdout_bytes + result.stderr_bytes))  # fmt: skip


def _argv(gate: Gate) -> list[str]:
    """``sh -c <run>`` with stderr onto stdout, so the tail reads in the order things were printed.

    ``gate.run`` is passed as it is, never pasted into a script; after ``--``, so a leading ``-``
    is part of the command, not an option of the shell."""
    return ["/bin/sh", "-c", 'exec /bin/sh -c -- "$1" 2>&1', "baton-gate", gate.run]


def _tail(output: bytes, total: int) -> str:
    """The last lines the box kept; past the cap, the end was lost, and the tail says so."""
    if total <= len(output):
        return box.safe_tail(output, TAIL_LINES, TAIL_CHARS)
    note = f"[baton: output cut: the box kept the first {len(output):,} of {total:,} bytes]"
    kept = box.safe_tail(output, TAIL_LINES - 1, TAIL_CHARS - len(note) - 1)
    return f"{kept}\n{note}" if kept else note


def _not_run(gate: Gate) -> GateResult:
    return _result(gate, Outcome.NOT_RUN, tail="not run: stopped")


def _result(
    gate: Gate,
    outcome: Outcome,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    duration_s: float = 0.0,
    tail: str,
    found: tuple[Annotation, ...] = (),
    report: box.BoxReport | None = None,
) -> GateResult:
    return GateResult(name=gate.name, command=gate.run, passed=outcome is Outcome.PASSED, exit_code=exit_code,
                      signal=signal, timed_out=outcome is Outcome.TIMED_OUT, duration_s=duration_s,
                      tail=tail, annotations=found, outcome=outcome, box_report=report)  # fmt: skip
