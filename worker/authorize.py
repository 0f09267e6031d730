"""Who may trigger Baton: a pure decision on what GitHub said about the sender.

The label on an issue proves nothing (issue forms add labels for anyone, and
Triage users can label without write access), so the person who applied the
label or wrote the `/baton` command must hold at least the policy's
``trigger.min_permission`` on the repository, as GitHub reports it at run
time. Anything Baton cannot establish is a refusal, never a default yes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from baton.tasks import Sender

#: GitHub's repository roles, weakest first. `permission` in the collaborator
#: answer is the legacy mapping (maintain -> write, triage -> read); `role_name`
#: carries the real role, or a custom role's name (then `permission` is its base).
ROLE_RANK: dict[str, int] = {"none": 0, "read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}
TRIGGER_ROLES = ("write", "maintain", "admin")
#: No policy lets anyone below this trigger Baton, so a sender below it is turned away before
#: the policy is even read (and before Baton says anything, except to a label's author).
FLOOR = TRIGGER_ROLES[0]


@dataclass(frozen=True, slots=True)
class Permission:
    """GitHub's answer for one user on one repository, or why there is none."""

    permission: str | None = None  # admin | write | read | none
    role_name: str | None = None
    error: str | None = None  # set when the lookup failed (network, 5xx, 404 ...)


@dataclass(frozen=True, slots=True)
class Authorization:
    allowed: bool
    code: str  # stable: allowed, allowed-bot, bot-not-allowed, below-minimum, lookup-failed, unknown-role
    reason: str  # for the log and the record (it names the login as typed: never put it in Markdown)
    role: str | None = None  # the sender's role, as GitHub reported it
    needed: str | None = None  # the role the policy asks for

    def to_dict(self) -> dict[str, object]:
        return {"allowed": self.allowed, "code": self.code, "reason": self.reason, "role": self.role,
                "needed": self.needed}  # fmt: skip


def effective_role(found: Permission) -> str | None:
    if found.role_name in ROLE_RANK:
        return found.role_name
    if found.permission in ROLE_RANK:  # a custom role: judge it by its base permission
        return found.permission
    return None


def authorize(
    sender: Sender,
    found: Permission | None,
    *,
    min_permission: str,
    allow_bots: Collection[str],
) -> Authorization:
    """May ``sender`` trigger an agent? ``found`` is None for bots (they are not collaborators)."""
    if min_permission not in TRIGGER_ROLES:
        return Authorization(
            False, "bad-policy", f"trigger.min_permission {min_permission!r} is not a trigger role"
        )
    if sender.is_bot or sender.login.endswith("[bot]"):
        if sender.login in allow_bots:
            return Authorization(
                True, "allowed-bot", f"{sender.login} is a bot the policy allows (trigger.allow_bots)"
            )
        return Authorization(
            False,
            "bot-not-allowed",
            f"{sender.login} is a bot; bots trigger Baton only when trigger.allow_bots names them",
        )
    if found is None or found.error is not None:
        detail = found.error if found is not None else "no answer"
        return Authorization(
            False,
            "lookup-failed",
            f"could not check {sender.login}'s permission on this repository ({detail}); "
            "Baton refuses when unsure",
        )
    role = effective_role(found)
    if role is None:
        return Authorization(
            False,
            "unknown-role",
            f"GitHub reported an unknown role for {sender.login}; Baton refuses when unsure",
        )
    if ROLE_RANK[role] < ROLE_RANK[min_permission]:
        return Authorization(
            False,
            "below-minimum",
            f"{sender.login} has {role} access; triggering Baton here needs {min_permission} or higher",
            role,
            min_permission,
        )
    return Authorization(
        True, "allowed", f"{sender.login} has {role} access (needs {min_permission})", role, min_permission
    )


def screen(sender: Sender, found: Permission | None) -> Authorization | None:
    """The check made before the policy is read: is a human sender at least at the FLOOR?

    None means "not decided here": the sender passed the floor, or is a bot (bots are not
    collaborators; only the policy's ``trigger.allow_bots`` can let one in).
    """
    if sender.is_bot or sender.login.endswith("[bot]"):
        return None
    verdict = authorize(sender, found, min_permission=FLOOR, allow_bots=())
    return None if verdict.allowed else verdict
