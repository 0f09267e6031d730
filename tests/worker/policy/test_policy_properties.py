"""Properties of merge() and decide() over random org ceilings, repo files and facts."""

from __future__ import annotations

import copy
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
    Merged,
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
from worker.policy.catalogue import INHERENT_TOOLS, tool_tags
from worker.policy.model import InstallationLimits, format_duration, parse_duration
from worker.policy.sizes import GiB, MiB, format_size, parse_size

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL = frozenset(Axis)

CUSTOM = ["my-search", "quiet"]
TOOLS = [*CATALOGUE, *CUSTOM, "mystery"]  # "mystery" is declared nowhere
HOSTS = ["pypi.org", "example.com", "evil.io"]
ENDPOINTS = ["api.anthropic.com", "api.openai.com"]
ENV = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NPM_TOKEN", "SENTRY_DSN"]
BOTS = ["dependabot[bot]", "renovate[bot]"]


def _subset(pool: list[str]) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)).map(tuple)


_tags = st.frozensets(st.sampled_from(list(Axis)))
_tool_names = st.lists(st.sampled_from(TOOLS), unique=True, max_size=10).map(tuple)
_timeouts = st.sampled_from([60, 600, 1800, 7200])
_agent = st.one_of(
    st.builds(
        Agent,
        adapter=st.sampled_from(["claude-code", "codex", "script"]),
        tools=_tool_names,
        model_endpoints=_subset(ENDPOINTS),
        egress=_subset(HOSTS),
        env=_subset(ENV),
        timeout=_timeouts,
    ),
    st.builds(
        Agent,
        adapter=st.just("command"),
        tools=_tool_names,
        egress=_subset(HOSTS),
        env=_subset(ENV),
        timeout=_timeouts,
        command=st.sampled_from([("./run",), ("./run", "{prompt_file}")]),
    ),
)
policies = st.builds(
    Policy,
    trigger=st.builds(Trigger, min_permission=st.sampled_from(list(Permission)), allow_bots=_subset(BOTS)),
    agents=st.dictionaries(st.sampled_from(["alpha", "beta", "gamma"]), _agent, min_size=1, max_size=3),
    tools=st.dictionaries(st.sampled_from([*CUSTOM, "web_fetch", "read_repo"]), _tags, max_size=3),
    protected_paths=_subset(["src/**", "docs/**"]).map(lambda p: (*ALWAYS_PROTECTED, *p)),
    gates=st.lists(
        st.builds(Gate, name=st.sampled_from(["tests", "lint"]), run=st.just("make"), timeout=_timeouts),
        max_size=1,
    ).map(tuple),
    limits=st.builds(
        Limits,
        max_concurrent_runs=st.integers(1, 8),
        max_diff_lines=st.integers(1, 5000),
        max_runs_per_day=st.integers(1, 100),
        max_agent_minutes_per_day=st.integers(1, 1000),
        max_agent_memory=st.sampled_from([64 * MiB, GiB, 4 * GiB, 8 * GiB]),
        max_workspace_bytes=st.sampled_from([16 * MiB, GiB, 10 * GiB]),
        installation=st.builds(
            InstallationLimits,
            max_concurrent_runs=st.none() | st.integers(1, 20),
            max_runs_per_day=st.none() | st.integers(1, 500),
            max_agent_minutes_per_day=st.none() | st.integers(1, 5000),
        ),
    ),
)


def _facts(policy: Policy) -> st.SearchStrategy[TaskFacts]:
    return st.builds(
        TaskFacts,
        agent=st.sampled_from(sorted(policy.agents)),
        repo_private=st.booleans(),
        offline=st.booleans(),
        network_cutoff=st.booleans(),
        seccomp=st.booleans(),
    )


def _sub(draw: st.DrawFn, items: tuple[str, ...]) -> list[str]:
    return [x for x in items if draw(st.booleans())]


