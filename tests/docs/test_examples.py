"""The docs' shell examples run, so a page cannot tell a reader to type something that fails.

Every ``sh``/``bash``/``shell`` block in README.md and docs/*.md carries a marker just before
its fence saying what it needs:

- ``<!-- run: offline -->``: runs alone in an empty directory;
- ``<!-- run: needs redis -->``: the same, with ``REDIS_URL`` set to a fresh Redis;
- ``<!-- run: needs demo -->``: runs where ``demo-out/`` holds the files ``baton demo`` writes (the
  demo runs once per session, for every such block);
- ``<!-- run: needs agent CLIs -->``: with the pinned real agent CLIs on ``PATH``;
- ``<!-- run: exempt (why) -->``: not run; the reason says what it needs (real GitHub, fly.io…),
  or which test already covers it.

Each runs under ``bash -e -o pipefail`` in a temporary directory with the repository's venv on
``PATH`` (and as ``./.venv``, as the pages assume), no ``BATON_*`` variable of this machine, a
private ``HOME`` and a bounded timeout; everything they start listens on loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import PAGES, ROOT, SHELL, Block, blocks

#: Doc pages whose shell examples must be marked and run (emulator/README.md has no shell blocks).
EXAMPLE_PAGES = [p for p in PAGES if p.parent != ROOT / "emulator"]
KINDS = ("offline", "needs redis", "needs demo", "needs agent CLIs")
TIMEOUT_S = 180
DEMO_TIMEOUT_S = 600
VENV_BIN = Path(sys.executable).parent


def _shell_blocks() -> list[Block]:
    return [b for page in EXAMPLE_PAGES for b in blocks(page) if b.info in SHELL]


def _kind(block: Block) -> str:
    return "exempt" if (block.marker or "").startswith("exempt") else block.marker or ""


def test_every_shell_example_says_what_it_needs() -> None:
    unmarked = [b.where for b in _shell_blocks() if b.marker is None]
    assert unmarked == [], "put <!-- run: offline | needs … | exempt (why) --> before each of these fences"
    unknown = [f"{b.where}: {b.marker}" for b in _shell_blocks() if _kind(b) not in (*KINDS, "exempt")]
    assert unknown == [], f"a run marker is one of {KINDS} or exempt (why)"


def test_an_exemption_says_why() -> None:
    bare = [b.where for b in _shell_blocks() if _kind(b) == "exempt" and "(" not in (b.marker or "")]
    assert bare == [], "write the reason: <!-- run: exempt (needs real GitHub) -->, or which test covers it"


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_") and k != "REDIS_URL"}
    env.update(
        HOME=str(home),
        PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        # A reader's git has their name; this machine's may not.
        GIT_AUTHOR_NAME="Docs Reader",
        GIT_AUTHOR_EMAIL="reader@example.com",
        GIT_COMMITTER_NAME="Docs Reader",
        GIT_COMMITTER_EMAIL="reader@example.com",
        **extra,
    )
    return env


def _workdir(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / ".venv").symlink_to(VENV_BIN.parent)
    (tmp / "home").mkdir()
    return work


def _run(block: Block, work: Path, env: dict[str, str]) -> None:
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=work, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, (
        f"{block.where} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


@pytest.fixture(scope="session")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``demo-out/`` from one ``baton demo`` run, shared by every block that needs it."""
    base = tmp_path_factory.mktemp("demo")
    argv = [sys.executable, "-m", "baton", "demo", "--out", "demo-out"]
    done = subprocess.run(argv, cwd=base, env=_env(base, {}), capture_output=True, text=True,
                          timeout=DEMO_TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, f"baton demo failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return base / "demo-out"


def _runnable() -> list[object]:
    return [pytest.param(b, id=b.where) for b in _shell_blocks() if _kind(b) in KINDS]


@pytest.mark.parametrize("block", _runnable())
def test_a_shell_example_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each block gets what its marker names, and only that (a fixture is started only when asked)."""
    work = _workdir(tmp_path)
    env = _env(tmp_path / "home", {})
    kind = _kind(block)
    if kind == "needs redis":
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    elif kind == "needs demo":
        shutil.copytree(request.getfixturevalue("demo_out"), work / "demo-out")
    elif kind == "needs agent CLIs":
        env["PATH"] = f"{request.getfixturevalue('agent_cli_bin')}:{env['PATH']}"
    _run(block, work, env)
