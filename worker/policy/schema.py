"""The JSON Schema of baton.yml v1: the single source of truth for its shape.

The runtime validator (_validate.py) interprets this very dict, and the file
editors use, ``schemas/baton-policy.schema.json``, is generated from it
(``baton policy schema > schemas/baton-policy.schema.json``); a test
fails if the two drift. Checks a schema cannot express (duplicate keys, gate
names, anchors, and what only an org file must say) live in load.py and are
listed there.

Patterns end in ``(?![\\s\\S])`` rather than ``$`` because in Python ``$`` also
matches before a trailing newline; the lookahead means "end of string" in both
Python and ECMA-262 (what editors run).
"""

from __future__ import annotations

import json
from typing import Any

from baton.tasks import AGENT_NAME_PATTERN
from worker.policy.model import REVIEW_CATEGORIES, SCHEMA_VERSION, Axis, Permission
from worker.policy.sizes import PATTERN as _SIZE_PATTERN
from worker.policy.sizes import SIZE_LIMITS, format_size

_END = r"(?![\s\S])"


def _pattern(body: str, title: str) -> dict[str, Any]:
    return {"type": "string", "title": title, "pattern": f"^{body}{_END}"}


ADAPTERS = (
    "claude-code", "codex", "gemini", "qwen-code", "opencode", "aider", "mini-swe-agent", "script", "command"
)  # fmt: skip
#: Adapter names Baton once accepted, and why a policy naming one is now refused.
RETIRED_ADAPTERS = {
    "goose": "Goose is on neither npm nor PyPI (its releases are downloads from GitHub), so Baton's CI "
    "cannot install it and it was never run; drive it with `adapter: command` if you must",
}
_ARGVLESS = [a for a in ADAPTERS if a != "command"]

_DURATION = _pattern("[1-9][0-9]{0,4}[smh]", "duration like 30m, 10s or 2h")
_HOST = _pattern(
    r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*",
    "lower-case host name like api.example.com (no scheme, port or path)",
)
_ENV = _pattern("[A-Za-z_][A-Za-z0-9_]{0,127}", "environment variable name like API_KEY")
_TOOL = _pattern("[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", "tool name like web_fetch")
#: One definition of an agent name, shared with the web side's routing of labels and commands.
_AGENT = _pattern(AGENT_NAME_PATTERN, "agent name like claude-code (lower case, used in agent:<name>)")
_BOT = _pattern(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}(\[bot\])?", "GitHub login like dependabot[bot]")


def _set_of(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item, "uniqueItems": True, "maxItems": 256}


_AXES = {"type": "string", "enum": [str(a) for a in Axis]}
_RUNS_PER_DAY = {"type": "integer", "minimum": 1, "maximum": 1000000}
_MINUTES_PER_DAY = {"type": "integer", "minimum": 1, "maximum": 100000000}
_SPEND = {"type": "number", "minimum": 0.01, "maximum": 1000000,
          "description": "US dollars of model calls, as Baton's model gateway meters them"}  # fmt: skip


def _size(key: str, what: str) -> dict[str, Any]:
    """A size: ``4GiB`` or a number of bytes. The bounds bind a number here and, for a string,
    in load.py (a schema cannot compare ``4GiB`` with a number), from the same SIZE_LIMITS."""
    bounds = SIZE_LIMITS[key]
    return {
        "type": ["integer", "string"],
        "title": "size like 512MiB or 4GiB (binary units KiB, MiB, GiB, TiB), or a number of bytes",
        "description": f"{what}; from {format_size(bounds.floor)} to {format_size(bounds.ceiling)}, "
        f"default {format_size(bounds.default)}",
        "pattern": f"^{_SIZE_PATTERN}{_END}",
        "minimum": bounds.floor,
        "maximum": bounds.ceiling,
    }


SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Baton policy (baton.yml), schema version 1",
    "description": (
        "Org ceiling in the org's .github repository (baton.yml) or a repository's narrowing "
        "(.github/baton.yml). A repository may only narrow the org policy."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["version"],
    "properties": {
        "version": {"const": SCHEMA_VERSION, "description": "Schema version; this Baton reads 1."},
        "trigger": {
            "type": "object",
            "additionalProperties": False,
            "description": "Who may assign an issue to an agent with the agent:<name> label.",
            "properties": {
                "min_permission": {"type": "string", "enum": [str(p) for p in Permission]},
                "allow_bots": _set_of(_BOT),
                "default_agent": {
                    **_AGENT,
                    "description": "The agent that runs when someone calls Baton by name (@<app-slug> ...); "
                    "one of this policy's agents (a repository may only pick among the org's).",
                },
            },
        },
        "agents": {
            "type": "object",
            "description": "Agent name -> how to run it.",
            "maxProperties": 64,
            "propertyNames": _AGENT,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "description": (
                    "In the org file, adapter and tools are required, and command with adapter: command "
                    "(Baton checks this when it loads the org file). In a repository file every field "
                    "may be left out and is inherited from the org's agent of the same name."
                ),
                "properties": {
                    "adapter": {"type": "string", "enum": list(ADAPTERS)},
                    "tools": _set_of(_TOOL),
                    "model_endpoints": _set_of(_HOST),
                    "egress": _set_of(_HOST),
                    "env": _set_of(_ENV),
                    "timeout": _DURATION,
                    "command": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 256,
                        "items": {"type": "string", "minLength": 1, "maxLength": 4096},
                    },
                },
                # Only the command adapter takes an argv. Which fields are required depends on
                # whose file it is, which a schema cannot see: load.org_policy checks that.
                "if": {"properties": {"adapter": {"enum": _ARGVLESS}}, "required": ["adapter"]},
                "then": {"properties": {"command": False}},
            },
        },
        "tools": {
            "type": "object",
            "description": "Extra tools, or stricter tags for known ones: name -> capabilities.",
            "maxProperties": 256,
            "propertyNames": _TOOL,
            "additionalProperties": _set_of(_AXES),
        },
        "paths": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "protected": _set_of({"type": "string", "minLength": 1, "maxLength": 1024}),
            },
        },
        "gates": {
            "type": "array",
            "maxItems": 64,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "run"],
                "properties": {
                    "name": _TOOL | {"title": "gate name like tests"},
                    "run": {"type": "string", "minLength": 1, "maxLength": 4096},
                    "timeout": _DURATION,
                },
            },
        },
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "description": "Per repository (days are UTC days). A repository may only lower them.",
            "properties": {
                "max_concurrent_runs": {"type": "integer", "minimum": 1, "maximum": 64},
                "max_diff_lines": {"type": "integer", "minimum": 1, "maximum": 1000000},
                "max_runs_per_day": _RUNS_PER_DAY,
                "max_agent_minutes_per_day": _MINUTES_PER_DAY,
                "max_model_spend_per_run": _SPEND,
                "max_model_spend_per_day": _SPEND,
                "max_agent_memory": _size(
                    "max_agent_memory", "Memory of one agent run: all of its box's processes together"
                ),
                "max_workspace_bytes": _size(
                    "max_workspace_bytes", "Disk of one agent run: its workspace, HOME and /tmp together"
                ),
                "installation": {
                    "type": "object",
                    "additionalProperties": False,
                    "description": (
                        "Org file only: totals across all the org's repositories. A key left out "
                        "means no installation-wide cap; a repository file may not set this."
                    ),
                    "properties": {
                        "max_concurrent_runs": {"type": "integer", "minimum": 1, "maximum": 4096},
                        "max_runs_per_day": _RUNS_PER_DAY,
                        "max_agent_minutes_per_day": _MINUTES_PER_DAY,
                        "max_model_spend_per_day": _SPEND,
                    },
                },
            },
        },
        "review": {
            "type": "object",
            "additionalProperties": False,
            "description": (
                "An independent reviewer before any push: one of this policy's agents reads the issue, "
                "the change and the run's egress and model summaries, read-only, and its verdict can "
                "stop the push. The org file must name the agent; a repository may add a review, add "
                "categories, lower the timeout and turn merge_gate on, and nothing else."
            ),
            "properties": {
                "agent": {
                    **_AGENT,
                    "description": "The reviewer: one of this policy's agents (not the script agent).",
                },
                "blocks_on": {
                    **_set_of({"type": "string", "enum": list(REVIEW_CATEGORIES)}),
                    "minItems": 1,
                    "description": "The findings that stop the push (default: all three).",
                },
                "timeout": {**_DURATION, "description": "How long the reviewer may take (default 10m)."},
                "merge_gate": {
                    "type": "boolean",
                    "description": "Also judge every pull request in baton/merge-gate (default false).",
                },
            },
        },
    },
}


def schema_text() -> str:
    """The published file's exact contents."""
    return json.dumps(SCHEMA, indent=2, sort_keys=False) + "\n"
