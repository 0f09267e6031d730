"""A gate's output as annotations: each tool's format, and the lines that must not become one."""

from __future__ import annotations

import pytest

from worker.gates.annotations import DEFAULT_LIMIT, MAX_MESSAGE_CHARS, parse
from worker.github.limits import Annotation, annotation_batches


def one(output: str, **kwargs: object) -> tuple[str, int, str, str]:
    found = parse(output, **kwargs)  # type: ignore[arg-type]
    assert len(found) == 1, found
    a = found[0]
    assert a.start_line == a.end_line
    return a.path, a.start_line, a.level, a.message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # plain path:line: message (pytest's assertion line, grep -n style)
        ("tests/test_app.py:12: AssertionError", ("tests/test_app.py", 12, "failure", "AssertionError")),
        ("app.py:1: bad thing", ("app.py", 1, "failure", "bad thing")),
        # gcc / clang, with a column
        ("src/main.c:3:5: error: 'x' undeclared", ("src/main.c", 3, "failure", "error: 'x' undeclared")),
        ("src/main.c:7:1: warning: unused variable",
         ("src/main.c", 7, "warning", "warning: unused variable")),
        ("src/main.c:7:1: note: declared here", ("src/main.c", 7, "notice", "note: declared here")),
        # mypy, with and without --show-column-numbers
        ('app.py:4: error: Name "y" is not defined  [name-defined]',
         ("app.py", 4, "failure", 'error: Name "y" is not defined [name-defined]')),
        ("app.py:4:7: error: Incompatible types", ("app.py", 4, "failure", "error: Incompatible types")),
        # ruff --output-format concise
        ("app.py:1:8: F401 [*] `os` imported but unused",
         ("app.py", 1, "failure", "F401 [*] `os` imported but unused")),
        # flake8 (./ prefix), go vet / go build
        ("./app.py:1:1: F401 'os' imported but unused",
         ("app.py", 1, "failure", "F401 'os' imported but unused")),
        ("./cmd/main.go:3:2: undefined: x", ("cmd/main.go", 3, "failure", "undefined: x")),
        # eslint -f unix: absolute paths under the box's workspace
        ("/workspace/web/app.js:1:5: 'x' is not defined. [Error/no-undef]",
         ("web/app.js", 1, "failure", "'x' is not defined. [Error/no-undef]")),
        # line 0 (a file-level finding) lands on line 1
        ("setup.cfg:0: file-level problem", ("setup.cfg", 1, "failure", "file-level problem")),
    ],
)  # fmt: skip
def test_each_tool_format(line: str, expected: tuple[str, int, str, str]) -> None:
    assert one(f"some noise\n{line}\nmore noise\n") == expected


def test_ruff_default_format_takes_the_headline_above_the_location() -> None:
    output = "F401 [*] `os` imported but unused\n --> app.py:1:8\n  |\n1 | import os\n  |        ^^\n"
    assert one(output) == ("app.py", 1, "failure", "F401 [*] `os` imported but unused")


def test_rustc_format_keeps_the_severity() -> None:
    assert one("warning: unused variable: `x`\n  --> src/main.rs:2:9\n") == (
        "src/main.rs",
        2,
        "warning",
        "warning: unused variable: `x`",
    )


def test_a_location_line_without_a_headline_is_ignored() -> None:
    assert parse("\n --> app.py:1:8\n") == []
    assert parse("app.py:2: first\n --> app.py:1:8\n") == [
        Annotation("app.py", 2, 2, "failure", "first")
    ]  # the location under another location has no message of its own


@pytest.mark.parametrize(
    "line",
    [
        "../secret.py:1: outside",
        "a/../../etc/passwd:1: outside",
        "/etc/passwd:1: absolute",
        "/workspace/../etc/passwd:1: absolute, then outside",
        "/home/agent/x.py:1: the box's HOME is not the tree",
        "a//b.py:1: not canonical",
        "a/./b.py:1: not canonical",
        "app.py:1:",  # no message
        "app.py:x: no number",
        "app.py: 1: space before the number",
        "12:30:45: a time of day",
        "http://example.com:80: a URL",
        "app.py:12345678901: too many digits",
    ],
)
def test_lines_that_name_no_place_in_the_tree_are_refused(line: str) -> None:
    assert parse(line) == []


def test_known_paths_keep_only_the_commits_files() -> None:
    output = "app.py:1: real\nghost.py:2: not in the commit\nlib/util.py:3: real too\n"
    found = parse(output, known_paths={"app.py", "lib/util.py"})
    assert [(a.path, a.start_line) for a in found] == [("app.py", 1), ("lib/util.py", 3)]


def test_long_messages_are_cut_to_one_bounded_line() -> None:
    found = parse("app.py:1: " + "x" * 5000 + "\n")
    assert len(found[0].message) == MAX_MESSAGE_CHARS
    assert found[0].message.endswith("…")


def test_messages_are_one_clean_line() -> None:
    """Terminal escapes go, control characters become visible, whitespace collapses."""
    found = parse("\x1b[31mapp.py\x1b[0m:1:\tbad\x07  thing\r\n")
    assert [(a.path, a.message) for a in found] == [("app.py", "bad\ufffd thing")]


def test_duplicates_are_dropped_and_order_is_the_outputs() -> None:
    output = "b.py:2: two\na.py:1: one\nb.py:2: two\nb.py:2:9: two\na.py:1: other\n"
    found = parse(output)
    assert [(a.path, a.start_line, a.message) for a in found] == [
        ("b.py", 2, "two"),
        ("a.py", 1, "one"),
        ("a.py", 1, "other"),
    ]
    assert parse(output) == found  # deterministic


def test_at_most_limit_annotations() -> None:
    output = "".join(f"app.py:{n}: finding {n}\n" for n in range(1, 2000))
    assert len(parse(output)) == DEFAULT_LIMIT
    found = parse(output, limit=3)
    assert [a.start_line for a in found] == [1, 2, 3]
    assert parse(output, limit=0) == []
    assert [len(b) for b in annotation_batches(parse(output))] == [50] * 10


def test_level_is_a_ceiling_and_title_is_kept() -> None:
    found = parse("app.py:1: error: e\napp.py:2: something\n", level="warning", title="lint")
    assert [(a.level, a.title) for a in found] == [("warning", "lint"), ("warning", "lint")]
    assert parse("app.py:1: error: e\n", level="notice")[0].level == "notice"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="level"):
        parse("", level="error")
    with pytest.raises(ValueError, match="limit"):
        parse("", limit=-1)
