"""Capability policy and the lethal-trifecta gate (issue 4): the public surface.

Typical use, at the edge that has the files::

    org = parse(org_bytes, "org/.github/baton.yml") if org_bytes else None
    repo = parse(repo_bytes, ".github/baton.yml") if repo_bytes else None
    merged = merge(org_policy(org), repo)      # merged.problems: widening attempts, dropped
    decision = decide(merged.policy, TaskFacts(agent="claude-code", repo_private=True))
    if not decision.allowed: ...               # spawn nothing; post explain(decision)

Everything here is pure; reading files and talking to GitHub happen elsewhere.
Whoever reads a policy file should read at most ``MAX_POLICY_BYTES + 1`` bytes.
"""

from worker.policy._yaml import MAX_BYTES as MAX_POLICY_BYTES
from worker.policy.catalogue import CATALOGUE, MODEL_KEYS, MODEL_PROVIDERS, ModelProvider, ToolSpec
from worker.policy.decide import Contributor, Decision, Remedy, decide
from worker.policy.defaults import ALWAYS_PROTECTED, DEFAULT_POLICY
from worker.policy.errors import INVALID, UNKNOWN_AGENT, WIDENING, PolicyError, Problem, UnknownAgent
from worker.policy.explain import explain
from worker.policy.facts import TaskFacts
from worker.policy.load import PolicyDoc, org_policy, parse
from worker.policy.merge import Merged, merge
from worker.policy.model import (
    REVIEW_CATEGORIES,
    Agent,
    Axis,
    Gate,
    Limits,
    Permission,
    Policy,
    Review,
    Trigger,
    canonical_json,
)
from worker.policy.schema import SCHEMA, schema_text

__all__ = [
    "ALWAYS_PROTECTED",
    "CATALOGUE",
    "DEFAULT_POLICY",
    "INVALID",
    "MAX_POLICY_BYTES",
    "MODEL_KEYS",
    "MODEL_PROVIDERS",
    "REVIEW_CATEGORIES",
    "SCHEMA",
    "UNKNOWN_AGENT",
    "WIDENING",
    "Agent",
    "Axis",
    "Contributor",
    "Decision",
    "Gate",
    "Limits",
    "Merged",
    "ModelProvider",
    "Permission",
    "Policy",
    "PolicyDoc",
    "PolicyError",
    "Problem",
    "Remedy",
    "Review",
    "TaskFacts",
    "ToolSpec",
    "Trigger",
    "UnknownAgent",
    "canonical_json",
    "decide",
    "explain",
    "merge",
    "org_policy",
    "parse",
    "schema_text",
]
