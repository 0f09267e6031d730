"""Aider 0.86.2 for real: `baton run` in the box, through the model gateway, against the model stand-in.

Aider has no tools: its edits come back in the reply text, and its only ways to run a program are
the model's shell suggestions (never run: --no-suggest-shell-commands) and the repository's own
settings, which is why the gate counts a shell for it whatever the policy lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.model.standin import ModelStandin
from tests.worker.runner.conftest import TEST_KEY, baton_run, cli_env, git
from worker.policy import Agent, Axis, Policy, TaskFacts, decide

ORG = """\
version: 1
agents:
  aider:
    adapter: aider
    tools: [edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
    timeout: 40s
  aider-web:
    adapter: aider
    tools: [edit_files, web_fetch]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
    timeout: 40s
"""


def _baton_run(
    tmp_path: Path, repo: Path, agent_cli_bin: Path, upstream: str, *, agent: str = "aider", body: str = ""
) -> dict[str, Any]:
    code, record, _ = baton_run(tmp_path, repo, ORG, agent, "--public", upstream=f"openai={upstream}",
                                env=cli_env(agent_cli_bin, "OPENAI_API_KEY"),
                                issue=f"# Say hello\n\nAdd hello.txt.{body}\n", timeout=90)  # fmt: skip
    assert "stderr" not in record, record["stderr"][-3000:]
    record["exit_status"] = code
    return record


def test_aider_writes_a_file_through_the_box_and_talks_only_to_its_model(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"steps": [{"write": {"path": "hello.txt", "content": "hello from aider\n"}}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
        requests = model.requests()
    assert record["exit_status"] == 0, json.dumps(record, indent=1)[-3000:]
    assert record["outcome"] == "done"
    assert record["adapter_version"] == "0.86.2"
    assert git(repo, "show", f"{record['commit']}:hello.txt") == "hello from aider"
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.openai.com", True)}
    assert [(r["path"], r["served"]) for r in requests] == [("/v1/chat/completions", "answer")]
    assert requests[0]["body"]["model"] == "gpt-5-mini"
    said = record["agent_result"]
    assert (said["is_error"], said["num_turns"]) == (False, 1)
    assert said["reported_changes"] == [{"path": "hello.txt", "kind": "edit", "ok": True}]


def test_a_shell_command_the_model_suggests_is_not_run(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    """The reply carries a file and a shell block; aider writes the file and runs nothing."""
    edit = "hello.txt\n```\n<<<<<<< SEARCH\n=======\nhi\n>>>>>>> REPLACE\n```\n"  # its diff format
    reply = edit + "\nNow run this:\n\n```bash\necho pwned > pwned.txt\n```\n"
    with ModelStandin({"steps": [{"text": reply}]}, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
        requests = model.requests()
    assert record["outcome"] == "done", json.dumps(record, indent=1)[-3000:]
    assert [c["path"] for c in record["changes"]] == ["hello.txt"]
    assert "pwned" not in git(repo, "ls-tree", "-r", "--name-only", record["commit"])
    assert len(requests) == 1  # no second turn carrying a command's output
    # --yes-always answers no to a shell command by itself [observed]; the switch also keeps the
    # invitation to suggest commands out of the system prompt.
    assert "suggest any shell commands" not in requests[0]["body"]["messages"][0]["content"]
    # And the gate counts a shell for aider, listed or not (the repository's settings can run one):
    # where the network cannot be cut off, that shell is egress.
    agent = Agent(
        "aider", tools=("edit_files",), model_endpoints=("api.openai.com",), env=("OPENAI_API_KEY",)
    )
    decision = decide(
        Policy(agents={"aider": agent}), TaskFacts(agent="aider", repo_private=False, network_cutoff=False)
    )
    assert ("cli", "run_shell") in [(c.kind, c.name) for c in decision.legs[Axis.EXTERNAL_COMM]]


@pytest.mark.parametrize(("agent", "fetched"), [("aider", False), ("aider-web", True)])
def test_a_url_in_the_issue_is_fetched_only_with_web_fetch(
    tmp_path: Path, repo: Path, agent_cli_bin: Path, agent: str, fetched: bool
) -> None:
    """aider offers to scrape a URL in its message and --yes-always accepts: without web_fetch it is
    not even tried; with it, the proxy still refuses a host the policy's egress does not list."""
    script = {"steps": [{"write": {"path": "hello.txt", "content": "hi\n"}}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        body = " See https://docs.example.com/greeting for the wording."
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url, agent=agent, body=body)
    hosts = {(e["host"], e["allowed"]) for e in record["egress"]}
    assert ("docs.example.com", False) in hosts if fetched else hosts == {("api.openai.com", True)}, hosts


def test_every_model_call_failing_is_a_failed_run_though_aider_exits_0(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {"steps": [{"error": {"status": 400, "message": "bad request"}}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        record = _baton_run(tmp_path, repo, agent_cli_bin, model.url)
    assert record["exit_code"] == 0
    assert record["outcome"] == "failed"
    assert record["commit"] is None
    said = record["agent_result"]
    assert (said["is_error"], said["subtype"]) == (True, "BadRequestError")
