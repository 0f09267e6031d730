"""The merge gate's evaluation as stored and as said: byte for byte what earlier versions wrote.

A stored result is reused across deploys and its words are signed into receipts, so the
``Evaluation`` must serialise exactly as the ``dict`` it replaced. The digests below were taken
from that dict-building code before the split, on these same inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib

import orjson
import pytest

from worker.gates import builtin, commands, verdicts
from worker.gates.pulls import Pull
from worker.github.limits import Annotation
from worker.policy import Policy
from worker.policy.model import Gate

PR = Pull(7, "open", "a" * 40, "feature", "main", True, "mallory", "User", "https://github.com/o/r/pull/7")
GATES_SET = (Gate("lint", "ruff check .", 60), Gate("tests", "pytest -q", 600))
POLICY = dataclasses.replace(Policy(), gates=GATES_SET)
NOTE = Annotation("src/app.py", 3, 4, "failure", "E501 line | too long", "lint")
CHECKS = (
    builtin.Check("protected-paths", True, "no protected path changed"),
    builtin.Check("secrets", False, "1 finding `x`", (NOTE,), ("src/app.py:3 aws key",)),
    builtin.Check("provenance", True, "2 commits", (), ("aaa by bot", "bbb by <b>x</b>")),
)
LINT_TAIL = "E501 | line\nghp_" + "x" * 36
GATES = (
    commands.GateResult(
        "lint", "ruff check .", False, 1, None, False, 1.234, LINT_TAIL, (NOTE,), commands.Outcome.FAILED
    ),
    commands.GateResult("tests", "pytest -q", True, 0, None, False, 12.0, "", (), commands.Outcome.PASSED),
    commands.GateResult("slow", "sleep 9", False, None, 9, True, 60.0, "", (), commands.Outcome.TIMED_OUT),
)
CHANGE = ("b" * 40, "c" * 64)


def _build(name: str) -> verdicts.Evaluation:
    if name == "failure":
        checks, gates, waiting, seconds, approved_by = CHECKS, GATES, False, 3.14159, None
    elif name == "waiting":
        checks, gates, waiting, seconds, approved_by = CHECKS[:1], (), True, 0.5, None
    else:
        checks, gates, waiting, seconds, approved_by = (
            CHECKS[:1] + CHECKS[2:],
            GATES[1:2],
            False,
            2.0,
            "maint",
        )
    return verdicts.build(
        PR, POLICY, checks, gates, waiting=waiting, seconds=seconds, approved_by=approved_by, change=CHANGE
    )


#: case -> (sha256 of the stored JSON, sha256 of the reused verdict's words, conclusion)
CASES = {
    "failure": (
        "5fa210588d73b9e17930c6f53e4703c097d6b13ba398ce67ef366c44a9e96817",
        "971413ec6522baabf8a11a424f2229995b629d23ec231e8f918ee42949e6fd20",
        "failure",
    ),
    "waiting": (
        "2b16984d3cc2c38cc0a379901da749d50854e52f563354fee15cee6d79dda0ae",
        "7031ac70faee562406f09d939be2648cd8b9a3ab6fe88df9418cd5d4484a6ec7",
        "action_required",
    ),
    "approved": (
        "c11d062e729660285e831a7aed101581c344a13d6ea2042c9aa400846331ea9e",
        "c75f7809b6943322a7f0cd6d0a04b7ab9d6c81388da63c28cab340dff6048083",
        "success",
    ),
}


def _stored(result: verdicts.Evaluation) -> bytes:
    return orjson.dumps(result.to_data(), option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_stored_result_is_byte_identical(name: str) -> None:
    result = _build(name)
    assert result.conclusion == CASES[name][2]
    assert hashlib.sha256(_stored(result)).hexdigest() == CASES[name][0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stored_result_reads_back_as_the_same_evaluation_and_words(name: str) -> None:
    result = _build(name)
    again = verdicts.Evaluation.from_data(orjson.loads(_stored(result)))
    assert again == result
    said = verdicts.verdict_of(again, reused=True)
    words = repr((said.conclusion, said.title, said.summary, said.annotations, said.actions))
    assert hashlib.sha256(words.encode()).hexdigest() == CASES[name][1]
    assert said.evidence == result


def test_success_needs_the_stored_result_to_agree() -> None:
    result = _build("approved")
    assert verdicts.agree(result, result.to_data(), PR, PR).conclusion == "success"
    tampered = {**result.to_data(), "passed": []}
    disagreed = verdicts.agree(result, tampered, PR, PR)
    assert (disagreed.conclusion, disagreed.summary) == (
        "neutral",
        "the stored result differs from the one computed.",
    )
    moved = dataclasses.replace(PR, head_sha="d" * 40)
    assert verdicts.agree(result, result.to_data(), moved, PR).summary == (
        "the pull request changed; the result is about another commit."
    )
