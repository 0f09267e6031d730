"""From baton.yml bytes to a validated document, and from an org document to a ceiling.

Checks run in this order, and every failure names file:line:col:
1. YAML reading (_yaml.py): size cap, syntax, anchors/aliases, tags, duplicate
   keys, non-string keys, depth. These stop at the first problem because the
   rest of the file cannot be trusted to mean what it says.
2. The JSON Schema (schema.py) via _validate.py: unknown keys, types, enums,
   patterns, ranges. All findings are reported at once.
3. What a schema cannot say: two gates with the same name; a size limit written with a
   unit (``4GiB``) below its floor or above its ceiling (sizes.py); an agent ``env``
   naming one of Baton's own settings or a GitHub token (``reserved_env``); a
   ``model_endpoints`` host the model gateway does not serve, or an ``egress``
   host that is a model provider's (model traffic has one door, the gateway).
4. In ``org_policy`` only, what an org file must say and a repository file may
   leave out (a schema sees one document and cannot know whose it is): each
   agent's ``adapter`` and ``tools``, and ``command`` for the command adapter.
   A repository's agent entry inherits every field it omits (merge.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from baton.settings import KNOWN as BATON_SETTINGS
from worker.policy import _yaml
from worker.policy._validate import Path, show_path, validate
from worker.policy.catalogue import MODEL_PROVIDERS
from worker.policy.defaults import ALWAYS_PROTECTED, DEFAULT_POLICY
from worker.policy.errors import INVALID, PolicyError, Problem
from worker.policy.model import (
    Agent,
    Axis,
    Gate,
    InstallationLimits,
    Limits,
    Permission,
    Policy,
    Review,
    Trigger,
    parse_duration,
)
from worker.policy.schema import ADAPTERS, RETIRED_ADAPTERS, SCHEMA
from worker.policy.sizes import SIZE_LIMITS, parse_size
from worker.policy.sizes import problem as size_problem


@dataclass(frozen=True)
class PolicyDoc:
    """A validated policy file: its plain data and where each value sits in it."""

    filename: str
    data: Mapping[str, Any]
    marks: Mapping[Path, tuple[int, int]] = field(default_factory=dict, repr=False)
    key_marks: Mapping[Path, tuple[int, int]] = field(default_factory=dict, repr=False)

    def problem(self, path: Path, message: str, *, at_key: bool = False) -> Problem:
        """A problem at ``path``, or at its nearest located ancestor."""
        marks = self.key_marks if at_key and path in self.key_marks else self.marks
        line, col = _locate(marks, path)
        return Problem(self.filename, line, col, message)


def _locate(marks: Mapping[Path, tuple[int, int]], path: Path) -> tuple[int, int]:
    for end in range(len(path), -1, -1):
        found = marks.get(path[:end])
        if found is not None:
            return found
    return (1, 1)


def parse(data: str | bytes, filename: str) -> PolicyDoc:
    """Read and validate one policy file; raise PolicyError listing every problem."""
    try:
        located = _yaml.read(data)
    except _yaml.YamlProblem as exc:
        raise PolicyError(INVALID, [Problem(filename, exc.line, exc.col, exc.message)]) from None
    doc = PolicyDoc(filename, {}, located.marks, located.key_marks)
    problems = [doc.problem(f.path, _retired(located.value, f.path) or _size(located.value, f.path)
                            or f.message, at_key=f.at_key)
                for f in validate(SCHEMA, located.value)]  # fmt: skip
    if not problems and isinstance(located.value, dict):
        doc = PolicyDoc(filename, located.value, located.marks, located.key_marks)
        problems = _semantic(doc)
    if problems:
        raise PolicyError(INVALID, sorted(set(problems)))
    return doc


def _retired(value: Any, path: Path) -> str | None:
    """The message for an adapter Baton no longer offers, saying why and what to use (else None)."""
    if len(path) != 3 or path[0] != "agents" or path[2] != "adapter" or not isinstance(value, dict):
        return None
    entry = value.get("agents", {}).get(path[1]) if isinstance(value.get("agents"), dict) else None
    adapter = entry.get("adapter") if isinstance(entry, dict) else None
    why = RETIRED_ADAPTERS.get(adapter) if isinstance(adapter, str) else None
    if why is None:
        return None
    offered = ", ".join(ADAPTERS)
    return f"agents.{path[1]}.adapter: adapter {adapter!r} was removed: {why}; use one of: {offered}"


def _size(value: Any, path: Path) -> str | None:
    """The message for a size limit the schema refused, saying what to write (else None)."""
    if len(path) != 2 or path[0] != "limits" or path[1] not in SIZE_LIMITS or not isinstance(value, dict):
        return None
    limits = value.get("limits")
    if not isinstance(limits, dict) or path[1] not in limits:
        return None
    return size_problem(show_path(path), limits[path[1]], SIZE_LIMITS[str(path[1])])


#: Variables that are never an agent's to have, whatever a policy says: GitHub's tokens.
GITHUB_TOKENS = frozenset({"GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN"})


def reserved_env(name: str) -> bool:
    """Is ``name`` one of Baton's own settings (its App key, webhook and audit secrets, Redis URL,
    signing key...) or a GitHub token? An agent never holds Baton's credentials."""
    return name in BATON_SETTINGS or name.startswith("BATON_") or name in GITHUB_TOKENS


