"""The packages keep to their places, as the README's code map draws them.

``baton`` is the kernel both sides stand on; ``bot`` is the web process; ``worker`` is everything
after the queue; ``evidence`` is the receipts library anyone can use offline; ``emulator`` plays
GitHub and the model vendors; ``demo`` drives the whole product. Only ``baton.cli`` (the command
table) composes the packages, and nothing imports by string, so these edges are all there are.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("baton", "bot", "worker", "evidence", "emulator", "demo")
#: The one module allowed to import every package: the `baton` command's table of subcommands.
COMPOSER = "baton/cli.py"

#: package -> the packages it must never import.
FORBIDDEN: dict[str, set[str]] = {
    "baton": {"bot", "worker", "emulator", "demo"},
    "bot": {"worker", "emulator", "demo"},
    "worker": {"bot", "emulator", "demo"},
    "evidence": {"baton", "bot", "worker", "emulator", "demo"},
    "emulator": {"baton", "bot", "worker", "evidence", "demo"},
    "demo": set(),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names.add("<relative>")
    return names


def _by_string(path: Path) -> list[str]:
    """Calls that import a module named at run time (importlib, __import__, pkgutil)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "attr", None) or getattr(func, "id", "")
            if name in {"import_module", "__import__", "find_spec", "iter_modules", "walk_packages"}:
                found.append(f"{path.name}:{node.lineno}: {name}()")
    return found


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _offenders(package: str) -> list[str]:
    bad = []
    for path in _files(package):
        rel = str(path.relative_to(ROOT))
        if rel == COMPOSER:
            continue
        for name in sorted(_imports(path)):
            if name.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{rel}: imports {name}")
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    assert _offenders(package) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_by_string_or_relative_import(package: str) -> None:
    """A module named in a string is an edge no checker sees; a relative one hides its package."""
    strings = [hit for path in _files(package) for hit in _by_string(path)]
    relative = [str(p.relative_to(ROOT)) for p in _files(package) if "<relative>" in _imports(p)]
    assert strings == []
    assert relative == []


def test_the_composer_is_the_only_kernel_module_that_sees_the_sides() -> None:
    composer = _imports(ROOT / COMPOSER)
    assert {"bot.commands.serve", "worker.commands.worker", "demo.play", "emulator.command"} <= composer


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    """The checks above can fail: a planted edge and a planted import by string are both found."""
    planted = tmp_path / "planted.py"
    planted.write_text("import importlib\nfrom bot.app import WEBHOOK_PATH\nimportlib.import_module('x')\n")
    assert "bot.app" in _imports(planted)
    assert any("baton.tasks" in _imports(p) for p in _files("worker"))
    assert _by_string(planted) == ["planted.py:3: import_module()"]
