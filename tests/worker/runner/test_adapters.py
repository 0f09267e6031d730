"""Adapters: argv, env and stdin per CLI from the policy and the grant; results read from hostile output."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.policy import MODEL_KEYS, Agent
from worker.policy.catalogue import INHERENT_TOOLS
from worker.policy.schema import ADAPTERS
from worker.runner import adapters, installed, prompt, results, script_agent
from worker.runner.adapters import SPECS, AgentMissing, Invocation

PROMPT = "PROMPT-TEXT-7f3a: fix the bug described in the issue"
PROMPT_PATH = "/home/agent/.baton/prompt.md"
WORKSPACE = "/workspace"
GATEWAY = "http://127.0.0.1:3129"
PLACEHOLDER = "baton-placeholder-test"
ALL_TOOLS = (
    "read_repo",
    "search_repo",
    "edit_files",
    "run_shell",
    "web_fetch",
    "web_search",
    "model_server_tools",
)
EXECUTABLES = ("claude", "codex", "gemini", "qwen", "aider", "mini", "opencode", "my-agent")


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH directory holding a stand-in executable for every CLI."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in EXECUTABLES:
        exe = directory / name
        exe.write_text("#!/bin/sh\necho '9.8.7'\n")
        exe.chmod(0o755)
    return directory


def agent_for(adapter: str, **fields: object) -> Agent:
    if adapter == "command":
        fields.setdefault("command", ("my-agent", "--task", "{prompt_file}", "--cwd={workspace}"))
    return Agent(adapter=adapter, **fields)  # type: ignore[arg-type]


def invoke(
    adapter: str,
    bin_dir: Path,
    *,
    tools: tuple[str, ...] = ("read_repo", "search_repo", "edit_files"),
    base_url: str | None = GATEWAY,
    env_values: dict[str, str] | None = None,
    **fields: object,
) -> Invocation:
    agent = agent_for(adapter, tools=tools, **fields)
    return adapters.build_invocation(
        SPECS[adapter], agent, granted_tools=tools, model_base_url=base_url, env_values=env_values or {},
        prompt_path=PROMPT_PATH, workspace=WORKSPACE, search_path=str(bin_dir), prompt_text=PROMPT,
        model_key=PLACEHOLDER if base_url is not None else None,
    )  # fmt: skip


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


# --- the registry ---------------------------------------------------------------------------------


def test_there_is_one_spec_per_policy_adapter() -> None:
    assert set(SPECS) == set(ADAPTERS)
    assert all(spec.name == name for name, spec in SPECS.items())


@pytest.mark.parametrize("adapter", [name for name, spec in SPECS.items() if spec.repertoire])
def test_every_tool_a_cli_has_is_denied_when_not_granted_or_counted_as_its_own(
    adapter: str, bin_dir: Path
) -> None:
    """What the gate decides on is what the agent can do: a tool of the CLI's that the policy does not
    grant changes what the CLI is told (a switch, a setting), or the catalogue counts it regardless."""
    spec, own = SPECS[adapter], INHERENT_TOOLS.get(adapter, {})
    assert set(own) <= set(spec.repertoire), f"{adapter}: an inherent tool the CLI does not have"
    everything = invoke(adapter, bin_dir, tools=spec.repertoire)
    for tool in spec.repertoire:
        without = invoke(adapter, bin_dir, tools=tuple(t for t in spec.repertoire if t != tool))
        told_apart = (without.argv, without.env, without.home_files) != (
            everything.argv,
            everything.env,
            everything.home_files,
        )
        assert told_apart is (tool not in own), f"{adapter}: {tool}"


def test_specs_are_frozen() -> None:
    spec = SPECS["claude-code"]
    with pytest.raises(AttributeError):
        spec.executable = "sh"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.tool_names["run_shell"] = ("Read",)  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.fixed_env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "0"  # type: ignore[index]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_prompt_is_never_in_argv_or_env(adapter: str, bin_dir: Path) -> None:
    inv = invoke(adapter, bin_dir, tools=ALL_TOOLS, env_values={})
    assert not any("PROMPT-TEXT" in token for token in inv.argv)
    assert not any("PROMPT-TEXT" in value for value in inv.env.values())
    spec = SPECS[adapter]
    if spec.stdin_program:
        assert inv.stdin == installed.script_agent_source()
        assert PROMPT_PATH in inv.argv
    elif spec.prompt_via is adapters.PromptVia.FILE:
        assert inv.stdin is None
        assert PROMPT_PATH in inv.argv
    elif spec.prompt_via is adapters.PromptVia.HOME_FILE:
        assert inv.stdin is None
        assert any(PROMPT in text for text in inv.home_files.values())
    else:
        assert inv.stdin == PROMPT.encode()


@pytest.mark.parametrize("adapter", [a for a in ADAPTERS if a != "script"])
def test_argv0_is_the_executable_found_on_the_given_path(adapter: str, bin_dir: Path) -> None:
    inv = invoke(adapter, bin_dir)
    assert Path(inv.argv[0]).parent == bin_dir
    assert inv.env["PATH"].startswith(f"{bin_dir}:")


@pytest.mark.parametrize("adapter", [a for a in ADAPTERS if a not in ("command", "script")])
def test_a_missing_cli_is_a_clear_error(adapter: str, tmp_path: Path) -> None:
    with pytest.raises(AgentMissing) as caught:
        invoke(adapter, tmp_path)
    error = caught.value
    assert error.code == adapters.AGENT_MISSING
    assert error.adapter == adapter
    assert f"the {adapter} agent needs {SPECS[adapter].executable}" in error.message
    assert SPECS[adapter].install_hint in error.message


def test_the_claude_hint_names_the_npm_package(tmp_path: Path) -> None:
    with pytest.raises(AgentMissing, match=r"npm install -g @anthropic-ai/claude-code"):
        adapters.locate(SPECS["claude-code"], agent_for("claude-code"), str(tmp_path))


def test_a_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AgentMissing, match="needs my-agent"):
        invoke("command", tmp_path)
    with pytest.raises(AgentMissing, match="needs /nowhere/agent"):
        invoke("command", tmp_path, command=("/nowhere/agent",))


def test_a_relative_command_is_left_to_the_box(bin_dir: Path) -> None:
    inv = invoke("command", bin_dir, command=("./scripts/agent.sh", "{prompt_file}"))
    assert inv.argv == ("./scripts/agent.sh", PROMPT_PATH)


# --- Claude Code ----------------------------------------------------------------------------------


def test_claude_code_argv(bin_dir: Path) -> None:
    inv = invoke("claude-code", bin_dir, timeout=1800)
    assert inv.argv == (
        str(bin_dir / "claude"), "-p", "--output-format", "json", "--permission-mode", "acceptEdits",
        "--max-turns", "90", "--no-session-persistence", "--setting-sources", "user", "--strict-mcp-config",
        "--allowedTools", "Read,Glob,Grep,Edit,Write,NotebookEdit",
        "--disallowedTools", "Bash,WebFetch,WebSearch",
    )  # fmt: skip


def test_claude_code_gets_shell_and_web_only_when_granted(bin_dir: Path) -> None:
    inv = invoke("claude-code", bin_dir, tools=("read_repo", "run_shell", "web_fetch", "web_search"))
    assert flag(inv.argv, "--allowedTools") == "Read,Bash,WebFetch"
    # Claude Code's WebSearch runs at the provider: web_search alone does not bring it.
    assert flag(inv.argv, "--disallowedTools") == "Glob,Grep,Edit,Write,NotebookEdit,WebSearch"
    inv = invoke("claude-code", bin_dir, tools=ALL_TOOLS)
    assert "--disallowedTools" not in inv.argv


def test_claude_code_env_holds_the_placeholder_never_the_real_key(bin_dir: Path) -> None:
    quiet = "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"
    values = {"ANTHROPIC_API_KEY": "sk-real", quiet: "0", "GITHUB_TOKEN": "not-listed"}
    inv = invoke("claude-code", bin_dir, env=("ANTHROPIC_API_KEY", quiet), env_values=values)
    assert dict(inv.env) == {
        "ANTHROPIC_API_KEY": PLACEHOLDER,
        "ANTHROPIC_BASE_URL": f"{GATEWAY}/anthropic",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # Baton's setting wins over the policy's value
        "PATH": f"{bin_dir}:{installed.SYSTEM_PATH}",
    }


def test_claude_code_gets_a_placeholder_key_only_when_it_has_a_model(bin_dir: Path) -> None:
    routed = invoke("claude-code", bin_dir, base_url="http://127.0.0.1:9/")
    assert routed.env["ANTHROPIC_API_KEY"] == PLACEHOLDER
    assert routed.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/anthropic"
    direct = invoke("claude-code", bin_dir, base_url=None, env=("ANTHROPIC_API_KEY",),
                    env_values={"ANTHROPIC_API_KEY": "sk-real"})  # fmt: skip
    assert "ANTHROPIC_API_KEY" not in direct.env
    assert "ANTHROPIC_BASE_URL" not in direct.env


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_adapter_ever_gives_the_box_a_model_keys_value(adapter: str, bin_dir: Path) -> None:
    """Whatever the policy lists and the worker holds, a model key's value never reaches the box:
    its name holds the run's placeholder (with a model) or is absent (without one)."""
    real = {name: f"sk-canary-{index}-do-not-leak" for index, name in enumerate(MODEL_KEYS)}
    for base_url in (GATEWAY, None):
        inv = invoke(adapter, bin_dir, base_url=base_url, env=tuple(MODEL_KEYS), env_values=real)
        shown = " ".join([*inv.argv, *inv.env.values()])
        assert not any(value in shown for value in real.values())
        assert {inv.env[n] for n in MODEL_KEYS if n in inv.env} <= ({PLACEHOLDER} if base_url else set())


