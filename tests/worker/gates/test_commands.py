"""Command gates, run for real in the box on a real repository: each property with a gate that tests it."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.runner.conftest import git
from worker.gates.commands import TAIL_CHARS, TAIL_LINES, GateResult, Outcome, run_gates
from worker.github.limits import Annotation
from worker.policy.model import Gate
from worker.runner import box
from worker.runner.inspect_git import InspectError
from worker.runner.probe import host

pytestmark = pytest.mark.skipif(host().bwrap is None, reason=host().bwrap_source)

NET_PY = """import socket, sys
reached = False
for host, port in [("127.0.0.1", int(sys.argv[1])), (sys.argv[2], int(sys.argv[1])), ("1.1.1.1", 80)]:
    try:
        socket.create_connection((host, port), 2).close()
    except OSError as exc:
        print(f"{host}:{port} refused: {exc}")
    else:
        reached = True
        print(f"{host}:{port} reached")
sys.exit(0 if reached else 1)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """One commit on ``main``: ``app.py``, and ``net.py`` for the network gate."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "app.py").write_text("print('hi')\n")
    (path / "net.py").write_text(NET_PY)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "app")
    return path


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every temp dir of the run lands here, so a test can see that none is left behind."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield scratch
    assert list(scratch.iterdir()) == []


def gates(*pairs: tuple[str, str]) -> list[Gate]:
    return [Gate(name, run, timeout=60) for name, run in pairs]


def outcomes(results: list[GateResult]) -> list[tuple[str, Outcome]]:
    return [(r.name, r.outcome) for r in results]


def test_a_passing_gate(repo: Path) -> None:
    [result] = run_gates(repo, "HEAD", gates(("exists", "test -f app.py && echo fine")))
    assert result.passed
    assert result.outcome is Outcome.PASSED
    assert (result.exit_code, result.signal, result.timed_out) == (0, None, False)
    assert result.tail == "fine"
    assert result.annotations == ()
    assert result.box_report is not None
    assert result.box_report.network == "none"
    data = result.to_data()
    assert data["outcome"] == "passed"
    assert data["command"] == "test -f app.py && echo fine"
    assert isinstance(data["box"], dict)


def test_a_failing_gate_annotates_the_files_it_names(repo: Path) -> None:
    script = (
        "echo app.py:1: bad thing >&2; echo ghost.py:2: not in the commit; echo ../x.py:1: outside; exit 3"
    )
    [result] = run_gates(repo, "HEAD", gates(("lint", script)))
    assert not result.passed
    assert result.outcome is Outcome.FAILED
    assert result.exit_code == 3
    assert result.annotations == (Annotation("app.py", 1, 1, "failure", "bad thing", title="lint"),)
    assert "app.py:1: bad thing" in result.tail
    assert result.to_data()["annotations"] == [
        {"path": "app.py", "start_line": 1, "end_line": 1, "annotation_level": "failure",
         "message": "bad thing", "title": "lint"}
    ]  # fmt: skip


def test_a_passing_gate_gets_no_annotations(repo: Path) -> None:
    [result] = run_gates(repo, "HEAD", gates(("warns", "echo app.py:1: just a remark")))
    assert result.passed
    assert result.annotations == ()


def test_a_gate_past_its_timeout_is_stopped(repo: Path) -> None:
    started = time.monotonic()
    [result] = run_gates(repo, "HEAD", [Gate("slow", "echo app.py:1: started; sleep 30", timeout=1)])
    assert time.monotonic() - started < 15
    assert result.timed_out
    assert not result.passed
    assert result.outcome is Outcome.TIMED_OUT
    assert result.exit_code is None or result.exit_code != 0
    assert [a.path for a in result.annotations] == ["app.py"]  # a timeout is a failure too


def test_a_gate_reaches_no_network(repo: Path) -> None:
    """Not the host's loopback, not its address, not the internet."""
    server = socket.socket()
    server.bind(("0.0.0.0", 0))  # every host address: does the gate get to any of them?
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent; it only picks the outgoing address
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.2"
    try:
        [result] = run_gates(repo, "HEAD", gates(("net", f"/usr/bin/python3 net.py {port} {address}")))
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert not result.passed, result.tail
    assert result.exit_code == 1, result.tail
    assert "reached" not in result.tail
    assert result.tail.count("refused:") == 3


