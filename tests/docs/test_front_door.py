"""The README stays a front door, and every page in docs/ can be found from it."""

from __future__ import annotations

from tests.docs.pages import ROOT, links

#: Issue 22: the README says what Baton is, its path, its commands, who reads what and the code map.
MAX_README_LINES = 150


def test_the_readme_is_a_front_door_not_the_manual() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail into docs/"


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index() -> None:
    linked = {t.partition("#")[0].removeprefix("docs/") for t in links(ROOT / "README.md")}
    linked |= {t.partition("#")[0] for t in links(ROOT / "docs" / "README.md")}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert sorted(pages - linked) == []