# --- Codex ----------------------------------------------------------------------------------------


def test_codex_argv_with_a_key(bin_dir: Path) -> None:
    inv = invoke("codex", bin_dir, env=("OPENAI_API_KEY",), env_values={"OPENAI_API_KEY": "sk-o"})
    assert inv.argv == (
        str(bin_dir / "codex"), "exec", "--json", "--skip-git-repo-check", "-c", "analytics.enabled=false",
        "--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps",
        "--dangerously-bypass-approvals-and-sandbox", "-c", 'web_search="disabled"',
        "-c", "model_provider=baton",
        "-c", f'model_providers.baton={{name="baton",base_url="{GATEWAY}/openai/v1",wire_api="responses",'
              'env_key="OPENAI_API_KEY"}',
        "-",
    )  # fmt: skip
    assert inv.env["OPENAI_API_KEY"] == PLACEHOLDER


def test_codex_without_a_key_listed_or_a_model(bin_dir: Path) -> None:
    inv = invoke("codex", bin_dir, tools=(*ALL_TOOLS,))
    assert 'web_search="live"' in inv.argv  # ALL_TOOLS grants model_server_tools
    provider = next(t for t in inv.argv if t.startswith("model_providers.baton="))
    assert 'env_key="OPENAI_API_KEY"' in provider
    assert inv.env["OPENAI_API_KEY"] == PLACEHOLDER
    assert 'web_search="disabled"' in invoke("codex", bin_dir, tools=("read_repo", "web_search")).argv
    direct = invoke("codex", bin_dir, base_url=None)
    assert "model_provider=baton" not in direct.argv
    assert "OPENAI_API_KEY" not in direct.env
    assert direct.argv[-1] == "-"


