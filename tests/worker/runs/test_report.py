"""What a run says: pure functions of its record, the same words for the same run."""

from __future__ import annotations

import dataclasses

import redis

from worker.runs import cancel, report
from worker.runs.record import Record


def test_the_output_tail_is_redacted_of_what_the_agent_was_given_and_of_token_shapes() -> None:
    given = "sk-ant-api03-very-secret-value"
    text = f"key={given}\ngh=ghp_{'a' * 36}\nauth: Bearer abcdefghijklmnop1234\nplain words stay"
    out = report.redact(text, [given])
    assert given not in out
    assert "ghp_" not in out
    assert "abcdefghijklmnop1234" not in out
    assert "plain words stay" in out


def test_a_commit_names_its_task_and_who_asked() -> None:
    message = report.commit_message(title="Fix   the\nspinner", number=7, task_id="t-1", agent="script",
                                    co_author="maria <1+maria@users.noreply.github.com>")  # fmt: skip
    subject, *rest = message.splitlines()
    assert subject == "Fix the spinner"
    assert report.trailer(message) == "t-1"
    assert "Co-authored-by: maria <1+maria@users.noreply.github.com>" in rest
    assert report.trailer("no trailers here") is None


def test_a_failed_run_shows_its_last_lines_inert_and_says_nothing_was_pushed() -> None:
    record = {"outcome": "failed", "reason": "the agent reported failure", "agent": "script",
              "output_tail": "\n".join(f"line {i}" for i in range(40)) + "\n```\n@everyone"}  # fmt: skip
    status = report.ended("t-1", "script", Record.from_data(record))
    assert status.summary.startswith("The agent reported failure.")
    assert "Nothing was pushed." in status.summary
    assert status.evidence is not None
    assert "line 39" in status.evidence
    assert "line 10" not in status.evidence  # the last lines only


def test_a_cancel_stops_only_runs_asked_for_before_it(rdb: redis.Redis) -> None:
    cancel.request(rdb, 1, 2, cancel.Cancel("2026-11-30T10:00:00.500Z", "c1", "maria", "command"))
    assert cancel.applies(rdb, 1, 2, "2026-11-30T10:00:00.400Z") is not None  # asked for earlier
    assert cancel.applies(rdb, 1, 2, "2026-11-30T10:00:00.600Z") is None  # asked for after the cancel
    cancel.request(rdb, 1, 2, cancel.Cancel("2026-11-30T09:00:00.000Z", "c0", "ada", "closed"))
    found = cancel.applies(rdb, 1, 2, "2026-11-30T10:00:00.400Z")
    assert found is not None
    assert found.task_id == "c1"  # an older cancel never replaces a newer one
    assert "`maria` cancelled it" in found.reason()


def test_a_receipt_on_the_issue_is_whole_or_absent_never_cut() -> None:
    from worker.github.limits import MAX_COMMENT_CHARS
    from worker.status import RECEIPT_TOO_LARGE, render

    record = {"agent": "helper", "outcome": "violations", "violations": [], "box": {}}
    status = report.ended("t1", "helper", Record.from_data(record))
    small = dataclasses.replace(status, receipt="### Signed receipt\n\n```json\n{}\n```\n")
    assert "### Signed receipt" in render(small)
    huge = dataclasses.replace(status, receipt="```json\n" + "x" * MAX_COMMENT_CHARS + "\n```")
    shown = render(huge)
    assert "x" * 100 not in shown
    assert RECEIPT_TOO_LARGE in shown
    assert shown.rstrip().endswith("state `failed`</sub>")
