"""One source of truth: the published JSON Schema is SCHEMA, and our checks agree with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.tasks import AGENT_NAME_PATTERN
from worker.policy import SCHEMA, PolicyError, org_policy, parse, schema_text
from worker.policy._validate import ANNOTATIONS, SUPPORTED, validate

PUBLISHED = Path(__file__).resolve().parents[3] / "schemas" / "baton-policy.schema.json"
REFERENCE = jsonschema.Draft202012Validator(SCHEMA)


def test_published_schema_is_generated_from_code() -> None:
    assert PUBLISHED.read_text(encoding="utf-8") == schema_text(), (
        "schemas/baton-policy.schema.json is stale: "
        "run `baton policy schema > schemas/baton-policy.schema.json`"
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(PUBLISHED.read_text(encoding="utf-8")))


def _keywords(schema: Any, found: set[str]) -> set[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key in ("properties",):
                for sub in value.values():
                    _keywords(sub, found)
            elif key not in ("enum", "const", "required") and isinstance(value, dict | bool):
                _keywords(value, found)
    return found


def test_interpreter_understands_every_keyword_the_schema_uses() -> None:
    """A keyword we silently skipped would be a check the editor makes and Baton does not."""
    assert _keywords(SCHEMA, set()) - SUPPORTED - ANNOTATIONS == set()


VALID = [
    "version: 1\n",
    "version: 1\ntrigger: {min_permission: admin, allow_bots: ['renovate[bot]']}\n",
    "version: 1\nagents:\n  c: {adapter: command, tools: [], command: [./run, '{prompt_file}']}\n",
    "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: [read_repo, mystery]\n"
    "    model_endpoints: [api.anthropic.com]\n    egress: [pypi.org]\n    env: [ANTHROPIC_API_KEY]\n"
    "    timeout: 2h\n",
    "version: 1\ntools: {my-mcp-search: [untrusted_input, external_comm], quiet: []}\n",
    "version: 1\npaths: {protected: ['docs/**']}\ngates: [{name: tests, run: pytest -q, timeout: 10m}]\n",
    "version: 1\nlimits: {max_concurrent_runs: 64, max_diff_lines: 1}\n",
    "version: 1.0\nlimits: {max_diff_lines: 20.0}\n",
    "version: 1\nlimits: {max_runs_per_day: 1, max_agent_minutes_per_day: 600, installation: {}}\n",
    "version: 1\nlimits:\n  installation: {max_concurrent_runs: 4096, max_runs_per_day: 9,\n"
    "                 max_agent_minutes_per_day: 1}\n",
    "version: 1\nlimits: {max_agent_memory: 512MiB, max_workspace_bytes: 10737418240}\n",
    "version: 1\nagents: {r: {adapter: codex, tools: [read_repo]}}\nreview: {agent: r}\n",
    "version: 1\nagents: {r: {adapter: codex, tools: []}}\n"
    "review: {agent: r, blocks_on: [secret_leak], timeout: 2m, merge_gate: true}\n",
]
INVALID = [
    "version: 2\n",
    "version: '1'\n",
    "{}\n",
    "[]\n",
    "version: 1\nextra: 1\n",
    "version: 1\ntrigger: {min_permission: triage}\n",
    "version: 1\ntrigger: {allow_bots: [a, a]}\n",
    "version: 1\nagents: {Upper: {adapter: codex, tools: []}}\n",
    "version: 1\nagents: {a: {adapter: codex, tools: [], command: [x]}}\n",
    "version: 1\nagents: {a: {adapter: codex, tools: [], timeout: 0m}}\n",
    "version: 1\nagents: {a: {adapter: codex, tools: [], egress: [Example.com]}}\n",
    "version: 1\nagents: {a: {adapter: codex, tools: [], env: ['1X']}}\n",
    "version: 1\ntools: {x: [everything]}\n",
    "version: 1\npaths: {protected: ['']}\n",
    "version: 1\ngates: [{name: t, run: ''}]\n",
    "version: 1\nlimits: {max_diff_lines: 1.5}\n",
    "version: 1\nlimits: {max_concurrent_runs: true}\n",
    "version: 1\nlimits: {max_concurrent_runs: 65}\n",
    "version: 1\nlimits: {max_runs_per_day: 0}\n",
    "version: 1\nlimits: {max_agent_minutes_per_day: 1.5}\n",
    "version: 1\nlimits: {installation: {max_concurrent_runs: 4097}}\n",
    "version: 1\nlimits: {installation: {max_diff_lines: 5}}\n",
    "version: 1\nlimits: {installation: []}\n",
    "version: 1\nlimits: {max_agent_memory: 4GB}\n",
    "version: 1\nlimits: {max_agent_memory: 1.5}\n",
    "version: 1\nlimits: {max_agent_memory: 1000}\n",
    "version: 1\nlimits: {max_workspace_bytes: [10GiB]}\n",
    "version: 1\nreview: {agent: r, blocks_on: []}\n",
    "version: 1\nreview: {agent: r, merge_gate: 1}\n",
    "version: 1\nreview: {agent: r, reviewer: x}\n",
]


#: Valid in a repository file (an omitted agent field is inherited); an org file must say them.
REPO_ONLY = [
    "version: 1\nagents: {a: {adapter: codex}}\n",
    "version: 1\nagents: {a: {adapter: command, tools: []}}\n",
    "version: 1\nagents: {a: {}}\n",
    "version: 1\nagents: {a: {tools: [read_repo]}}\n",
    "version: 1\nagents: {a: {command: [./run]}}\n",
]


def _ours_valid(data: object) -> bool:
    return not any(validate(SCHEMA, data))


@pytest.mark.parametrize("text", VALID)
def test_valid_fixtures_pass_both_validators_and_load(text: str) -> None:
    data = yaml.safe_load(text)
    assert REFERENCE.is_valid(data)
    assert _ours_valid(data)
    parse(text, "f.yml")


@pytest.mark.parametrize("text", INVALID)
def test_invalid_fixtures_fail_both_validators_and_load(text: str) -> None:
    data = yaml.safe_load(text)
    assert not REFERENCE.is_valid(data)
    assert not _ours_valid(data)
    with pytest.raises(PolicyError):
        parse(text, "f.yml")


@pytest.mark.parametrize("text", REPO_ONLY)
def test_repo_only_fixtures_pass_both_validators_and_the_org_loader_refuses_them(text: str) -> None:
    data = yaml.safe_load(text)
    assert REFERENCE.is_valid(data)
    assert _ours_valid(data)
    doc = parse(text, "f.yml")
    with pytest.raises(PolicyError, match="an org file defines each agent in full"):
        org_policy(doc)


def test_agent_names_use_the_one_pattern_the_web_side_routes_by() -> None:
    """baton.tasks.AGENT_NAME_PATTERN is the single definition; the schema is built from it."""
    pattern = SCHEMA["properties"]["agents"]["propertyNames"]["pattern"]
    assert pattern == f"^{AGENT_NAME_PATTERN}(?![\\s\\S])"
    package = Path(__file__).resolve().parents[3] / "worker" / "policy"
    defining = [f.name for f in package.glob("*.py") if "[a-z0-9._-]" in f.read_text(encoding="utf-8")]
    assert defining == [], f"define agent names in baton/tasks.py only, not in {defining}"


# --- random documents, mostly near-valid so both verdicts are common -------------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2_000_000),
    st.sampled_from([0.5, 2.0]),
    st.sampled_from(["", "x", "a\n", "Bad Name", "30m", "1d", "write", "web_fetch", "API_KEY", "a.b"]),
    st.sampled_from(["-bad.com", "x.io:443", "9X", "0s", "100000h", "bad login", "Bad", "other", "triage"]),
    st.lists(st.sampled_from(["x", "y"]), max_size=2),
    st.dictionaries(st.sampled_from(["x", "name"]), st.just("v"), max_size=1),
)


def _maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually ``good``, one time in eight something that may be wrong."""
    return st.integers(0, 7).flatmap(lambda i: _JUNK if i == 0 else good)