# --- gemini, qwen-code, opencode, aider and mini-swe-agent [observed; see adapters.py] ------------


def gemini_policy(inv: Invocation) -> str:
    return inv.home_files[".gemini/baton-policy.toml"]


def test_gemini_argv_env_and_settings(bin_dir: Path) -> None:
    inv = invoke("gemini", bin_dir, env=("GEMINI_API_KEY",), env_values={"GEMINI_API_KEY": "g"})
    assert inv.argv == (
        str(bin_dir / "gemini"), "--output-format", "json", "--skip-trust", "--approval-mode", "yolo",
        "--admin-policy", "/home/agent/.gemini/baton-policy.toml", "--prompt", adapters.STDIN_POINTER,
    )  # fmt: skip
    assert inv.stdin == PROMPT.encode()
    assert dict(inv.env) == {
        "GEMINI_API_KEY": PLACEHOLDER,
        "GEMINI_CLI_HOME": "/home/agent",
        "GEMINI_MODEL": adapters.GEMINI_DEFAULT_MODEL,
        "GOOGLE_GEMINI_BASE_URL": f"{GATEWAY}/gemini",
        "PATH": f"{bin_dir}:{installed.SYSTEM_PATH}",
    }
    settings = json.loads(inv.home_files[".gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"  # else exit 41 with a base URL
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["general"]["maxAttempts"] == 1


def test_gemini_denies_in_its_admin_policy_every_tool_not_granted(bin_dir: Path) -> None:
    inv = invoke("gemini", bin_dir, tools=("read_repo", "edit_files"))
    assert gemini_policy(inv).splitlines()[1:] == [
        "[[rule]]",
        'toolName = ["grep_search", "glob", "run_shell_command", "list_background_processes", '
        '"read_background_output", "web_fetch", "google_web_search"]',
        'decision = "deny"',
        "priority = 999",
    ]
    # web_search alone does not bring the provider's search (a server tool): model_server_tools does.
    tools = ("read_repo", "search_repo", "edit_files", "run_shell", "web_fetch", "web_search")
    searcher = gemini_policy(invoke("gemini", bin_dir, tools=tools))
    assert 'toolName = ["google_web_search"]' in searcher
    assert "[[rule]]" not in gemini_policy(invoke("gemini", bin_dir, tools=ALL_TOOLS))


def test_gemini_keeps_a_model_the_policy_passes(bin_dir: Path) -> None:
    inv = invoke("gemini", bin_dir, env=("GEMINI_MODEL",), env_values={"GEMINI_MODEL": "gemini-3-pro"})
    assert inv.env["GEMINI_MODEL"] == "gemini-3-pro"
    direct = invoke("gemini", bin_dir, base_url=None)
    assert "GOOGLE_GEMINI_BASE_URL" not in direct.env
    assert "GEMINI_API_KEY" not in direct.env


def test_qwen_code_argv_env_and_settings(bin_dir: Path) -> None:
    inv = invoke(
        "qwen-code", bin_dir, timeout=600, env=("OPENAI_API_KEY",), env_values={"OPENAI_API_KEY": "o"}
    )
    assert inv.argv == (
        str(bin_dir / "qwen"), "--output-format", "json", "--approval-mode", "yolo", "--max-session-turns",
        "30", "--allowed-mcp-server-names", "", adapters.STDIN_POINTER,
    )  # fmt: skip
    assert inv.stdin == PROMPT.encode()
    assert dict(inv.env) == {
        "OPENAI_API_KEY": PLACEHOLDER,
        "OPENAI_BASE_URL": f"{GATEWAY}/openai/v1",
        "OPENAI_MODEL": adapters.QWEN_DEFAULT_MODEL,  # without all three it will not start
        "PATH": f"{bin_dir}:{installed.SYSTEM_PATH}",
        "QWEN_CODE_SYSTEM_SETTINGS_PATH": "/home/agent/.qwen/baton-settings.json",  # over the repository
        "QWEN_HOME": "/home/agent/.qwen",
    }
    settings = json.loads(inv.home_files[".qwen/baton-settings.json"])
    assert settings["disableAllHooks"] is True
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["memory"]["enableManagedAutoMemory"] is False  # else a second model call per run
    assert settings["permissions"]["deny"] == ["run_shell_command", "monitor", "web_fetch"]


def test_qwen_code_denies_every_tool_not_granted_and_keeps_a_model_the_policy_passes(bin_dir: Path) -> None:
    read_only = invoke("qwen-code", bin_dir, tools=("read_repo",), env=("OPENAI_MODEL",),
                       env_values={"OPENAI_MODEL": "qwen3-coder-plus"})  # fmt: skip
    assert read_only.env["OPENAI_MODEL"] == "qwen3-coder-plus"
    assert json.loads(read_only.home_files[".qwen/baton-settings.json"])["permissions"]["deny"] == [
        "grep_search", "glob", "edit", "write_file", "run_shell_command", "monitor", "web_fetch"
    ]  # fmt: skip
    everything = json.loads(
        invoke("qwen-code", bin_dir, tools=ALL_TOOLS).home_files[".qwen/baton-settings.json"]
    )
    assert everything["permissions"]["deny"] == []


def test_the_pinned_gemini_and_qwen_clis_report_their_versions(agent_cli_bin: Path) -> None:
    assert adapters.version(SPECS["gemini"], str(agent_cli_bin / "gemini")) == "0.61.0"
    assert adapters.version(SPECS["qwen-code"], str(agent_cli_bin / "qwen")) == "0.15.10"


def test_aider_argv_and_env(bin_dir: Path) -> None:
    """[observed 0.86.2] See adapters.py: every switch that stops traffic or a program is a flag, since
    flags win over the workspace's .aider.conf.yml and .env."""
    inv = invoke("aider", bin_dir, tools=("edit_files",), env=("OPENAI_API_KEY",))
    assert flag(inv.argv, "--message-file") == PROMPT_PATH
    assert flag(inv.argv, "--model") == "openai/gpt-5-mini"
    assert flag(inv.argv, "--openai-api-base") == f"{GATEWAY}/openai/v1"
    assert flag(inv.argv, "--load") == "/dev/null"
    assert flag(inv.argv, "--chat-history-file") == "/dev/null"
    switches = (
        "--yes-always --no-git --no-auto-commits --no-dirty-commits --no-check-update --analytics-disable "
        "--no-suggest-shell-commands --no-auto-lint --no-auto-test --no-detect-urls"
    )
    for switch in switches.split():
        assert switch in inv.argv, switch
    assert "--chat-mode" not in inv.argv
    assert (inv.env["OPENAI_API_BASE"], inv.env["OPENAI_API_KEY"]) == (f"{GATEWAY}/openai/v1", PLACEHOLDER)
    assert inv.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    cache = json.loads(inv.home_files[".aider/caches/model_prices_and_context_window.json"])
    assert cache  # not empty, so not fetched
    assert "openai/gpt-5-mini" not in cache  # and no model in it, so litellm's bundled map answers
    assert inv.stdin is None


def test_aider_tools(bin_dir: Path) -> None:
    """web_fetch is URL scraping; without edit_files it only answers (ask mode); shell suggestions are
    never run, granted or not (the gate counts a shell for aider anyway)."""
    granted = invoke("aider", bin_dir, tools=ALL_TOOLS)
    assert "--no-detect-urls" not in granted.argv
    assert "--chat-mode" not in granted.argv
    assert "--no-suggest-shell-commands" in granted.argv
    read_only = invoke("aider", bin_dir, tools=("read_repo",))
    assert flag(read_only.argv, "--chat-mode") == "ask"


def test_aider_takes_its_model_from_the_policys_env_when_passed(bin_dir: Path) -> None:
    inv = invoke("aider", bin_dir, env=("AIDER_MODEL",), env_values={"AIDER_MODEL": "openai/gpt-5.4"})
    assert "--model" not in inv.argv
    assert inv.env["AIDER_MODEL"] == "openai/gpt-5.4"


def test_mini_swe_agent_argv_env_and_config(bin_dir: Path) -> None:
    """[observed 2.4.6] Everything, the task included, in one config file in HOME."""
    import yaml

    inv = invoke("mini-swe-agent", bin_dir, env=("OPENAI_API_KEY",), timeout=120)
    assert inv.argv[1:] == ("-c", "/home/agent/.baton/mini.yaml", "-o", "/home/agent/.baton/traj.json",
                            "--yolo", "--exit-immediately")  # fmt: skip
    assert SPECS["mini-swe-agent"].result_file == ".baton/traj.json"
    assert inv.env["OPENAI_API_BASE"] == f"{GATEWAY}/openai/v1"
    assert inv.env["OPENAI_API_KEY"] == PLACEHOLDER
    assert inv.env["MSWEA_MODEL_NAME"] == "openai/gpt-5-mini"
    fixed = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
             "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
    assert {name: inv.env[name] for name in fixed} == fixed
    config = yaml.safe_load(inv.home_files[".baton/mini.yaml"])
    assert config["run"]["task"] == PROMPT
    assert (config["agent"]["mode"], config["agent"]["confirm_exit"]) == ("yolo", False)
    assert config["agent"]["step_limit"] == adapters.max_turns(agent_for("mini-swe-agent", timeout=120))
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in config["agent"]["instance_template"]
    assert "{{task}}" in config["agent"]["instance_template"]
    assert inv.stdin is None


@pytest.mark.parametrize(
    "task", ["{{ x }} {% raw %}", "tab\tand\u2028line\nsep \U0001f600", "- a: [b", "'\"\\"]
)
def test_mini_swe_agent_task_survives_the_yaml_file(bin_dir: Path, task: str) -> None:
    import yaml

    inv = adapters.build_invocation(
        SPECS["mini-swe-agent"], agent_for("mini-swe-agent"), granted_tools=(), model_base_url=GATEWAY,
        env_values={}, prompt_path=PROMPT_PATH, workspace=WORKSPACE, search_path=str(bin_dir),
        prompt_text=task, model_key=PLACEHOLDER,
    )  # fmt: skip
    assert yaml.safe_load(inv.home_files[".baton/mini.yaml"])["run"]["task"] == task


def test_opencode_runs_with_its_whole_config_from_baton_and_none_from_the_repository(bin_dir: Path) -> None:
    inv = invoke("opencode", bin_dir, tools=("read_repo", "edit_files"), env=("OPENAI_API_KEY",))
    assert inv.argv[1:] == ("run", "--format", "json", "--title", "baton", adapters.STDIN_POINTER)
    assert inv.stdin == PROMPT.encode()
    for name in (
        "OPENCODE_DISABLE_PROJECT_CONFIG",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_SHARE",
    ):
        assert inv.env[name] == "1"
    assert inv.env["npm_config_registry"] == "http://127.0.0.1:9/"  # nothing listens there in the box
    assert inv.env["OPENAI_API_KEY"] == PLACEHOLDER
    assert inv.home_files == {}
    config = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])
    assert config["permission"] == {
        "read": "allow", "glob": "deny", "grep": "deny", "list": "deny", "edit": "allow", "bash": "deny",
        "webfetch": "deny", "websearch": "deny", "external_directory": "deny",
    }  # fmt: skip
    assert (config["autoupdate"], config["share"]) == (False, "disabled")
    assert config["instructions"] == [f"{WORKSPACE}/AGENTS.md"]  # the repository's AGENTS.md, by path
    assert config["provider"] == {"baton": {
        "npm": "@ai-sdk/openai-compatible", "name": "Baton model gateway", "models": {"gpt-5.5": {}},
        "options": {"baseURL": f"{GATEWAY}/openai/v1", "apiKey": "{env:OPENAI_API_KEY}"}}}  # fmt: skip
    assert config["model"] == config["small_model"] == "baton/gpt-5.5"


