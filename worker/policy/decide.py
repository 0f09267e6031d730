"""The lethal-trifecta gate: one pure function from (policy, facts) to a Decision.

No I/O, clock or randomness, and no switch: a task that would combine private
data, untrusted input and external communication is denied, and the worker
creates no process for it. The Decision says which legs were present, what
put each one there, and which changes would pass; its canonical JSON is what
the receipts work will sign, so equal inputs must give equal bytes.

``facts.offline`` is the maintainer's one-step retry: every tool that counts as
external_comm for this task, and every egress host, is removed first and the
same rules are applied to what is left. Model endpoints are never
external_comm, so an offline decision always has at most two legs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from worker.policy.catalogue import CATALOGUE, INHERENT_TOOLS, is_model_key, tool_tags
from worker.policy.errors import UnknownAgent
from worker.policy.facts import TaskFacts
from worker.policy.model import Axis, Policy, canonical_json

DECISION_VERSION = 1
_P, _U, _E = Axis.PRIVATE_DATA, Axis.UNTRUSTED_INPUT, Axis.EXTERNAL_COMM
_REMOVABLE = frozenset({"tool", "egress", "env"})


class Contributor(NamedTuple):
    """Something that put a leg in place: a tool, an egress host, an env name or a fact."""

    kind: str  # "tool" | "egress" | "env" | "fact" | "cli" (a tool the agent's CLI cannot be kept from)
    name: str
    reason: str


class Remedy(NamedTuple):
    """A change that would break ``leg`` and so let the task pass."""

    action: str  # "drop" (edit the policy) | "run_offline" (the one-step retry)
    leg: Axis
    drop: tuple[Contributor, ...]
    text: str


_ISSUE_TEXT = Contributor("fact", "issue_text", "issue and PR text and comments are always untrusted input")
_PRIVATE_REPO = Contributor(
    "fact", "private_repo", "the repository is private, so its contents are private data"
)
_SHELL = "runs code with a network Baton cannot cut off: unrestricted egress"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    agent: str
    facts: TaskFacts
    triggered: tuple[Axis, ...]
    legs: Mapping[Axis, tuple[Contributor, ...]]
    unknown_tools: tuple[str, ...]
    removed: tuple[Contributor, ...]
    remedies: tuple[Remedy, ...]
    policy_sha256: str

    def to_data(self) -> dict[str, object]:
        def item(c: Contributor) -> dict[str, str]:
            return {"kind": c.kind, "name": c.name, "reason": c.reason}

        return {
            "version": DECISION_VERSION,
            "allowed": self.allowed,
            "agent": self.agent,
            "facts": self.facts.to_data(),
            "triggered": [str(a) for a in self.triggered],
            "legs": {str(a): [item(c) for c in cs] for a, cs in self.legs.items()},
            "unknown_tools": list(self.unknown_tools),
            "removed": [item(c) for c in self.removed],
            "remedies": [
                {"action": r.action, "leg": str(r.leg), "drop": [item(c) for c in r.drop], "text": r.text}
                for r in self.remedies
            ],
            "policy_sha256": self.policy_sha256,
        }

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace, ASCII): the bytes a receipt signs."""
        return canonical_json(self.to_data())


