"""What every generator of a docs page shares: write the fresh text, or (``--check``) say it drifted.

A generated page is compared byte for byte; a drifted one fails with the command that regenerates it,
so the docs test's failure says the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(argv: list[str], page: Path, fresh: str, *, what: str, regenerate: str) -> int:
    """Write ``fresh`` to ``page``; with ``--check``, exit status 1 (and why, on stderr) if it differs."""
    if "--check" in argv:
        current = page.read_text(encoding="utf-8") if page.exists() else None
        if current != fresh:
            print(f"{page.name}: {what} differs from the code; run `{regenerate}`", file=sys.stderr)
            return 1
        return 0
    page.write_text(fresh, encoding="utf-8")
    return 0