@pytest.mark.parametrize(
    ("key", "package", "path"),
    [("ANTHROPIC_API_KEY", "@ai-sdk/anthropic", "anthropic/v1"),
     ("GROQ_API_KEY", "@ai-sdk/openai-compatible", "groq/v1"),
     ("OPENROUTER_API_KEY", "@ai-sdk/openai-compatible", "openrouter/v1"),
     ("GEMINI_API_KEY", "@ai-sdk/google", "gemini/v1beta")],
)  # fmt: skip
def test_opencode_talks_to_the_provider_whose_key_the_policy_passes(
    bin_dir: Path, key: str, package: str, path: str
) -> None:
    inv = invoke("opencode", bin_dir, env=(key,))
    baton = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])["provider"]["baton"]
    assert (baton["npm"], baton["options"]["baseURL"]) == (package, f"{GATEWAY}/{path}")
    assert baton["options"]["apiKey"] == "{env:" + key + "}"
    assert inv.env[key] == PLACEHOLDER


def test_opencode_without_a_model_gets_no_provider_and_no_key(bin_dir: Path) -> None:
    inv = invoke("opencode", bin_dir, base_url=None, tools=ALL_TOOLS)
    config = json.loads(inv.env["OPENCODE_CONFIG_CONTENT"])
    assert "provider" not in config
    assert "model" not in config
    assert "OPENAI_API_KEY" not in inv.env
    assert set(config["permission"].values()) == {"allow", "deny"}
    assert config["permission"]["bash"] == "allow"


