"""What a run job works from, read once at its start (``worker.runs.execute``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.runs.iteration import Conversation


@dataclass
class Plan:
    """What the run job works from: read once, from the task's record and fresh GitHub state."""

    agent: str
    offline: bool
    attempt: int
    number: int
    clone_url: str = ""
    issue: dict[str, Any] = field(default_factory=dict)
    notices: tuple[str, ...] = ()  # which ceiling applied, said on every status of the run
    #: A follow-up on the issue's pull request: what was asked there (read fresh as the run starts).
    follow_up: Conversation | None = None
    #: Commits on the branch Baton did not make that a follow-up builds on (their authors allowed).
    built_on: tuple[dict[str, str], ...] = ()