def _model_hosts(doc: PolicyDoc, agent: str, entry: Mapping[str, Any]) -> list[Problem]:
    """Model endpoints must be providers the gateway serves; egress may not name one (one door)."""
    found = []
    for index, host in enumerate(entry.get("model_endpoints", ())):
        if host not in MODEL_PROVIDERS:
            at: Path = ("agents", agent, "model_endpoints", index)
            found.append(doc.problem(at, (
                f"{show_path(at)}: {host} is not a model provider Baton's model gateway serves (it serves "
                f"{', '.join(sorted(MODEL_PROVIDERS))}); for an LLM gateway of your own, keep the "
                "provider's host here and point the provider at it with BATON_MODEL_UPSTREAMS")))  # fmt: skip
    for index, host in enumerate(entry.get("egress", ())):
        if host in MODEL_PROVIDERS:
            at = ("agents", agent, "egress", index)
            found.append(doc.problem(at, (
                f"{show_path(at)}: {host} is a model provider, and model traffic goes through Baton's "
                "model gateway, never the egress proxy: list it in model_endpoints")))  # fmt: skip
    return found


def _semantic(doc: PolicyDoc) -> list[Problem]:
    problems = []
    for agent, entry in doc.data.get("agents", {}).items():
        problems += _model_hosts(doc, agent, entry)
        for index, name in enumerate(entry.get("env", ())):
            if reserved_env(name):
                where: Path = ("agents", agent, "env", index)
                problems.append(doc.problem(where, (
                    f"{show_path(where)}: {name} is Baton's own setting or a GitHub token, and an agent "
                    "never gets Baton's credentials; pass the agent a variable of its own "
                    "(e.g. ANTHROPIC_API_KEY)")))  # fmt: skip
    for key, bounds in SIZE_LIMITS.items():  # a schema bounds 4294967296, not "4GiB"
        limits = doc.data.get("limits", {})
        found = size_problem(f"limits.{key}", limits[key], bounds) if key in limits else None
        if found is not None:
            problems.append(doc.problem(("limits", key), found))
    seen: dict[str, int] = {}
    for index, gate in enumerate(doc.data.get("gates", ())):
        first = seen.setdefault(gate["name"], index)
        if first != index:
            path: Path = ("gates", index, "name")
            problems.append(
                doc.problem(
                    path, f"{show_path(path)}: gate {gate['name']!r} is already defined at gates[{first}]"
                )
            )
    return problems


# --- documents to policies -------------------------------------------------------