# --- command and script ---------------------------------------------------------------------------


def test_command_substitutes_the_prompt_file_and_sends_the_prompt_on_stdin(bin_dir: Path) -> None:
    inv = invoke("command", bin_dir)
    assert inv.argv == (str(bin_dir / "my-agent"), "--task", PROMPT_PATH, f"--cwd={WORKSPACE}")
    assert inv.stdin == PROMPT.encode()
    assert inv.env["BATON_MODEL_BASE_URL"] == GATEWAY
    assert inv.env["BATON_MODEL_KEY"] == PLACEHOLDER


def test_the_script_agent_runs_from_its_invocation(tmp_path: Path) -> None:
    """The script adapter end to end, no box: system python3, program on stdin, recipe in the issue."""
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    body = 'Do this:\n```baton-recipe\n{"steps": [{"op": "write", "path": "done.txt", "content": "ok"}]}\n```'
    (home / "prompt.md").write_text(prompt.render(title="t", body=body))
    agent = agent_for("script", tools=("read_repo", "edit_files"))
    inv = adapters.build_invocation(
        SPECS["script"], agent, granted_tools=agent.tools, model_base_url=None, env_values={},
        prompt_path=str(home / "prompt.md"), workspace=str(workspace), search_path="/nonexistent",
    )  # fmt: skip
    assert inv.argv[1:] == ("-I", "-", str(home / "prompt.md"))
    assert Path(inv.argv[0]).parent in (Path("/usr/bin"), Path("/usr/local/bin"), Path("/bin"))
    done = subprocess.run(inv.argv, input=inv.stdin, env=dict(inv.env), cwd=workspace, capture_output=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (workspace / "done.txt").read_text() == "ok"
    parsed = SPECS["script"].parse_result(done.stdout, done.returncode)
    assert parsed.is_error is False
    assert parsed.num_turns == 1
    assert adapters.version(SPECS["script"], inv.argv[0]) == script_agent.VERSION


# --- inputs Baton refuses -------------------------------------------------------------------------


def test_env_values_only_for_names_the_agent_lists(bin_dir: Path) -> None:
    inv = invoke("aider", bin_dir, env=("HF_TOKEN",), env_values={"HF_TOKEN": "a", "AWS_SECRET": "b"})
    assert inv.env["HF_TOKEN"] == "a"
    assert "AWS_SECRET" not in inv.env


def test_an_env_value_with_nul_is_refused(bin_dir: Path) -> None:
    with pytest.raises(ValueError, match="NUL"):
        invoke("aider", bin_dir, env=("HF_TOKEN",), env_values={"HF_TOKEN": "a\x00b"})


def test_a_model_without_its_placeholder_is_a_programming_error(bin_dir: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        adapters.build_invocation(
            SPECS["codex"], agent_for("codex"), granted_tools=(), model_base_url=GATEWAY, env_values={},
            prompt_path=PROMPT_PATH, workspace=WORKSPACE, search_path=str(bin_dir), prompt_text=PROMPT,
        )  # fmt: skip


@pytest.mark.parametrize("url", ["ftp://x", 'http://x/"}', "http://x/v1?key=1", "http://x y", "api.x.com"])
def test_a_bad_base_url_is_refused(bin_dir: Path, url: str) -> None:
    with pytest.raises(ValueError, match="model base URL"):
        invoke("codex", bin_dir, base_url=url)


def test_a_stdin_adapter_needs_the_prompt_text(bin_dir: Path) -> None:
    with pytest.raises(ValueError, match="pass prompt_text"):
        adapters.build_invocation(
            SPECS["claude-code"], agent_for("claude-code"), granted_tools=(), model_base_url=None,
            env_values={}, prompt_path=PROMPT_PATH, workspace=WORKSPACE, search_path=str(bin_dir),
        )  # fmt: skip


def test_max_turns_follows_the_timeout_within_bounds() -> None:
    assert adapters.max_turns(Agent(adapter="codex", timeout=30)) == 10
    assert adapters.max_turns(Agent(adapter="codex", timeout=1800)) == 90
    assert adapters.max_turns(Agent(adapter="codex", timeout=36000)) == 200


# --- versions and installs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [("2.1.197 (Claude Code)\n", "2.1.197"), ("codex-cli 0.171.0", "0.171.0"), ("aider 0.86.1", "0.86.1"),
     ("v1.2.3-beta.1", "1.2.3-beta.1"), ("no version here", None), ("", None)],
)  # fmt: skip
def test_parse_version(text: str, version: str | None) -> None:
    assert adapters.parse_version(text) == version


