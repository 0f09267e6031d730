"""Effective policy = the org ceiling, narrowed by the repository's file.

This is the opposite of Probot's config inheritance, where the most specific
file wins: here the repository is the *least* trusted party (anyone with write
access edits it, and so can an agent's PR once merged), so it can only take
capabilities away. A repository may remove agents, tools, hosts, bots and env
names; add protected paths, tags and gates; raise ``min_permission``; lower
limits and timeouts. Installation-wide limits (``limits.installation``) are the
org's alone: a repository file that sets them has that key dropped and reported.

The effective policy is the ceiling intersected with what the repository asked,
item by item. Every narrowing is applied. Each widening attempt is dropped on
its own and reported as a Problem at the repository file's line and column: a
field keeps the ceiling's value, and a list item, agent or tool declaration is
simply not added. So a file that narrows and also widens by mistake keeps its
narrowings, the result is never wider than the ceiling nor than what the file
asked, and it is exactly what the file would give with the widening items
deleted. ``Merged.problems`` lists what was dropped; callers that must stop on
any widening (``baton policy check``) use ``ok`` or ``raise_for_widening()``.

Omission means "inherit": a section, an agent field (``adapter`` and
``command`` included) or a restated org gate's timeout that the repository file
leaves out keeps the ceiling's value; restating one with another value is a
widening attempt. Inside ``agents:`` the listed agents are the ones the
repository allows (an agent left out is removed, and one the org does not have
is not added, so a misspelt name can leave no agents at all, never more), and
``gates:`` only adds (an org gate cannot be dropped by leaving it out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.policy._validate import Path, show_path
from worker.policy.catalogue import CATALOGUE
from worker.policy.errors import WIDENING, PolicyError, Problem
from worker.policy.load import REPO_LIMITS, SPEND_LIMITS, PolicyDoc, gate_from, review_from, reviewer_problem
from worker.policy.model import (
    Agent,
    Axis,
    Gate,
    Limits,
    Permission,
    Policy,
    Review,
    Trigger,
    format_duration,
    parse_duration,
)
from worker.policy.sizes import SIZE_LIMITS, format_size, parse_size


@dataclass(frozen=True)
class Merged:
    """The effective policy, and the widening attempts that were dropped from it."""

    policy: Policy
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing the repository asked for had to be dropped."""
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

    def within(self, path: Path, asked: Iterable[str], allowed: Iterable[str], noun: str) -> tuple[str, ...]:
        """The asked items the ceiling allows; each other one is reported and left out."""
        allowed_set = set(allowed)
        kept = []
        for index, item in enumerate(asked):
            if item in allowed_set:
                kept.append(item)
            else:
                self.widen(
                    (*path, index),
                    f"{noun} {item!r} is not in the org policy; a repository may only remove {noun}s "
                    f"(org allows: {', '.join(sorted(allowed_set)) or 'none'})",
                )
        return tuple(kept)


def merge(ceiling: Policy, repo: PolicyDoc | None) -> Merged:
    """Narrow ``ceiling`` by ``repo``, dropping (and reporting) each widening attempt."""
    if repo is None:
        return Merged(ceiling)
    check = _Checker(repo)
    d = repo.data
    agents = _agents(check, ceiling.agents, d.get("agents"))
    _keep_reviewer(check, ceiling, agents)
    effective = Policy(
        trigger=_trigger(check, ceiling.trigger, d.get("trigger", {}), agents),
        agents=agents,
        tools=_tools(check, ceiling.tools, d.get("tools", {})),
        protected_paths=(*ceiling.protected_paths, *d.get("paths", {}).get("protected", ())),
        gates=_gates(check, ceiling.gates, d.get("gates", ())),
        limits=_limits(check, ceiling.limits, d.get("limits", {})),
        review=_review(check, ceiling.review, d.get("review"), agents),
    )
    return Merged(effective, tuple(sorted(set(check.problems))))


