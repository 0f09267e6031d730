"""The trifecta gate on hand-picked cases: what an admin sees for common policies."""

from __future__ import annotations

import json

import pytest

from worker.policy import (
    DEFAULT_POLICY,
    Agent,
    Axis,
    Policy,
    TaskFacts,
    UnknownAgent,
    decide,
    explain,
)

ALL = (Axis.PRIVATE_DATA, Axis.UNTRUSTED_INPUT, Axis.EXTERNAL_COMM)


def _policy(**agent: object) -> Policy:
    base: dict[str, object] = {
        "adapter": "claude-code",
        "tools": ("read_repo", "edit_files"),
        "model_endpoints": ("api.anthropic.com",),
        "env": ("ANTHROPIC_API_KEY",),
    }
    base.update(agent)
    return Policy(agents={"a": Agent(**base)}, tools={"quiet": frozenset()})  # type: ignore[arg-type]


def _names(decision: object, axis: Axis) -> list[str]:
    return [c.name for c in decision.legs[axis]]  # type: ignore[attr-defined]


def test_private_repo_with_web_fetch_is_denied_before_spawn() -> None:
    d = decide(_policy(tools=("read_repo", "web_fetch")), TaskFacts("a", repo_private=True))
    assert not d.allowed
    assert d.triggered == ALL
    assert _names(d, Axis.PRIVATE_DATA) == ["private_repo"]
    assert _names(d, Axis.UNTRUSTED_INPUT) == ["issue_text", "web_fetch"]
    assert _names(d, Axis.EXTERNAL_COMM) == ["web_fetch"]
    assert [r.text for r in d.remedies] == [
        "drop tool web_fetch from agent a",
        "run offline: /baton run a --offline",
    ]


def test_offline_retry_removes_external_tools_and_hosts_and_passes() -> None:
    policy = _policy(tools=("read_repo", "web_fetch", "run_shell"), egress=("pypi.org",))
    d = decide(policy, TaskFacts("a", repo_private=True, offline=True))
    assert d.allowed
    assert d.legs[Axis.EXTERNAL_COMM] == ()
    assert [c.name for c in d.removed] == ["run_shell", "web_fetch", "pypi.org"]
    assert d.policy_sha256 == decide(policy, TaskFacts("a", repo_private=True)).policy_sha256


def test_a_command_agent_without_the_network_cut_off_is_open_network() -> None:
    """Baton cannot take tools away from an arbitrary program; only the box's cut-off closes its network,
    and --offline cannot stand in for it."""
    policy = _policy(adapter="command", command=("./agent",), model_endpoints=(), env=())
    d = decide(policy, TaskFacts("a", repo_private=True))
    assert not d.allowed
    assert _names(d, Axis.EXTERNAL_COMM) == ["command adapter"]
    assert "host network" in d.legs[Axis.EXTERNAL_COMM][0].reason
    assert d.remedies == ()  # no edit of tools, egress or env helps, and neither does --offline
    assert not decide(policy, TaskFacts("a", repo_private=True, offline=True)).allowed
    cut = decide(policy, TaskFacts("a", repo_private=True, network_cutoff=True))
    assert cut.allowed
    assert cut.legs[Axis.EXTERNAL_COMM] == ()
    assert decide(policy, TaskFacts("a", repo_private=False)).allowed  # nothing private to send


def test_public_repo_with_only_the_model_key_is_allowed() -> None:
    d = decide(_policy(tools=("web_fetch",)), TaskFacts("a", repo_private=False))
    assert d.allowed
    assert d.triggered == (Axis.UNTRUSTED_INPUT, Axis.EXTERNAL_COMM)
    assert d.remedies == ()


def test_any_other_env_name_is_private_data() -> None:
    d = decide(
        _policy(tools=("web_fetch",), env=("ANTHROPIC_API_KEY", "GITHUB_TOKEN")), TaskFacts("a", False)
    )
    assert not d.allowed
    assert _names(d, Axis.PRIVATE_DATA) == ["GITHUB_TOKEN"]
    assert "drop env GITHUB_TOKEN from agent a" in [r.text for r in d.remedies]


def test_model_key_counts_only_with_its_own_endpoint() -> None:
    """Otherwise listing OPENAI_API_KEY for an Anthropic agent would smuggle a secret through."""
    d = decide(_policy(tools=("web_fetch",), env=("OPENAI_API_KEY",)), TaskFacts("a", False))
    assert _names(d, Axis.PRIVATE_DATA) == ["OPENAI_API_KEY"]