def test_a_gate_sees_no_secret_of_the_worker(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "baton-test-secret-4f1c9a"
    monkeypatch.setenv("BATON_TEST_SECRET", secret)
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    script = "env | sort; tr '\\0' '\\n' </proc/self/environ | wc -l; cat /proc/1/environ; echo HOME=$HOME"
    [result] = run_gates(repo, "HEAD", gates(("env", script)))
    assert result.passed, result.tail
    assert secret not in result.tail
    assert "BATON_TEST_SECRET" not in result.tail
    assert "GITHUB_TOKEN" not in result.tail
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in result.tail
    assert "HOME=/home/agent" in result.tail


def test_gates_write_only_their_own_copy(repo: Path) -> None:
    """Each gate gets a fresh copy and a fresh HOME; the repository is as it was."""
    head = git(repo, "rev-parse", "HEAD")
    before = sorted(p.name for p in repo.iterdir())
    vandal = ("echo changed > app.py; echo x > new.txt; mkdir -p .git; echo x > .git/HEAD; "
              "echo x > $HOME/marker; chmod 000 new.txt; mkdir locked; chmod 000 locked")  # fmt: skip
    check = "grep -q hi app.py && test ! -e new.txt && test ! -e .git && test ! -e $HOME/marker"
    results = run_gates(repo, "HEAD", gates(("vandal", vandal), ("check", check)))
    assert [r.passed for r in results] == [True, True], [r.tail for r in results]
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    assert sorted(p.name for p in repo.iterdir()) == before
    assert (repo / "app.py").read_text() == "print('hi')\n"


def test_order_is_kept_and_every_gate_runs_after_a_failure(repo: Path) -> None:
    results = run_gates(
        repo, "HEAD", gates(("a", "true"), ("b", "exit 2"), ("c", "echo c"), ("d", "kill -9 $$"))
    )
    assert outcomes(results) == [("a", Outcome.PASSED), ("b", Outcome.FAILED), ("c", Outcome.PASSED),
                                 ("d", Outcome.FAILED)]  # fmt: skip
    assert [(r.exit_code, r.signal) for r in results[:3]] == [(0, None), (2, None), (0, None)]
    assert results[3].exit_code != 0 or results[3].signal == 9


def test_the_copy_is_the_commit_whatever_its_gitattributes_say(repo: Path) -> None:
    """export-ignore and export-subst would let a PR hide files from the gate or change them."""
    (repo / "tests").mkdir()
    (repo / "tests" / "t.txt").write_text("hidden?\n")
    (repo / "keep").write_text("$Format:%H$\n")
    (repo / ".gitattributes").write_text("tests export-ignore\nkeep export-subst\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("app.py")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "attributes")
    script = (
        "test -f tests/t.txt && grep -qF '$Format:%H$' keep && ./run.sh && test -L link && grep -q hi link"
    )
    [result] = run_gates(repo, "HEAD", gates(("exact", script)))
    assert result.passed, result.tail
    assert result.tail == "ran"


def test_the_tail_is_the_last_lines(repo: Path) -> None:
    [result] = run_gates(repo, "HEAD", gates(("count", "seq 1 100; exit 1")))
    assert result.tail.split("\n") == [str(n) for n in range(101 - TAIL_LINES, 101)]


def test_output_past_the_cap_is_marked_in_the_tail(repo: Path) -> None:
    [result] = run_gates(repo, "HEAD", gates(("loud", "yes 'app.py:1: again' | head -n 200000; echo end")))
    assert result.passed
    lines = result.tail.split("\n")
    assert len(lines) <= TAIL_LINES
    assert len(result.tail) <= TAIL_CHARS
    assert lines[-1].startswith("[baton: output cut: the box kept the first 1,048,576 of 3,200,004 bytes]")


def test_stop_before_the_start_runs_nothing(repo: Path) -> None:
    stop = threading.Event()
    stop.set()
    results = run_gates(repo, "not-even-a-commit", gates(("a", "true"), ("b", "false")), stop=stop)
    assert outcomes(results) == [("a", Outcome.NOT_RUN), ("b", Outcome.NOT_RUN)]
    for r in results:
        assert not r.passed
        assert r.tail == "not run: stopped"
        assert (r.exit_code, r.signal, r.duration_s, r.box_report) == (None, None, 0.0, None)


def test_stop_during_a_gate_stops_it_and_the_rest_do_not_run(repo: Path) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    started = time.monotonic()
    try:
        results = run_gates(repo, "HEAD", gates(("long", "sleep 30"), ("next", "true")), stop=stop)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 10
    assert outcomes(results) == [("long", Outcome.STOPPED), ("next", Outcome.NOT_RUN)]
    assert not results[0].timed_out
    assert not results[0].passed


def test_a_gate_that_cannot_start_is_a_failed_result(repo: Path) -> None:
    results = run_gates(repo, "HEAD", [Gate("broken", "true", timeout=0), Gate("after", "true")])
    assert outcomes(results) == [("broken", Outcome.ERROR), ("after", Outcome.PASSED)]
    assert results[0].tail.startswith("could not start the gate: timeout_s must be > 0")
    assert not results[0].passed
    assert results[0].box_report is None


def test_an_unknown_commit_is_an_error_not_a_result(repo: Path) -> None:
    with pytest.raises(InspectError):
        run_gates(repo, "0" * 40, gates(("a", "true")))


def test_a_result_cannot_contradict_itself() -> None:
    with pytest.raises(ValueError, match="contradicts"):
        GateResult(name="a", command="true", passed=True, exit_code=1, signal=None, timed_out=False,
                   duration_s=0.0, tail="", annotations=(), outcome=Outcome.FAILED)  # fmt: skip


def test_the_command_is_run_as_written(repo: Path) -> None:
    """A leading dash is a command, not an option of the shell; stderr and stdout are one stream."""
    results = run_gates(
        repo,
        "HEAD",
        gates(("dash", "-x 2>/dev/null || echo command"), ("both", "echo 1; echo 2 >&2; echo 3")),
    )
    assert [r.tail for r in results] == ["command", "1\n2\n3"]


def test_a_gates_box_is_asked_for_the_policys_disk_limit(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[box.BoxSpec] = []
    real = box.run

    def recording(spec: box.BoxSpec, **kwargs: Any) -> box.BoxResult:
        asked.append(spec)
        return real(spec, **kwargs)

    monkeypatch.setattr(box, "run", recording)  # watched at the gate's edge, then run for real
    [result] = run_gates(repo, "HEAD", gates(("ok", "true")), max_disk_bytes=3 * 1024**3)
    assert result.outcome is Outcome.PASSED
    assert [(s.max_disk_bytes, s.memory_bytes) for s in asked] == [(3 * 1024**3, 4 * 1024**3)]
