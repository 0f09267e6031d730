"""The org policy is a ceiling: a repository narrows it, and every widening is a located error."""

from __future__ import annotations

import dataclasses

import pytest

from worker.policy import (
    ALWAYS_PROTECTED,
    DEFAULT_POLICY,
    Axis,
    Merged,
    Permission,
    Policy,
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


# (id, repo file, line, col, words, the same file with the widening taken out)
WIDENING = [
    (
        "new-agent",
        "version: 1\nagents:\n  aider: {adapter: aider, tools: []}\n",
        3,
        3,
        "no agent 'aider'",
        "version: 1\nagents: {}\n",
    ),
    (
        "new-tool",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo, browser]}\n",
        3,
        58,
        "agents.claude-code.tools[1]: tool 'browser' is not in the org policy",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo]}\n",
    ),
    (
        "new-host",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    egress: [pypi.org, evil.io]\n",
        6,
        24,
        "egress host 'evil.io'",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [], egress: [pypi.org]}\n",
    ),
    (
        "new-model-endpoint",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    model_endpoints: [api.openai.com]\n",
        6,
        23,
        "model endpoint 'api.openai.com'",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [], model_endpoints: []}\n",
    ),
    (
        "new-env",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: []\n"
        "    env: [AWS_SECRET]\n",
        6,
        11,
        "env name 'AWS_SECRET'",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [], env: []}\n",
    ),
    (
        "new-bot",
        "version: 1\ntrigger:\n  allow_bots: [evil-bot]\n",
        3,
        16,
        "bot 'evil-bot'",
        "version: 1\ntrigger: {allow_bots: []}\n",
    ),
    (
        "longer-timeout",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [], timeout: 2h}\n",
        3,
        59,
        "2h is longer than the org's 30m",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: []}\n",
    ),
    (
        "other-adapter",
        "version: 1\nagents:\n  claude-code: {adapter: codex, tools: []}\n",
        3,
        26,
        "cannot change it",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: []}\n",
    ),
    (
        "other-command",
        "version: 1\nagents:\n  runner: {adapter: command, tools: [], command: [sh, -c, curl evil.io]}\n",
        3,
        50,
        "differs from the org's command",
        "version: 1\nagents:\n  runner: {adapter: command, tools: []}\n",
    ),
    (
        "drop-tag",
        "version: 1\ntools:\n  my-mcp-search: [untrusted_input]\n",
        3,
        18,
        "drops external_comm",
        "version: 1\n",
    ),
    (
        "declare-unknown-tool",
        "version: 1\ntools:\n  shady: []\n",
        3,
        3,
        "the org policy does not declare tool 'shady'",
        "version: 1\n",
    ),
    (
        "replace-org-gate",
        "version: 1\ngates: [{name: tests, run: 'true'}]\n",
        2,
        28,
        "cannot change it",
        "version: 1\n",
    ),
    (
        "longer-gate",
        "version: 1\ngates: [{name: tests, run: pytest -q, timeout: 1h}]\n",
        2,
        48,
        "only lower",
        "version: 1\n",
    ),
    (
        "higher-limit",
        "version: 1\nlimits:\n  max_diff_lines: 100000\n",
        3,
        19,
        "100000 is above the org's 2000",
        "version: 1\n",
    ),
]


@pytest.mark.parametrize(
    ("repo", "line", "col", "words", "kept"), [c[1:] for c in WIDENING], ids=[c[0] for c in WIDENING]
)
def test_widening_is_a_located_problem_and_only_that_item_is_dropped(
    repo: str, line: int, col: int, words: str, kept: str
) -> None:
    merged = _merge(repo)
    assert not merged.ok
    assert len(merged.problems) == 1, merged.problems
    first = merged.problems[0]
    assert (first.file, first.line, first.col) == (".github/baton.yml", line, col), str(first)
    assert words in first.message
    assert "a repository" in first.message  # says what is allowed instead
    without = _merge(kept)
    assert without.ok, without.problems
    assert merged.policy == without.policy  # exactly as if the widening had not been written


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


