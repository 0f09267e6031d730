"""Fixtures for the emulator tests: a live emulator on loopback, a populated world, a webhook receiver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from emulator_world import World, build_world
from webhook_receiver import Receiver, serve_receiver

from emulator import EmulatorServer
from emulator.admin.client import AdminClient


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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A loopback HTTP server recording every delivery it gets (answers ``receiver.status``)."""
    with serve_receiver() as running:
        yield running


@pytest.fixture
def hooked(github_emulator: EmulatorServer, receiver: Receiver) -> Iterator[World]:
    """The world, with the App's webhook URL pointing at ``receiver``."""
    built = build_world(github_emulator, webhook_url=receiver.url)
    yield built
    built.admin.close()


@pytest.fixture
def admin(github_emulator: EmulatorServer) -> Iterator[AdminClient]:
    """The admin API's Python client (people's actions, set-up, inspection)."""
    with AdminClient(github_emulator.url) as client:
        yield client
