"""`baton policy check` and `baton gate explain`, driven through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli import main

ORG = """\
version: 1
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files, web_fetch]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_check_prints_the_effective_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    repo = _write(tmp_path, "repo.yml", "version: 1\nlimits: {max_diff_lines: 100}\n")
    assert main(["policy", "check", "--org", org, repo]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert "max_diff_lines: 100" in out.out
    assert "web_fetch" in out.out
    assert out.out.startswith("# effective policy, sha256 ")


def test_printed_policy_is_itself_a_valid_org_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An admin can paste `baton policy check` output as a starting org baton.yml."""
    org = _write(tmp_path, "org.yml", ORG)
    assert main(["policy", "check", "--org", org]) == 0
    printed = _write(tmp_path, "printed.yml", capsys.readouterr().out)
    assert main(["policy", "check", "--org", org, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)["policy_sha256"]
    assert main(["policy", "check", "--org", printed, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy_sha256"] == before


def test_check_without_files_shows_the_built_in_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert ".github/workflows/**" in data["policy"]["paths"]["protected"]
    assert len(data["policy_sha256"]) == 64


def test_check_reports_widening_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    repo = _write(
        tmp_path,
        "repo.yml",
        "version: 1\nagents:\n  claude-code:\n    adapter: claude-code\n    tools: [read_repo, mcp]\n"
        "    egress: [evil.io]\n",
    )
    assert main(["policy", "check", "--org", org, repo]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{repo}:5:24: agents.claude-code.tools[1]: tool 'mcp' is not in the org policy; "
        "a repository may only remove tools (org allows: edit_files, read_repo, web_fetch)",
        f"{repo}:6:14: agents.claude-code.egress[0]: egress host 'evil.io' is not in the org policy; "
        "a repository may only remove egress hosts (org allows: none)",
    ]


def test_check_reports_invalid_org_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    org = _write(tmp_path, "org.yml", "version: 1\nlimits: {max_diff_lines: -1}\n")
    assert main(["policy", "check", "--org", org, "--json"]) == 1
    out = capsys.readouterr()
    assert out.err == f"{org}:2:26: limits.max_diff_lines: must be at least 1, got -1\n"
    assert json.loads(out.out)["problems"][0]["line"] == 2


def test_check_missing_file_is_a_located_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.yml")
    assert main(["policy", "check", missing]) == 1
    assert capsys.readouterr().err.startswith(f"{missing}:1:1: cannot read file")


def test_schema_command_prints_the_published_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "schema"]) == 0
    published = Path(__file__).resolve().parents[3] / "schemas" / "baton-policy.schema.json"
    assert capsys.readouterr().out == published.read_text(encoding="utf-8")


def test_explain_denies_web_fetch_on_a_private_repo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    assert main(["gate", "explain", "--agent", "claude-code", "--org", org]) == 3
    out = capsys.readouterr().out
    assert "DENIED" in out
    assert "/baton run claude-code --offline" in out


def test_explain_offline_retry_is_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    assert main(["gate", "explain", "--agent", "claude-code", "--org", org, "--offline", "--json"]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["allowed"] is True
    assert [r["name"] for r in decision["removed"]] == ["web_fetch"]


def test_explain_public_repo_is_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    assert main(["gate", "explain", "--agent", "claude-code", "--org", org, "--public"]) == 0
    assert "ALLOWED" in capsys.readouterr().out


def test_explain_json_is_byte_identical_across_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    args = ["gate", "explain", "--agent", "claude-code", "--org", org, "--json"]
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert capsys.readouterr().out == first


def test_explain_repo_narrowing_applies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    repo = _write(
        tmp_path,
        "repo.yml",
        "version: 1\nagents:\n  claude-code: {adapter: claude-code, tools: [read_repo]}\n",
    )
    assert main(["gate", "explain", "--agent", "claude-code", "--org", org, "--policy", repo]) == 0


@pytest.mark.parametrize(
    ("files", "agent", "expected_err"),
    [
        ({}, "ghost", "agent 'ghost' is not in the effective policy"),
        ({"--policy": "version: 1\nlimits: {max_diff_lines: 999999}\n"}, "claude-code", ":2:26: limits"),
        ({"--org": "version: 1\nagents: [\n"}, "claude-code", ":3:1: YAML syntax"),
    ],
    ids=["unknown-agent", "widening", "bad-yaml"],
)
def test_explain_bad_input_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, str], agent: str, expected_err: str
) -> None:
    args = ["gate", "explain", "--agent", agent]
    for flag, text in files.items():
        args += [flag, _write(tmp_path, flag.strip("-") + ".yml", text)]
    assert main(args) == 1
    out = capsys.readouterr()
    assert expected_err in out.err
    assert out.out == ""


def test_private_and_public_are_exclusive() -> None:
    with pytest.raises(SystemExit) as caught:
        main(["gate", "explain", "--agent", "a", "--private", "--public"])
    assert caught.value.code == 2