def test_version_asks_the_cli_with_a_throwaway_home(bin_dir: Path) -> None:
    assert adapters.version(SPECS["claude-code"], str(bin_dir / "claude")) == "9.8.7"
    assert adapters.version(SPECS["codex"], str(bin_dir / "missing")) is None


def test_a_policy_command_is_never_run_on_the_host_for_its_version(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    exe = tmp_path / "agent"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\necho 1.0.0\n")
    exe.chmod(0o755)
    assert adapters.version(SPECS["command"], str(exe)) is None
    assert not marker.exists()


def test_the_pinned_real_clis_report_their_versions(agent_cli_bin: Path) -> None:
    assert adapters.version(SPECS["claude-code"], str(agent_cli_bin / "claude")) == "2.1.197"
    assert adapters.version(SPECS["codex"], str(agent_cli_bin / "codex")) == "0.171.0"
    assert adapters.version(SPECS["aider"], str(agent_cli_bin / "aider")) == "0.86.2"
    assert adapters.version(SPECS["mini-swe-agent"], str(agent_cli_bin / "mini")) == "2.4.6"


def test_install_dirs_of_an_npm_install(tmp_path: Path) -> None:
    package = tmp_path / "prefix" / "node_modules" / "@anthropic-ai" / "claude-code" / "bin"
    package.mkdir(parents=True)
    (package / "claude.exe").write_bytes(b"\x7fELF")
    (package / "claude.exe").chmod(0o755)
    dot_bin = tmp_path / "prefix" / "node_modules" / ".bin"
    dot_bin.mkdir()
    (dot_bin / "claude").symlink_to("../@anthropic-ai/claude-code/bin/claude.exe")
    assert adapters.install_dirs(str(dot_bin / "claude")) == (str(tmp_path / "prefix" / "node_modules"),)


def test_install_dirs_include_an_env_interpreter(tmp_path: Path) -> None:
    tools, node = tmp_path / "tools", tmp_path / "node" / "bin"
    tools.mkdir()
    node.mkdir(parents=True)
    (node / "node").write_text("")
    (node / "node").chmod(stat.S_IRWXU)
    script = tools / "gemini"
    script.write_text("#!/usr/bin/env node\n")
    assert adapters.install_dirs(str(script), search_path=str(node)) == (str(node), str(tools))
    assert adapters.install_dirs("relative/x") == ()


# --- results: the agent's own account, read from hostile output -----------------------------------

#: Observed: claude-code 2.1.197 -p --output-format json, one turn (trimmed).
CLAUDE_OK = json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "api_error_status": None, "num_turns": 2,
    "result": "done", "stop_reason": "end_turn", "total_cost_usd": 0.00005,
    "usage": {"input_tokens": 5, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2,
              "output_tokens": 1},
    "permission_denials": [{"tool_name": "Write", "tool_use_id": "t1", "tool_input": {"file_path": "/x"}}],
    "terminal_reason": "completed",
})  # fmt: skip
#: Observed: codex 0.171.0 exec --json (one turn), plus a file_change item as AGENT-CLIS.md records it.
CODEX_OK = "\n".join([
    '{"type":"thread.started","thread_id":"01a2"}',
    '{"type":"turn.started"}',
    '{"type":"item.completed","item":{"id":"item_0","type":"file_change","status":"completed",'
    '"changes":[{"path":"hello.txt","kind":"add"}]}}',
    '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"done"}}',
    '{"type":"turn.completed","usage":{"input_tokens":7,"cached_input_tokens":0,"output_tokens":2,'
    '"reasoning_output_tokens":0}}',
])  # fmt: skip


def test_claude_result() -> None:
    got = SPECS["claude-code"].parse_result(CLAUDE_OK.encode(), 0)
    assert (got.is_error, got.subtype, got.num_turns, got.cost_usd) == (False, "success", 2, 0.00005)
    assert (got.input_tokens, got.output_tokens) == (8, 1)
    assert got.permission_denials == ("Write",)
    assert got.summary == "done"
    assert got.parse_error is None
    assert json.loads(json.dumps(got.to_data()))["permission_denials"] == ["Write"]


def test_claude_is_error_with_exit_0_is_an_error() -> None:
    """Observed: with no key Claude Code says "Not logged in" as subtype success, is_error true."""
    text = json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": "Not logged in"})
    assert SPECS["claude-code"].parse_result(text, 0).is_error is True
    assert SPECS["claude-code"].parse_result(CLAUDE_OK, 1).is_error is True
    maxed = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": False})
    assert SPECS["claude-code"].parse_result(maxed, 0).is_error is True


