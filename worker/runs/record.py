"""The run record: what one agent run did and what was in force, built once, read everywhere.

``worker.runs.execute`` builds it from the runner's ``RunRecord`` (``Record.of``), or for a
run that never reached the runner from its outcome and reason alone; ``worker.runs.report``
puts it into words and ``worker.receipts`` signs it. It is kept in Redis (``to_data``, read back
with ``from_data``) so a retried task finds what its first attempt pushed; those bytes, and the
receipts made from it, are the same as when the record was a plain dict.

Parts of it are agent-written (its output tail, its own summary, file paths it made up): only
``worker.runs.report`` turns them into Markdown, and only through ``inert`` and ``fenced``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from baton.tasks import Outcome
from worker.runner import run as runner


@dataclass(frozen=True)
class Record:
    """One run: the runner's fields (``worker.runner.run.RunRecord``), then what the worker adds."""

    agent: str
    outcome: Outcome
    reason: str = ""
    run_id: str = ""
    decision_sha256: str = ""
    decision: Mapping[str, Any] = field(default_factory=dict)
    probe: Mapping[str, Any] = field(default_factory=dict)
    adapter: str | None = None
    adapter_version: str | None = None
    prompt_version: str | None = None
    box: Mapping[str, Any] | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    durations: Mapping[str, float] = field(default_factory=dict)
    egress: Sequence[Mapping[str, Any]] = ()
    over_limit: Mapping[str, Any] | None = None
    diff: Mapping[str, Any] | None = None
    changes: Sequence[Mapping[str, Any]] = ()
    violations: Sequence[Mapping[str, Any]] = ()
    agent_result: Mapping[str, Any] | None = None
    model: Mapping[str, Any] | None = None
    output_tail: str = ""
    branch: str | None = None
    commit: str | None = None
    cost_usd: float | None = None
    started_at: str = ""
    #: The gate's decision in words (what the trifecta check run shows).
    explanation: str = ""
    #: What the receipts name: the base the agent started on, the issue text as it got it.
    base: str = ""
    issue_sha256: str = ""
    #: A follow-up on the pull request (``worker.runs.iteration.Conversation.to_data``): what was
    #: asked there, by whom, and the line comments; None for a run from the issue.
    follow_up: Mapping[str, Any] | None = None
    #: Commits on the branch that Baton did not make and the run built on: ``{"sha", "author",
    #: "permission"}``, each author holding the policy's ``trigger.min_permission`` when the run began.
    built_on: Sequence[Mapping[str, Any]] = ()
    #: The policy's reviewer on this run's change (``worker.runner.review.ReviewRecord.to_data``):
    #: None for a run the policy reviews not, or that made no commit to review.
    review: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, ran: runner.RunRecord, *, explanation: str, base: str, issue_sha256: str) -> Record:
        """The record of a run the runner took through: every field it reported, as it reported it."""
        return cls(**vars(ran), explanation=explanation, base=base, issue_sha256=issue_sha256)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Record:
        """Read back what ``to_data`` stored (keys it does not know are dropped)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known and k != "outcome"}
        return cls(**values, outcome=Outcome(str(data["outcome"])))

    def to_data(self) -> dict[str, Any]:
        """The record as JSON-ready data: the keys and values the runner's record had, and the
        worker's three, a follow-up's two and a review (the stored bytes are compared by tests and
        read by ``baton replay``)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("egress", "changes", "violations", "built_on"):
            data[name] = list(data[name])
        for name in _ONLY_IF_SET:  # a run from the issue, unreviewed, stores the bytes it always did
            if not data[name]:
                del data[name]
        return data

    def usage_fields(self) -> dict[str, str]:
        """What the task's record keeps of the run for the budgets and the status page."""
        fields = {"run_outcome": str(self.outcome)}
        seconds = self.agent_seconds
        if seconds is not None:  # the reviewer's minutes count in the same day budgets
            fields["agent_seconds"] = f"{seconds + self.review_seconds:.3f}"
        costs = [
            c for c in (self.cost_usd, (self.review or {}).get("cost_usd")) if isinstance(c, int | float)
        ]
        if costs:  # the reviewer's dollars too: the gateway counted them in the same ledger
            fields["cost_usd"] = f"{sum(costs):.6f}"
        if self.started_at:
            fields["run_started_at"] = self.started_at
        return fields

    @property
    def agent_seconds(self) -> float | None:
        found = self.durations.get("agent_s")
        return float(found) if isinstance(found, int | float) else None

    @property
    def review_seconds(self) -> float:
        found = self.durations.get("review_s")
        return float(found) if isinstance(found, int | float) else 0.0


#: Fields a record holds only for a follow-up on a pull request, or a run its policy reviews.
_ONLY_IF_SET = ("follow_up", "built_on", "review")


def issue_digest(issue: Mapping[str, Any]) -> str:
    """The issue text the agent was given (title, blank line, body), by sha256: an untrusted input."""
    text = f"{issue.get('title') or ''}\n\n{issue.get('body') or ''}"
    return hashlib.sha256(text.encode()).hexdigest()
