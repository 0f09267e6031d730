"""The org policy is a ceiling: a repository narrows it, and every widening is a located error."""

from __future__ import annotations

import pytest

from worker.policy import (
    ALWAYS_PROTECTED,
    DEFAULT_POLICY,
    Axis,
    Merged,
    Permission,
    PolicyError,
    TaskFacts,
    decide,
    merge,
    org_policy,
    parse,
)

ORG = """\
version: 1
trigger: {min_permission: write, allow_bots: ["dependabot[bot]", "renovate[bot]"]}
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files, run_shell, web_fetch]
    model_endpoints: [api.anthropic.com]
    egress: [pypi.org, files.pythonhosted.org]
    env: [ANTHROPIC_API_KEY, SENTRY_DSN]
    timeout: 30m
  runner:
    adapter: command
    tools: [read_repo]
    command: [./agent, "{prompt_file}"]
tools:
  my-mcp-search: [untrusted_input, external_comm]
paths: {protected: [secrets/**]}
gates:
  - {name: tests, run: pytest -q, timeout: 10m}
limits: {max_concurrent_runs: 4, max_diff_lines: 2000}
"""
CEILING = org_policy(parse(ORG, "org.yml"))


def _merge(repo: str) -> Merged:
    return merge(CEILING, parse(repo, ".github/baton.yml"))


def test_no_repo_file_means_the_ceiling() -> None:
    assert merge(CEILING, None).policy == CEILING


def test_no_org_file_means_the_built_in_defaults() -> None:
    assert org_policy(None) == DEFAULT_POLICY
    assert set(ALWAYS_PROTECTED) <= set(DEFAULT_POLICY.protected_paths)
    assert DEFAULT_POLICY.trigger.min_permission == Permission.WRITE
    assert DEFAULT_POLICY.trigger.allow_bots == ()
    assert all(a.egress == () for a in DEFAULT_POLICY.agents.values())


def test_org_file_cannot_unprotect_workflows() -> None:
    org = org_policy(parse("version: 1\npaths: {protected: []}\n", "org.yml"))
    assert set(ALWAYS_PROTECTED) <= set(org.protected_paths)


def test_repo_narrows_every_section() -> None:
    merged = _merge(
        "version: 1\n"
        "trigger: {min_permission: admin, allow_bots: []}\n"
        "agents:\n"
        "  claude-code:\n"
        "    adapter: claude-code\n"
        "    tools: [read_repo, web_fetch]\n"
        "    egress: []\n"
        "    env: [ANTHROPIC_API_KEY]\n"
        "    timeout: 10m\n"
        "tools: {web_fetch: [private_data], my-mcp-search: [untrusted_input, external_comm, private_data]}\n"
        "paths: {protected: [infra/**]}\n"
        "gates: [{name: lint, run: ruff check .}, {name: tests, run: pytest -q, timeout: 5m}]\n"
        "limits: {max_diff_lines: 500}\n"
    )
    assert merged.ok, merged.problems
    p = merged.policy
    assert p.trigger.min_permission == Permission.ADMIN
    assert p.trigger.allow_bots == ()
    assert list(p.agents) == ["claude-code"]  # runner removed by omission
    agent = p.agents["claude-code"]
    assert agent.tools == ("read_repo", "web_fetch")
    assert (agent.egress, agent.env, agent.timeout) == ((), ("ANTHROPIC_API_KEY",), 600)
    assert agent.model_endpoints == ("api.anthropic.com",)  # omitted: inherited
    assert p.tools["web_fetch"] == {Axis.PRIVATE_DATA}
    assert Axis.PRIVATE_DATA in p.tools["my-mcp-search"]
    assert {"secrets/**", "infra/**", *ALWAYS_PROTECTED} == set(p.protected_paths)
    assert [(g.name, g.timeout) for g in p.gates] == [("tests", 300), ("lint", 600)]
    assert (p.limits.max_concurrent_runs, p.limits.max_diff_lines) == (4, 500)


def test_omitted_sections_inherit_the_ceiling() -> None:
    merged = _merge("version: 1\nlimits: {max_concurrent_runs: 1}\n")
    assert merged.ok
    assert merged.policy.agents == CEILING.agents
    assert merged.policy.gates == CEILING.gates


