"""The run record: typed, and stored as the same bytes the plain dict it replaced was."""

from __future__ import annotations

import orjson

from baton.tasks import Outcome
from worker.runner import run as runner
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
