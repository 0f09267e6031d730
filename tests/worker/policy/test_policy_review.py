"""``review:``: an independent reviewer before any push. The org sets a ceiling, a repository may only
make the review stricter, and a policy without one keeps the bytes (and digest) it always had."""

from __future__ import annotations

import pytest

from worker.policy import (
    REVIEW_CATEGORIES,
    Merged,
    Policy,
    PolicyError,
    Review,
    merge,
    org_policy,
    parse,
)

ORG = """\
version: 1
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  checker:
    adapter: codex
    tools: [read_repo]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
  other-checker:
    adapter: gemini
    tools: [read_repo]
    model_endpoints: [generativelanguage.googleapis.com]
    env: [GEMINI_API_KEY]
  script:
    adapter: script
    tools: [read_repo, edit_files]
"""
REVIEWED = ORG + "review:\n  agent: checker\n  blocks_on: [secret_leak, malicious_change]\n  timeout: 5m\n"
REPO = ".github/baton.yml"


def _ceiling(text: str = REVIEWED) -> Policy:
    return org_policy(parse(text, "org/.github/baton.yml"))


def _merge(repo: str, ceiling: str = REVIEWED) -> Merged:
    return merge(_ceiling(ceiling), parse(repo, REPO))


def _messages(merged: Merged) -> list[str]:
    return [str(p) for p in merged.problems]


def test_the_org_names_a_reviewer_with_what_it_blocks_on_and_defaults_for_the_rest() -> None:
    assert _ceiling().review == Review(agent="checker", blocks_on=("secret_leak", "malicious_change"),
                                       timeout=300, merge_gate=False)  # fmt: skip
    plain = _ceiling(ORG + "review: {agent: checker}\n").review
    assert plain == Review(agent="checker", blocks_on=REVIEW_CATEGORIES, timeout=600, merge_gate=False)
    assert REVIEW_CATEGORIES == ("injection_suspected", "secret_leak", "malicious_change")


def test_a_policy_without_a_review_keeps_its_bytes_and_digest() -> None:
    plain = _ceiling(ORG)
    assert plain.review is None
    assert "review" not in plain.to_data()
    # Exactly the bytes this policy had before `review:` existed (a receipt and a replay bind them).
    same = Policy(trigger=plain.trigger, agents=plain.agents, tools=plain.tools,
                  protected_paths=plain.protected_paths, gates=plain.gates, limits=plain.limits)  # fmt: skip
    assert plain == same
    assert plain.canonical == same.canonical
    written = {"agent": "checker", "blocks_on": ["secret_leak", "malicious_change"], "timeout": "5m",
               "merge_gate": False}  # fmt: skip
    assert _ceiling().to_data()["review"] == written
    assert _ceiling().digest != plain.digest


def test_what_a_policy_writes_loads_back_to_the_same_digest() -> None:
    """``baton replay`` reads a kept policy back as an org file: the review must survive it."""
    reviewed = _ceiling(REVIEWED.replace("timeout: 5m", "timeout: 300s\n  merge_gate: true"))
    again = org_policy(parse(reviewed.canonical, "kept.json"))
    assert again == reviewed
    assert again.digest == reviewed.digest


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (ORG + "review: {agent: nobody}\n", "review.agent: 'nobody' is not one of this policy's agents"),
        (ORG + "review: {agent: script}\n", "review.agent: 'script' runs the script adapter"),
        (ORG + "review: {blocks_on: [secret_leak]}\n", "review: missing required key 'agent'"),
    ],
)
def test_an_org_review_must_name_one_of_its_agents_with_a_model(text: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        _ceiling(text)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nreview: {agent: Upper}\n",
        "version: 1\nreview: {agent: a, blocks_on: []}\n",
        "version: 1\nreview: {agent: a, blocks_on: [everything]}\n",
        "version: 1\nreview: {agent: a, blocks_on: [secret_leak, secret_leak]}\n",
        "version: 1\nreview: {agent: a, timeout: 0m}\n",
        "version: 1\nreview: {agent: a, merge_gate: 'yes'}\n",
        "version: 1\nreview: {agent: a, extra: 1}\n",
        "version: 1\nreview: [a]\n",
    ],
)
def test_a_malformed_review_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse(text, REPO)
    assert f"{REPO}:2:" in str(caught.value)
    assert "review" in str(caught.value)