def test_egress_beyond_model_endpoints_is_external_comm() -> None:
    d = decide(_policy(egress=("pypi.org",)), TaskFacts("a", repo_private=False))
    assert _names(d, Axis.EXTERNAL_COMM) == ["pypi.org"]
    assert decide(_policy(), TaskFacts("a", repo_private=False)).legs[Axis.EXTERNAL_COMM] == ()


def test_shell_is_unrestricted_egress_until_network_cut_off_exists() -> None:
    policy = _policy(tools=("run_shell",))
    assert not decide(policy, TaskFacts("a", repo_private=True)).allowed
    assert decide(policy, TaskFacts("a", repo_private=True, network_cutoff=True)).allowed


def test_unknown_tool_counts_as_all_three_but_a_declared_one_does_not() -> None:
    d = decide(_policy(tools=("mystery",)), TaskFacts("a", repo_private=False))
    assert d.unknown_tools == ("mystery",)
    assert d.triggered == ALL
    assert not d.allowed
    assert all("mystery" in _names(d, axis) for axis in ALL)
    assert decide(_policy(tools=("quiet",)), TaskFacts("a", repo_private=True)).allowed


def test_policy_can_add_tags_to_a_catalogue_tool_but_never_remove_them() -> None:
    policy = Policy(agents={"a": Agent("codex", tools=("web_fetch",))}, tools={"web_fetch": frozenset()})
    d = decide(policy, TaskFacts("a", repo_private=False))
    assert Axis.EXTERNAL_COMM in d.triggered


def test_default_policy_denies_private_repos_until_network_cut_off() -> None:
    """A documented consequence of 'no cut-off yet': the built-in agents have a shell. --offline takes
    it away, except from Codex, whose shell is how it edits files: no switch of its removes it."""
    for name in DEFAULT_POLICY.agents:
        assert not decide(DEFAULT_POLICY, TaskFacts(name, repo_private=True)).allowed
        offline = decide(DEFAULT_POLICY, TaskFacts(name, repo_private=True, offline=True))
        assert offline.allowed is (name != "codex")
        assert decide(DEFAULT_POLICY, TaskFacts(name, repo_private=True, network_cutoff=True)).allowed
        assert decide(DEFAULT_POLICY, TaskFacts(name, repo_private=False)).allowed


def test_a_tool_the_cli_cannot_be_kept_from_is_counted_though_not_listed() -> None:
    policy = _policy(adapter="codex", tools=("read_repo", "edit_files"), model_endpoints=("api.openai.com",),
                     env=("OPENAI_API_KEY",))  # fmt: skip
    denied = decide(policy, TaskFacts("a", repo_private=True, offline=True))
    assert not denied.allowed
    [shell] = [c for c in denied.legs[Axis.EXTERNAL_COMM] if c.name == "run_shell"]
    assert shell.kind == "cli"
    assert "exec_command" in shell.reason
    assert "run_offline" not in [r.action for r in denied.remedies]  # it would not help
    assert all(("cli", "run_shell") not in {(c.kind, c.name) for c in r.drop} for r in denied.remedies)
    assert decide(policy, TaskFacts("a", repo_private=True, network_cutoff=True)).allowed  # the box bounds it


def test_unknown_agent_is_an_error_not_a_decision() -> None:
    with pytest.raises(UnknownAgent) as caught:
        decide(_policy(), TaskFacts("ghost", repo_private=False))
    assert caught.value.code == "policy.unknown_agent"
    assert "agents allowed here: a" in caught.value.message


def test_json_is_canonical() -> None:
    d = decide(_policy(tools=("web_fetch",), egress=("b.io", "a.io")), TaskFacts("a", repo_private=True))
    raw = d.to_json()
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    assert json.loads(raw)["policy_sha256"] == d.policy_sha256
    assert json.loads(raw)["allowed"] is False


def test_digest_depends_on_meaning_not_spelling() -> None:
    one = Policy(agents={"a": Agent("codex", tools=("b", "a"), timeout=3600)})
    two = Policy(agents={"a": Agent("codex", tools=("a", "b", "a"), timeout=3600)})
    three = Policy(agents={"a": Agent("codex", tools=("a",), timeout=3600)})
    assert one.digest == two.digest != three.digest


def test_facts_reject_non_bool_flags() -> None:
    with pytest.raises(TypeError):
        TaskFacts("a", repo_private="yes")  # type: ignore[arg-type]


def test_explanation_names_legs_causes_and_the_retry() -> None:
    text = explain(decide(_policy(tools=("web_fetch",)), TaskFacts("a", repo_private=True)))
    assert text.startswith("agent a: DENIED")
    assert "fact private_repo" in text
    assert "tool web_fetch" in text
    assert "/baton run a --offline" in text