def agent_from(data: Mapping[str, Any]) -> Agent:
    """An org file's agent entry; omitted optional fields take the safe empty default."""
    command = data.get("command")
    return Agent(
        adapter=data["adapter"],
        tools=tuple(data["tools"]),
        model_endpoints=tuple(data.get("model_endpoints", ())),
        egress=tuple(data.get("egress", ())),
        env=tuple(data.get("env", ())),
        timeout=parse_duration(data.get("timeout", "30m")),
        command=tuple(command) if command is not None else None,
    )


def review_from(data: Mapping[str, Any], agent: str) -> Review:
    """A ``review:`` entry (its agent already checked), each field left out at its default."""
    defaults = Review(agent)
    return Review(
        agent=agent,
        blocks_on=tuple(data.get("blocks_on", defaults.blocks_on)),
        timeout=parse_duration(data["timeout"]) if "timeout" in data else defaults.timeout,
        merge_gate=bool(data.get("merge_gate", defaults.merge_gate)),
    )


#: The adapter a review may not run: the script agent follows the recipe it finds in its prompt, and
#: the reviewer's prompt holds the issue's text and the agent's change, so they would write its verdict.
SCRIPTED = "script"


def reviewer_problem(name: str, agents: Mapping[str, Agent]) -> str | None:
    """Why ``name`` cannot be the reviewer among ``agents`` (None: it can). The words end where the
    caller says whose agents they are."""
    agent = agents.get(name)
    if agent is not None and agent.adapter == SCRIPTED:
        return (f"{name!r} runs the script adapter, which follows the recipe in its prompt (the issue's text "
                "and the agent's change would write its verdict); name an agent with a model")  # fmt: skip
    return None


def gate_from(data: Mapping[str, Any]) -> Gate:
    return Gate(name=data["name"], run=data["run"], timeout=parse_duration(data.get("timeout", "10m")))


#: What every agent entry of an org file must say; ``command`` too for the command adapter.
ORG_AGENT_KEYS = ("adapter", "tools")


def _org_problems(doc: PolicyDoc) -> list[Problem]:
    problems: list[Problem] = []
    default = doc.data.get("trigger", {}).get("default_agent")
    agents = doc.data.get("agents")
    named = set(agents) if agents is not None else set(DEFAULT_POLICY.agents)
    if default is not None and default not in named:
        at: Path = ("trigger", "default_agent")
        agents_named = ", ".join(sorted(named)) or "none"
        problems.append(doc.problem(at, f"{show_path(at)}: {default!r} is not one of this policy's agents "
                                        f"({agents_named})"))  # fmt: skip
    review = doc.data.get("review")
    if review is not None:
        at = ("review", "agent")
        found = (
            {name: agent_from(a) for name, a in agents.items() if "adapter" in a and "tools" in a}
            if agents is not None
            else dict(DEFAULT_POLICY.agents)
        )
        if "agent" not in review:
            problems.append(doc.problem(("review",), "review: missing required key 'agent' (an org file "
                                                     "names its reviewer)"))  # fmt: skip
        elif review["agent"] not in named:
            listed = ", ".join(sorted(named)) or "none"
            problems.append(doc.problem(at, f"{show_path(at)}: {review['agent']!r} is not one of this "
                                            f"policy's agents ({listed})"))  # fmt: skip
        elif (why := reviewer_problem(review["agent"], found)) is not None:
            problems.append(doc.problem(at, f"{show_path(at)}: {why}"))
    for name, entry in doc.data.get("agents", {}).items():
        path: Path = ("agents", name)
        needed = (*ORG_AGENT_KEYS, "command") if entry.get("adapter") == "command" else ORG_AGENT_KEYS
        problems.extend(
            doc.problem(
                path,
                f"{show_path(path)}: missing required key {key!r} (an org file defines each agent in full)",
            )
            for key in needed
            if key not in entry
        )
    return problems


