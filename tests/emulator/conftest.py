"""Fixtures for the emulator tests: a live emulator on loopback and a populated world."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from emulator_world import World, build_world

from emulator import EmulatorServer


@pytest.fixture
def github_emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    """A live emulator on 127.0.0.1 (free port), state under a temporary directory."""
    with EmulatorServer(tmp_path / "github") as server:
        yield server


@pytest.fixture
def world(github_emulator: EmulatorServer) -> Iterator[World]:
    built = build_world(github_emulator)
    yield built
    built.admin.close()
