"""docs/security.md's side-by-side of the box and sandbox-runtime: every row names the test that
holds Baton's claim, and that test exists (renaming or removing it fails here, and with it the row)."""

from __future__ import annotations

import ast
import re

from tests.docs.pages import ROOT

_ROW = re.compile(r"^\| (?P<what>[^|]+?) \| (?P<baton>[^|]+?) \| (?P<peer>[^|]+?) \| `(?P<test>[^`]+)` \|$")
#: What the issue asked the box to hold, each a row.
REQUIRED = ("UNIX sockets", "other kernel surface", "memory", "processes", "disk", "domain fronting",
            "what to install")  # fmt: skip


def _rows() -> dict[str, str]:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    return {m["what"]: m["test"] for line in text.splitlines() if (m := _ROW.match(line))}


def test_every_row_names_a_test_that_exists() -> None:
    rows = _rows()
    assert len(rows) >= 15
    for what, test in rows.items():
        path, _, name = test.partition("::")
        source = ROOT / path
        assert source.is_file(), f"{what}: {path} is not a file"
        names = {n.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{what}: {path} has no test {name}"


def test_the_rows_the_hardened_box_promised_are_there() -> None:
    assert set(REQUIRED) <= set(_rows())