def _listof(item: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return _maybe(st.lists(_maybe(item), max_size=3, unique_by=repr))


_TOOL = st.sampled_from(["read_repo", "web_fetch", "my-tool", "x:y"])
_HOST = st.sampled_from(["api.anthropic.com", "pypi.org", "a-b.c"])
_ENV = st.sampled_from(["ANTHROPIC_API_KEY", "NPM_TOKEN", "_x"])
_DURATION = st.sampled_from(["30m", "10s", "2h", "99999h"])
_AGENT = st.fixed_dictionaries(
    {},
    optional={
        "adapter": _maybe(st.sampled_from(["claude-code", "codex", "command", "script"])),
        "tools": _listof(_TOOL),
        "model_endpoints": _listof(_HOST),
        "egress": _listof(_HOST),
        "env": _listof(_ENV),
        "timeout": _maybe(_DURATION),
        "command": _listof(st.sampled_from(["./run", "{prompt_file}", ""])),
    },
)
_DOC = st.fixed_dictionaries(
    {"version": _maybe(st.sampled_from([1, 1.0]))},
    optional={
        "trigger": _maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "min_permission": _maybe(st.sampled_from(["write", "maintain", "admin"])),
                    "allow_bots": _listof(st.sampled_from(["dependabot[bot]", "renovate"])),
                },
            )
        ),
        "agents": _maybe(
            st.dictionaries(st.sampled_from(["claude-code", "a.b"]), _maybe(_AGENT), max_size=2)
        ),
        "tools": _maybe(
            st.dictionaries(
                st.sampled_from(["mcp", "my-tool"]),
                _listof(st.sampled_from(["private_data", "untrusted_input", "external_comm"])),
                max_size=2,
            )
        ),
        "paths": _maybe(
            st.fixed_dictionaries({}, optional={"protected": _listof(st.sampled_from(["a/**", ""]))})
        ),
        "gates": _listof(
            st.fixed_dictionaries(
                {
                    "name": _maybe(st.sampled_from(["tests", "lint"])),
                    "run": _maybe(st.sampled_from(["make", ""])),
                },
                optional={"timeout": _maybe(_DURATION)},
            )
        ),
        "limits": _maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "max_concurrent_runs": _maybe(st.integers(0, 70)),
                    "max_diff_lines": _maybe(st.integers(0, 2_000_000)),
                    "max_runs_per_day": _maybe(st.integers(0, 2_000_000)),
                    "max_agent_minutes_per_day": _maybe(st.integers(0, 200_000_000)),
                    "max_agent_memory": _maybe(
                        st.sampled_from(["4GiB", "4GB", "0MiB", "1.5GiB", 4 * 2**30, 2**20, 2**41, 2.0**32])
                    ),
                    "max_workspace_bytes": _maybe(st.sampled_from(["10GiB", "16MiB", "10", 10 * 2**30])),
                    "installation": _maybe(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "max_concurrent_runs": _maybe(st.integers(0, 5000)),
                                "max_runs_per_day": _maybe(st.integers(0, 2_000_000)),
                                "max_agent_minutes_per_day": _maybe(st.integers(0, 200_000_000)),
                            },
                        )
                    ),
                },
            )
        ),
        "review": _maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "agent": _maybe(st.sampled_from(["claude-code", "a.b"])),
                    "blocks_on": _listof(st.sampled_from(["secret_leak", "malicious_change", "x"])),
                    "timeout": _maybe(_DURATION),
                    "merge_gate": _maybe(st.booleans()),
                },
            )
        ),
        "extra": _JUNK,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_DOC)
def test_our_validator_agrees_with_jsonschema_on_random_documents(doc: dict[str, Any]) -> None:
    assert _ours_valid(doc) == REFERENCE.is_valid(doc), list(validate(SCHEMA, doc))
