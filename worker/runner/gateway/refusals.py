"""Why the gateway did not pass a request on: stable codes, each with its HTTP status.

A refusal is also a finding about the run. Every request the policy forbids
(another key, an operation that is not inference, a shape that would make the
provider fetch, search, execute or connect, a shape Baton does not recognise) is
a **violation**: it is recorded in the run, shown on the issue and in the receipt,
and nothing the run produced is pushed. A legitimate CLI sends none of these; an
agent that does has been talked into trying. The other refusals (the spend cap,
a provider Baton cannot reach, too many connections) are Baton's own limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    # The request itself is not one Baton reads.
    BAD_REQUEST = "bad-request"
    TOO_LARGE = "too-large"
    # Who is asking.
    MISSING_CREDENTIAL = "missing-credential"
    FOREIGN_CREDENTIAL = "foreign-credential"
    # What is asked for.
    PROVIDER_NOT_GRANTED = "provider-not-granted"
    NOT_INFERENCE = "not-inference"
    SERVER_TOOL = "server-tool"
    REMOTE_SOURCE = "remote-source"
    STORED_STATE = "stored-state"
    FEATURE_HEADER = "feature-header"
    UNKNOWN_SHAPE = "unknown-shape"
    # Baton's own limits and the provider's availability: not violations.
    OVER_BUDGET = "over-budget"
    BUDGET_UNKNOWN = "budget-unknown"
    NO_UPSTREAM_KEY = "no-upstream-key"
    UPSTREAM_FAILED = "upstream-failed"
    UPSTREAM_TIMEOUT = "upstream-timeout"
    BUSY = "busy"


STATUS: dict[Reason, int] = {
    Reason.BAD_REQUEST: 400,
    Reason.TOO_LARGE: 413,
    Reason.MISSING_CREDENTIAL: 401,
    Reason.FOREIGN_CREDENTIAL: 403,
    Reason.PROVIDER_NOT_GRANTED: 403,
    Reason.NOT_INFERENCE: 403,
    Reason.SERVER_TOOL: 403,
    Reason.REMOTE_SOURCE: 403,
    Reason.STORED_STATE: 403,
    Reason.FEATURE_HEADER: 403,
    Reason.UNKNOWN_SHAPE: 403,
    Reason.OVER_BUDGET: 403,
    Reason.BUDGET_UNKNOWN: 503,
    Reason.NO_UPSTREAM_KEY: 503,
    Reason.UPSTREAM_FAILED: 502,
    Reason.UPSTREAM_TIMEOUT: 504,
    Reason.BUSY: 503,
}

#: Refusals that are findings about the run (see the module docstring).
VIOLATIONS = frozenset(
    {
        Reason.BAD_REQUEST,
        Reason.TOO_LARGE,
        Reason.MISSING_CREDENTIAL,
        Reason.FOREIGN_CREDENTIAL,
        Reason.PROVIDER_NOT_GRANTED,
        Reason.NOT_INFERENCE,
        Reason.SERVER_TOOL,
        Reason.REMOTE_SOURCE,
        Reason.STORED_STATE,
        Reason.FEATURE_HEADER,
        Reason.UNKNOWN_SHAPE,
    }
)

#: Longest detail kept: it may quote a field name or a type the agent chose.
MAX_DETAIL = 300


@dataclass(frozen=True)
class Refusal:
    """One refused request: the code, and Baton's sentence about it (names it quotes are cut)."""

    reason: Reason
    detail: str

    def __post_init__(self) -> None:
        if len(self.detail) > MAX_DETAIL:
            object.__setattr__(self, "detail", self.detail[: MAX_DETAIL - 1] + "…")

    @property
    def status(self) -> int:
        return STATUS[self.reason]

    @property
    def violation(self) -> bool:
        return self.reason in VIOLATIONS


def shown(value: object, limit: int = 60) -> str:
    """A name the agent chose, as a refusal quotes it: repr'd (so nothing in it formats) and cut."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
