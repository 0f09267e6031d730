"""`baton run` end to end: a real git repository, the real box, the real proxy, real agents.

Each test runs the command as a person would and checks what they would see: the exit status, the
run record, and the repository (one new branch with one commit, or nothing at all).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.model.standin import ModelStandin
from tests.worker.runner.conftest import cli_env, git

ORG = """\
version: 1
agents:
  scripted:
    adapter: script
    tools: [read_repo, edit_files]
    timeout: 20s
  researcher:
    adapter: script
    tools: [read_repo, edit_files, web_fetch]
  ghost:
    adapter: command
    command: [/nonexistent/agent, "{prompt_file}"]
    tools: [read_repo]
  claude:
    adapter: claude-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  claude-quick:
    adapter: claude-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
    timeout: 15s
  asker:
    adapter: script
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  codex:
    adapter: codex
    tools: [read_repo, edit_files, run_shell]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
"""


def _issue(tmp_path: Path, steps: list[dict[str, Any]], title: str = "Add a greeting") -> Path:
    recipe = json.dumps({"version": 1, "steps": steps})
    path = tmp_path / "issue.md"
    path.write_text(f"# {title}\n\nPlease.\n\n```baton-recipe\n{recipe}\n```\n")
    return path


def _baton_run(tmp_path: Path, repo: Path, agent: str, issue: Path, *extra: str,
               env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:  # fmt: skip
    org = tmp_path / "org.yml"
    org.write_text(ORG)
    argv = [sys.executable, "-m", "baton", "run", "--agent", agent, "--repo", str(repo), "--issue-file",
            str(issue), "--org", str(org), "--json", *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env=env or dict(os.environ))  # fmt: skip
    record = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {"stderr": done.stderr}
    return done.returncode, record


def test_a_script_agent_run_leaves_one_commit_on_a_new_branch(tmp_path: Path, repo: Path) -> None:
    head, branch = git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--show-current")
    issue = _issue(tmp_path, [{"op": "write", "path": "hello.txt", "content": "hello\n"}])
    code, record = _baton_run(tmp_path, repo, "scripted", issue)
    assert code == 0, record
    assert record["outcome"] == "done"
    assert record["box"]["network"] == "loopback only + proxy"
    assert record["egress"] == []  # the script agent talks to nobody
    assert [(c["path"], c["kind"]) for c in record["changes"]] == [("hello.txt", "added")]
    commit = record["commit"]
    assert git(repo, "rev-parse", record["branch"]) == commit
    assert git(repo, "rev-parse", f"{commit}^") == head  # one commit, on the base
    assert git(repo, "show", f"{commit}:hello.txt") == "hello"
    # The checked-out branch and the working tree are untouched.
    assert (git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--show-current")) == (head, branch)
    assert not (repo / "hello.txt").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_a_denied_run_starts_nothing(tmp_path: Path, repo: Path) -> None:
    issue = _issue(tmp_path, [{"op": "write", "path": "x.txt", "content": "x\n"}])
    code, record = _baton_run(tmp_path, repo, "researcher", issue)
    assert code == 3
    assert record["outcome"] == "denied"
    assert record["box"] is None
    assert git(repo, "branch", "--list", "baton/*") == ""


def test_a_change_to_a_protected_path_commits_nothing(tmp_path: Path, repo: Path) -> None:
    issue = _issue(tmp_path, [{"op": "write", "path": ".github/workflows/ci.yml", "content": "on: push\n"}])
    code, record = _baton_run(tmp_path, repo, "scripted", issue)
    assert code == 4
    assert record["outcome"] == "violations"
    assert [(v["code"], v["path"]) for v in record["violations"]] == [
        ("protected-path", ".github/workflows/ci.yml")
    ]
    assert record["commit"] is None
    assert git(repo, "branch", "--list", "baton/*") == ""


def test_a_missing_agent_executable_is_a_clear_failure(tmp_path: Path, repo: Path) -> None:
    code, record = _baton_run(tmp_path, repo, "ghost", _issue(tmp_path, []))
    assert code == 5
    assert record["outcome"] == "agent-missing"
    assert "/nonexistent/agent" in record["reason"]


def test_an_agent_past_its_timeout_is_stopped_and_nothing_is_committed(tmp_path: Path, repo: Path) -> None:
    steps = [{"op": "write", "path": "half.txt", "content": "half\n"}, {"op": "sleep", "seconds": 120}]
    code, record = _baton_run(tmp_path, repo, "scripted", _issue(tmp_path, steps))
    assert code == 5
    assert record["outcome"] == "timed-out"
    assert record["timed_out"] is True
    assert record["durations"]["agent_s"] < 60
    assert git(repo, "branch", "--list", "baton/*") == ""


def test_bad_input_is_exit_1_with_a_clear_line(tmp_path: Path, repo: Path) -> None:
    code, record = _baton_run(tmp_path, repo, "scripted", tmp_path / "no-such-issue.md")
    assert code == 1
    assert "cannot read the issue file" in record["stderr"]


@pytest.mark.parametrize(
    ("upstream", "said"),
    [
        ("claude=http://127.0.0.1:9", "--upstream 'claude' is not a provider the model gateway serves"),
        ("anthropic=ftp://127.0.0.1", "--upstream 'anthropic=ftp://127.0.0.1': expected PROVIDER=URL"),
    ],
)
def test_a_bad_upstream_is_exit_1_and_runs_nothing(
    tmp_path: Path, repo: Path, upstream: str, said: str
) -> None:
    issue = _issue(tmp_path, [{"op": "write", "path": "hello.txt", "content": "hello\n"}])
    code, record = _baton_run(tmp_path, repo, "asker", issue, "--upstream", upstream)
    assert code == 1
    assert said in record["stderr"]
    assert "baton/run-" not in git(repo, "branch", "--list", "baton/*")


def test_the_real_claude_code_cli_edits_through_the_box_and_talks_only_to_its_model(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"workspace": "/workspace", "steps": [
        {"write": {"path": "hello.txt", "content": "hello from claude\n"}}, {"text": "Done."}]}  # fmt: skip
    with ModelStandin(script, record_dir=tmp_path / "model") as model:
        env = {**os.environ, "PATH": f"{agent_cli_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "ANTHROPIC_API_KEY": "sk-test-not-a-secret"}  # fmt: skip
        code, record = _baton_run(
            tmp_path, repo, "claude", _issue(tmp_path, [], title="Say hello"),
            "--upstream", f"anthropic={model.url}", env=env,
        )  # fmt: skip
        requests = model.requests()
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert record["outcome"] == "done"
    assert record["adapter_version"] == "2.1.197"
    assert git(repo, "show", f"{record['commit']}:hello.txt") == "hello from claude"
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.anthropic.com", True)}
    assert requests
    assert all(r["path"].startswith(("/v1/messages", "/")) for r in requests)


def test_the_printed_run_says_what_the_model_calls_were_and_cost(tmp_path: Path, repo: Path) -> None:
    ask = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64,
                      "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    steps = [
        {"op": "http", "url": "${BATON_MODEL_BASE_URL}/anthropic/v1/messages", "data": ask,
         "headers": {"content-type": "application/json", "x-api-key": "${BATON_MODEL_KEY}"}},
        {"op": "write", "path": "hello.txt", "content": "hello\n"},
    ]  # fmt: skip
    org = tmp_path / "org.yml"
    org.write_text(ORG)
    with ModelStandin([{"text": "Hi."}], api_key="sk-test-not-a-secret") as model:
        done = subprocess.run(
            [sys.executable, "-m", "baton", "run", "--agent", "asker", "--repo", str(repo), "--issue-file",
             str(_issue(tmp_path, steps)), "--org", str(org), "--upstream", f"anthropic={model.url}"],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "ANTHROPIC_API_KEY": "sk-test-not-a-secret"},
        )  # fmt: skip
        answered = len(model.requests())
    assert done.returncode == 0, done.stdout + done.stderr
    assert answered == 1
    assert re.search(r"^  model: 1 calls, 0 refused, [1-9]\d* tokens in, [1-9]\d* out, \$\d+\.\d{4}$",
                     done.stdout, re.MULTILINE), done.stdout  # fmt: skip
    assert "sk-test-not-a-secret" not in done.stdout


def test_the_worker_decides_with_the_probes_answer(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the box can cut the network (bubblewrap here, and in CI), a shell stops counting as egress."""
    from worker import context
    from worker.policy import DEFAULT_POLICY, TaskFacts, decide
    from worker.runner import box

    for name in ("APP_ID", "PRIVATE_KEY", "PRIVATE_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)
    found = box.probe()
    assert found.network_cutoff, found.to_data()  # CI installs bubblewrap and socat: the cut-off must work
    assert context.fresh(redis_url).network_cutoff is True
    on_private = TaskFacts(agent="claude-code", repo_private=True, network_cutoff=True)
    assert decide(DEFAULT_POLICY, on_private).allowed  # the built-in agents run shells, cut off
    assert not decide(DEFAULT_POLICY, TaskFacts(agent="claude-code", repo_private=True)).allowed


def _claude_env(agent_cli_bin: Path) -> dict[str, str]:
    return cli_env(agent_cli_bin, "ANTHROPIC_API_KEY")


def test_a_model_endpoint_that_is_down_ends_the_run_failed_in_bounded_time(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    from baton.redis_server import free_port

    closed = free_port()  # nothing listens there
    code, record = _baton_run(
        tmp_path, repo, "claude-quick", _issue(tmp_path, [], title="Say hello"),
        "--upstream", f"anthropic=http://127.0.0.1:{closed}", env=_claude_env(agent_cli_bin),
    )  # fmt: skip
    assert code == 5, record
    assert record["outcome"] in ("failed", "timed-out")
    assert record["commit"] is None
    assert record["durations"]["total_s"] < 120
    assert {e["host"] for e in record["egress"]} == {"api.anthropic.com"}


def test_a_model_endpoint_that_stalls_is_cut_off_by_the_agents_timeout(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"workspace": "/workspace", "steps": [{"stall": {"seconds": 300, "times": "always"}}]}
    with ModelStandin(script, max_stall_seconds=300) as model:
        code, record = _baton_run(
            tmp_path, repo, "claude-quick", _issue(tmp_path, [], title="Say hello"),
            "--upstream", f"anthropic={model.url}", env=_claude_env(agent_cli_bin),
        )  # fmt: skip
    assert code == 5, record
    assert record["outcome"] == "timed-out"
    assert record["timed_out"] is True
    assert record["durations"]["agent_s"] < 60


def test_the_real_codex_cli_edits_through_the_box_and_talks_only_to_its_model(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"workspace": "/workspace", "steps": [
        {"write": {"path": "hello.txt", "content": "hello from codex\n"}}, {"text": "Done."}]}  # fmt: skip
    with ModelStandin(script) as model:
        env = {**os.environ, "PATH": f"{agent_cli_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "OPENAI_API_KEY": "sk-test-not-a-secret"}  # fmt: skip
        code, record = _baton_run(
            tmp_path, repo, "codex", _issue(tmp_path, [], title="Say hello"),
            "--upstream", f"openai={model.url}", "--public", env=env,
        )  # fmt: skip
        paths = {r["path"] for r in model.requests()}
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert record["adapter_version"] == "0.171.0"
    assert git(repo, "show", f"{record['commit']}:hello.txt") == "hello from codex"
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.openai.com", True)}
    assert paths == {"/v1/responses"}
    assert record["agent_result"]["reported_changes"] == [
        {"kind": "add", "ok": True, "path": "/workspace/hello.txt"}
    ]


def test_the_real_claude_code_cli_refuses_a_shell_command_the_policy_did_not_grant(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    """The model asks for Bash anyway (--disallowedTools took it out of what it was offered): Claude Code
    refuses the call and nothing runs; the refusal is in its result's permission denials."""
    script = {"workspace": "/workspace", "steps": [
        {"bash": "echo pwned > /workspace/pwned.txt"}, {"text": "Done."}]}  # fmt: skip
    with ModelStandin(script) as model:
        code, record = _baton_run(
            tmp_path, repo, "claude", _issue(tmp_path, [], title="Say hello"),
            "--upstream", f"anthropic={model.url}", env=_claude_env(agent_cli_bin),
        )  # fmt: skip
        requests = model.requests()
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert record["outcome"] == "no-changes"
    assert "Bash" not in {t.get("name") for t in requests[0]["body"]["tools"]}
    told = json.dumps(requests[-1]["body"]["messages"][-1])
    assert "tool_result" in told
    assert "pwned" not in git(repo, "log", "--all", "--name-only", "--format=")


def test_codex_whose_shell_is_its_own_is_counted_with_it_though_the_policy_lists_none(
    tmp_path: Path, repo: Path
) -> None:
    """Codex edits through its shell and no switch removes it: on a private repository where the box cannot
    cut the network off, the gate counts that shell as egress and --offline is not offered."""
    org = tmp_path / "no-shell.yml"
    org.write_text(ORG.replace("tools: [read_repo, edit_files, run_shell]", "tools: [read_repo, edit_files]"))
    done = subprocess.run([sys.executable, "-m", "baton", "gate", "explain", "--agent", "codex", "--org",
                           str(org), "--private", "--json"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    decision = json.loads(done.stdout)
    assert decision["allowed"] is False, done.stdout
    external = {(c["kind"], c["name"]) for c in decision["legs"]["external_comm"]}
    assert ("cli", "run_shell") in external
    assert "run_offline" not in [r["action"] for r in decision["remedies"]]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge"])
def test_an_issue_file_that_is_not_a_small_regular_file_is_refused_at_once(
    tmp_path: Path, repo: Path, kind: str
) -> None:
    """A FIFO with no writer must not hang the command, nor /dev/zero exhaust its memory."""
    path = tmp_path / "issue"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"# title\n" + b"x" * (1 << 20))
    code, record = _baton_run(tmp_path, repo, "scripted", path)  # bounded by the helper's timeout
    assert code == 1
    expected = "larger than" if kind == "huge" else "not a regular file"
    assert expected in record["stderr"]
    assert git(repo, "branch", "--list", "baton/*") == ""