def test_a_widening_drops_only_itself_and_every_narrowing_still_applies() -> None:
    """A repo that narrows and also widens by mistake keeps its narrowings (not the broader ceiling)."""
    merged = _merge(
        "version: 1\nlimits: {max_diff_lines: 10}\n"
        "agents:\n  claude-code: {adapter: claude-code, tools: [read_repo, mcp],\n"
        "                egress: [pypi.org, evil.io]}\n"
    )
    assert [(p.line, p.col) for p in merged.problems] == [(4, 58), (5, 36)]
    assert "tool 'mcp'" in merged.problems[0].message
    assert "egress host 'evil.io'" in merged.problems[1].message
    p = merged.policy
    assert p.limits.max_diff_lines == 10
    assert list(p.agents) == ["claude-code"]  # runner removed by omission, as the repo asked
    agent = p.agents["claude-code"]
    assert (agent.tools, agent.egress) == (("read_repo",), ("pypi.org",))
    assert agent.env == CEILING.agents["claude-code"].env  # not restated: inherited


def test_every_dropped_item_is_its_own_problem_in_file_order() -> None:
    merged = _merge(
        "version: 1\n"
        "trigger: {min_permission: admin, allow_bots: [evil-bot, 'renovate[bot]', other-bot]}\n"
        "limits: {max_concurrent_runs: 9, max_diff_lines: 9999}\n"
    )
    assert [p.line for p in merged.problems] == [2, 2, 3, 3]
    assert merged.policy.trigger.min_permission == Permission.ADMIN
    assert merged.policy.trigger.allow_bots == ("renovate[bot]",)
    assert merged.policy.limits == CEILING.limits
    with pytest.raises(PolicyError) as caught:
        merged.raise_for_widening()
    assert len(caught.value.problems) == 4


def test_changing_an_org_agents_adapter_keeps_the_agent_as_the_org_defines_it_narrowed() -> None:
    merged = _merge("version: 1\nagents:\n  claude-code: {adapter: codex, tools: [read_repo]}\n")
    assert len(merged.problems) == 1
    agent = merged.policy.agents["claude-code"]
    assert agent.adapter == "claude-code"
    assert agent.tools == ("read_repo",)


def test_changing_an_org_gates_run_is_dropped_but_a_lower_timeout_applies() -> None:
    merged = _merge("version: 1\ngates: [{name: tests, run: 'true', timeout: 5m}, {name: lint, run: make}]\n")
    assert len(merged.problems) == 1
    assert [(g.name, g.run, g.timeout) for g in merged.policy.gates] == [
        ("tests", "pytest -q", 300),
        ("lint", "make", 600),
    ]


def test_dropping_a_tag_is_refused_but_added_tags_apply() -> None:
    merged = _merge("version: 1\ntools:\n  my-mcp-search: [untrusted_input, private_data]\n")
    assert len(merged.problems) == 1
    assert merged.policy.tools["my-mcp-search"] == set(Axis)


def test_restating_an_org_gate_without_a_timeout_inherits_the_orgs_timeout() -> None:
    ceiling = org_policy(parse("version: 1\ngates: [{name: tests, run: make, timeout: 5m}]\n", "org.yml"))
    merged = merge(ceiling, parse("version: 1\ngates: [{name: tests, run: make}]\n", "r.yml"))
    assert merged.ok, merged.problems
    assert merged.policy.gates == ceiling.gates


# --- a repository narrows an agent without restating the org's definition --------


def test_repo_agent_entry_may_omit_adapter_tools_and_command() -> None:
    merged = _merge("version: 1\nagents:\n  claude-code: {tools: [read_repo]}\n  runner: {}\n")
    assert merged.ok, merged.problems
    agent = merged.policy.agents["claude-code"]
    base = CEILING.agents["claude-code"]
    assert agent == dataclasses.replace(base, tools=("read_repo",))
    assert merged.policy.agents["runner"] == CEILING.agents["runner"]


def test_repo_drops_web_fetch_without_restating_anything_else() -> None:
    merged = _merge("version: 1\nagents:\n  claude-code:\n    tools: [read_repo, edit_files, run_shell]\n")
    assert merged.ok, merged.problems
    assert "web_fetch" not in merged.policy.agents["claude-code"].tools
    assert list(merged.policy.agents) == ["claude-code"]


def test_restating_the_same_adapter_and_command_is_allowed() -> None:
    merged = _merge(
        "version: 1\nagents:\n  runner: {adapter: command, command: [./agent, '{prompt_file}'], tools: []}\n"
        "  claude-code: {adapter: claude-code}\n"
    )
    assert merged.ok, merged.problems
    assert merged.policy.agents["runner"].command == ("./agent", "{prompt_file}")


