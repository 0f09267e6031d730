"""A sibling's claim to be done, against its three signals; what a run does next. Pure."""

from __future__ import annotations

import pytest

from worker.umbrella.siblings import Claim, Facts, Next, Verdict, judge, plan

MERGED = Facts(4, issue_closed=True, item_ticked=False, pull=9, merged=True, head="h" * 40,
               merge_commit="m" * 40, on_base=True, paths=frozenset({"shared.txt"}))  # fmt: skip


def test_a_sibling_that_claims_nothing_is_not_judged() -> None:
    assert judge(Facts(4, issue_closed=False, item_ticked=False)) == Claim(4, Verdict.NONE)
    open_pull = Facts(4, False, False, pull=9, pull_open=True, head="h" * 40, gate="success")
    assert judge(open_pull).verdict is Verdict.NONE


def test_all_three_signals_accept_a_claim() -> None:
    assert judge(MERGED) == Claim(4, Verdict.ACCEPTED)
    ticked = Facts(4, False, True, pull=9, merged=True, merge_commit="m" * 40, on_base=True)
    assert judge(ticked).delivered


@pytest.mark.parametrize(
    ("facts", "failed"),
    [
        (Facts(4, issue_closed=True, item_ticked=False), "it has no pull request"),
        (Facts(4, True, False, pull=9, pull_open=True, head="a" * 40, gate="failure"),
         "pull request #9 is not merged and its merge gate is failure on aaaaaaaaaaaa"),
        (Facts(4, False, True, pull=9, pull_open=True, head="a" * 40, gate=""),
         "pull request #9 is not merged and its merge gate is none on aaaaaaaaaaaa"),
        (Facts(4, False, False, pull=9, merged=True, merge_commit="m" * 40, on_base=True),
         "its sub-issue is open and its item unticked"),
        (Facts(4, True, False, pull=9, merged=True, merge_commit="m" * 40, on_base=False),
         "the base branch does not contain pull request #9's merge commit"),
    ],
)  # fmt: skip
def test_a_contradiction_rejects_the_claim_naming_the_signal(facts: Facts, failed: str) -> None:
    claim = judge(facts)
    assert claim.verdict is Verdict.REJECTED
    assert failed in claim.failed
    assert not claim.delivered
    assert claim.note().startswith("claim rejected: ")


def test_what_a_run_does_next() -> None:
    claims = [judge(MERGED)]
    common = {"started_on": "a", "changed": ["shared.txt"]}
    assert plan(claims, [MERGED], base_now="a", moved_paths=[], same_tree=False, **common) == plan(
        [], [], base_now="a", moved_paths=[], same_tree=False, **common
    )
    assert (
        plan(claims, [MERGED], base_now="a", moved_paths=[], same_tree=False, **common).next is Next.PUBLISH
    )
    # The base moved elsewhere: pushed as it is; onto this run's files: moved and verified again.
    assert (
        plan(claims, [MERGED], base_now="b", moved_paths=["other.txt"], same_tree=False, **common).next
        is Next.PUBLISH
    )
    moved = plan(claims, [MERGED], base_now="b", moved_paths=["shared.txt"], same_tree=False, **common)
    assert (moved.next, moved.by) == (Next.REBASE, (4,))
    delivered = plan(claims, [MERGED], base_now="b", moved_paths=["shared.txt"], same_tree=True, **common)
    assert (delivered.next, delivered.by) == (Next.DELIVERED, (4,))
    # A rejected claim delivers nothing, whatever its paths.
    rejected = [Claim(4, Verdict.REJECTED, ("x",))]
    assert (
        plan(rejected, [MERGED], base_now="b", moved_paths=["shared.txt"], same_tree=True, **common).by == ()
    )
