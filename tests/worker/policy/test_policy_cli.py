"""`baton policy check` and `baton gate explain`, driven through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from baton.cli import main
from worker.policy import MAX_POLICY_BYTES

ROOT = Path(__file__).resolve().parents[3]

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
    assert out.err.splitlines() == [
        f"{repo}:5:24: agents.claude-code.tools[1]: tool 'mcp' is not in the org policy; "
        "a repository may only remove tools (org allows: edit_files, read_repo, web_fetch)",
        f"{repo}:6:14: agents.claude-code.egress[0]: egress host 'evil.io' is not in the org policy; "
        "a repository may only remove egress hosts (org allows: none)",
    ]
    # ...and what would run: the widening items dropped, the narrowing (no web_fetch) kept.
    assert out.out.startswith("# effective policy, 2 widening attempts dropped (see stderr); sha256 ")
    assert "tools: [read_repo]" in out.out


def test_check_json_on_widening_has_the_problems_and_the_policy_that_would_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = _write(tmp_path, "org.yml", ORG)
    repo = _write(tmp_path, "repo.yml", "version: 1\nlimits: {max_diff_lines: 10}\nagents: {aider: {}}\n")
    assert main(["policy", "check", "--org", org, repo, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert [(p["line"], p["col"]) for p in data["problems"]] == [(3, 10)]
    assert data["policy"]["limits"]["max_diff_lines"] == 10
    assert data["policy"]["agents"] == {}
    assert len(data["policy_sha256"]) == 64


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


def test_explain_decides_a_shell_as_the_workers_box_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shell is open network unless the box cuts it off: --network-cutoff says the workers' box does."""
    org = _write(tmp_path, "org.yml", SHELL_ORG)
    assert main(["gate", "explain", "--agent", "coder", "--org", org]) == 3
    assert "network cut-off not available" in capsys.readouterr().out
    assert main(["gate", "explain", "--agent", "coder", "--org", org, "--network-cutoff"]) == 0
    out = capsys.readouterr().out
    assert "ALLOWED" in out
    assert "network cut-off available" in out


SHELL_ORG = """\
version: 1
agents:
  coder:
    adapter: claude-code
    tools: [read_repo, edit_files, run_shell]
    model_endpoints: [api.anthropic.com]
"""


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
        (
            {"--policy": "version: 1\nlimits: {max_diff_lines: 999999}\n"},
            "claude-code",
            ":2:26: limits.max_diff_lines: 999999 is above the org's 2000; a repository may only lower it\n"
            "baton gate explain: the worker drops this and decides on the rest; "
            "`baton policy check` shows that policy\n",
        ),
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


# --- only regular files, and only so much of them ---------------------------------


def _baton(*args: str) -> subprocess.CompletedProcess[str]:
    """`baton ARGS` in a child with 1 GiB of address space and a deadline, so a regression
    (reading /dev/zero to the end, waiting on a FIFO for a writer) fails the test instead of
    hanging the suite or exhausting the machine."""
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
        "from baton.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=20, cwd=ROOT, check=False
    )


def _commands(path: str) -> list[list[str]]:
    return [
        ["policy", "check", path],
        ["policy", "check", "--org", path],
        ["gate", "explain", "--agent", "claude-code", "--policy", path],
        ["gate", "explain", "--agent", "claude-code", "--org", path],
    ]


FIX = "give the path of a baton.yml file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = str(tmp_path / "baton.yml")
    os.mkfifo(fifo)  # nobody ever writes to it: opening it for reading would wait forever
    for args in _commands(fifo):
        done = _baton(*args)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert done.stderr == f"{fifo}:1:1: not a regular file (a FIFO); {FIX}\n"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused_not_read_to_the_end() -> None:
    for args in _commands("/dev/zero"):
        done = _baton(*args)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert done.stderr == f"/dev/zero:1:1: not a regular file (a character device); {FIX}\n"


def test_a_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in _commands(str(tmp_path)):
        assert main(args) == 1
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", f"{tmp_path}:1:1: not a regular file (a directory); {FIX}\n")


def test_a_file_one_byte_over_the_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = "version: 1\n"
    at_limit = _write(tmp_path, "at.yml", head + "#" * (MAX_POLICY_BYTES - len(head) - 1) + "\n")
    assert main(["policy", "check", at_limit]) == 0
    capsys.readouterr()
    over = _write(tmp_path, "over.yml", head + "#" * (MAX_POLICY_BYTES - len(head)) + "\n")
    assert os.path.getsize(over) == MAX_POLICY_BYTES + 1
    for args in _commands(over):
        assert main(args) == 1
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err == (
            f"{over}:1:1: file is larger than {MAX_POLICY_BYTES} bytes, the most a policy file may be; "
            "shorten it\n"
        )
