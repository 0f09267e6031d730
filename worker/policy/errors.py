"""Policy errors: every problem names the file, line, column, field and the fix.

A policy file is written by a person who will read the error in a terminal or
a status comment, so problems are collected (not raised one at a time) and
rendered the way compilers do: ``file:line:col: message``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from baton import codes
from baton.errors import BatonError

#: Stable codes (tests and logs match on these, never on messages).
INVALID = codes.POLICY_INVALID
WIDENING = codes.POLICY_WIDENING
UNKNOWN_AGENT = codes.POLICY_UNKNOWN_AGENT


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a policy file; ``line`` and ``col`` are 1-based."""

    file: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"


class PolicyError(BatonError):
    """A policy file is invalid, or a repository file tried to widen the org ceiling."""

    def __init__(self, code: str, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(code, "\n".join(str(p) for p in self.problems))


class UnknownAgent(BatonError):
    """The task names an agent the effective policy does not allow."""

    def __init__(self, agent: str, known: Iterable[str]) -> None:
        names = ", ".join(sorted(known)) or "none"
        super().__init__(
            UNKNOWN_AGENT,
            f"agent {agent!r} is not in the effective policy (agents allowed here: {names}); "
            "add it to the org policy's agents: section, or use one of those",
        )
        self.agent = agent
