"""mini-swe-agent 2.4.6 for real: `baton run` in the box, through the model gateway, against the stand-in.

Its one tool is a shell, so the gate counts a shell for it whatever the policy lists, and the box is
what bounds that shell: a command the policy never granted runs, but only inside the box.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emulator.model.standin import ModelStandin
from tests.worker.runner.conftest import TEST_KEY, baton_run, cli_env, git
from worker.policy import Agent, Axis, Policy, TaskFacts, decide

ORG = """\
version: 1
agents:
  mini:
    adapter: mini-swe-agent
    tools: [read_repo, edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
    timeout: 40s
"""


#: An issue whose text looks like one of mini-swe-agent's templates: it must reach the model as written.
TEMPLATE_LIKE = "# Say hello\n\nAdd hello.txt. {{ not_a_template_variable }}\n"


def _baton_run(tmp_path: Path, repo: Path, agent_cli_bin: Path, upstream: str) -> dict[str, Any]:
    code, record, _ = baton_run(tmp_path, repo, ORG, "mini", "--public", upstream=f"openai={upstream}",
                                env=cli_env(agent_cli_bin, "OPENAI_API_KEY"), timeout=90,
                                issue=TEMPLATE_LIKE)  # fmt: skip
    assert "stderr" not in record, record["stderr"][-3000:]
    record["exit_status"] = code
    return record


def test_mini_writes_a_file_through_the_box_and_talks_only_to_its_model(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"steps": [{"write": {"path": "hello.txt", "content": "hello from mini\n"}}, {"text": "Done."}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
        requests = model.requests()
    assert record["exit_status"] == 0, json.dumps(record, indent=1)[-3000:]
    assert record["outcome"] == "done"
    assert record["adapter_version"] == "2.4.6"
    assert git(repo, "show", f"{record['commit']}:hello.txt") == "hello from mini"
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.openai.com", True)}
    assert [(r["path"], r["served"], r["step"]) for r in requests] == [
        ("/v1/chat/completions", "answer", 0), ("/v1/chat/completions", "answer", 1)]  # fmt: skip
    first = requests[0]["body"]
    assert first["model"] == "gpt-5-mini"
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
    # The task reached the model from the config file, not rendered as a template.
    assert "{{ not_a_template_variable }}" in first["messages"][1]["content"]
    said = record["agent_result"]
    assert (said["is_error"], said["subtype"], said["num_turns"]) == (False, "Submitted", 2)


def test_a_shell_command_runs_only_in_the_box_and_the_gate_counts_the_shell(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    """The policy lists no run_shell, yet mini's every step is a shell command: the gate counts one."""
    agent = Agent("mini-swe-agent", tools=("read_repo",), model_endpoints=("api.openai.com",),
                  env=("OPENAI_API_KEY",))  # fmt: skip
    decision = decide(Policy(agents={"mini": agent}), TaskFacts(agent="mini", repo_private=False,
                                                                 network_cutoff=False))  # fmt: skip
    assert ("cli", "run_shell") in [(c.kind, c.name) for c in decision.legs[Axis.EXTERNAL_COMM]]
    script = {"steps": [{"bash": "echo pwned > pwned.txt"}, {"text": "Done."}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
        requests = model.requests()
    assert record["outcome"] == "done", json.dumps(record, indent=1)[-3000:]
    assert [c["path"] for c in record["changes"]] == ["pwned.txt"]  # the box's workspace, judged by Baton
    tool_turn = requests[1]["body"]["messages"][-1]
    assert tool_turn["role"] == "tool"
    assert "<returncode>0</returncode>" in tool_turn["content"]


def test_a_model_error_is_a_failed_run_named_by_its_exception(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"steps": [{"error": {"status": 400, "message": "bad request"}}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
    assert record["outcome"] == "failed"
    assert record["commit"] is None
    said = record["agent_result"]
    assert (said["is_error"], said["subtype"]) == (True, "BadRequestError")
    assert "bad request" in said["summary"]