def _narrow_agent(draw: st.DrawFn, agent: Agent) -> dict[str, Any]:
    """An agent entry that narrows ``agent``, restating the org's definition only sometimes."""
    entry: dict[str, Any] = {}
    if draw(st.booleans()):
        entry["adapter"] = agent.adapter
    if agent.command is not None and draw(st.booleans()):
        entry["command"] = list(agent.command)
    if draw(st.integers(0, 3)) > 0:
        entry["tools"] = _sub(draw, agent.tools)
    for key in ("egress", "env", "model_endpoints"):
        if draw(st.booleans()):
            entry[key] = _sub(draw, getattr(agent, key))
    if draw(st.booleans()):
        entry["timeout"] = format_duration(draw(st.sampled_from([30, agent.timeout])))
    return entry


@dataclasses.dataclass(frozen=True)
class RepoFile:
    """A repository baton.yml as data, and (when it widens) the same data without the widening."""

    data: dict[str, Any]
    without_widening: dict[str, Any] | None

    @property
    def text(self) -> str:
        return yaml.safe_dump(self.data, sort_keys=False)


@st.composite
def repo_files(draw: st.DrawFn, ceiling: Policy) -> RepoFile:
    """A random narrowing of ``ceiling``, about half the time with one widening attempt too."""
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
            agents[name] = _narrow_agent(draw, agent)
        data["agents"] = agents
    if draw(st.booleans()):
        known = [n for n in [*CUSTOM, "web_fetch"] if n in ceiling.tools or n in CATALOGUE]
        names = draw(st.lists(st.sampled_from(known), unique=True, max_size=2))
        data["tools"] = {
            n: sorted(str(a) for a in ceiling.tools.get(n, frozenset()) | draw(_tags)) for n in names
        }
    if draw(st.booleans()):
        gates = [
            {"name": g.name, "run": g.run, "timeout": format_duration(draw(st.sampled_from([30, g.timeout])))}
            for g in ceiling.gates
            if draw(st.booleans())
        ]
        data["gates"] = [*gates, *([{"name": "extra", "run": "make extra"}] if draw(st.booleans()) else [])]
    if draw(st.booleans()):
        data["limits"] = {
            key: draw(st.integers(1, getattr(ceiling.limits, key)))
            for key in ("max_diff_lines", "max_runs_per_day", "max_agent_minutes_per_day")
            if draw(st.booleans())
        }
        for key, floor in (("max_agent_memory", 64 * MiB), ("max_workspace_bytes", 16 * MiB)):
            if draw(st.booleans()):  # spelt with a unit or in bytes, at most the ceiling's
                size = draw(st.sampled_from([floor, getattr(ceiling.limits, key)]))
                data["limits"][key] = draw(st.sampled_from([format_size(size), size]))
    without = _widen(draw, ceiling, data) if draw(st.booleans()) else None
    return RepoFile(data, without)


def _widen(draw: st.DrawFn, ceiling: Policy, data: dict[str, Any]) -> dict[str, Any]:
    """Add one widening attempt of a random kind to ``data``; return ``data`` as it was without it."""
    kind = draw(st.sampled_from(["agent", "bot", "limit", "size", "installation", "tag", "gate",
                                 *_AGENT_WIDENINGS]))  # fmt: skip
    name = sorted(ceiling.agents)[0]
    entry = data.setdefault("agents", {}).setdefault(name, {})  # a bare entry inherits everything
    without = copy.deepcopy(data)
    if kind in _AGENT_WIDENINGS:
        _widen_agent(draw, kind, ceiling.agents[name], entry, without["agents"][name])
    elif kind == "agent":
        data["agents"]["delta"] = {"adapter": "codex", "tools": []}
    elif kind == "bot":
        trigger = data.setdefault("trigger", {})
        trigger["allow_bots"] = [*trigger.get("allow_bots", ceiling.trigger.allow_bots), "evil-bot"]
    elif kind == "limit":
        data.setdefault("limits", {})["max_diff_lines"] = ceiling.limits.max_diff_lines + 1
        without.get("limits", {}).pop("max_diff_lines", None)
    elif kind == "size":
        data.setdefault("limits", {})["max_agent_memory"] = format_size(ceiling.limits.max_agent_memory + GiB)
        without.get("limits", {}).pop("max_agent_memory", None)
    elif kind == "installation":
        data.setdefault("limits", {})["installation"] = {"max_runs_per_day": 1}  # lower, still refused
    elif kind == "tag":
        tagged = [n for n, tags in ceiling.tools.items() if tags]
        if tagged and draw(st.booleans()):
            tool = draw(st.sampled_from(tagged))
            data.setdefault("tools", {})[tool] = []
            without.setdefault("tools", {})[tool] = sorted(str(a) for a in ceiling.tools[tool])
        else:
            data.setdefault("tools", {})["mystery"] = []  # declared nowhere: a repo cannot declare it
    elif ceiling.gates:
        gate = ceiling.gates[0]
        others = [g for g in data.get("gates", []) if g["name"] != gate.name]
        mine = [g for g in data.get("gates", []) if g["name"] == gate.name] or [{"name": gate.name}]
        data["gates"] = [*others, {**mine[0], "run": "true"}]
    return without


