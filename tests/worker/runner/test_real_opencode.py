"""The real OpenCode CLI (opencode-ai 1.18.33) through `baton run`: the box, the model gateway, the stand-in.

It speaks OpenAI Chat Completions to the gateway's ``/openai/v1`` as the provider "baton"; the stand-in
plays the model. What a user would check: one commit with the file, egress to the model host only, a
shell the policy did not grant neither offered nor run, and no run config of the repository's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.model.standin import ModelStandin
from tests.worker.runner.conftest import TEST_KEY, baton_run, cli_env, git, offered
from worker.runner.adapters import SPECS

ORG = """\
version: 1
agents:
  opencode:
    adapter: opencode
    tools: [read_repo, search_repo, edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
    timeout: 40s
  opencode-claude:
    adapter: opencode
    tools: [read_repo, search_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
    timeout: 40s
  opencode-shell:
    adapter: opencode
    tools: [read_repo, search_repo, edit_files, run_shell]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
    timeout: 40s
  opencode-gemini:
    adapter: opencode
    tools: [read_repo, search_repo, edit_files]
    model_endpoints: [generativelanguage.googleapis.com]
    env: [GEMINI_API_KEY]
    timeout: 40s
"""
#: For a GPT model OpenCode offers ``apply_patch{patchText}`` instead of ``write`` and ``edit`` [observed],
#: which the stand-in's provider-neutral ``write`` step does not render: that call is given as is.
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from opencode\n*** End Patch"
WRITE = {"filePath": "/workspace/hello.txt", "content": "hello from opencode\n"}
HELLO = {"write": {"path": "hello.txt", "content": "hello from opencode\n"}}
#: agent -> (provider, its host, the key's env name, the step that writes hello.txt, the tool it is
#: done with, the path the stand-in sees).
PROVIDERS = {
    "opencode": ("openai", "api.openai.com", "OPENAI_API_KEY",
                 {"tool": {"name": "apply_patch", "input": {"patchText": PATCH}}}, "apply_patch",
                 "/v1/chat/completions"),
    "opencode-claude": ("anthropic", "api.anthropic.com", "ANTHROPIC_API_KEY",
                        {"tool": {"name": "write", "input": WRITE}}, "write", "/v1/messages"),
    "opencode-gemini": ("gemini", "generativelanguage.googleapis.com", "GEMINI_API_KEY", HELLO, "write",
                        "/v1beta/models/gemini-3.5-flash:streamGenerateContent"),
}  # fmt: skip


def _baton_run(
    tmp_path: Path,
    repo: Path,
    agent_cli_bin: Path,
    model: ModelStandin,
    *,
    agent: str = "opencode",
    key: str = TEST_KEY,
) -> tuple[int, dict[str, Any]]:
    provider, _, key_env, _, _, _ = PROVIDERS["opencode" if agent == "opencode-shell" else agent]
    code, record, _ = baton_run(
        tmp_path,
        repo,
        ORG,
        agent,
        upstream=f"{provider}={model.url}",
        env=cli_env(agent_cli_bin, key_env, key),
        issue="# Say hello\n\nPlease.\n",
    )
    return code, record


@pytest.mark.parametrize("agent", PROVIDERS)
def test_the_real_opencode_cli_edits_through_the_box_and_talks_only_to_its_model(
    tmp_path: Path, repo: Path, agent_cli_bin: Path, agent: str
) -> None:
    _, host, _, step, tool, path = PROVIDERS[agent]
    (repo / "AGENTS.md").write_text("Greet in plain words. Marker: agents-md-4711.\n")
    git(repo, "add", "AGENTS.md")
    git(repo, "commit", "-q", "-m", "instructions for agents")
    script = {
        "workspace": "/workspace",
        "steps": [step, {"text": "Done."}],
    }
    with ModelStandin(script, api_key=TEST_KEY) as model:
        code, record = _baton_run(tmp_path, repo, agent_cli_bin, model, agent=agent)
        requests = model.requests()
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert record["outcome"] == "done"
    assert record["adapter_version"] == "1.18.33"
    assert git(repo, "show", f"{record['commit']}:hello.txt") == "hello from opencode"
    assert [(c["path"], c["kind"]) for c in record["changes"]] == [("hello.txt", "added")]
    # No models.dev, no npm registry, no share service: the model host only, and only inference on it.
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {(host, True)}
    assert [r["path"] for r in requests] == [path, path]  # --title: no title request
    assert all(offered(r) >= {"read", "glob", "grep", tool} for r in requests)
    assert not any(offered(r) & {"bash", "webfetch", "websearch"} for r in requests)
    assert all("agents-md-4711" in json.dumps(r["body"]) for r in requests)  # the repository's AGENTS.md
    said = record["agent_result"]
    assert (said["is_error"], said["summary"], said["num_turns"]) == (False, "Done.", 2)
    assert said["reported_changes"] == [{"kind": "add", "ok": True, "path": "/workspace/hello.txt"}]
    assert said["input_tokens"] > 0
    assert said["output_tokens"] > 0


def test_a_shell_the_policy_did_not_grant_is_not_offered_and_a_call_to_it_is_refused(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    """The stand-in calls ``bash`` anyway (as a model told so by an issue might): OpenCode answers that no
    such tool exists, and nothing ran. A repository's opencode.json granting the build agent ``bash`` (it
    would override the top-level deny) is not read."""
    (repo / "opencode.json").write_text(json.dumps({"agent": {"build": {"permission": {"bash": "allow"}}}}))
    git(repo, "add", "opencode.json")
    git(repo, "commit", "-q", "-m", "an agent config that grants bash")
    script = {"workspace": "/workspace", "steps": [
        {"tool": {"name": "bash", "input": {"command": "echo pwned > pwned.txt", "description": "Write"}}},
        {"text": "I could not run it."}]}  # fmt: skip
    with ModelStandin(script, api_key=TEST_KEY) as model:
        code, record = _baton_run(tmp_path, repo, agent_cli_bin, model)
        requests = model.requests()
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert (record["outcome"], record["commit"]) == ("no-changes", None)  # no pwned.txt, nor anything else
    assert len(requests) == 2
    assert not any("bash" in offered(r) for r in requests)
    assert record["agent_result"]["permission_denials"] == ["bash"]
    answer = requests[1]["body"]["messages"][-1]
    assert answer["role"] == "tool"
    assert "unavailable tool 'bash'" in answer["content"]
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.openai.com", True)}


def test_a_granted_shell_runs_in_the_box_and_its_file_is_committed(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    script = {
        "workspace": "/workspace",
        "steps": [{"bash": "echo from the shell > shell.txt"}, {"text": "Ran."}],
    }
    with ModelStandin(script, api_key=TEST_KEY) as model:
        code, record = _baton_run(tmp_path, repo, agent_cli_bin, model, agent="opencode-shell")
        requests = model.requests()
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    assert git(repo, "show", f"{record['commit']}:shell.txt") == "from the shell"
    assert all("bash" in offered(r) for r in requests)
    assert {(e["host"], e["allowed"]) for e in record["egress"]} == {("api.openai.com", True)}


def test_a_model_that_refuses_the_key_ends_the_run_failed_at_once_with_its_message(
    tmp_path: Path, repo: Path, agent_cli_bin: Path
) -> None:
    """A 4xx is not retried: one request, one ``error`` event, rc 1 well before the timeout (a retried 5xx
    runs into it); the run says why and commits nothing."""
    script = {"workspace": "/workspace", "steps": [{"text": "Done."}]}
    with ModelStandin(script, api_key=TEST_KEY) as model:
        code, record = _baton_run(tmp_path, repo, agent_cli_bin, model, key="sk-some-other-key")
        requests = model.requests()
    assert code == 5, json.dumps(record, indent=1)[-3000:]
    assert (record["outcome"], record["commit"], record["exit_code"]) == ("failed", None, 1)
    assert len(requests) == 1
    said = record["agent_result"]
    assert (said["is_error"], said["subtype"]) == (True, "APIError")
    assert "key" in said["summary"].lower()


# --- its result, from output captured from 1.18.33 (ids, timestamps, snapshots and diffs trimmed) ---------

_PATCHED = r"""{"type":"step_start","sessionID":"ses_1","part":{"type":"step-start"}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"apply_patch","callID":"call_x","state":{"status":"completed","input":{"patchText":"*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** Update File: README.md\n@@\n-hi\n+hello there\n*** End Patch"},"output":"Success. Updated the following files:\nA hello.txt\nM README.md","metadata":{"files":[{"filePath":"/workspace/hello.txt","relativePath":"hello.txt","type":"add","additions":1,"deletions":0},{"filePath":"/workspace/README.md","relativePath":"README.md","type":"update","additions":1,"deletions":1}],"diagnostics":{},"truncated":false},"title":"Success. Updated the following files:\nA hello.txt\nM README.md"}}}
{"type":"step_finish","sessionID":"ses_1","part":{"reason":"tool-calls","type":"step-finish","tokens":{"total":110,"input":100,"output":10,"reasoning":0,"cache":{"write":0,"read":0}},"cost":0}}
{"type":"step_start","sessionID":"ses_1","part":{"type":"step-start"}}
{"type":"text","sessionID":"ses_1","part":{"type":"text","text":"Done."}}
{"type":"step_finish","sessionID":"ses_1","part":{"reason":"stop","type":"step-finish","tokens":{"total":130,"input":100,"output":10,"reasoning":0,"cache":{"write":5,"read":15}},"cost":0.25}}
"""  # noqa: E501
_WROTE = r"""{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"write","callID":"call_1","state":{"status":"completed","input":{"filePath":"hello.txt","content":"hello from opencode\n"},"output":"Wrote file successfully.","metadata":{"diagnostics":{},"filepath":"/workspace/hello.txt","exists":false,"truncated":false},"title":"hello.txt"}}}
"""  # noqa: E501
_DENIED = r"""{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"invalid","callID":"call_1","state":{"status":"completed","input":{"tool":"bash","error":"Model tried to call unavailable tool 'bash'. Available tools: edit, glob, grep, invalid, read, skill, task, todowrite, write."},"output":"The arguments provided to the tool are invalid: Model tried to call unavailable tool 'bash'. Available tools: edit, glob, grep, invalid, read, skill, task, todowrite, write.","metadata":{"truncated":false},"title":"Invalid Tool"}}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"read","callID":"call_x","state":{"status":"error","input":{"filePath":"/etc/hostname"},"error":"The user has specified a rule which prevents you from using this specific tool call. Here are some of the relevant rules [{\"permission\":\"external_directory\",\"action\":\"deny\",\"pattern\":\"*\"}]"}}}
{"type":"tool_use","sessionID":"ses_1","part":{"type":"tool","tool":"bash","callID":"call_x","state":{"status":"error","input":{"command":"echo hi > x.txt","description":"x"},"error":"The user rejected permission to use this specific tool call."}}}
{"type":"text","sessionID":"ses_1","part":{"type":"text","text":"I could not run it."}}
"""  # noqa: E501
_FAILED = r"""{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"Incorrect API key provided","statusCode":401,"isRetryable":false,"responseBody":"{\"error\":{\"message\":\"Incorrect API key provided\",\"type\":\"invalid_request_error\"}}","metadata":{"url":"http://127.0.0.1:3129/openai/v1/chat/completions"}}}}
"""  # noqa: E501


def test_a_finished_run_reads_as_its_reply_turns_tokens_cost_and_changes() -> None:
    got = SPECS["opencode"].parse_result(_PATCHED.encode(), 0)
    assert (got.is_error, got.summary, got.num_turns, got.parse_error) == (False, "Done.", 2, None)
    assert (got.input_tokens, got.output_tokens, got.cost_usd) == (220, 20, 0.25)  # cache counted as input
    assert [(c.path, c.kind, c.ok) for c in got.reported_changes] == [
        ("/workspace/hello.txt", "add", True), ("/workspace/README.md", "update", True)]  # fmt: skip
    wrote = SPECS["opencode"].parse_result(_WROTE, 0)
    assert [(c.path, c.kind, c.ok) for c in wrote.reported_changes] == [("/workspace/hello.txt", "add", True)]


def test_refused_calls_are_its_permission_denials() -> None:
    got = SPECS["opencode"].parse_result(_DENIED, 0)
    assert got.permission_denials == ("bash", "read", "bash")
    assert (got.is_error, got.summary) == (False, "I could not run it.")  # exit 0: judge by the diff


def test_a_failed_model_call_is_an_error_with_the_providers_message() -> None:
    got = SPECS["opencode"].parse_result(_FAILED, 1)
    assert (got.is_error, got.subtype, got.summary) == (True, "APIError", "Incorrect API key provided")
    cut = SPECS["opencode"].parse_result(_PATCHED[: len(_PATCHED) // 2], None)  # killed mid-line
    assert cut.is_error is True
    assert cut.parse_error == "1 JSON line(s) could not be read"