def _trigger(check: _Checker, ceiling: Trigger, d: Mapping[str, Any], agents: Mapping[str, Agent]) -> Trigger:
    permission = ceiling.min_permission
    if "min_permission" in d:
        asked = Permission(d["min_permission"])
        if asked.rank < ceiling.min_permission.rank:
            check.widen(
                ("trigger", "min_permission"),
                f"{asked} is below the org's {ceiling.min_permission}; a repository may only raise it",
            )
        else:
            permission = asked
    bots = check.within(
        ("trigger", "allow_bots"), d.get("allow_bots", ceiling.allow_bots), ceiling.allow_bots, "bot"
    )
    default = ceiling.default_agent
    if "default_agent" in d:
        if d["default_agent"] in agents:  # among the org's agents this repository keeps
            default = d["default_agent"]
        else:
            check.widen(
                ("trigger", "default_agent"),
                f"{d['default_agent']!r} is not an agent the org policy allows here "
                f"({', '.join(sorted(agents)) or 'none'}); a repository may only pick among them",
            )
    if default not in agents:  # the repository removed the org's default: no default here
        default = None
    return Trigger(min_permission=permission, allow_bots=bots, default_agent=default)


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


_AGENT_SETS = (
    ("tools", "tool"),
    ("model_endpoints", "model endpoint"),
    ("egress", "egress host"),
    ("env", "env name"),
)


def _agent(check: _Checker, path: Path, base: Agent, d: Mapping[str, Any]) -> Agent:
    """``base`` narrowed by the entry ``d``; every field ``d`` omits is inherited."""
    if "adapter" in d and d["adapter"] != base.adapter:
        check.widen(
            (*path, "adapter"),
            f"the org runs this agent with {base.adapter!r}; a repository cannot change it",
        )
    if "command" in d and tuple(d["command"]) != base.command:
        check.widen(
            (*path, "command"),
            "differs from the org's command; a repository cannot change it"
            if base.command is not None
            else f"the org runs this agent without a command (adapter {base.adapter!r}); "
            "a repository cannot add one",
        )
    sets = {
        key: check.within((*path, key), d[key], getattr(base, key), noun) if key in d else getattr(base, key)
        for key, noun in _AGENT_SETS
    }
    timeout = base.timeout
    if "timeout" in d:
        asked = parse_duration(d["timeout"])
        if asked > base.timeout:
            check.widen(
                (*path, "timeout"),
                f"{d['timeout']} is longer than the org's {format_duration(base.timeout)}; "
                "a repository may only lower it",
            )
        else:
            timeout = asked
    return Agent(adapter=base.adapter, timeout=timeout, command=base.command, **sets)


def _tools(
    check: _Checker, ceiling: Mapping[str, frozenset[Axis]], d: Mapping[str, Any]
) -> dict[str, frozenset[Axis]]:
    """Tags only accumulate: the ceiling's tags stay whatever the repository writes."""
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
    """Org gates stay (their ``run`` unchanged, their timeout at most lowered); new ones are added."""
    by_name = {g.name: i for i, g in enumerate(ceiling)}
    out = list(ceiling)
    for index, entry in enumerate(d):
        at = by_name.get(entry["name"])
        if at is None:
            out.append(gate_from(entry))
            continue
        base = ceiling[at]
        if entry["run"] != base.run:
            check.widen(
                ("gates", index, "run"),
                f"org gate {base.name!r} runs {base.run!r}; a repository cannot change it",
            )
        timeout = base.timeout
        if "timeout" in entry:
            asked = parse_duration(entry["timeout"])
            if asked > base.timeout:
                check.widen(
                    ("gates", index, "timeout"),
                    f"is longer than org gate {base.name!r}'s {format_duration(base.timeout)}; "
                    "a repository may only lower it",
                )
            else:
                timeout = asked
        out[at] = Gate(name=base.name, run=base.run, timeout=timeout)
    return tuple(out)


