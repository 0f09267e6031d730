"""Before a sub-issue's run publishes anything: its siblings' claims to be done, each verified.

A sibling that landed while this run worked changes what "done" means for it, and a claim read off
one signal (an issue closed by hand, a box ticked in the umbrella) is how a fleet ends up judged on
work nobody did. So under the umbrella's lock (``LOCK_PREFIX``: one run of an umbrella verifies
and publishes at a time), on state read fresh, every sibling that claims to be done by any signal
must be backed by all three, each independent of the others:

  1. its pull request is merged, or open with ``baton/merge-gate`` success on its current head;
  2. its sub-issue is closed, or its item in the umbrella is ticked;
  3. the base branch still contains what it delivered (a merged pull request's merge commit).

A contradiction rejects the claim (the umbrella's table names the signal that failed), and a
rejected claim is not counted as delivered. What then happens to this run is ``plan``'s decision:
if the base moved since it started onto files it changed, its change is moved onto the new base
and verified again; if its change is already on the base, a verified sibling delivered it and
nothing is pushed ("no changes needed, delivered by #n"). ``judge`` and ``plan`` are pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Facts:
    """One sibling as GitHub has it now."""

    number: int
    issue_closed: bool
    item_ticked: bool
    pull: int | None = None
    merged: bool = False
    pull_open: bool = False
    head: str | None = None
    #: ``baton/merge-gate``'s conclusion on the pull request's current head ("" for none).
    gate: str = ""
    merge_commit: str | None = None
    #: The base branch contains ``merge_commit`` (checked for a merged pull request only).
    on_base: bool = False
    #: Paths its pull request changed (merged: what it brought onto the base).
    paths: frozenset[str] = frozenset()


class Verdict(StrEnum):
    NONE = "none"  # claims nothing: not done by any signal
    ACCEPTED = "accepted"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Claim:
    number: int
    verdict: Verdict
    failed: tuple[str, ...] = ()  # the signals that failed, Baton's words

    @property
    def delivered(self) -> bool:
        """Accepted, and on the base (a merged pull request)."""
        return self.verdict is Verdict.ACCEPTED

    def note(self) -> str:
        """What the umbrella's table says of it."""
        if self.verdict is Verdict.REJECTED:
            return "claim rejected: " + "; ".join(self.failed)
        return ""


def judge(sibling: Facts) -> Claim:
    """The three signals against each other; a claim by any one must be backed by all three."""
    claims = sibling.issue_closed or sibling.item_ticked or sibling.merged
    if not claims:
        return Claim(sibling.number, Verdict.NONE)
    failed: list[str] = []
    if sibling.pull is None:
        failed.append("it has no pull request")
    elif not sibling.merged and not (sibling.pull_open and sibling.gate == "success"):
        gate = sibling.gate or "none"
        where = f" on {sibling.head[:12]}" if sibling.head else ""
        failed.append(f"pull request #{sibling.pull} is not merged and its merge gate is {gate}{where}")
    if not (sibling.issue_closed or sibling.item_ticked):
        failed.append("its sub-issue is open and its item unticked")
    if sibling.merged and not sibling.on_base:
        failed.append(f"the base branch does not contain pull request #{sibling.pull}'s merge commit")
    if failed:
        return Claim(sibling.number, Verdict.REJECTED, tuple(failed))
    if not sibling.merged:  # done by every signal but not on the base yet: nothing delivered to build on
        return Claim(sibling.number, Verdict.NONE)
    return Claim(sibling.number, Verdict.ACCEPTED)


class Next(StrEnum):
    PUBLISH = "publish"  # the base is where the run started, or moved elsewhere: push as it is
    REBASE = "rebase"  # the base moved onto files this run changed: move the change, verify again
    DELIVERED = "delivered"  # the change is already on the base: nothing to push


@dataclass(frozen=True, slots=True)
class Plan:
    next: Next
    #: The verified siblings whose delivered paths touch this run's: who delivered it, or moved it.
    by: tuple[int, ...] = ()


def plan(
    claims: Sequence[Claim], siblings: Sequence[Facts], *, started_on: str, base_now: str,
    changed: Collection[str], moved_paths: Collection[str], same_tree: bool,
) -> Plan:  # fmt: skip
    """What this run does next, from its siblings' verified claims and the base.

    ``started_on``/``base_now``: the base commit the run started on and the base's head now;
    ``changed``: the paths this run changed; ``moved_paths``: the paths changed between the two
    commits; ``same_tree``: this run's change, moved onto ``base_now``, leaves the tree as
    ``base_now`` has it (the work is there already)."""
    accepted = {c.number for c in claims if c.delivered}
    touching = tuple(s.number for s in siblings if s.number in accepted and s.paths & set(changed))
    if same_tree:
        return Plan(Next.DELIVERED, touching)
    if base_now != started_on and set(changed) & set(moved_paths):
        return Plan(Next.REBASE, touching)
    return Plan(Next.PUBLISH)
