"""The effective policy as plain frozen data, and its one canonical byte form.

Everything that decides (merge, the trifecta gate) and everything that will be
signed (the Decision, later receipts) works on these types. Collections that are
sets in meaning (tools, hosts, env names, bots, protected paths) are stored
sorted and de-duplicated so that two policies that mean the same thing have the
same bytes and the same digest; order-bearing lists (gates, a command's argv)
keep their order.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType

from worker.policy.sizes import SIZE_LIMITS, format_size

SCHEMA_VERSION = 1


class Axis(StrEnum):
    """The three legs of the lethal trifecta."""

    PRIVATE_DATA = "private_data"
    UNTRUSTED_INPUT = "untrusted_input"
    EXTERNAL_COMM = "external_comm"


ALL_AXES: frozenset[Axis] = frozenset(Axis)


class Permission(StrEnum):
    """Repository permission needed to trigger an agent, weakest first."""

    WRITE = "write"
    MAINTAIN = "maintain"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Permission.WRITE: 0, Permission.MAINTAIN: 1, Permission.ADMIN: 2}

_DURATION = re.compile(r"([1-9][0-9]{0,4})([smh])")
_UNIT = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> int:
    """``30m`` -> 1800. Only s, m, h: a policy never needs days, and ``1d`` in a
    timeout is more likely a typo than an intent."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 30m, 10s or 2h")
    return int(match.group(1)) * _UNIT[match.group(2)]


def format_duration(seconds: int) -> str:
    """The shortest exact spelling, so 3600s and 60m both print (and hash) as 1h."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _set(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


@dataclass(frozen=True)
class Trigger:
    min_permission: Permission = Permission.WRITE
    allow_bots: tuple[str, ...] = ()
    #: The agent that runs when someone calls Baton by name (`@<app-slug> ...`) rather than naming
    #: one; None: such a call is answered with how to name an agent.
    default_agent: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_bots", _set(self.allow_bots))


@dataclass(frozen=True)
class Agent:
    """How one agent may run. ``timeout`` is in seconds."""

    adapter: str
    tools: tuple[str, ...] = ()
    model_endpoints: tuple[str, ...] = ()
    egress: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int = 1800
    command: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tools", "model_endpoints", "egress", "env"):
            object.__setattr__(self, name, _set(getattr(self, name)))


@dataclass(frozen=True)
class Gate:
    name: str
    run: str
    timeout: int = 600


#: What a reviewer's verdict judges (``worker.runner.verdict``), in the order its reply must hold them.
REVIEW_CATEGORIES = ("injection_suspected", "secret_leak", "malicious_change")
#: How long a reviewer may take unless the policy says (``review.timeout``).
REVIEW_TIMEOUT_S = 600


@dataclass(frozen=True)
class Review:
    """An independent reviewer before any push: one of the policy's agents, run read-only on the
    result. ``blocks_on``: the categories whose finding stops the push (kept in REVIEW_CATEGORIES'
    order); ``merge_gate``: it also judges every pull request in ``baton/merge-gate``."""

    agent: str
    blocks_on: tuple[str, ...] = REVIEW_CATEGORIES
    timeout: int = REVIEW_TIMEOUT_S
    merge_gate: bool = False

    def __post_init__(self) -> None:
        asked = set(self.blocks_on)
        unknown = asked - set(REVIEW_CATEGORIES)
        if unknown:
            raise ValueError(f"review categories {sorted(unknown)} are not among {REVIEW_CATEGORIES}")
        object.__setattr__(self, "blocks_on", tuple(c for c in REVIEW_CATEGORIES if c in asked))

    def to_data(self) -> dict[str, object]:
        """Every field, in the file's vocabulary: what a replay loads back as an org file."""
        return {
            "agent": self.agent,
            "blocks_on": list(self.blocks_on),
            "timeout": format_duration(self.timeout),
            "merge_gate": self.merge_gate,
        }


