"""The run record: typed, and stored as the same bytes the plain dict it replaced was."""

from __future__ import annotations

import orjson

from baton.tasks import Outcome
from worker.runner import run as runner
from worker.runner.review import ReviewRecord
from worker.runner.verdict import Result
from worker.runs import review
from worker.runs.record import Record


def _ran() -> runner.RunRecord:
    return runner.RunRecord(
        "t-1", "script", Outcome.DONE, "ab" * 32, {"policy_sha256": "cd"}, {"net": 1},
        adapter="script", exit_code=0, durations={"agent_s": 1.5, "total_s": 2.0},
        egress=[{"host": "h", "port": 443, "allowed": True, "connections": 1}],
        commit="c" * 40, cost_usd=0.25, started_at="2026-12-01T00:00:00+00:00",
    )  # fmt: skip


def test_a_record_stores_the_bytes_the_dict_did_and_reads_back_equal() -> None:
    ran = _ran()
    before = {**ran.to_data(), "explanation": "allowed", "base": "b" * 40, "issue_sha256": "e" * 64}
    record = Record.of(ran, explanation="allowed", base="b" * 40, issue_sha256="e" * 64)
    stored = orjson.dumps(record.to_data(), option=orjson.OPT_SORT_KEYS)
    assert stored == orjson.dumps(before, option=orjson.OPT_SORT_KEYS)
    assert Record.from_data(orjson.loads(stored)) == Record.from_data(record.to_data())
    assert Record.from_data(orjson.loads(stored)).outcome is Outcome.DONE
    assert record.agent_seconds == 1.5


def test_a_review_is_stored_only_when_there_is_one_and_counts_in_the_runs_usage() -> None:
    record = Record.of(_ran(), explanation="allowed", base="b" * 40, issue_sha256="e" * 64)
    assert "review" not in record.to_data()
    assert record.usage_fields()["agent_seconds"] == "1.500"
    done = ReviewRecord("checker", Result.BLOCKED, "the reviewer found secret_leak", cost_usd=0.5,
                        durations={"review_s": 2.25}, blocking=["secret_leak"])  # fmt: skip
    blocked = review.reviewed(record, done)
    assert (blocked.outcome, blocked.commit, blocked.reason) == (
        Outcome.REVIEW_BLOCKED,
        None,
        "the reviewer found secret_leak; nothing was pushed",
    )
    assert blocked.durations["review_s"] == 2.25
    assert orjson.loads(orjson.dumps(blocked.to_data()))["review"]["result"] == "blocked"
    assert blocked.usage_fields()["agent_seconds"] == "3.750"  # the reviewer's minutes count too
    assert blocked.usage_fields()["cost_usd"] == "0.750000"  # and its dollars
    passed = review.reviewed(
        record, ReviewRecord("checker", Result.PASSED, "nothing", durations={"review_s": 1.0})
    )
    assert (passed.outcome, passed.commit) == (Outcome.DONE, record.commit)
    assert Record.from_data(orjson.loads(orjson.dumps(passed.to_data()))) == passed