def _limits(check: _Checker, ceiling: Limits, d: Mapping[str, Any]) -> Limits:
    """Per-repository limits may only go down; the installation-wide ones are the org's alone."""
    values: dict[str, int] = {}
    for key in REPO_LIMITS:
        base = getattr(ceiling, key)
        asked = int(d.get(key, base))
        if asked > base:
            check.widen(("limits", key), f"{asked} is above the org's {base}; a repository may only lower it")
            asked = base
        values[key] = asked
    spend: dict[str, float | None] = {}
    for key in SPEND_LIMITS:
        cap: float | None = getattr(ceiling, key)
        wanted = d.get(key)
        if wanted is None:
            spend[key] = cap
        elif cap is not None and float(wanted) > cap:
            check.widen(
                ("limits", key), f"{wanted} is above the org's {cap:g}; a repository may only lower it"
            )
            spend[key] = cap
        else:
            spend[key] = float(wanted)
    size: dict[str, int] = {}
    for key in SIZE_LIMITS:
        top: int = getattr(ceiling, key)
        size[key] = parse_size(d[key]) if key in d else top
        if size[key] > top:
            check.widen(
                ("limits", key),
                f"{format_size(size[key])} is above the org's {format_size(top)}; "
                "a repository may only lower it",
            )
            size[key] = top
    if "installation" in d:
        check.widen(
            ("limits", "installation"),
            "only the org file sets installation-wide limits (they are shared by all the org's "
            "repositories); remove it from this repository's file",
            at_key=True,
        )
    return Limits(
        max_concurrent_runs=values["max_concurrent_runs"],
        max_diff_lines=values["max_diff_lines"],
        max_runs_per_day=values["max_runs_per_day"],
        max_agent_minutes_per_day=values["max_agent_minutes_per_day"],
        installation=ceiling.installation,
        max_model_spend_per_run=spend["max_model_spend_per_run"],
        max_model_spend_per_day=spend["max_model_spend_per_day"],
        max_agent_memory=size["max_agent_memory"],
        max_workspace_bytes=size["max_workspace_bytes"],
    )


def _keep_reviewer(check: _Checker, ceiling: Policy, agents: dict[str, Agent]) -> None:
    """An ``agents:`` section that leaves out the agent the org's review runs would remove the review:
    that agent stays (as the org defines it) and the attempt is reported."""
    review = ceiling.review
    if review is None or review.agent in agents or review.agent not in ceiling.agents:
        return
    agents[review.agent] = ceiling.agents[review.agent]
    check.widen(
        ("agents",),
        f"leaves out {review.agent!r}, the agent the org's review runs; a repository cannot remove the "
        "org's review, so it stays",
        at_key=True,
    )


def _review(
    check: _Checker, ceiling: Review | None, d: Mapping[str, Any] | None, agents: Mapping[str, Agent]
) -> Review | None:
    """A repository may add a review, add categories, lower the timeout and turn the merge-gate use on;
    it may not remove the org's review, change its agent, drop categories or turn the gate use off."""
    if d is None:
        return ceiling
    if ceiling is None:
        name = d.get("agent")
        if name is None:
            check.widen(("review",), "names no agent, and the org has no review to inherit one from; name "
                                     "one of the org's agents in review.agent", at_key=True)  # fmt: skip
            return None
        listed = ", ".join(sorted(agents)) or "none"
        why = reviewer_problem(name, agents) or (
            None
            if name in agents
            else f"{name!r} is not an agent the org policy allows here ({listed}); "
            "a repository may only pick among them"
        )
        if why is not None:
            check.widen(("review", "agent"), why)
            return None
        return review_from(d, name)
    if "agent" in d and d["agent"] != ceiling.agent:
        check.widen(
            ("review", "agent"),
            f"the org's review runs {ceiling.agent!r}; a repository cannot change its reviewer",
        )
    blocks = set(ceiling.blocks_on)
    if "blocks_on" in d:
        left_out = blocks - set(d["blocks_on"])
        if left_out:
            check.widen(
                ("review", "blocks_on"),
                f"leaves out {', '.join(sorted(left_out))}, which the org's review blocks on; a repository "
                "may only add categories",
            )
        blocks |= set(d["blocks_on"])
    timeout = ceiling.timeout
    if "timeout" in d:
        asked = parse_duration(d["timeout"])
        if asked > ceiling.timeout:
            check.widen(
                ("review", "timeout"),
                f"{d['timeout']} is longer than the org's {format_duration(ceiling.timeout)}; "
                "a repository may only lower it",
            )
        else:
            timeout = asked
    merge_gate = ceiling.merge_gate
    if "merge_gate" in d:
        if ceiling.merge_gate and not d["merge_gate"]:
            check.widen(
                ("review", "merge_gate"),
                "the org's review is also a merge-gate gate; a repository cannot turn that off",
            )
        merge_gate = merge_gate or bool(d["merge_gate"])
    return Review(agent=ceiling.agent, blocks_on=tuple(blocks), timeout=timeout, merge_gate=merge_gate)
