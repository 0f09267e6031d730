"""The live spend cap: how much a run may still spend on its model, asked before every call.

Two bounds, both in US dollars at the gateway's prices: the run's own
(``limits.max_model_spend_per_run``), counted from the journal, and the day's
(``limits.max_model_spend_per_day`` for the repository, and the org's
``limits.installation.max_model_spend_per_day``), counted by a :class:`Ledger`
that every run of the scope shares (the worker's is in Redis, in the same budget
hashes as runs and agent minutes). The cap is checked before a call and charged
after it. A call whose charge reaches a cap ends the run there and then (the next
call is refused too), so a run may end a little over: by that call's cost, and by
what its other calls in flight together cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Left:
    """The tightest day budget: dollars left (may be negative), its limit, what it is, where it is set."""

    usd: float
    limit: float
    scope: str
    setting: str


class Ledger(Protocol):
    """The shared day budgets. Both methods may block (Redis): the gateway calls them off its loop."""

    def left(self) -> Left | None:
        """The tightest of the day budgets, or None when no day budget is set. Raises if unknown."""

    def charge(self, usd: float) -> Left | None:
        """Count ``usd`` spent now, in every day budget of the run; what is then left, as ``left``."""


@dataclass(frozen=True)
class SpendCap:
    per_run_usd: float | None = None
    ledger: Ledger | None = None
    #: What the run spent before this gateway served it (its agent's calls, for the reviewer's gateway):
    #: the run's own cap counts both.
    spent_before_usd: float = 0.0


def usd(amount: float) -> str:
    """Dollars as status lines show them: cents, or four places below a dollar."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"
