"""The reviewer's verdict, read strictly: hostile replies (huge, nested, wrong types, extra or repeated
keys, places outside the tree or the change) are malformed, and malformed blocks like a finding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.runner import results, verdict
from worker.runner.verdict import Location, Malformed, Ran, Result, Verdict, judge, parse


def _clean() -> dict[str, Any]:
    return {c: {"found": False, "reasons": [], "locations": []} for c in verdict.CATEGORIES}


def _with(category: str, **entry: Any) -> dict[str, Any]:
    data = _clean()
    data[category] = {**data[category], **entry}
    return data


def _malformed(reply: str) -> str:
    read = parse(reply)
    assert isinstance(read, Malformed), read
    return read.why


def test_a_clean_verdict_reads_as_three_findings_of_nothing() -> None:
    read = parse(json.dumps(_clean()))
    assert isinstance(read, Verdict)
    assert [f.category for f in read.findings] == list(verdict.CATEGORIES)
    assert read.blocking(verdict.CATEGORIES) == ()


def test_a_finding_keeps_its_reasons_and_places_and_one_json_fence_is_allowed() -> None:
    found = _with("secret_leak", found=True, reasons=["adds an AWS key"],
                  locations=["app/cfg.py:3", "/workspace/app/cfg.py:4", "./lib/a.py:10-12"])  # fmt: skip
    read = parse(f"```json\n{json.dumps(found, indent=2)}\n```\n")
    assert isinstance(read, Verdict)
    [leak] = read.blocking(verdict.CATEGORIES)
    assert leak.reasons == ("adds an AWS key",)
    assert leak.locations == (
        Location("app/cfg.py", 3),
        Location("app/cfg.py", 4),
        Location("lib/a.py", 10, 12),
    )
    assert read.blocking(("malicious_change",)) == ()  # not what this policy blocks on


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("", "the reviewer gave no reply"),
        ("Looks fine to me.", "the reply is not one JSON object (Expecting value)"),
        ('Here it is: {"secret_leak": 1}', "the reply is not one JSON object (Expecting value)"),
        (json.dumps(_clean()) + "\n" + json.dumps(_clean()), "the reply is not one JSON object (Extra data)"),
        ("[]", "the reply is an array, not an object"),
        ("null", "the reply is null, not an object"),
        (json.dumps({**_clean(), "verdict": "pass"}), "the verdict has the unknown key 'verdict'"),
        (
            json.dumps({k: v for k, v in _clean().items() if k != "secret_leak"}),
            "the verdict has no 'secret_leak'",
        ),
        (json.dumps(_with("secret_leak", severity="low")), "secret_leak has the unknown key 'severity'"),
        (json.dumps({**_clean(), "malicious_change": {"found": False}}), "malicious_change has no 'reasons'"),
        (json.dumps({**_clean(), "malicious_change": False}), "malicious_change is a boolean, not an object"),
        (json.dumps(_with("secret_leak", found=0)), "secret_leak.found is a number, not true or false"),
        (json.dumps(_with("secret_leak", found="false")), "secret_leak.found is a string, not true or false"),
        (json.dumps(_with("secret_leak", reasons="none")), "secret_leak.reasons is a string, not an array"),
        (
            json.dumps(_with("secret_leak", reasons=[{"why": 1}])),
            "secret_leak.reasons[0] is an object, not a string",
        ),
        (
            json.dumps(_with("secret_leak", locations=["README.md"])),
            "secret_leak.locations[0] is not path:line",
        ),
        (
            json.dumps(_with("secret_leak", locations=["../etc/passwd:1"])),
            "secret_leak.locations[0] is not a path inside the tree",
        ),
        (
            json.dumps(_with("secret_leak", locations=["/etc/passwd:1"])),
            "secret_leak.locations[0] is not a path inside the tree",
        ),
        (
            json.dumps(_with("secret_leak", locations=["a\u202eb.py:1"])),
            "secret_leak.locations[0] is not a path inside the tree",
        ),
        (
            json.dumps(_with("secret_leak", locations=["a.py:0"])),
            "secret_leak.locations[0] names no line of a file",
        ),
        (
            json.dumps(_with("secret_leak", locations=["a.py:9-3"])),
            "secret_leak.locations[0] names no line of a file",
        ),
        ('{"secret_leak": NaN}', "NaN is not JSON"),
    ],
)
def test_a_reply_that_is_not_exactly_the_verdict_is_malformed(reply: str, why: str) -> None:
    assert _malformed(reply).startswith(why)


def test_a_category_given_twice_is_malformed_not_the_last_one_wins() -> None:
    """``{"secret_leak": {found: true}, ..., "secret_leak": {found: false}}``: a parser that kept the
    last one would read a finding away."""
    text = (
        json.dumps(_with("secret_leak", found=True))[:-1]
        + ', "secret_leak": '
        + json.dumps(_clean()["secret_leak"])
        + "}"
    )
    assert _malformed(text) == "the key 'secret_leak' is given twice"


def test_a_huge_or_deeply_nested_reply_is_malformed_without_reading_it_all() -> None:
    huge = json.dumps(_with("secret_leak", reasons=["x" * 40_000]))
    assert _malformed(huge).startswith("the reply is 40,")
    nested = json.dumps(_with("secret_leak", reasons=[])).replace("[]", "[" * 5000 + "]" * 5000, 1)
    assert _malformed(nested) in (
        "the reply is nested too deep to read",
        "secret_leak.reasons[0] is a array, not a string",
    )
    deep = "[" * 20_000 + "]" * 20_000
    assert _malformed(deep).startswith("the reply is")
    cut = results.parse(results.ResultFormat.CLAUDE_JSON, json.dumps({"type": "result", "is_error": False,
                        "result": json.dumps(_with("secret_leak", reasons=["y" * 5000]))}), 0)  # fmt: skip
    assert cut.summary is not None
    assert _malformed(cut.summary) == "the reply was cut: it is longer than its CLI's summary holds"


def test_reasons_and_places_past_their_bounds_are_counted_and_left_out() -> None:
    many = _with("malicious_change", found=True, reasons=[f"reason {i} " + "z" * 400 for i in range(9)],
                 locations=[f"src/f{i}.py:{i + 1}" for i in range(25)])  # fmt: skip
    read = parse(json.dumps(many))
    assert isinstance(read, Verdict)
    [bad] = read.blocking(verdict.CATEGORIES)
    assert (len(bad.reasons), bad.reasons_left_out) == (verdict.MAX_REASONS, 4)
    assert all(len(r) <= verdict.MAX_REASON_CHARS for r in bad.reasons)
    assert (len(bad.locations), bad.locations_left_out) == (verdict.MAX_LOCATIONS, 15)


def test_only_a_verdict_that_parses_and_finds_nothing_blocking_passes() -> None:
    clean, leak = json.dumps(_clean()), json.dumps(_with("secret_leak", found=True, reasons=["a key"]))
    every = verdict.CATEGORIES
    assert judge(Ran(0, reply=clean), every).result is Result.PASSED
    blocked = judge(Ran(0, reply=leak), every)
    assert (blocked.result, blocked.detail) == (Result.BLOCKED, "the reviewer found secret_leak")
    assert [f.category for f in blocked.findings] == ["secret_leak"]
    assert judge(Ran(0, reply=leak), ("injection_suspected",)).result is Result.PASSED
    malformed = judge(Ran(0, reply="LGTM"), every)
    assert (malformed.result, malformed.detail) == (Result.MALFORMED, "the reviewer's verdict did not parse")
    assert malformed.quoted is not None


@pytest.mark.parametrize(
    ("ran", "result", "detail"),
    [
        (
            Ran(0, timed_out=True, timeout_s=60, reply="{}"),
            Result.TIMED_OUT,
            "the reviewer timed out after 60s",
        ),
        (Ran(1), Result.CRASHED, "the reviewer crashed (exit 1)"),
        (Ran(None, signal=9), Result.CRASHED, "the reviewer crashed (killed by signal 9)"),
        (Ran(0, is_error=True), Result.CRASHED, "the reviewer crashed (its CLI reported an error, exit 0)"),
        (
            Ran(0, refused=("model-not-inference",)),
            Result.REFUSED,
            "the model gateway refused the reviewer's own model requests (model-not-inference)",
        ),
        (
            Ran(0, over_budget="this run has spent $1.00"),
            Result.OVER_BUDGET,
            "the model gateway refused a reviewer's call: this run has spent $1.00",
        ),
        (Ran(None, cancelled=True), Result.CANCELLED, "the review was cancelled"),
    ],
)
def test_every_way_of_not_judging_fails_closed_and_says_which(ran: Ran, result: Result, detail: str) -> None:
    clean = json.dumps(_clean())
    judged = judge(Ran(**{**vars(ran), "reply": ran.reply or clean}), verdict.CATEGORIES)
    assert (judged.result, judged.detail) == (result, detail)
    assert not judged.passed


def test_the_lines_inside_the_change_are_the_ones_it_adds() -> None:
    patch = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -3 +3,2 @@\n-x = 1\n+x = 2\n+y = 3\n"
        "diff --git a/new.txt b/new.txt\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
        "diff --git a/gone.txt b/gone.txt\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    changed = verdict.changed_lines(patch)
    assert changed == {"app.py": frozenset({3, 4}), "new.txt": frozenset({1})}
    assert verdict.inside(Location("app.py", 4), changed)
    assert verdict.inside(Location("app.py", 1, 3), changed)
    assert not verdict.inside(Location("app.py", 9), changed)
    assert not verdict.inside(Location("gone.txt", 1), changed)
