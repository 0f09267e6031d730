"""The script agent, run as the box runs it: a real python3 process in a workspace, stdlib only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from worker.runner import prompt, script_agent

SCRIPT = Path(script_agent.__file__)
#: The system python3 the box uses, where there is one.
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def run(
    workspace: Path, steps: list[dict[str, Any]] | str, *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    recipe = workspace.parent / "recipe.json"
    recipe.write_text(steps if isinstance(steps, str) else json.dumps({"version": 1, "steps": steps}))
    return subprocess.run(
        [PYTHON, "-I", str(SCRIPT), str(recipe)],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
    )


def result_line(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(last, dict)
    return last


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace


def test_file_steps_change_the_workspace(ws: Path) -> None:
    (ws / "old.txt").write_text("old")
    (ws / "tree" / "deep").mkdir(parents=True)
    (ws / "tree" / "deep" / "f").write_text("f")
    done = run(ws, [
        {"op": "write", "path": "src/new.py", "content": "print('hi')\n"},
        {"op": "append", "path": "src/new.py", "content": "print('again')\n"},
        {"op": "write", "path": "blob.bin", "content_b64": "AAEC/w=="},
        {"op": "mkdir", "path": "empty/dir"},
        {"op": "delete", "path": "old.txt"},
        {"op": "delete", "path": "tree"},
        {"op": "write", "path": "run.sh", "content": "#!/bin/sh\n", "mode": "0755"},
        {"op": "chmod", "path": "src/new.py", "mode": "0600"},
    ])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (ws / "src" / "new.py").read_text() == "print('hi')\nprint('again')\n"
    assert (ws / "blob.bin").read_bytes() == b"\x00\x01\x02\xff"
    assert (ws / "empty" / "dir").is_dir()
    assert not (ws / "old.txt").exists()
    assert not (ws / "tree").exists()
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (ws / "src" / "new.py").stat().st_mode & 0o777 == 0o600
    assert result_line(done) == {"script_agent": script_agent.VERSION, "steps_run": 8, "exit": 0}


def test_symlinks_are_made_verbatim_for_hostile_agent_tests(ws: Path) -> None:
    done = run(ws, [
        {"op": "symlink", "path": "escape", "target": "/etc/passwd"},
        {"op": "symlink", "path": "dangling", "target": "../../nowhere"},
        {"op": "delete", "path": "dangling"},
    ])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert os.readlink(ws / "escape") == "/etc/passwd"
    assert not os.path.lexists(ws / "dangling")


def test_paths_may_be_absolute_the_box_decides_what_is_reachable(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    done = run(ws, [{"op": "write", "path": str(outside), "content": "escaped"}])
    assert done.returncode == 0, done.stderr
    assert outside.read_text() == "escaped"


def test_print_read_and_env(ws: Path) -> None:
    (ws / "secret.txt").write_text("contents\n")
    done = run(
        ws,
        [
            {"op": "print", "text": "to out\n"},
            {"op": "print", "text": "to err\n", "stream": "stderr"},
            {"op": "print", "text": "ab", "repeat": 3},
            {"op": "read", "path": "secret.txt"},
            {"op": "env"},
        ],
        env={"PATH": "/usr/bin:/bin", "CANARY_TOKEN": "canary-123"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "to err\n"
    lines = done.stdout.splitlines()
    assert lines[0] == "to out"
    assert lines[1] == "abababcontents"
    assert json.loads(lines[2])["CANARY_TOKEN"] == "canary-123"


def test_exit_stops_with_its_code(ws: Path) -> None:
    done = run(ws, [{"op": "exit", "code": 7}, {"op": "write", "path": "never", "content": ""}])
    assert done.returncode == 7
    assert not (ws / "never").exists()
    assert result_line(done) == {"script_agent": script_agent.VERSION, "steps_run": 1, "exit": 7}


def test_a_failed_step_stops_the_run_unless_its_errors_are_ignored(ws: Path) -> None:
    done = run(
        ws, [{"op": "delete", "path": "missing", "ignore_errors": True}, {"op": "read", "path": "nope"}]
    )
    assert done.returncode == script_agent.EXIT_STEP_FAILED
    assert "step 2 ('read')" in done.stderr
    assert result_line(done)["steps_run"] == 1
    assert "step 2" in result_line(done)["error"]


@pytest.mark.parametrize(
    "step",
    [
        {"op": "teleport"},
        {"op": "sleep", "seconds": script_agent.MAX_SLEEP_S + 1},
        {"op": "sleep", "seconds": "1"},
        {"op": "exit", "code": 256},
        {"op": "write", "path": "x"},
        {"op": "chmod", "path": "x", "mode": "rwx"},
        {"op": "print", "text": "x", "stream": "socket"},
        {"op": "spawn", "argv": "ls"},
    ],
)
def test_bad_steps_fail_clearly(ws: Path, step: dict[str, Any]) -> None:
    done = run(ws, [step])
    assert done.returncode == script_agent.EXIT_STEP_FAILED
    assert "script-agent: step 1" in done.stderr


@pytest.mark.parametrize("recipe", ["", "not json", "[1, 2]", '{"steps": 3}', '{"version": 2, "steps": []}'])
def test_no_readable_recipe_exits_3(ws: Path, recipe: str) -> None:
    done = run(ws, recipe)
    assert done.returncode == script_agent.EXIT_NO_RECIPE
    assert "script-agent:" in done.stderr


def test_sleep_then_exit(ws: Path) -> None:
    started = time.monotonic()
    done = run(ws, [{"op": "sleep", "seconds": 1}])
    assert done.returncode == 0
    assert time.monotonic() - started >= 1


def test_spawn_waits_and_checks(ws: Path) -> None:
    done = run(ws, [
        {"op": "spawn", "argv": [PYTHON, "-c", "open('child.txt', 'w').write('ran')"]},
        {"op": "spawn", "argv": [PYTHON, "-c", "raise SystemExit(3)"], "check": True},
    ])  # fmt: skip
    assert (ws / "child.txt").read_text() == "ran"
    assert done.returncode == script_agent.EXIT_STEP_FAILED
    assert "exited 3" in done.stderr


def test_a_detached_spawn_outlives_the_agent(ws: Path) -> None:
    """What a timeout test needs: a grandchild in its own session, still running after the agent exits."""
    code = "import time; time.sleep(1); open('late.txt', 'w').write('still here')"
    recipe = ws.parent / "recipe.json"
    recipe.write_text(json.dumps({"steps": [{"op": "spawn", "argv": [PYTHON, "-c", code], "detach": True}]}))
    # Not through pipes: the grandchild inherits the agent's stdout and stderr and holds them open (as a
    # hostile agent's would), so whoever waits for their end waits for the grandchild too.
    started = time.monotonic()
    agent = subprocess.Popen([PYTHON, "-I", str(SCRIPT), str(recipe)], cwd=ws, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    assert agent.wait(timeout=60) == 0
    assert time.monotonic() - started < 1
    assert not (ws / "late.txt").exists()
    deadline = time.monotonic() + 20
    while not (ws / "late.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (ws / "late.txt").read_text() == "still here"


def test_http_reports_a_failure_without_failing(ws: Path) -> None:
    done = run(ws, [{"op": "http", "url": "http://127.0.0.1:1/exfil", "data": "x", "timeout": 2}])
    assert done.returncode == 0
    assert done.stdout.startswith("http error: ")


def test_the_recipe_can_come_from_the_issue_inside_a_prompt(ws: Path) -> None:
    recipe = json.dumps({"steps": [{"op": "write", "path": "f.txt", "content": "x"}]})
    body = f"Please do this:\n```baton-recipe\n{recipe}\n```\n"
    (ws.parent / "prompt.md").write_text(prompt.render(title="t", body=body))
    done = subprocess.run(
        [PYTHON, "-I", str(SCRIPT), str(ws.parent / "prompt.md")], cwd=ws, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (ws / "f.txt").read_text() == "x"


def test_the_program_can_come_on_stdin(ws: Path) -> None:
    """How the script adapter runs it: `python3 -I - RECIPE`, the program on stdin (no bind needed)."""
    recipe = ws.parent / "r.json"
    recipe.write_text(json.dumps({"steps": [{"op": "print", "text": "via stdin"}]}))
    done = subprocess.run(
        [PYTHON, "-I", "-", str(recipe)], input=SCRIPT.read_bytes(), cwd=ws, capture_output=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"via stdin\n")


def test_version() -> None:
    done = subprocess.run(
        [PYTHON, "-I", str(SCRIPT), "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith(f"script-agent {script_agent.VERSION} (python 3.")


def test_it_imports_nothing_but_the_standard_library() -> None:
    tree = ast.parse(SCRIPT.read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}  # fmt: skip
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}  # fmt: skip
    assert names - {"__future__"} <= set(sys.stdlib_module_names)
    assert "worker" not in names
    assert "bot" not in names