_AGENT_WIDENINGS = ("tool", "host", "env", "timeout", "adapter", "command")


def _widen_agent(
    draw: st.DrawFn, kind: str, agent: Agent, entry: dict[str, Any], without: dict[str, Any]
) -> None:
    if kind in ("tool", "host", "env"):
        key, pool = {"tool": ("tools", TOOLS), "host": ("egress", HOSTS), "env": ("env", ENV)}[kind]
        extra = [x for x in pool if x not in getattr(agent, key)]
        if extra:
            entry[key] = [*entry.get(key, getattr(agent, key)), draw(st.sampled_from(extra))]
    elif kind == "timeout":
        entry["timeout"] = format_duration(agent.timeout * 2)
        without.pop("timeout", None)
    elif kind == "adapter":
        entry.pop("command", None)
        entry["adapter"] = draw(st.sampled_from([a for a in ("codex", "script") if a != agent.adapter]))
    else:
        if agent.command is None:
            entry.pop("adapter", None)  # with a non-command adapter the file would be invalid
        entry["command"] = [*(agent.command or ("sh",)), "--evil"]


@dataclasses.dataclass(frozen=True)
class Case:
    ceiling: Policy
    repo: RepoFile
    merged: Merged


def _merged_case(data: st.DataObject) -> Case:
    ceiling = data.draw(policies)
    repo = data.draw(repo_files(ceiling))
    return Case(ceiling, repo, merge(ceiling, parse(repo.text, ".github/baton.yml")))


@SETTINGS
@given(st.data())
def test_effective_policy_never_exceeds_the_ceiling(data: st.DataObject) -> None:
    case = _merged_case(data)
    ceiling, eff = case.ceiling, case.merged.policy
    event("widening dropped" if not case.merged.ok else "narrowed")
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
    assert set(eff.tools) <= set(ceiling.tools) | set(CATALOGUE)
    assert set(eff.protected_paths) >= set(ceiling.protected_paths)
    for base_gate, gate in zip(ceiling.gates, eff.gates, strict=False):
        assert (gate.name, gate.run) == (base_gate.name, base_gate.run)
        assert gate.timeout <= base_gate.timeout
    assert len(eff.gates) >= len(ceiling.gates)
    assert eff.limits.max_concurrent_runs <= ceiling.limits.max_concurrent_runs
    assert eff.limits.max_diff_lines <= ceiling.limits.max_diff_lines
    assert eff.limits.max_runs_per_day <= ceiling.limits.max_runs_per_day
    assert eff.limits.max_agent_minutes_per_day <= ceiling.limits.max_agent_minutes_per_day
    assert eff.limits.max_agent_memory <= ceiling.limits.max_agent_memory
    assert eff.limits.max_workspace_bytes <= ceiling.limits.max_workspace_bytes
    assert eff.limits.installation == ceiling.limits.installation


