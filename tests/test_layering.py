"""The packages keep to their places: Baton never imports its GitHub stand-in, and the
web side never imports the worker's machinery (it only names the job function)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def offenders(package: str, forbidden: str) -> list[str]:
    return [f"{path}: {name}" for path, names in imports(package).items() for name in sorted(names)
            if name == forbidden or name.startswith(forbidden + ".")]  # fmt: skip


def test_baton_never_imports_the_emulator() -> None:
    assert offenders("bot", "emulator") == []
    assert offenders("worker", "emulator") == []


def test_the_web_side_does_not_import_the_worker() -> None:
    """bot/ stays thin; only the CLI registry names worker commands (by string)."""
    assert offenders("bot", "worker") == []


def test_the_checker_sees_imports() -> None:
    assert any("bot.tasks" in names for names in imports("worker").values())
