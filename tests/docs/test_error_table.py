"""docs/errors.md is the page generated from the code registry, so it cannot drift from the code."""

from __future__ import annotations

import subprocess
import sys

from baton import codes
from tests.docs.pages import ROOT

SCRIPT = ROOT / "scripts" / "error_table.py"


def test_errors_md_is_the_page_generated_from_the_registry() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_every_registered_code_has_its_row_with_its_sentence() -> None:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for entry in codes.ENTRIES:
        assert text.count(f"| `{entry.code}` |") == 1, entry.code
        assert entry.sentence.replace("|", "\\|") in text, entry.code