@pytest.mark.parametrize(
    ("entry", "line", "col", "words"),
    [
        ("runner: {command: [sh, -c, curl evil.io]}", 3, 21, "differs from the org's command"),
        ("runner: {adapter: command, command: [./agent]}", 3, 39, "differs from the org's command"),
        ("claude-code: {command: [sh]}", 3, 26, "the org runs this agent without a command"),
        ("claude-code: {adapter: command}", 3, 26, "the org runs this agent with 'claude-code'"),
    ],
    ids=["other-command", "shorter-command", "command-for-cli-agent", "other-adapter-no-command"],
)
def test_restating_adapter_or_command_with_another_value_is_widening(
    entry: str, line: int, col: int, words: str
) -> None:
    merged = _merge(f"version: 1\nagents:\n  {entry}\n")
    assert len(merged.problems) == 1, merged.problems
    problem = merged.problems[0]
    assert (problem.line, problem.col) == (line, col), str(problem)
    assert words in problem.message
    name = entry.split(":", maxsplit=1)[0]
    assert merged.policy.agents[name] == CEILING.agents[name]


def test_repo_narrowing_can_turn_a_deny_into_an_allow_by_removing_a_leg() -> None:
    facts = TaskFacts(agent="claude-code", repo_private=True)
    assert not decide(CEILING, facts).allowed
    narrowed = _merge(
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo], egress: []}\n"
    )
    assert decide(narrowed.policy, facts).allowed


def test_model_spend_caps_only_go_down_and_are_not_written_unless_set() -> None:
    org = org_policy(parse("version: 1\nlimits:\n  max_model_spend_per_run: 5\n"
                           "  installation: {max_model_spend_per_day: 100}\n", "org.yml"))  # fmt: skip
    merged = merge(org, parse("version: 1\nlimits:\n  max_model_spend_per_run: 7.5\n"
                              "  max_model_spend_per_day: 20\n", "repo.yml"))  # fmt: skip
    limits = merged.policy.limits
    assert (limits.max_model_spend_per_run, limits.max_model_spend_per_day) == (5.0, 20.0)
    assert limits.installation.max_model_spend_per_day == 100.0
    assert [p.message for p in merged.problems] == [
        "limits.max_model_spend_per_run: 7.5 is above the org's 5; a repository may only lower it"
    ]
    # A policy that sets no cap has the bytes (and digest) it had before caps existed: replays of
    # decisions recorded then still match.
    plain = org_policy(parse("version: 1\n", "org.yml")).to_data()["limits"]
    assert not any("spend" in key for key in plain)
    assert not any("spend" in key for key in plain["installation"])


# -- trigger.default_agent: who runs when someone calls Baton by name ----------------------------


def _with_default(agent: str) -> Policy:
    return org_policy(parse(ORG.replace("trigger: {", f"trigger: {{default_agent: {agent}, "), "org.yml"))


def test_the_org_names_the_default_agent_among_its_own() -> None:
    assert "trigger: {" in ORG
    assert _with_default("runner").trigger.default_agent == "runner"
    assert CEILING.trigger.default_agent is None
    with pytest.raises(PolicyError) as caught:
        _with_default("codex")
    assert "trigger.default_agent: 'codex' is not one of this policy's agents (claude-code, runner)" in str(
        caught.value
    )


def test_a_repository_picks_the_default_only_among_the_agents_it_keeps() -> None:
    ceiling = _with_default("claude-code")
    picked = merge(ceiling, parse("version: 1\ntrigger: {default_agent: runner}\n", ".github/baton.yml"))
    assert (picked.policy.trigger.default_agent, picked.problems) == ("runner", ())
    widened = merge(ceiling, parse("version: 1\ntrigger: {default_agent: codex}\n", ".github/baton.yml"))
    assert widened.policy.trigger.default_agent == "claude-code"  # the ceiling's stands
    [problem] = widened.problems
    assert "trigger.default_agent: 'codex' is not an agent the org policy allows here" in str(problem)
    removed = merge(ceiling, parse("version: 1\nagents: {runner: {}}\n", ".github/baton.yml"))
    assert removed.policy.trigger.default_agent is None  # the repository dropped the org's default


def test_a_default_agent_changes_the_digest_only_where_it_is_set() -> None:
    assert "default_agent" not in CEILING.to_data()["trigger"]
    assert _with_default("runner").to_data()["trigger"]["default_agent"] == "runner"