def test_codex_result() -> None:
    got = SPECS["codex"].parse_result(CODEX_OK, 0)
    assert (got.is_error, got.num_turns, got.input_tokens, got.output_tokens) == (False, 1, 7, 2)
    assert got.reported_changes == (results.ReportedChange("hello.txt", "add", True),)
    assert got.summary == "done"
    failed = CODEX_OK + '\n{"type":"turn.failed","error":{"message":"stream disconnected"}}'
    assert SPECS["codex"].parse_result(failed, 0).is_error is True


#: Observed: aider 0.86.2 --message-file, one reply writing a file (trimmed).
AIDER_OK = """Analytics have been permanently disabled.

Aider v0.86.2
Model: openai/gpt-5-mini with diff edit format
Git repo: none
Repo-map: disabled

hello.txt
```
hello from aider
```

Tokens: 1.2k sent, 11 received. Cost: $0.0012 message, $0.0012 session.

hello.txt
Applied edit to hello.txt
"""
#: Observed: the same against a model answering 400 to every call: rc 0 all the same.
AIDER_400 = """Aider v0.86.2
Model: openai/gpt-standin with whole edit format
Git repo: none
Repo-map: disabled

litellm.BadRequestError: OpenAIException - boom
"""
#: Observed: a 500 is retried with back-off, then given up (trimmed).
AIDER_500 = """litellm.InternalServerError: InternalServerError: OpenAIException - boom
The API provider's servers are down or overloaded.
Retrying in 0.2 seconds...
litellm.InternalServerError: InternalServerError: OpenAIException - boom
The API provider's servers are down or overloaded.
"""


def test_aider_result() -> None:
    got = SPECS["aider"].parse_result(AIDER_OK, 0)
    assert (got.is_error, got.num_turns, got.input_tokens, got.output_tokens) == (False, 1, 1200, 11)
    assert got.cost_usd == 0.0012
    assert got.reported_changes == (results.ReportedChange("hello.txt", "edit", True),)
    assert got.summary is not None
    assert got.summary.endswith("Applied edit to hello.txt")


def test_aider_exits_0_when_every_model_call_failed_and_that_is_an_error() -> None:
    for output, name in ((AIDER_400, "BadRequestError"), (AIDER_500, "InternalServerError")):
        got = SPECS["aider"].parse_result(output, 0)
        assert (got.is_error, got.subtype, got.num_turns) == (True, name, None)
    retried = AIDER_500 + "Retrying in 0.5 seconds...\nok\n\nTokens: 596 sent, 2 received.\n"
    assert SPECS["aider"].parse_result(retried, 0).is_error is False  # a retry that got through