def decide(policy: Policy, facts: TaskFacts) -> Decision:
    """Allow the task unless private data, untrusted input and external comm all meet.

    Raises UnknownAgent if ``facts.agent`` is not in the policy: that is a
    routing error to report, not a trifecta decision.
    """
    agent = policy.agents.get(facts.agent)
    if agent is None:
        raise UnknownAgent(facts.agent, policy.agents)
    tools, unknown, removed = _tools(agent.tools, policy, facts, INHERENT_TOOLS.get(agent.adapter, {}))
    egress = agent.egress
    if facts.offline and egress:
        removed.extend(Contributor("egress", host, "removed by --offline") for host in egress)
        egress = ()

    private: list[Contributor] = [_PRIVATE_REPO] if facts.repo_private else []
    untrusted: list[Contributor] = [_ISSUE_TEXT]
    external: list[Contributor] = []
    for name in agent.env:
        if not is_model_key(name, agent.model_endpoints):
            private.append(Contributor("env", name, "passed to the agent, and not a model key"))
    for host in egress:
        external.append(Contributor("egress", host, "reachable beyond the model endpoints"))
    for name, tags, shell, reason, inherent in tools:
        kind = "cli" if inherent else "tool"
        if _P in tags:
            private.append(Contributor(kind, name, reason))
        if _U in tags:
            untrusted.append(Contributor(kind, name, reason))
        if _E in tags:
            external.append(Contributor(kind, name, reason))
        elif shell:
            external.append(Contributor(kind, name, _SHELL if not inherent else f"{reason}; {_SHELL}"))

    stuck = any(c.kind == "cli" for c in external)  # --offline cannot take a CLI's own tool away
    unrestricted = agent.adapter == "command" and not facts.network_cutoff
    if unrestricted:
        # Its tools are whatever the program does: without the cut-off it is on the host's network,
        # and --offline cannot take that away.
        external.append(Contributor("fact", "command adapter", _COMMAND_OPEN))
    legs = MappingProxyType({_P: tuple(private), _U: tuple(untrusted), _E: tuple(external)})
    triggered = tuple(axis for axis, found in legs.items() if found)
    allowed = len(triggered) < 3
    return Decision(
        allowed=allowed,
        agent=facts.agent,
        facts=facts,
        triggered=triggered,
        legs=legs,
        unknown_tools=tuple(unknown),
        removed=tuple(removed),
        remedies=()
        if allowed
        else _remedies(facts.agent, legs, offline_helps=not (facts.offline or unrestricted or stuck)),
        policy_sha256=policy.digest,
    )


_Tool = tuple[str, frozenset[Axis], bool, str, bool]  # name, tags, leaky shell, reason, inherent
_COMMAND_OPEN = (
    "runs a program whose tools Baton cannot restrict, on the host network (this machine's box cannot "
    "cut the network off)"
)


def _tools(
    names: tuple[str, ...], policy: Policy, facts: TaskFacts, inherent: Mapping[str, str]
) -> tuple[list[_Tool], list[str], list[Contributor]]:
    """A ``_Tool`` per tool kept; unknown names; tools --offline removed.

    ``inherent``: tools the agent's CLI has whether listed or not (``INHERENT_TOOLS``), counted
    after the listed ones; --offline cannot remove those either."""
    shell_leaks = not facts.network_cutoff
    kept: list[_Tool] = []
    unknown: list[str] = []
    removed: list[Contributor] = []
    for name in (*names, *(t for t in inherent if t not in names)):
        tags, known = tool_tags(name, policy.tools)
        spec = CATALOGUE.get(name)
        if name in inherent:
            reason = f"{spec.summary if spec else name}; {inherent[name]}"
        elif not known:
            reason = "unknown tool: counts as all three until the org policy declares it"
            unknown.append(name)
        elif spec is None:
            reason = "tagged in the policy's tools: section"
        else:
            reason = spec.summary
        shell = spec is not None and spec.runs_code and shell_leaks
        if facts.offline and (_E in tags or shell) and name not in inherent:
            removed.append(Contributor("tool", name, "removed by --offline"))
        else:
            kept.append((name, tags, shell, reason, name in inherent))
    return kept, unknown, removed


def _remedies(
    agent: str, legs: Mapping[Axis, tuple[Contributor, ...]], *, offline_helps: bool
) -> tuple[Remedy, ...]:
    """One per leg that policy edits alone can break, plus the offline retry where it would pass."""
    out = []
    for leg, found in legs.items():
        if all(c.kind in _REMOVABLE for c in found):
            names = ", ".join(f"{'egress host' if c.kind == 'egress' else c.kind} {c.name}" for c in found)
            out.append(Remedy("drop", leg, found, f"drop {names} from agent {agent}"))
    if offline_helps:
        out.append(Remedy("run_offline", _E, legs[_E], f"run offline: /baton run {agent} --offline"))
    return tuple(out)
