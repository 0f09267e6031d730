"""One error type for the evidence package: a stable code to match on, a message to act on."""

from __future__ import annotations

#: Every code EvidenceError carries; tests and the CLI's --json output match on these, never on text.
CODES = frozenset(
    {
        "malformed-envelope",
        "unknown-key",
        "bad-signature",
        "bad-statement",
        "subject-mismatch",
        "bad-key",
        "bad-checkpoint",
        "not-included",
        "inconsistent",
        "bad-proof",
        "log-busy",  # every append lost its race to other appenders: retry later
        "audit-unreadable",  # the audit chain's last sealed entry cannot be read: run verify
        "audit-busy",  # every seal collided with other sealers: the events stay pending
    }
)


class EvidenceError(Exception):
    """A receipt, key, checkpoint or proof failed a check.

    Deliberately not a ``baton.errors.BatonError``: the offline verifier must run without Baton's
    server side installed. ``message`` names what failed (field, keyid, commit) and how to fix it.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message