@SETTINGS
@given(st.data())
def test_effective_policy_never_exceeds_what_the_repo_validly_asked(data: st.DataObject) -> None:
    """Each thing the repo asked that is within the ceiling is honoured (a widening elsewhere
    in the file does not undo it): the result is never wider than the repo's own request."""
    case = _merged_case(data)
    ceiling, asked, eff = case.ceiling, case.repo.data, case.merged.policy
    trigger = asked.get("trigger", {})
    if "min_permission" in trigger:
        wanted = Permission(trigger["min_permission"])
        if wanted.rank >= ceiling.trigger.min_permission.rank:
            assert eff.trigger.min_permission.rank >= wanted.rank
    if "allow_bots" in trigger:
        assert set(eff.trigger.allow_bots) <= set(trigger["allow_bots"])
    if "agents" in asked:
        assert set(eff.agents) <= set(asked["agents"])
        for name, agent in eff.agents.items():
            _agent_within_ask(agent, ceiling.agents[name], asked["agents"][name])
    for tool, tags in asked.get("tools", {}).items():
        if tool in ceiling.tools or tool in CATALOGUE:
            assert eff.tools[tool] >= {Axis(t) for t in tags}
    assert set(eff.protected_paths) >= set(asked.get("paths", {}).get("protected", ()))
    _gates_within_ask(eff.gates, ceiling.gates, asked.get("gates", ()))
    for key, value in asked.get("limits", {}).items():
        wanted = parse_size(value) if key in ("max_agent_memory", "max_workspace_bytes") else value
        if key != "installation" and wanted <= getattr(ceiling.limits, key):
            assert getattr(eff.limits, key) <= wanted


def _agent_within_ask(agent: Agent, base: Agent, entry: dict[str, Any]) -> None:
    for key in ("tools", "model_endpoints", "egress", "env"):
        if key in entry:
            assert set(getattr(agent, key)) <= set(entry[key]), key
    if "timeout" in entry and parse_duration(entry["timeout"]) <= base.timeout:
        assert agent.timeout <= parse_duration(entry["timeout"])


def _gates_within_ask(eff: tuple[Gate, ...], ceiling: tuple[Gate, ...], asked: list[dict[str, Any]]) -> None:
    by_name = {g.name: g for g in eff}
    org_gates = {g.name: g for g in ceiling}
    for gate in asked:
        timeout = parse_duration(gate.get("timeout", "10m"))
        got = by_name[gate["name"]]
        base = org_gates.get(gate["name"])
        if base is None:
            assert (got.run, got.timeout) == (gate["run"], timeout)
        elif "timeout" in gate and timeout <= base.timeout:
            assert got.timeout <= timeout


@SETTINGS
@given(st.data())
def test_a_widening_costs_exactly_itself(data: st.DataObject) -> None:
    """The file with a widening runs exactly as the file without it would, plus a located problem."""
    case = _merged_case(data)
    without = case.repo.without_widening
    if without is None:
        assert case.merged.ok, case.merged.problems
        return
    clean = merge(case.ceiling, parse(yaml.safe_dump(without, sort_keys=False), ".github/baton.yml"))
    assert clean.ok, clean.problems
    assert case.merged.policy == clean.policy
    event("widening reported" if case.merged.problems else "widening was a no-op")
    assert all(p.file == ".github/baton.yml" and p.line >= 1 for p in case.merged.problems)


@SETTINGS
@given(st.data())
def test_a_repo_turns_deny_into_allow_only_by_removing_a_leg(data: st.DataObject) -> None:
    case = _merged_case(data)
    ceiling, eff = case.ceiling, case.merged.policy
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
    """Except where the agent keeps a way out --offline cannot take away: a command agent where the
    box cannot cut the network off, or a tool of the CLI's own (``INHERENT_TOOLS``, such as Codex's
    shell) that reaches out (a shell without the cut-off, or a tool the policy tags external_comm).
    Then it is refused, and the retry is not offered."""
    facts = data.draw(_facts(policy))
    adapter = policy.agents[facts.agent].adapter
    own_way_out = any(
        Axis.EXTERNAL_COMM in tool_tags(tool, policy.tools)[0]
        or (CATALOGUE[tool].runs_code and not facts.network_cutoff)
        for tool in INHERENT_TOOLS.get(adapter, {})
    )
    unrestricted = (adapter == "command" and not facts.network_cutoff) or own_way_out
    offline = decide(policy, dataclasses.replace(facts, offline=True))
    # Issue text is always untrusted, so such an agent passes only where it can reach no private data.
    assert offline.allowed is (not unrestricted or not offline.legs[Axis.PRIVATE_DATA])
    d = decide(policy, facts)
    if unrestricted:
        assert "run_offline" not in [r.action for r in d.remedies]
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
    assert fields == {
        "agent": "str",
        "repo_private": "bool",
        "offline": "bool",
        "network_cutoff": "bool",
        "seccomp": "bool",
    }
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
