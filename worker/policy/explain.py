"""A Decision in plain words: for the CLI now, the issue's status comment later."""

from __future__ import annotations

from worker.policy.decide import Contributor, Decision
from worker.policy.model import Axis

_LEG_NAMES = {
    Axis.PRIVATE_DATA: "private data",
    Axis.UNTRUSTED_INPUT: "untrusted input",
    Axis.EXTERNAL_COMM: "external communication",
}


def _item(c: Contributor) -> str:
    label = {"tool": "tool", "egress": "egress host", "env": "env", "fact": "fact",
             "cli": "tool of the CLI"}.get(c.kind, c.kind)  # fmt: skip
    return f"{label} {c.name}: {c.reason}"


def explain(decision: Decision) -> str:
    """Which legs, why, and what to change; deterministic like the Decision itself."""
    verdict = "ALLOWED" if decision.allowed else "DENIED (no agent process will be started)"
    lines = [f"agent {decision.agent}: {verdict}"]
    facts = decision.facts
    lines.append(
        f"  facts: {'private' if facts.repo_private else 'public'} repository"
        f"{', offline' if facts.offline else ''}"
        f", network cut-off {'available' if facts.network_cutoff else 'not available'}"
        f", seccomp filter {'on' if facts.seccomp else 'off'}"
    )
    for axis in Axis:
        found = decision.legs.get(axis, ())
        mark = "present" if found else "absent"
        lines.append(f"  {_LEG_NAMES[axis]} ({axis}): {mark}")
        lines.extend(f"    - {_item(c)}" for c in found)
    if decision.unknown_tools:
        lines.append(
            "  unknown tools (count as all three; declare them in the org policy's tools: section): "
            + ", ".join(decision.unknown_tools)
        )
    if decision.removed:
        lines.append("  removed by --offline: " + ", ".join(c.name for c in decision.removed))
    if decision.remedies:
        lines.append("  any one of these would pass:")
        lines.extend(f"    - {r.text}" for r in decision.remedies)
    lines.append(f"  policy sha256: {decision.policy_sha256}")
    return "\n".join(lines)
