"""What is true about a task, apart from its policy: the gate's second input.

TaskFacts deliberately has no field for the issue's text, title, comments or
author. Issue and PR text is *always* untrusted input, so knowing its content
can only ever add a leg that is already there; and a decision that could read
the text could be argued with by the text (prompt injection aimed at the gate).
The only string is the agent name, which must name an agent of the effective
policy or decide() refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """Facts the worker knows before any agent process exists.

    ``repo_private`` has no default: a caller that does not know must say True.
    ``network_cutoff`` is whether Baton can cut the agent's network at run time
    (the agent-runs work provides it; until then it is False, and a shell counts
    as unrestricted egress). ``offline`` is the maintainer's ``--offline`` retry. ``seccomp``
    is whether the box filters the agent's system calls (no UNIX sockets, io_uring, ptrace...):
    no leg depends on it today, but the decision says what it was made on.
    """

    agent: str
    repo_private: bool
    offline: bool = False
    network_cutoff: bool = False
    seccomp: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str):
            raise TypeError("TaskFacts.agent must be a str")
        for f in fields(self):
            if f.name != "agent" and not isinstance(getattr(self, f.name), bool):
                raise TypeError(
                    f"TaskFacts.{f.name} must be a bool, not {type(getattr(self, f.name)).__name__}"
                )

    def to_data(self) -> dict[str, object]:
        return {
            "agent": self.agent,
            "repo_private": self.repo_private,
            "offline": self.offline,
            "network_cutoff": self.network_cutoff,
            "seccomp": self.seccomp,
        }
