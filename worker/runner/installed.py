"""The installed CLIs on the host: their version, and what the box must bind so they run inside it.

These are the only functions of the adapters that touch the host, so they live
apart from the pure argv and env building in :mod:`worker.runner.adapters`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

#: Inside the box, after the CLI's own directory.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Directories the box provides itself; never returned by :func:`install_dirs`.
_SYSTEM_DIRS = frozenset({"/", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/usr/bin", "/usr/sbin", "/usr/lib",
                          "/usr/local/bin"})  # fmt: skip


@cache
def script_agent_path() -> Path:
    return Path(__file__).with_name("script_agent.py")


@cache
def script_agent_source() -> bytes:
    """The script agent's program, fed to ``python3 -I -`` on stdin so the box needs no extra bind for it."""
    return script_agent_path().read_bytes()


def run_version(argv: Sequence[str], *, timeout_s: float = 15.0) -> str | None:
    """Run ``argv`` (a version query) on the host with a throwaway HOME and only PATH set; its version.

    An empty argv asks nothing and answers None: a policy's own command is never
    run outside the box, since nothing says ``--version`` only prints a version.
    """
    if not argv:
        return None
    resolved = [str(script_agent_path()) if a == "{script_agent}" else a for a in argv]
    with tempfile.TemporaryDirectory(prefix="baton-version-") as home:
        try:
            done = subprocess.run(  # noqa: S603 - a fixed query of an executable Baton located
                resolved,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
                env={"PATH": SYSTEM_PATH, "HOME": home},
            )
        except (OSError, subprocess.SubprocessError):
            return None
    return parse_version((done.stdout or done.stderr)[:4096].decode("utf-8", errors="replace"))


def parse_version(text: str) -> str | None:
    """``2.1.197 (Claude Code)`` -> ``2.1.197``; ``codex-cli 0.171.0`` -> ``0.171.0``; else None."""
    match = re.search(r"(?<![0-9.])\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.\-]+)?", text)
    return match.group(0)[:64] if match else None


def install_dirs(executable: str, *, search_path: str | None = None) -> tuple[str, ...]:
    """Directories to bind read-only into the box so ``executable`` runs there.

    Its own directory, the directory it resolves into, the whole ``node_modules``
    of an npm install (``node_modules/.bin`` holds symlinks into it), the whole
    virtual environment of a pip install, and, for a ``#!`` script, its
    interpreter's (``#!/usr/bin/env node`` is looked up on ``search_path``), with a
    Python interpreter's installation prefix (its standard library lives beside
    its ``bin``). System directories are left out: the box provides those.
    Outermost directories only.
    """
    if not os.path.isabs(executable):
        return ()
    found: set[str] = set()
    for path in _with_interpreter(executable, search_path):
        real = os.path.realpath(path)
        found |= {
            os.path.dirname(path),
            os.path.dirname(real),
            *_npm_prefix(path),
            *_npm_prefix(real),
            *_python_prefix(path),
            *_python_prefix(real),
        }
    kept = sorted(d for d in found if d and d not in _SYSTEM_DIRS)
    return tuple(d for d in kept if not any(d.startswith(other + "/") for other in kept))


def _with_interpreter(executable: str, search_path: str | None) -> list[str]:
    paths = [executable]
    try:
        with open(os.path.realpath(executable), "rb") as handle:
            first = handle.read(256).split(b"\n", 1)[0]
    except OSError:
        return paths
    if not first.startswith(b"#!"):
        return paths
    words = first[2:].decode("utf-8", errors="replace").split()
    if len(words) >= 2 and os.path.basename(words[0]) == "env":
        found = shutil.which(words[-1], path=search_path or SYSTEM_PATH)
        paths += [os.path.abspath(found)] if found else []
    elif words and os.path.isabs(words[0]):
        paths.append(words[0])
    return paths


def _npm_prefix(path: str) -> list[str]:
    """``/p/node_modules/.bin/x`` or ``/p/node_modules/@a/b/x`` -> ``/p/node_modules``."""
    parts = Path(path).parts
    if "node_modules" not in parts:
        return []
    return [str(Path(*parts[: parts.index("node_modules") + 1]))]


def _python_prefix(path: str) -> list[str]:
    """``/v/bin/aider`` with ``/v/pyvenv.cfg`` -> ``/v`` (a venv); ``/p/bin/python3.11`` with
    ``/p/lib/python3.11`` -> ``/p`` (an interpreter's installation, as pyenv makes them)."""
    bin_dir = Path(path).parent
    if bin_dir.name != "bin":
        return []
    root = bin_dir.parent
    if (root / "pyvenv.cfg").is_file():
        return [str(root)]
    version = re.fullmatch(r"python(\d+\.\d+)", Path(path).name)
    if version and (root / "lib" / f"python{version.group(1)}").is_dir():
        return [str(root)]
    return []
