"""Effective policy = the org ceiling, narrowed by the repository's file.

This is the opposite of Probot's config inheritance, where the most specific
file wins: here the repository is the *least* trusted party (anyone with write
access edits it, and so can an agent's PR once merged), so it can only take
capabilities away. A repository may remove agents, tools, hosts, bots and env
names; add protected paths, tags and gates; raise ``min_permission``; lower
limits and timeouts. Anything else is a widening attempt: it is reported with
the repository file's line and column, and then the ceiling applies in full.
Nothing is half-applied, so what runs is always either exactly what the repo
asked for or exactly the ceiling.

Omission means "inherit": a section or agent field the repo file leaves out
keeps the ceiling's value. Inside ``agents:`` the listed agents are the ones
the repository allows (an agent left out is removed), and ``gates:`` only adds
(an org gate cannot be dropped by leaving it out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.policy._validate import Path, show_path
from worker.policy.catalogue import CATALOGUE
from worker.policy.errors import WIDENING, PolicyError, Problem
from worker.policy.load import PolicyDoc, agent_from, gate_from
from worker.policy.model import Agent, Axis, Gate, Limits, Permission, Policy, Trigger, format_duration


@dataclass(frozen=True)
class Merged:
    """The effective policy, and the widening attempts that forced it back to the ceiling."""

    policy: Policy
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_widening(self) -> Policy:
        """The effective policy, or PolicyError(WIDENING) for callers that must stop and report."""
        if self.problems:
            raise PolicyError(WIDENING, self.problems)
        return self.policy


class _Checker:
    def __init__(self, doc: PolicyDoc) -> None:
        self.doc = doc
        self.problems: list[Problem] = []

    def widen(self, path: Path, message: str, *, at_key: bool = False) -> None:
        self.problems.append(self.doc.problem(path, f"{show_path(path)}: {message}", at_key=at_key))

    def subset(self, path: Path, asked: Iterable[str], allowed: Iterable[str], noun: str) -> None:
        allowed_set = set(allowed)
        for index, item in enumerate(asked):
            if item not in allowed_set:
                self.widen(
                    (*path, index),
                    f"{noun} {item!r} is not in the org policy; a repository may only remove {noun}s "
                    f"(org allows: {', '.join(sorted(allowed_set)) or 'none'})",
                )


def merge(ceiling: Policy, repo: PolicyDoc | None) -> Merged:
    """Narrow ``ceiling`` by ``repo``; on any widening attempt return the ceiling and the problems."""
    if repo is None:
        return Merged(ceiling)
    check = _Checker(repo)
    d = repo.data
    effective = Policy(
        trigger=_trigger(check, ceiling.trigger, d.get("trigger", {})),
        agents=_agents(check, ceiling.agents, d.get("agents")),
        tools=_tools(check, ceiling.tools, d.get("tools", {})),
        protected_paths=(*ceiling.protected_paths, *d.get("paths", {}).get("protected", ())),
        gates=_gates(check, ceiling.gates, d.get("gates", ())),
        limits=_limits(check, ceiling.limits, d.get("limits", {})),
    )
    if check.problems:
        return Merged(ceiling, tuple(sorted(set(check.problems))))
    return Merged(effective)


def _trigger(check: _Checker, ceiling: Trigger, d: Mapping[str, Any]) -> Trigger:
    permission = ceiling.min_permission
    if "min_permission" in d:
        asked = Permission(d["min_permission"])
        if asked.rank < ceiling.min_permission.rank:
            check.widen(
                ("trigger", "min_permission"),
                f"{asked} is below the org's {ceiling.min_permission}; a repository may only raise it",
            )
        permission = asked
    bots = d.get("allow_bots", ceiling.allow_bots)
    check.subset(("trigger", "allow_bots"), bots, ceiling.allow_bots, "bot")
    return Trigger(min_permission=permission, allow_bots=tuple(bots))


def _agents(check: _Checker, ceiling: Mapping[str, Agent], d: Mapping[str, Any] | None) -> dict[str, Agent]:
    if d is None:
        return dict(ceiling)
    out = {}
    for name, entry in d.items():
        path: Path = ("agents", name)
        base = ceiling.get(name)
        if base is None:
            check.widen(
                path,
                f"the org policy has no agent {name!r}; a repository may only remove agents "
                f"(org allows: {', '.join(sorted(ceiling)) or 'none'})",
                at_key=True,
            )
            continue
        out[name] = _agent(check, path, base, entry)
    return out


def _agent(check: _Checker, path: Path, base: Agent, d: Mapping[str, Any]) -> Agent:
    asked = agent_from({"timeout": format_duration(base.timeout), **d})
    if asked.adapter != base.adapter:
        check.widen(
            (*path, "adapter"),
            f"the org runs this agent with {base.adapter!r}; a repository cannot change it",
        )
    if "command" in d and asked.command != base.command:
        check.widen((*path, "command"), "differs from the org's command; a repository cannot change it")
    fields = (
        ("tools", "tool"),
        ("model_endpoints", "model endpoint"),
        ("egress", "egress host"),
        ("env", "env name"),
    )
    for key, noun in fields:
        if key in d:
            check.subset((*path, key), d[key], getattr(base, key), noun)
    if asked.timeout > base.timeout:
        check.widen(
            (*path, "timeout"),
            f"{d['timeout']} is longer than the org's {format_duration(base.timeout)}; "
            "a repository may only lower it",
        )
    return Agent(
        adapter=base.adapter,
        tools=asked.tools,
        model_endpoints=tuple(d.get("model_endpoints", base.model_endpoints)),
        egress=tuple(d.get("egress", base.egress)),
        env=tuple(d.get("env", base.env)),
        timeout=asked.timeout,
        command=base.command,
    )


def _tools(
    check: _Checker, ceiling: Mapping[str, frozenset[Axis]], d: Mapping[str, Any]
) -> dict[str, frozenset[Axis]]:
    out = dict(ceiling)
    for name, tags in d.items():
        path: Path = ("tools", name)
        asked = frozenset(Axis(t) for t in tags)
        if name not in ceiling and name not in CATALOGUE:
            check.widen(
                path,
                f"the org policy does not declare tool {name!r}; a repository cannot declare tools, only "
                "the org can say what an unknown tool may do (until then it counts as all three axes)",
                at_key=True,
            )
            continue
        dropped = ceiling.get(name, frozenset()) - asked
        if dropped:
            check.widen(
                path,
                f"drops {', '.join(sorted(dropped))}, which the org policy tags it with; "
                "a repository may only add tags",
            )
        out[name] = out.get(name, frozenset()) | asked
    return out


def _gates(check: _Checker, ceiling: tuple[Gate, ...], d: Iterable[Mapping[str, Any]]) -> tuple[Gate, ...]:
    by_name = {g.name: i for i, g in enumerate(ceiling)}
    out = list(ceiling)
    for index, entry in enumerate(d):
        asked = gate_from(entry)
        at = by_name.get(asked.name)
        if at is None:
            out.append(asked)
            continue
        base = ceiling[at]
        if asked.run != base.run:
            check.widen(
                ("gates", index, "run"),
                f"org gate {base.name!r} runs {base.run!r}; a repository cannot change it",
            )
        elif asked.timeout > base.timeout:
            check.widen(
                ("gates", index, "timeout"),
                f"is longer than org gate {base.name!r}'s {format_duration(base.timeout)}; "
                "a repository may only lower it",
            )
        else:
            out[at] = asked
    return tuple(out)


def _limits(check: _Checker, ceiling: Limits, d: Mapping[str, Any]) -> Limits:
    values = {}
    for key in ("max_concurrent_runs", "max_diff_lines"):
        base = getattr(ceiling, key)
        asked = int(d.get(key, base))
        if asked > base:
            check.widen(("limits", key), f"{asked} is above the org's {base}; a repository may only lower it")
        values[key] = asked
    return Limits(**values)