def org_policy(doc: PolicyDoc | None) -> Policy:
    """The ceiling: the org file over the built-in defaults, or the defaults alone.

    The org admin sets the ceiling, so the org file may be wider than the
    defaults: each section it writes replaces the default section (fields of
    ``trigger`` and ``limits`` one by one). Only ``ALWAYS_PROTECTED`` cannot be
    removed. Raises PolicyError(INVALID) when an agent entry leaves out what an
    org file must say (see the module docstring, step 4).
    """
    if doc is None:
        return DEFAULT_POLICY
    problems = _org_problems(doc)
    if problems:
        raise PolicyError(INVALID, sorted(set(problems)))
    d = doc.data
    base = DEFAULT_POLICY
    trigger = d.get("trigger", {})
    limits = d.get("limits", {})
    agents = d.get("agents")
    tools = d.get("tools", {})
    return Policy(
        trigger=Trigger(
            min_permission=Permission(trigger.get("min_permission", base.trigger.min_permission)),
            allow_bots=tuple(trigger.get("allow_bots", base.trigger.allow_bots)),
            default_agent=trigger.get("default_agent", base.trigger.default_agent),
        ),
        agents=base.agents if agents is None else {name: agent_from(a) for name, a in agents.items()},
        tools={name: frozenset(Axis(t) for t in tags) for name, tags in tools.items()},
        protected_paths=(*ALWAYS_PROTECTED, *d.get("paths", {}).get("protected", ())),
        gates=tuple(gate_from(g) for g in d.get("gates", ())),
        limits=limits_from(limits, base.limits),
        review=review_from(d["review"], d["review"]["agent"]) if "review" in d else None,
    )


#: The per-repository limits; each one left out of the org file keeps the default.
REPO_LIMITS = ("max_concurrent_runs", "max_diff_lines", "max_runs_per_day", "max_agent_minutes_per_day")
#: The per-repository spend caps (US dollars); one left out of the org file keeps the default's (none).
SPEND_LIMITS = ("max_model_spend_per_run", "max_model_spend_per_day")


def limits_from(data: Mapping[str, Any], base: Limits) -> Limits:
    """An org file's ``limits``: ``installation`` replaces the default's as a whole, so a key
    the org leaves out there is no installation-wide cap (not a default one)."""
    # YAML may give 20.0 for 20 (the schema accepts it as a whole number): store ints.
    value = {key: int(data.get(key, getattr(base, key))) for key in REPO_LIMITS}
    spend = {key: _dollars(data.get(key, getattr(base, key))) for key in SPEND_LIMITS}
    installation = data.get("installation")
    size = {key: parse_size(data.get(key, getattr(base, key))) for key in SIZE_LIMITS}
    return Limits(
        max_concurrent_runs=value["max_concurrent_runs"],
        max_diff_lines=value["max_diff_lines"],
        max_runs_per_day=value["max_runs_per_day"],
        max_agent_minutes_per_day=value["max_agent_minutes_per_day"],
        installation=base.installation if installation is None else installation_from(installation),
        max_model_spend_per_run=spend["max_model_spend_per_run"],
        max_model_spend_per_day=spend["max_model_spend_per_day"],
        max_agent_memory=size["max_agent_memory"],
        max_workspace_bytes=size["max_workspace_bytes"],
    )


def _dollars(value: object) -> float | None:
    """A spend cap as the model holds it: a float (YAML gives 5 for five dollars), or None."""
    return None if value is None else float(value)  # type: ignore[arg-type]


def installation_from(data: Mapping[str, Any]) -> InstallationLimits:
    def cap(key: str) -> int | None:
        return None if data.get(key) is None else int(data[key])

    return InstallationLimits(
        max_concurrent_runs=cap("max_concurrent_runs"),
        max_runs_per_day=cap("max_runs_per_day"),
        max_agent_minutes_per_day=cap("max_agent_minutes_per_day"),
        max_model_spend_per_day=_dollars(data.get("max_model_spend_per_day")),
    )
