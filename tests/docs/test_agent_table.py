"""The README's agent table says what is true: each real CLI with the version its adapter was verified
with, and "verified" only for a CLI whose end-to-end test (in the box, through the model gateway,
against the stand-in, to its one commit) is in this suite, which CI runs without skips."""

from __future__ import annotations

import importlib
import re

from tests.docs.pages import ROOT
from worker.runner.adapters import SPECS

#: Adapter -> the test that runs its real CLI end to end ("module:function"). Renaming or removing
#: one fails this test, and with it the README's claim.
VERIFIED_BY = {
    "claude-code": "tests.worker.runner.test_baton_run:"
    "test_the_real_claude_code_cli_edits_through_the_box_and_talks_only_to_its_model",
    "codex": "tests.worker.runner.test_baton_run:"
    "test_the_real_codex_cli_edits_through_the_box_and_talks_only_to_its_model",
    "gemini": "tests.worker.runner.test_real_gemini:"
    "test_gemini_cli_makes_its_one_commit_through_the_box_and_talks_only_to_its_model",
    "qwen-code": "tests.worker.runner.test_real_qwen:"
    "test_qwen_code_makes_its_one_commit_through_the_box_and_talks_only_to_its_model",
    "opencode": "tests.worker.runner.test_real_opencode:"
    "test_the_real_opencode_cli_edits_through_the_box_and_talks_only_to_its_model",
    "aider": "tests.worker.runner.test_real_aider:"
    "test_aider_writes_a_file_through_the_box_and_talks_only_to_its_model",
    "mini-swe-agent": "tests.worker.runner.test_real_mini_swe_agent:"
    "test_mini_writes_a_file_through_the_box_and_talks_only_to_its_model",
}
_ROW = re.compile(r"^\| (?P<cli>[^|]+?) \| `(?P<adapter>[a-z-]+)` \| (?P<pinned>[^|]+?) \| (?P<ci>[^|]+) \|$")


def _rows() -> dict[str, dict[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return {m["adapter"]: m.groupdict() for line in text.splitlines() if (m := _ROW.match(line))}


def test_every_real_cli_has_a_row_with_its_pinned_version() -> None:
    rows = _rows()
    real = {name for name, spec in SPECS.items() if spec.pinned is not None}
    assert set(rows) == real
    for adapter, row in rows.items():
        assert row["pinned"] == SPECS[adapter].pinned, adapter


def test_verified_is_said_only_of_a_cli_whose_end_to_end_test_exists() -> None:
    for adapter, row in _rows().items():
        assert (row["ci"] == "verified") is (adapter in VERIFIED_BY), adapter
    for adapter, where in VERIFIED_BY.items():
        module, _, function = where.partition(":")
        assert callable(getattr(importlib.import_module(module), function, None)), f"{adapter}: {where}"
