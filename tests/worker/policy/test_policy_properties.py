"""Properties of merge() and decide() over random org ceilings, repo files and facts."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from worker.policy import (
    ALWAYS_PROTECTED,
    CATALOGUE,
    Agent,
    Axis,
    Decision,
    Gate,
    Limits,
    Permission,
    Policy,
    TaskFacts,
    Trigger,
    UnknownAgent,
    decide,
    merge,
    org_policy,
    parse,
)
from worker.policy.model import format_duration

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL = frozenset(Axis)

CUSTOM = ["my-search", "quiet"]
TOOLS = [*CATALOGUE, *CUSTOM, "mystery"]  # "mystery" is declared nowhere
HOSTS = ["pypi.org", "example.com", "evil.io"]
ENDPOINTS = ["api.anthropic.com", "api.openai.com"]
ENV = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "SENTRY_DSN"]
BOTS = ["dependabot[bot]", "renovate[bot]"]


def _subset(pool: list[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)).map(tuple)


_tags = st.frozensets(st.sampled_from(list(Axis)))
_agent = st.builds(
    Agent,
    adapter=st.sampled_from(["claude-code", "codex", "script"]),
    tools=st.lists(st.sampled_from(TOOLS), unique=True, max_size=10).map(tuple),
    model_endpoints=_subset(ENDPOINTS),
    egress=_subset(HOSTS),
    env=_subset(ENV),
    timeout=st.sampled_from([60, 600, 1800, 7200]),
)
policies = st.builds(
    Policy,
    trigger=st.builds(Trigger, min_permission=st.sampled_from(list(Permission)), allow_bots=_subset(BOTS)),
    agents=st.dictionaries(st.sampled_from(["alpha", "beta", "gamma"]), _agent, min_size=1, max_size=3),
    tools=st.dictionaries(st.sampled_from([*CUSTOM, "web_fetch", "read_repo"]), _tags, max_size=3),
    protected_paths=_subset(["src/**", "docs/**"]).map(lambda p: (*ALWAYS_PROTECTED, *p)),
    gates=st.lists(
        st.builds(Gate, name=st.sampled_from(["tests", "lint"]), run=st.just("make")), max_size=1
    ).map(tuple),
    limits=st.builds(Limits, max_concurrent_runs=st.integers(1, 8), max_diff_lines=st.integers(1, 5000)),
)


def _facts(policy: Policy) -> st.SearchStrategy[TaskFacts]:
    return st.builds(
        TaskFacts,
        agent=st.sampled_from(sorted(policy.agents)),
        repo_private=st.booleans(),
        offline=st.booleans(),
        network_cutoff=st.booleans(),
    )


def _sub(draw: st.DrawFn, items: tuple[str, ...]) -> list[str]:
    return [x for x in items if draw(st.booleans())]


@st.composite
def repo_files(draw: st.DrawFn, ceiling: Policy) -> str:
    """A repository baton.yml, as text: a random narrowing of ``ceiling``, one time in four
    with a single widening attempt of a random kind."""
    data: dict[str, Any] = {"version": 1}
    ranks = [p for p in Permission if p.rank >= ceiling.trigger.min_permission.rank]
    if draw(st.booleans()):
        data["trigger"] = {
            "min_permission": str(draw(st.sampled_from(ranks))),
            "allow_bots": _sub(draw, ceiling.trigger.allow_bots),
        }
    if draw(st.booleans()):
        agents = {}
        for name, agent in ceiling.agents.items():
            if draw(st.integers(0, 3)) == 3:  # Hypothesis favours 0; removals should be the exception
                continue
            entry: dict[str, Any] = {"adapter": agent.adapter, "tools": _sub(draw, agent.tools)}
            for key in ("egress", "env", "model_endpoints"):
                if draw(st.booleans()):
                    entry[key] = _sub(draw, getattr(agent, key))
            if draw(st.booleans()):
                entry["timeout"] = format_duration(draw(st.sampled_from([30, agent.timeout])))
            agents[name] = entry
        data["agents"] = agents
    if draw(st.booleans()):
        known = [n for n in [*CUSTOM, "web_fetch"] if n in ceiling.tools or n in CATALOGUE]
        names = draw(st.lists(st.sampled_from(known), unique=True, max_size=2))
        data["tools"] = {
            n: sorted(str(a) for a in ceiling.tools.get(n, frozenset()) | draw(_tags)) for n in names
        }
    if draw(st.booleans()):
        data["limits"] = {"max_diff_lines": draw(st.integers(1, ceiling.limits.max_diff_lines))}
    if draw(st.integers(0, 3)) == 3:
        _widen(draw, ceiling, data)
    return yaml.safe_dump(data, sort_keys=False)


def _widen(draw: st.DrawFn, ceiling: Policy, data: dict[str, Any]) -> None:
    kind = draw(st.sampled_from(["agent", "tool", "host", "env", "bot", "limit", "tag", "timeout"]))
    name = sorted(ceiling.agents)[0]
    agent = ceiling.agents[name]
    entry = data.setdefault("agents", {}).setdefault(
        name, {"adapter": agent.adapter, "tools": list(agent.tools)}
    )
    if kind == "agent":
        data["agents"]["delta"] = {"adapter": "codex", "tools": []}
    elif kind in ("tool", "host", "env"):
        key, pool = {"tool": ("tools", TOOLS), "host": ("egress", HOSTS), "env": ("env", ENV)}[kind]
        have = entry.get(key, list(getattr(agent, key)))
        extra = [x for x in pool if x not in getattr(agent, key)]
        if extra:
            entry[key] = [*have, draw(st.sampled_from(extra))]
    elif kind == "bot":
        data["trigger"] = {"allow_bots": [b for b in BOTS if b not in ceiling.trigger.allow_bots][:1]}
    elif kind == "limit":
        data["limits"] = {"max_diff_lines": ceiling.limits.max_diff_lines + 1}
    elif kind == "tag":
        data["tools"] = {"mystery": []}
    else:
        entry["timeout"] = format_duration(agent.timeout * 2)


def _merged_case(data: st.DataObject) -> tuple[Policy, Policy, bool]:
    ceiling = data.draw(policies)
    merged = merge(ceiling, parse(data.draw(repo_files(ceiling)), ".github/baton.yml"))
    return ceiling, merged.policy, merged.ok


@SETTINGS
@given(st.data())
def test_effective_policy_never_exceeds_the_ceiling(data: st.DataObject) -> None:
    ceiling, eff, ok = _merged_case(data)
    event("widening refused" if not ok else "narrowed")
    if not ok:
        assert eff == ceiling
    assert eff.trigger.min_permission.rank >= ceiling.trigger.min_permission.rank
    assert set(eff.trigger.allow_bots) <= set(ceiling.trigger.allow_bots)
    assert set(eff.agents) <= set(ceiling.agents)
    for name, agent in eff.agents.items():
        base = ceiling.agents[name]
        assert agent.adapter == base.adapter
        assert agent.command == base.command
        for key in ("tools", "model_endpoints", "egress", "env"):
            assert set(getattr(agent, key)) <= set(getattr(base, key)), key
        assert agent.timeout <= base.timeout
    for tool, tags in ceiling.tools.items():
        assert eff.tools[tool] >= tags
    assert set(eff.protected_paths) >= set(ceiling.protected_paths)
    for base_gate, gate in zip(ceiling.gates, eff.gates, strict=False):
        assert (gate.name, gate.run) == (base_gate.name, base_gate.run)
        assert gate.timeout <= base_gate.timeout
    assert len(eff.gates) >= len(ceiling.gates)
    assert eff.limits.max_concurrent_runs <= ceiling.limits.max_concurrent_runs
    assert eff.limits.max_diff_lines <= ceiling.limits.max_diff_lines


@SETTINGS
@given(st.data())
def test_a_repo_turns_deny_into_allow_only_by_removing_a_leg(data: st.DataObject) -> None:
    ceiling, eff, _ = _merged_case(data)
    facts = data.draw(_facts(eff)) if eff.agents else None
    if facts is None:
        return
    before, after = decide(ceiling, facts), decide(eff, facts)
    event(f"ceiling allowed={before.allowed}, effective allowed={after.allowed}")
    if before.allowed or not after.allowed:
        return
    agent = eff.agents[facts.agent]
    kept = {"tool": set(agent.tools), "egress": set(agent.egress), "env": set(agent.env)}
    lost = set(before.triggered) - set(after.triggered)
    assert lost
    for axis in lost:
        for c in before.legs[axis]:
            assert c.kind != "fact", f"{axis} had fact {c.name} and still vanished"
            assert c.name not in kept[c.kind], c  # the repo removed it


@SETTINGS
@given(policies, st.data())
def test_unknown_tool_always_triggers_all_three(policy: Policy, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(policy.agents)))
    agent = policy.agents[name]
    policy = dataclasses.replace(
        policy, agents={**policy.agents, name: dataclasses.replace(agent, tools=(*agent.tools, "zz-unknown"))}
    )
    facts = TaskFacts(name, data.draw(st.booleans()), network_cutoff=data.draw(st.booleans()))
    d = decide(policy, facts)
    assert set(d.triggered) == ALL
    assert not d.allowed
    assert "zz-unknown" in d.unknown_tools
    for axis in Axis:
        assert "zz-unknown" in [c.name for c in d.legs[axis]]
    offline = decide(policy, dataclasses.replace(facts, offline=True))
    assert "zz-unknown" in [c.name for c in offline.removed]


@SETTINGS
@given(policies, st.data())
def test_same_inputs_give_the_same_bytes_even_after_a_yaml_round_trip(
    policy: Policy, data: st.DataObject
) -> None:
    facts = data.draw(_facts(policy))
    first = decide(policy, facts).to_json()
    assert decide(policy, facts).to_json() == first
    rebuilt = org_policy(parse(yaml.safe_dump(policy.to_data()), "org.yml"))
    assert rebuilt == policy
    assert decide(rebuilt, facts).to_json() == first
    shuffled = dataclasses.replace(policy, agents=dict(reversed(list(policy.agents.items()))))
    assert decide(shuffled, facts).to_json() == first


@SETTINGS
@given(policies, st.data())
def test_offline_always_passes_and_remedies_really_pass(policy: Policy, data: st.DataObject) -> None:
    facts = data.draw(_facts(policy))
    assert decide(policy, dataclasses.replace(facts, offline=True)).allowed
    d = decide(policy, facts)
    for remedy in d.remedies:
        if remedy.action != "drop":
            continue
        agent = policy.agents[facts.agent]
        gone = {(c.kind, c.name) for c in remedy.drop}
        fixed = dataclasses.replace(
            agent,
            tools=tuple(t for t in agent.tools if ("tool", t) not in gone),
            egress=tuple(h for h in agent.egress if ("egress", h) not in gone),
            env=tuple(e for e in agent.env if ("env", e) not in gone),
        )
        narrowed = dataclasses.replace(policy, agents={**policy.agents, facts.agent: fixed})
        assert decide(narrowed, facts).allowed, remedy.text


# --- the untrusted text cannot reach the gate ------------------------------------


def test_decide_cannot_receive_the_untrusted_text() -> None:
    """decide() takes a Policy and TaskFacts only, and TaskFacts has no field for text."""
    assert list(inspect.signature(decide).parameters) == ["policy", "facts"]
    fields = {f.name: f.type for f in dataclasses.fields(TaskFacts)}
    assert fields == {"agent": "str", "repo_private": "bool", "offline": "bool", "network_cutoff": "bool"}
    assert not hasattr(TaskFacts("a", True), "__dict__")  # slots: nothing can be attached later


@SETTINGS
@given(policies, st.data(), st.text(max_size=200))
def test_any_text_naming_no_agent_is_refused_and_changes_no_decision(
    policy: Policy, data: st.DataObject, text: str
) -> None:
    """The one string in TaskFacts, the agent name, only selects a configured agent."""
    facts = data.draw(_facts(policy))
    reference = decide(policy, facts).to_json()
    if text not in policy.agents:
        with pytest.raises(UnknownAgent):
            decide(policy, dataclasses.replace(facts, agent=text))
    assert decide(policy, facts).to_json() == reference


def test_decision_fields_are_what_a_receipt_needs() -> None:
    names = {f.name for f in dataclasses.fields(Decision)}
    assert names == {
        "allowed", "agent", "facts", "triggered", "legs", "unknown_tools", "removed", "remedies",
        "policy_sha256",
    }  # fmt: skip