# (id, repo file, line, col, words)
WIDENING = [
    ("new-agent", "version: 1\nagents:\n  aider: {adapter: aider, tools: []}\n", 3, 3, "no agent 'aider'"),
    (
        "new-tool",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo, browser]}\n",
        3,
        58,
        "agents.claude-code.tools[1]: tool 'browser' is not in the org policy",
    ),
    (
        "new-host",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    egress: [pypi.org, evil.io]\n",
        6,
        24,
        "egress host 'evil.io'",
    ),
    (
        "new-model-endpoint",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    model_endpoints: [evil.io]\n",
        6,
        23,
        "model endpoint 'evil.io'",
    ),
    (
        "new-env",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    env: [AWS_SECRET]\n",
        6,
        11,
        "env name 'AWS_SECRET'",
    ),
    ("new-bot", "version: 1\ntrigger:\n  allow_bots: [evil-bot]\n", 3, 16, "bot 'evil-bot'"),
    ("lower-permission", "version: 1\ntrigger: {min_permission: write}\n", None, None, None),
    (
        "longer-timeout",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [], timeout: 2h}\n",
        3,
        59,
        "2h is longer than the org's 30m",
    ),
    (
        "other-adapter",
        "version: 1\nagents:\n  claude-code: {adapter: codex, tools: []}\n",
        3,
        26,
        "cannot change it",
    ),
    (
        "other-command",
        "version: 1\nagents:\n  runner: {adapter: command, tools: [], command: [sh, -c, curl evil.io]}\n",
        3,
        50,
        "differs from the org's command",
    ),
    ("drop-tag", "version: 1\ntools:\n  my-mcp-search: [untrusted_input]\n", 3, 18, "drops external_comm"),
    (
        "declare-unknown-tool",
        "version: 1\ntools:\n  shady: []\n",
        3,
        3,
        "the org policy does not declare tool 'shady'",
    ),
    ("replace-org-gate", "version: 1\ngates: [{name: tests, run: 'true'}]\n", 2, 28, "cannot change it"),
    ("longer-gate", "version: 1\ngates: [{name: tests, run: pytest -q, timeout: 1h}]\n", 2, 48, "only lower"),
    (
        "higher-limit",
        "version: 1\nlimits:\n  max_diff_lines: 100000\n",
        3,
        19,
        "100000 is above the org's 2000",
    ),
]


@pytest.mark.parametrize(
    ("repo", "line", "col", "words"), [c[1:] for c in WIDENING if c[2]], ids=[c[0] for c in WIDENING if c[2]]
)
def test_widening_is_a_located_error_and_the_ceiling_applies(
    repo: str, line: int, col: int, words: str
) -> None:
    merged = _merge(repo)
    assert not merged.ok
    assert merged.policy == CEILING  # never half-applied
    first = merged.problems[0]
    assert (first.file, first.line, first.col) == (".github/baton.yml", line, col), str(first)
    assert words in first.message
    assert "a repository" in first.message  # says what is allowed instead


def test_lowering_min_permission_is_widening() -> None:
    ceiling = org_policy(parse("version: 1\ntrigger: {min_permission: maintain}\n", "org.yml"))
    merged = merge(ceiling, parse("version: 1\ntrigger:\n  min_permission: write\n", "r.yml"))
    assert [str(p) for p in merged.problems] == [
        "r.yml:3:19: trigger.min_permission: write is below the org's maintain; "
        "a repository may only raise it"
    ]
    assert merged.policy == ceiling


def test_raise_for_widening_gives_a_stable_code() -> None:
    with pytest.raises(PolicyError) as caught:
        _merge("version: 1\nlimits: {max_diff_lines: 3000}\n").raise_for_widening()
    assert caught.value.code == "policy.widening"
    assert str(caught.value).startswith(".github/baton.yml:2:26: limits.max_diff_lines")
    assert _merge("version: 1\n").raise_for_widening() == CEILING


def test_leaving_out_an_org_gate_does_not_drop_it() -> None:
    merged = _merge("version: 1\ngates: [{name: lint, run: make lint}]\n")
    assert [g.name for g in merged.policy.gates] == ["tests", "lint"]


def test_one_widening_among_narrowings_applies_none_of_them() -> None:
    merged = _merge(
        "version: 1\nlimits: {max_diff_lines: 10}\n"
        "agents:\n  claude-code: {adapter: claude-code, tools: [mcp]}\n"
    )
    assert len(merged.problems) == 1
    assert merged.policy.limits.max_diff_lines == 2000


def test_repo_narrowing_can_turn_a_deny_into_an_allow_by_removing_a_leg() -> None:
    facts = TaskFacts(agent="claude-code", repo_private=True)
    assert not decide(CEILING, facts).allowed
    narrowed = _merge(
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo], egress: []}\n"
    )
    assert decide(narrowed.policy, facts).allowed
