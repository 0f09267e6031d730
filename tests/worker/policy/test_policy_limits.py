"""Daily budgets and installation-wide limits: defaults, org ceiling, repository narrowing."""

from __future__ import annotations

import pytest
import yaml

from worker.policy import DEFAULT_POLICY, Limits, Merged, PolicyError, merge, org_policy, parse
from worker.policy.model import InstallationLimits

ORG = """\
version: 1
limits:
  max_concurrent_runs: 4
  max_runs_per_day: 20
  max_agent_minutes_per_day: 120
  installation: {max_concurrent_runs: 10, max_agent_minutes_per_day: 1000}
"""
CEILING = org_policy(parse(ORG, "org.yml"))


def _merge(repo: str) -> Merged:
    return merge(CEILING, parse(repo, ".github/baton.yml"))


def test_defaults_give_daily_budgets_and_no_installation_cap() -> None:
    limits = DEFAULT_POLICY.limits
    assert (limits.max_runs_per_day, limits.max_agent_minutes_per_day) == (50, 600)
    assert limits.installation == InstallationLimits(None, None, None)
    assert DEFAULT_POLICY.to_data()["limits"] == {
        "max_concurrent_runs": 2,
        "max_diff_lines": 2000,
        "max_runs_per_day": 50,
        "max_agent_minutes_per_day": 600,
        "installation": {},
    }


def test_org_file_sets_daily_budgets_and_installation_totals() -> None:
    limits = CEILING.limits
    assert (limits.max_concurrent_runs, limits.max_diff_lines) == (4, 2000)  # left out: default
    assert (limits.max_runs_per_day, limits.max_agent_minutes_per_day) == (20, 120)
    assert limits.installation == InstallationLimits(
        max_concurrent_runs=10, max_runs_per_day=None, max_agent_minutes_per_day=1000
    )


def test_org_file_without_daily_budgets_keeps_the_defaults() -> None:
    limits = org_policy(parse("version: 1\nlimits: {max_diff_lines: 10}\n", "org.yml")).limits
    assert limits == Limits(max_diff_lines=10)
    assert (limits.max_runs_per_day, limits.max_agent_minutes_per_day) == (50, 600)


def test_whole_number_floats_are_stored_as_ints() -> None:
    text = "version: 1\nlimits: {max_runs_per_day: 5.0, installation: {max_runs_per_day: 7.0}}\n"
    limits = org_policy(parse(text, "org.yml")).limits
    assert (limits.max_runs_per_day, limits.installation.max_runs_per_day) == (5, 7)
    assert type(limits.max_runs_per_day) is type(limits.installation.max_runs_per_day) is int


def test_to_data_emits_only_the_installation_caps_that_are_set_and_round_trips() -> None:
    data = CEILING.to_data()["limits"]
    assert isinstance(data, dict)
    assert data["installation"] == {"max_concurrent_runs": 10, "max_agent_minutes_per_day": 1000}
    again = org_policy(parse(yaml.safe_dump({"version": 1, "limits": data}), "org.yml"))
    assert again.limits == CEILING.limits


def test_installation_caps_change_the_digest() -> None:
    plain = org_policy(parse("version: 1\n", "org.yml"))
    capped = org_policy(parse("version: 1\nlimits: {installation: {max_runs_per_day: 5}}\n", "org.yml"))
    empty = org_policy(parse("version: 1\nlimits: {installation: {}}\n", "org.yml"))
    assert plain.digest != capped.digest
    assert plain.digest == empty.digest  # an empty mapping sets no cap: the same policy


def test_repo_lowers_daily_budgets_and_keeps_the_orgs_installation_totals() -> None:
    merged = _merge("version: 1\nlimits: {max_runs_per_day: 5, max_agent_minutes_per_day: 30}\n")
    assert merged.ok, merged.problems
    limits = merged.policy.limits
    assert (limits.max_runs_per_day, limits.max_agent_minutes_per_day) == (5, 30)
    assert limits.installation == CEILING.limits.installation


def test_no_repo_file_keeps_the_installation_totals() -> None:
    assert merge(CEILING, None).policy.limits.installation == CEILING.limits.installation


@pytest.mark.parametrize(
    ("text", "col", "message"),
    [
        (
            "version: 1\nlimits: {max_runs_per_day: 21}\n",
            28,
            "limits.max_runs_per_day: 21 is above the org's 20; a repository may only lower it",
        ),
        (
            "version: 1\nlimits: {max_agent_minutes_per_day: 600}\n",
            37,
            "limits.max_agent_minutes_per_day: 600 is above the org's 120; a repository may only lower it",
        ),
    ],
)
def test_repo_raising_a_daily_budget_is_dropped_and_reported(text: str, col: int, message: str) -> None:
    merged = _merge(text)
    assert [(p.file, p.line, p.col, p.message) for p in merged.problems] == [
        (".github/baton.yml", 2, col, message)
    ]
    assert merged.policy.limits == CEILING.limits


def test_repo_setting_installation_limits_is_dropped_and_reported_at_the_key() -> None:
    """Even a lower value: one repository cannot speak for the installation's shared budget."""
    merged = _merge("version: 1\nlimits:\n  max_runs_per_day: 3\n  installation: {max_concurrent_runs: 1}\n")
    assert [(p.line, p.col) for p in merged.problems] == [(4, 3)]
    message = merged.problems[0].message
    assert message.startswith("limits.installation: only the org file sets installation-wide limits")
    assert "remove it" in message
    assert merged.policy.limits.max_runs_per_day == 3  # the narrowing beside it still applies
    assert merged.policy.limits.installation == CEILING.limits.installation
    with pytest.raises(PolicyError) as caught:
        merged.raise_for_widening()
    assert caught.value.code == "policy.widening"


def test_repo_installation_limits_are_dropped_even_with_no_org_caps() -> None:
    merged = merge(org_policy(None), parse("version: 1\nlimits: {installation: {}}\n", "r.yml"))
    assert len(merged.problems) == 1
    assert merged.policy == DEFAULT_POLICY


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("version: 1\nlimits: {max_runs_per_day: 0}\n", "limits.max_runs_per_day: must be at least 1"),
        ("version: 1\nlimits: {max_agent_minutes_per_day: x}\n", "expected a whole number"),
        ("version: 1\nlimits: {installation: {max_runs_per_day: 0}}\n", "must be at least 1"),
        (
            "version: 1\nlimits: {installation: {max_diff_lines: 5}}\n",
            "limits.installation.max_diff_lines: unknown key",
        ),
        (
            "version: 1\nlimits: {installation: {max_concurrent_runs: null}}\n",
            "expected a whole number, got null",
        ),
        ("version: 1\nlimits: {installation: 5}\n", "limits.installation: expected a mapping"),
    ],
)
def test_bad_limits_name_the_field(text: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse(text, "org.yml")
    assert str(caught.value).startswith("org.yml:2:")
    assert words in str(caught.value)