def test_a_repository_may_add_a_review_where_the_org_has_none() -> None:
    merged = _merge("version: 1\nreview: {agent: checker, merge_gate: true}\n", ceiling=ORG)
    assert merged.problems == ()
    assert merged.policy.review == Review(agent="checker", merge_gate=True)


def test_a_repository_adds_categories_lowers_the_timeout_and_turns_the_merge_gate_on() -> None:
    merged = _merge("version: 1\nreview:\n  blocks_on: [injection_suspected, secret_leak, malicious_change]\n"
                    "  timeout: 2m\n  merge_gate: true\n")  # fmt: skip
    assert merged.problems == ()
    assert merged.policy.review == Review(agent="checker", blocks_on=REVIEW_CATEGORIES, timeout=120,
                                          merge_gate=True)  # fmt: skip


def test_leaving_review_out_of_a_repository_file_inherits_the_orgs() -> None:
    merged = _merge("version: 1\nlimits: {max_diff_lines: 10}\n")
    assert merged.policy.review == _ceiling().review
    assert merged.problems == ()


def test_each_widening_of_the_review_is_dropped_on_its_own_and_reported_where_it_is() -> None:
    merged = _merge(
        "version: 1\n"
        "review:\n"
        "  agent: other-checker\n"
        "  blocks_on: [injection_suspected]\n"
        "  timeout: 1h\n"
        "  merge_gate: false\n"
    )
    # The org's review stands, with the one narrowing asked (the category added).
    assert merged.policy.review == Review(agent="checker", blocks_on=REVIEW_CATEGORIES, timeout=300)
    assert _messages(merged) == [
        f"{REPO}:3:10: review.agent: the org's review runs 'checker'; a repository cannot change its "
        "reviewer",
        f"{REPO}:4:14: review.blocks_on: leaves out malicious_change, secret_leak, which the org's review "
        "blocks on; a repository may only add categories",
        f"{REPO}:5:12: review.timeout: 1h is longer than the org's 5m; a repository may only lower it",
    ]


def test_turning_the_orgs_merge_gate_use_off_is_dropped_and_reported() -> None:
    ceiling = REVIEWED + "  merge_gate: true\n"
    merged = _merge("version: 1\nreview: {merge_gate: false}\n", ceiling=ceiling)
    assert merged.policy.review is not None
    assert merged.policy.review.merge_gate is True
    assert _messages(merged) == [
        f"{REPO}:2:22: review.merge_gate: the org's review is also a merge-gate gate; a repository "
        "cannot turn that off"
    ]


def test_a_repository_cannot_remove_the_review_by_dropping_its_agent() -> None:
    merged = _merge("version: 1\nagents:\n  claude-code: {}\n")
    assert set(merged.policy.agents) == {"claude-code", "checker"}
    assert merged.policy.review == _ceiling().review
    assert _messages(merged) == [
        f"{REPO}:2:1: agents: leaves out 'checker', the agent the org's review runs; a repository "
        "cannot remove the org's review, so it stays"
    ]


def test_a_repository_review_names_only_an_agent_it_keeps_and_never_the_script_agent() -> None:
    dropped = _merge("version: 1\nagents: {claude-code: {}}\nreview: {agent: checker}\n", ceiling=ORG)
    assert dropped.policy.review is None
    assert _messages(dropped) == [
        f"{REPO}:3:17: review.agent: 'checker' is not an agent the org policy allows here "
        "(claude-code); a repository may only pick among them"
    ]
    scripted = _merge("version: 1\nreview: {agent: script}\n", ceiling=ORG)
    assert scripted.policy.review is None
    [problem] = _messages(scripted)
    assert "review.agent: 'script' runs the script adapter" in problem
    nameless = _merge("version: 1\nreview: {timeout: 1m}\n", ceiling=ORG)
    assert nameless.policy.review is None
    assert _messages(nameless) == [
        f"{REPO}:2:1: review: names no agent, and the org has no review to inherit one from; "
        "name one of the org's agents in review.agent"
    ]
