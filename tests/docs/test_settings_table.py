"""docs/operators.md holds the one settings table, generated from KNOWN in baton/settings.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from baton.settings import KNOWN
from tests.docs.pages import ROOT

SCRIPT = ROOT / "scripts" / "settings_table.py"
OPERATORS = ROOT / "docs" / "operators.md"


def _check(page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--page", str(page)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_the_settings_table_in_operators_md_is_the_one_generated_from_known() -> None:
    done = _check(OPERATORS)
    assert done.returncode == 0, done.stderr


def test_a_page_that_drifted_fails_and_says_which_command_regenerates_it(tmp_path: Path) -> None:
    page = tmp_path / "operators.md"
    page.write_text(OPERATORS.read_text(encoding="utf-8").replace(KNOWN["APP_ID"], "edited by hand"))
    done = _check(page)
    assert done.returncode == 1
    assert "run `python scripts/settings_table.py`" in done.stderr


def test_every_setting_is_in_the_table_once_and_no_page_has_a_second_table() -> None:
    text = OPERATORS.read_text(encoding="utf-8")
    for name in KNOWN:
        assert text.count(f"| `{name}` |") == 1, name
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page != OPERATORS:
            assert "| `BATON_AUDIT_SECRET` |" not in page.read_text(encoding="utf-8"), page
