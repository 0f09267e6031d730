"""Fixtures for the setup and status pages: a GitHub emulator, a Baton in setup mode, the form's fields."""

from __future__ import annotations

import contextlib
import html
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from baton.redis_server import free_port
from baton.settings import Settings
from bot.app import create_app
from emulator import EmulatorServer
from tests.conftest import serve_app

_FIELD = re.compile(r'<input type="hidden" name="(manifest|state)" value="([^"]*)">')


@pytest.fixture
def github(tmp_path: Path) -> Iterator[EmulatorServer]:
    with EmulatorServer(tmp_path / "github") as server:
        yield server


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    """Where the setup page writes `.env` (never the tests' working directory)."""
    path = tmp_path / "deploy"
    path.mkdir()
    return path


#: The setup token of the Batons these tests start (`baton serve` draws a fresh one each start).
SETUP_TOKEN = "tests-setup-token-0123456789"


@pytest.fixture
def setup_base(github: EmulatorServer, redis_url: str, env_dir: Path) -> Iterator[str]:
    """A Baton in setup mode (no App credentials) on loopback, GITHUB_API_URL the emulator."""
    app = create_app(Settings(github_api_url=github.url), redis_url, env_dir=env_dir, setup_token=SETUP_TOKEN)
    with serve_app(app) as base:
        yield base


def setup_link(base: str) -> str:
    """The setup page's link, as `baton serve` prints it: with its token."""
    return f"{base}/?token={SETUP_TOKEN}"


def form_fields(page: str) -> dict[str, str]:
    """The setup form's hidden fields (manifest, state), as the browser would post them."""
    return {name: html.unescape(value) for name, value in _FIELD.findall(page)}


def register(base: str, *, org: str = "") -> tuple[dict[str, str], httpx.Response]:
    """Do what a browser does with the setup form, up to GitHub's redirect back (not followed)."""
    fields = {**form_fields(httpx.get(setup_link(base), timeout=10).text), "org": org}
    start = httpx.post(base + "/setup/start", data=fields, timeout=10)
    assert start.status_code == 307, start.text
    back = httpx.post(start.headers["location"], data=fields, timeout=30)
    assert back.status_code == 302, back.text
    return fields, back


@contextlib.contextmanager
def running_serve(cwd: Path, *, redis_url: str, github_url: str, log: Path) -> Iterator[str]:
    """`baton serve` as a process started in ``cwd`` (where it finds `.env`), with none of this
    environment's App or Baton settings; yields its base URL once it is ready."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("APP_ID", "PRIVATE_KEY", "WEBHOOK_SECRET")}
    env = {k: v for k, v in env.items() if not k.startswith(("BATON_", "PRIVATE_KEY"))}
    env.update(PORT=str(port), REDIS_URL=redis_url, GITHUB_API_URL=github_url, LOG_LEVEL="WARNING",
               XDG_CACHE_HOME=str(log.parent / "cache"))  # fmt: skip
    with log.open("wb") as out:
        serve = subprocess.Popen([sys.executable, "-m", "baton", "serve"], cwd=cwd, env=env,
                                 stdout=out, stderr=out)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert serve.poll() is None, log.read_text()
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield base
    finally:
        serve.terminate()
        serve.wait(timeout=30)
