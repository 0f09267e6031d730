"""Every relative link and ``#anchor`` in the README and docs/ resolves, as GitHub would resolve it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.pages import PAGES, ROOT, anchors, links


def _broken(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(ROOT)}: link {target!r}"
        if not file.exists():
            problems.append(
                f"{where}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}"
            )
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{where}: no heading in {file.relative_to(ROOT)} has the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert _broken(page) == []


def test_the_anchors_are_githubs() -> None:
    """The slug rule, on headings these pages use: code spans and punctuation dropped, not their text."""
    from tests.docs.pages import slug

    assert slug("`baton demo`") == "baton-demo"
    assert (
        slug("Setup mode, the setup page and the status page")
        == "setup-mode-the-setup-page-and-the-status-page"
    )
    assert slug("`trigger`: who may start an agent") == "trigger-who-may-start-an-agent"
    assert slug("The log only grew: `baton log verify`") == "the-log-only-grew-baton-log-verify"
