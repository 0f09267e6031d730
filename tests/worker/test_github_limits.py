"""GitHub's limits, enforced before sending (a 422 would lose the whole report)."""

from __future__ import annotations

import pytest

from worker.github.limits import (
    MAX_OUTPUT_CHARS,
    Action,
    Annotation,
    LimitError,
    Output,
    actions_to_api,
    annotation_batches,
    truncate,
)


def test_long_output_is_cut_to_the_limit_with_a_visible_marker_and_link() -> None:
    body = Output("t", "s" * 100_000, "x" * 70_000).to_api("https://baton.example/evidence/1")
    for key in ("summary", "text"):
        assert len(body[key].encode()) == MAX_OUTPUT_CHARS
        assert "truncated" in body[key]
        assert body[key].endswith("Full evidence: https://baton.example/evidence/1")
    assert Output("t", "short").to_api(None) == {"title": "t", "summary": "short"}


def test_multibyte_text_is_cut_by_bytes_without_splitting_a_character() -> None:
    body = Output("t", "é" * 40_000).to_api(None)["summary"]  # 80,000 bytes, 40,000 characters
    assert len(body.encode()) <= MAX_OUTPUT_CHARS
    assert "truncated" in body
    assert body.startswith("é" * 1000)


def test_text_at_the_limit_is_untouched() -> None:
    exact = "y" * MAX_OUTPUT_CHARS
    assert truncate(exact, MAX_OUTPUT_CHARS, None) == exact
    assert len(truncate(exact + "y", MAX_OUTPUT_CHARS, None).encode()) == MAX_OUTPUT_CHARS


def test_annotations_go_out_fifty_per_request() -> None:
    notes = [Annotation("a.py", i + 1, i + 1, "warning", f"m{i}") for i in range(120)]
    batches = annotation_batches(notes)
    assert [len(b) for b in batches] == [50, 50, 20]
    assert batches[2][-1]["message"] == "m119"
    assert batches[0][0] == {"path": "a.py", "start_line": 1, "end_line": 1, "annotation_level": "warning",
                             "message": "m0"}  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    [
        Annotation("a", 1, 1, "error", "m"),
        Annotation("a", 3, 2, "notice", "m"),
        Annotation("a", 0, 1, "notice", "m"),
    ],
)
def test_malformed_annotations_are_caught_before_sending(bad: Annotation) -> None:
    with pytest.raises(LimitError):
        bad.to_api()


@pytest.mark.parametrize(
    "action",
    [
        Action("x" * 21, "id", "d"),
        Action("label", "i" * 21, "d"),
        Action("label", "id", "d" * 41),
        Action("", "id", "d"),
    ],
)
def test_actions_over_githubs_limits_are_refused(action: Action) -> None:
    with pytest.raises(LimitError):
        actions_to_api([action])


def test_at_most_three_actions() -> None:
    ok = Action("x" * 20, "i" * 20, "d" * 40)
    assert len(actions_to_api([ok] * 3)) == 3
    with pytest.raises(LimitError, match="at most 3"):
        actions_to_api([ok] * 4)