@dataclass(frozen=True)
class InstallationLimits:
    """Totals across all of an installation's repositories; ``None`` is no installation-wide cap.

    Only the org file sets these: a repository's file is one of many under the
    installation, so it cannot speak for (or loosen) the others' shared budget.
    """

    max_concurrent_runs: int | None = None
    max_runs_per_day: int | None = None
    max_agent_minutes_per_day: int | None = None
    #: US dollars of model calls a UTC day, metered by the model gateway.
    max_model_spend_per_day: float | None = None

    def to_data(self) -> dict[str, float]:
        """Only the caps that are set, so the output is itself a valid ``installation:`` mapping."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {name: value for name, value in values if value is not None}


@dataclass(frozen=True)
class Limits:
    """Per-repository limits (days are UTC days), plus the org's installation-wide totals.

    The model spend caps (US dollars, as the model gateway meters them) are ``None``,
    no cap, unless a file sets them; ``to_data`` writes them only when set, so a policy
    that never set one keeps the bytes, and the digest, it had before they existed. The
    box's memory and disk sizes (bytes) always have a value, written only when not the
    default for the same reason.
    """

    max_concurrent_runs: int = 2
    max_diff_lines: int = 2000
    max_runs_per_day: int = 50
    max_agent_minutes_per_day: int = 600
    installation: InstallationLimits = field(default_factory=InstallationLimits)
    max_model_spend_per_run: float | None = None
    max_model_spend_per_day: float | None = None
    #: Bytes of memory one agent run's box may use (all its processes together).
    max_agent_memory: int = SIZE_LIMITS["max_agent_memory"].default
    #: Bytes one agent run may write: its workspace, HOME and /tmp together.
    max_workspace_bytes: int = SIZE_LIMITS["max_workspace_bytes"].default

    def spend_data(self) -> dict[str, float]:
        """The spend caps that are set, in the file's vocabulary."""
        caps = (("max_model_spend_per_run", self.max_model_spend_per_run),
                ("max_model_spend_per_day", self.max_model_spend_per_day))  # fmt: skip
        return {name: value for name, value in caps if value is not None}

    def size_data(self) -> dict[str, str]:
        """The box's sizes that differ from Baton's defaults, spelt like ``4GiB``. Like the spend
        caps, a policy that leaves them at the default keeps the bytes and digest it had before
        they existed, so decisions recorded earlier still replay (a default is part of this
        schema version: changing one would need it written out)."""
        sizes = ((name, getattr(self, name)) for name in SIZE_LIMITS)
        return {name: format_size(v) for name, v in sizes if v != SIZE_LIMITS[name].default}


def _frozen_map(items: Mapping[str, object] | None) -> Mapping[str, object]:
    return MappingProxyType(dict(sorted((items or {}).items())))


@dataclass(frozen=True)
class Policy:
    """A complete policy: an org ceiling, the built-in defaults, or an effective policy."""

    trigger: Trigger = field(default_factory=Trigger)
    agents: Mapping[str, Agent] = field(default_factory=dict)
    tools: Mapping[str, frozenset[Axis]] = field(default_factory=dict)
    protected_paths: tuple[str, ...] = ()
    gates: tuple[Gate, ...] = ()
    limits: Limits = field(default_factory=Limits)
    version: int = SCHEMA_VERSION
    #: The reviewer before any push; None: no review (and no ``review`` key in the bytes).
    review: Review | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", _frozen_map(self.agents))
        object.__setattr__(self, "tools", _frozen_map({k: frozenset(v) for k, v in self.tools.items()}))
        object.__setattr__(self, "protected_paths", _set(self.protected_paths))
        object.__setattr__(self, "gates", tuple(self.gates))

    def to_data(self) -> dict[str, object]:
        """The policy in the file's own vocabulary (durations as ``30m``), JSON-ready."""
        agents: dict[str, object] = {}
        for name, agent in self.agents.items():
            entry: dict[str, object] = {
                "adapter": agent.adapter,
                "tools": list(agent.tools),
                "model_endpoints": list(agent.model_endpoints),
                "egress": list(agent.egress),
                "env": list(agent.env),
                "timeout": format_duration(agent.timeout),
            }
            if agent.command is not None:
                entry["command"] = list(agent.command)
            agents[name] = entry
        return {
            "version": self.version,
            "trigger": {
                "min_permission": str(self.trigger.min_permission),
                "allow_bots": list(self.trigger.allow_bots),
                # Written only when set, so every decision recorded before it existed replays.
                **({"default_agent": self.trigger.default_agent} if self.trigger.default_agent else {}),
            },
            "agents": agents,
            "tools": {name: sorted(str(a) for a in tags) for name, tags in self.tools.items()},
            "paths": {"protected": list(self.protected_paths)},
            "gates": [
                {"name": g.name, "run": g.run, "timeout": format_duration(g.timeout)} for g in self.gates
            ],
            "limits": {
                "max_concurrent_runs": self.limits.max_concurrent_runs,
                "max_diff_lines": self.limits.max_diff_lines,
                "max_runs_per_day": self.limits.max_runs_per_day,
                "max_agent_minutes_per_day": self.limits.max_agent_minutes_per_day,
                **self.limits.spend_data(),
                **self.limits.size_data(),
                "installation": self.limits.installation.to_data(),
            },
            # Written only when set, so a policy without a review keeps its bytes and digest.
            **({"review": self.review.to_data()} if self.review is not None else {}),
        }

    @cached_property
    def canonical(self) -> bytes:
        """Canonical JSON bytes; cached because decide() reports the digest on every call."""
        return canonical_json(self.to_data())

    @cached_property
    def digest(self) -> str:
        """Hex sha256 of the canonical bytes: what a signed Decision binds to."""
        return hashlib.sha256(self.canonical).hexdigest()


def canonical_json(data: object) -> bytes:
    """Sorted keys, no whitespace, ASCII only: equal data gives equal bytes on every machine."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