def _trajectory(status: str, content: str = "", submission: str = "") -> str:
    """The shape mini-swe-agent 2.4.6 writes with -o [observed], trimmed to what Baton reads."""
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    return json.dumps({
        "info": {"model_stats": {"instance_cost": 0.00013, "api_calls": 2}, "mini_version": "2.4.6",
                 "exit_status": status, "submission": submission},
        "messages": [
            {"role": "system", "content": "You are a software engineer."},
            {"role": "user", "content": "Add hello.txt."},
            {"role": "assistant", "content": "Writing it.", "extra": {"actions": [{"command": "echo"}],
             "response": {"usage": usage}, "cost": 0.0001}},
            {"role": "tool", "content": "<returncode>0</returncode>", "extra": {"returncode": 0}},
            {"role": "exit", "content": content, "extra": {"exit_status": status, "submission": submission}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }, indent=2)  # fmt: skip


def test_mini_swe_agent_result() -> None:
    got = SPECS["mini-swe-agent"].parse_result(_trajectory("Submitted"), 0)
    assert (got.is_error, got.subtype, got.num_turns, got.cost_usd) == (False, "Submitted", 2, 0.00013)
    assert (got.input_tokens, got.output_tokens, got.summary) == (100, 20, "Writing it.")
    assert got.parse_error is None


def test_mini_swe_agent_errors() -> None:
    said = "litellm.BadRequestError: OpenAIException - boom"
    got = SPECS["mini-swe-agent"].parse_result(_trajectory("BadRequestError", said), 1)
    assert (got.is_error, got.subtype, got.summary) == (True, "BadRequestError", said)
    assert SPECS["mini-swe-agent"].parse_result(_trajectory("LimitsExceeded", "LimitsExceeded"), 0).is_error
    missing = SPECS["mini-swe-agent"].parse_result(b"", 0)
    assert missing.is_error is True
    assert missing.parse_error == "no trajectory was written"
    cut = SPECS["mini-swe-agent"].parse_result(_trajectory("Submitted")[:300], 0)
    assert (cut.is_error, cut.subtype) == (False, "Submitted")
    assert cut.parse_error is not None


def test_wrong_types_are_dropped_with_a_note() -> None:
    text = json.dumps({"type": "result", "is_error": "false", "num_turns": "5", "total_cost_usd": True,
                       "usage": [1, 2], "permission_denials": {"x": 1}, "result": 42})  # fmt: skip
    got = SPECS["claude-code"].parse_result(text, 0)
    assert (got.num_turns, got.cost_usd, got.input_tokens, got.summary) == (None, None, None, None)
    assert got.permission_denials == ()
    assert got.parse_error is not None
    assert "is_error" in got.parse_error


@pytest.mark.parametrize(
    "output",
    [
        b"",
        b"not json at all",
        b'{"type": "result", "is_error": fal',  # cut off
        b"\xff\xfe\x00garbage",
        b'{"type":"result","total_cost_usd":NaN,"num_turns":1e400}',
        b"[" * 100_000,
        b'{"type":"result","num_turns":' + b"9" * 5000 + b"}",
    ],
)
def test_hostile_output_never_raises(output: bytes) -> None:
    for spec in SPECS.values():
        got = spec.parse_result(output, 0)
        assert isinstance(got, results.AgentResult)
        assert got.cost_usd is None or got.cost_usd == got.cost_usd  # never NaN


def test_huge_output_is_read_from_its_tail() -> None:
    junk = b"x" * (results.MAX_PARSE_BYTES + 10) + b"\n"
    got = SPECS["claude-code"].parse_result(junk + CLAUDE_OK.encode(), 0)
    assert got.num_turns == 2
    assert got.parse_error is not None
    assert "only the last" in got.parse_error


def test_a_long_summary_is_cut() -> None:
    text = json.dumps({"type": "result", "is_error": False, "result": "y" * 100_000})
    got = SPECS["claude-code"].parse_result(text, 0)
    assert got.summary is not None
    assert len(got.summary) < results.MAX_SUMMARY_CHARS + 100


def test_no_exit_code_is_an_error() -> None:
    assert SPECS["command"].parse_result(b"fine", None).is_error is True
    assert SPECS["command"].parse_result(b"fine", 0).summary == "fine"


#: Observed: gemini 0.61.0 -o json after a write_file call and a reply (trimmed: one role, no timings).
GEMINI_OK = json.dumps({
    "session_id": "95ba79b5", "response": "Done.",
    "stats": {"models": {"gemini-2.5-pro": {
        "api": {"totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 221, "errorsByType": {}},
        "tokens": {"input": 22, "prompt": 22, "candidates": 6, "total": 28, "cached": 0, "thoughts": 0,
                   "tool": 0}}},
        "tools": {"totalCalls": 1, "totalSuccess": 1, "totalFail": 0,
                  "byName": {"write_file": {"count": 1, "success": 1, "fail": 0}}},
        "files": {"totalLinesAdded": 1, "totalLinesRemoved": 0}},
}, indent=2)  # fmt: skip
#: Observed: qwen 0.15.10 -o json after a denied run_shell_command and a reply (trimmed).
QWEN_DENIED = json.dumps([
    {"type": "system", "subtype": "init", "session_id": "26ad8083", "cwd": "/workspace",
     "tools": ["read_file", "write_file"], "permission_mode": "yolo", "qwen_code_version": "0.15.10"},
    {"type": "assistant", "session_id": "26ad8083", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Done."}], "usage": {"input_tokens": 11, "output_tokens": 3}}},
    {"type": "result", "subtype": "success", "session_id": "26ad8083", "is_error": False, "duration_ms": 360,
     "num_turns": 2, "result": "Done.", "usage": {"input_tokens": 22, "output_tokens": 6,
                                                    "cache_read_input_tokens": 0, "total_tokens": 28},
     "permission_denials": [{"tool_name": "run_shell_command", "tool_use_id": "c0",
                             "tool_input": {"command": "echo pwned > pwned.txt"}}]},
], separators=(",", ":"))  # fmt: skip
#: Observed: qwen 0.15.10 -o json when the model answered HTTP 400: exit 0, is_error false (trimmed).
QWEN_API_ERROR = json.dumps([
    {"type": "system", "subtype": "init", "session_id": "14a4dc5d"},
    {"type": "result", "subtype": "success", "session_id": "14a4dc5d", "is_error": False, "num_turns": 1,
     "result": "[API Error: 400 scripted failure]", "usage": {"input_tokens": 0, "output_tokens": 0},
     "permission_denials": []},
], separators=(",", ":"))  # fmt: skip


def test_gemini_result() -> None:
    got = SPECS["gemini"].parse_result(GEMINI_OK, 0)
    assert (got.is_error, got.summary, got.num_turns, got.input_tokens, got.output_tokens) == (
        False, "Done.", 2, 22, 6)  # fmt: skip
    assert got.parse_error is None


def test_a_failed_gemini_call_is_an_error_with_nothing_on_stdout() -> None:
    """Observed: HTTP 400 from the model -> exit 144 (400 mod 256), stdout empty, the error on stderr."""
    got = SPECS["gemini"].parse_result(b"", 144)
    assert got.is_error is True
    assert got.summary is None
    said = json.dumps({"session_id": "1", "error": {"type": "Error", "message": "quota", "code": 429}})
    assert SPECS["gemini"].parse_result(said, 0).is_error is True
    assert SPECS["gemini"].parse_result(said, 0).summary == "quota"


def test_qwen_result_with_a_denied_shell() -> None:
    got = SPECS["qwen-code"].parse_result(QWEN_DENIED, 0)
    assert (got.is_error, got.subtype, got.summary, got.num_turns) == (False, "success", "Done.", 2)
    assert (got.input_tokens, got.output_tokens) == (22, 6)
    assert got.permission_denials == ("run_shell_command",)
    assert got.parse_error is None


def test_a_qwen_api_error_with_exit_0_is_an_error() -> None:
    got = SPECS["qwen-code"].parse_result(QWEN_API_ERROR, 0)
    assert (got.is_error, got.subtype, got.summary) == (
        True,
        "api_error",
        "[API Error: 400 scripted failure]",
    )
    cut = SPECS["qwen-code"].parse_result(QWEN_DENIED[: len(QWEN_DENIED) // 2], 0)
    assert cut.summary is None
    assert cut.parse_error == "no result object in the output"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096) | st.text(max_size=2048).map(str.encode), st.none() | st.integers(-300, 300))
def test_any_output_gives_a_result(output: bytes, code: int | None) -> None:
    for spec in SPECS.values():
        got = spec.parse_result(output, code)
        assert got.is_error is (code != 0 or got.is_error)
        json.dumps(got.to_data())
