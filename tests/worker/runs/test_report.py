"""What a run says: pure functions of its record, the same words for the same run."""

from __future__ import annotations

import dataclasses

import redis

from worker import receipts
from worker.runner.probe import _NETWORK  # the box's wordings, one per network
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


#: A box report as records made before the box wrote its own summary hold it (three of 17 not in force).
_OLD_BOX = {
    **{name: {"in_force": True, "detail": "…"} for name in (
        "pid_namespace", "ipc_namespace", "uts_namespace", "user_namespace", "net_namespace",
        "cgroup_namespace", "mount_namespace", "die_with_parent", "new_session", "capabilities_dropped",
        "no_new_privileges", "non_root_uid", "read_only_system", "file_size_limit")},
    **{name: {"in_force": False, "detail": "not in force: …"}
       for name in ("process_limit", "memory_limit", "seccomp")},
    "network": "loopback only + proxy",
    "writable": ["/workspace", "/home/agent", "/tmp"],
}  # fmt: skip


def _box_line(box: dict[str, object]) -> str:
    record = Record.from_data({"agent": "script", "outcome": "no-changes", "adapter": "script", "box": box})
    [line] = [line for line in report.run_lines(record) if line.startswith("Box: ")]
    return line


def test_the_status_shows_the_boxs_own_one_sentence_summary() -> None:
    said = "network: only the model gateway; memory 4 GiB (cgroup); processes 512; disk 10 GiB; seccomp on"
    assert _box_line({**_OLD_BOX, "summary": said}) == f"Box: {said}"


def test_a_record_without_a_summary_counts_the_protections_and_names_only_those_not_in_force() -> None:
    assert _box_line(_OLD_BOX) == (
        "Box: network loopback only + proxy; 14 of 17 protections in force; "
        "not in force: memory limit, process limit, seccomp"
    )


def test_a_summary_with_markup_is_shown_inert() -> None:
    line = _box_line({**_OLD_BOX, "summary": "memory [4 GiB](https://x.example) @everyone\n- seccomp on"})
    assert line == "Box: `memory [4 GiB](https://x.example) @everyone - seccomp on`"
    assert _box_line({**_OLD_BOX, "summary": "see https://x.example"}) == "Box: `see https://x.example`"


def test_a_run_that_ended_before_its_box_started_says_only_what_it_got_to() -> None:
    """The gate was asked and the adapter found, then a cancel came: no version, box or time is made up."""
    record = Record.from_data({"agent": "script", "outcome": "cancelled", "reason": "`maria` cancelled it",
                               "decision_sha256": "ab" * 32, "adapter": "script"})  # fmt: skip
    status = report.ended("t-1", "script", record)
    assert status.summary == (
        "The run was stopped: `maria` cancelled it. "
        "No agent was started and no box was made; nothing was run or pushed."
    )
    assert list(status.details) == ["Adapter `script`", f"Decision `sha256:{'ab' * 8}…`"]


def test_the_receipt_keeps_the_whole_box_report_beside_its_summary() -> None:
    """The comment says one sentence; the signed ``baton/agent`` predicate keeps every protection."""
    box = {**_OLD_BOX, "summary": "network: only the model gateway; seccomp on"}
    record = Record.from_data({"agent": "script", "outcome": "done", "box": box})
    predicate = receipts.agent_run(task_id="t-1", full_name="o/r", number=1, base="a" * 40,
                                   diff_digest="b" * 64, record=record)  # fmt: skip
    held = predicate["box"]
    assert isinstance(held, dict)
    assert held["summary"] == box["summary"]
    assert held["memoryLimit"] == {"inForce": False, "detail": "not in force: …"}
    assert len([v for v in held.values() if isinstance(v, dict)]) == 17


def test_a_run_stopped_at_a_box_limit_says_which_on_the_issue_and_in_its_receipt() -> None:
    over = {"kind": "memory", "limit_bytes": 128 << 20, "used_bytes": 131 << 20, "mechanism": "supervisor"}
    record = Record.from_data({
        "agent": "script", "outcome": "over-limit", "over_limit": over, "box": _OLD_BOX,
        "reason": "the agent was stopped: it passed its memory limit of 128 MiB: 131 MiB measured by "
                  "Baton's supervisor, which stopped the box; nothing was committed",
    })  # fmt: skip
    status = report.ended("t-1", "script", record)
    assert status.headline == "🛑 Stopped: the agent passed a limit of its box"
    assert status.summary.startswith("The agent was stopped: it passed its memory limit of 128 MiB")
    assert "Nothing was pushed." in status.summary
    predicate = receipts.agent_run(task_id="t-1", full_name="o/r", number=1, base="a" * 40,
                                   diff_digest="b" * 64, record=record)  # fmt: skip
    exit_ = predicate["exit"]
    assert isinstance(exit_, dict)
    assert exit_["outcome"] == "over-limit"
    assert exit_["overLimit"] == {"kind": "memory", "limitBytes": 128 << 20, "usedBytes": 131 << 20,
                                  "mechanism": "supervisor"}  # fmt: skip
    plain = receipts.agent_run(task_id="t-1", full_name="o/r", number=1, base="a" * 40, diff_digest="b" * 64,
                               record=dataclasses.replace(record, over_limit=None, outcome="done"))  # type: ignore[arg-type]  # fmt: skip
    assert "overLimit" not in plain["exit"]  # type: ignore[operator]  # earlier receipts keep their bytes


def test_a_fronted_tunnel_the_proxy_refused_is_named_with_its_reason_in_the_status_and_receipt() -> None:
    egress = [{"host": "allowed.example", "port": 443, "allowed": False, "connections": 1, "bytes_up": 0,
               "bytes_down": 0, "reasons": {"sni-mismatch": 1}, "sni": {"other.example": 1}}]  # fmt: skip
    record = Record.from_data({"agent": "script", "outcome": "done", "box": _OLD_BOX, "egress": egress})
    assert report.egress_summary(record.egress) == "allowed.example:443 refused (sni-mismatch) x1"
    predicate = receipts.agent_run(task_id="t-1", full_name="o/r", number=1, base="a" * 40,
                                   diff_digest="b" * 64, record=record)  # fmt: skip
    egress_claim = predicate["egress"]
    assert isinstance(egress_claim, dict)
    refused = {"host": "allowed.example", "port": 443, "allowed": False, "connections": 1}
    assert egress_claim["hosts"] == [{**refused, "reasons": ["sni-mismatch"]}]


def test_every_sentence_the_box_writes_is_shown_as_plain_text() -> None:
    """The box's own words need no quoting: each network wording, with every limit, reads as prose."""
    for network in _NETWORK.values():
        said = f"{network}; memory 4 GiB (supervisor); processes 1024; disk 10 GiB; seccomp on"
        assert report.box_summary({"summary": said}) == said
