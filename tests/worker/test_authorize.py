"""Who may trigger Baton: the permission table, bots, and failing closed."""

from __future__ import annotations

import pytest

from baton.tasks import Sender
from worker.authorize import Permission, authorize

USER = Sender("alice", "User")


@pytest.mark.parametrize(
    ("found", "minimum", "allowed", "code"),
    [
        (Permission("admin", "admin"), "write", True, "allowed"),
        (Permission("write", "maintain"), "write", True, "allowed"),
        (Permission("write", "write"), "write", True, "allowed"),
        (Permission("read", "triage"), "write", False, "below-minimum"),  # triage can label, not trigger
        (Permission("read", "read"), "write", False, "below-minimum"),
        (Permission("none", "none"), "write", False, "below-minimum"),
        (Permission("write", "write"), "maintain", False, "below-minimum"),
        (Permission("write", "maintain"), "maintain", True, "allowed"),
        (Permission("write", "maintain"), "admin", False, "below-minimum"),
        (
            Permission("write", "security-champion"),
            "write",
            True,
            "allowed",
        ),  # custom role: judged by its base
        (Permission("read", "security-champion"), "write", False, "below-minimum"),
        (Permission(None, "mystery"), "write", False, "unknown-role"),
        (
            Permission(error="GET /repos/o/r/collaborators/alice/permission: 502"),
            "write",
            False,
            "lookup-failed",
        ),
        (None, "write", False, "lookup-failed"),
    ],
)
def test_permission_table(found: Permission | None, minimum: str, allowed: bool, code: str) -> None:
    verdict = authorize(USER, found, min_permission=minimum, allow_bots=())
    assert (verdict.allowed, verdict.code) == (allowed, code)
    assert "alice" in verdict.reason


def test_bots_trigger_only_when_the_policy_names_them() -> None:
    bot = Sender("renovate[bot]", "Bot")
    admin = Permission("admin", "admin")
    assert authorize(bot, admin, min_permission="write", allow_bots=()).code == "bot-not-allowed"
    assert authorize(bot, None, min_permission="write", allow_bots=("renovate[bot]",)).allowed
    # A "User" whose login looks like a bot's is treated as a bot.
    fake = Sender("evil[bot]", "User")
    assert not authorize(fake, admin, min_permission="write", allow_bots=()).allowed


def test_a_policy_asking_for_less_than_write_is_refused() -> None:
    verdict = authorize(USER, Permission("admin", "admin"), min_permission="triage", allow_bots=())
    assert (verdict.allowed, verdict.code) == (False, "bad-policy")
