"""How each agent CLI is driven: one frozen spec per policy adapter name, in :data:`SPECS`.

A spec says which executable to find, its argv, how the prompt reaches it (a
file path in argv, or standard input: never the prompt's text in argv or env,
where ``ps`` and crash reports would show it), how the tools the gate granted
map onto the CLI's own switches (defence in depth: the box is the real bound),
where the model base URL and key go, and how its version and result are read.

:func:`build_invocation` turns a spec, the policy's agent and the gate's grant
into an :class:`Invocation` (argv, env, stdin). It is pure but for looking the
executable up on the PATH it is given; a missing one is :class:`AgentMissing`.

Marks on the specs: [observed] was run here (claude-code 2.1.197, codex 0.171.0,
aider 0.86.2 and mini-swe-agent 2.4.6, each against a scripted model on loopback); [documented] is what the
CLI's documentation says, not run; [inferred] is neither, and needs a real run
before anyone relies on it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

import yaml

from baton import codes
from baton.errors import BatonError
from worker.policy import MODEL_KEYS, Agent
from worker.runner import results
from worker.runner.bwrap import AGENT_HOME
from worker.runner.installed import SYSTEM_PATH, install_dirs, parse_version, run_version, script_agent_source
from worker.runner.results import AgentResult, ResultFormat

AGENT_MISSING = codes.AGENT_MISSING

#: For CLIs that read the prompt on stdin but want a positional prompt too. Fixed text, never issue text.
STDIN_POINTER = "Follow the task given on standard input."
#: A model base URL: scheme, host, optional port and path; nothing a TOML or JSON string must escape.
_BASE_URL = re.compile(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/\-]*)?")


class PromptVia(StrEnum):
    FILE = "file"  # {prompt_file} in argv
    STDIN = "stdin"  # the prompt's bytes on standard input
    FILE_AND_STDIN = "file+stdin"  # both (the generic command adapter)
    HOME_FILE = "home-file"  # in a settings file the spec's home_files hook writes (Context.prompt_text)


class AgentMissing(BatonError):
    """The agent's executable is not on the PATH the runner searched."""

    def __init__(self, adapter: str, executable: str, install_hint: str) -> None:
        super().__init__(
            AGENT_MISSING,
            f"the {adapter} agent needs {executable}, which is not on the runner's PATH; install it "
            f"({install_hint}) or fix the policy",
        )
        self.adapter = adapter
        self.executable = executable
        self.install_hint = install_hint


@dataclass(frozen=True)
class Invocation:
    """What the box runs. argv[0] is absolute when it was looked up; env holds only what Baton sets
    (the box adds HOME and the proxy settings); stdin is fed to the process (None: /dev/null);
    ``home_files`` are written into the box's HOME before it starts (path relative to HOME -> text)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    stdin: bytes | None
    home_files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a spec's ``configure`` hook may use."""

    agent: Agent
    granted: frozenset[str]
    model_base_url: str | None  # the model gateway's root as the box sees it, no trailing slash
    key_env: str | None  # the env name that holds this CLI's model key (the run's placeholder), if any
    workspace: str = "/workspace"  # the task's worktree as the box sees it
    #: The prompt's text, for a CLI that takes its task only in a settings file (mini-swe-agent).
    prompt_text: str | None = None


#: (extra argv, extra env) for what a flat template cannot say (a TOML or JSON config value).
Configure = Callable[[Context], tuple[tuple[str, ...], Mapping[str, str]]]
#: Files a CLI reads from its HOME (a settings file no flag replaces): path relative to HOME -> text.
HomeFiles = Callable[[Context], Mapping[str, str]]
#: A relative path with no empty, ``.`` or ``..`` part: what ``home_files`` and ``result_file`` may name.
_RELATIVE = re.compile(r"(?!\.{1,2}(/|$))[A-Za-z0-9_.\-]+(/(?!\.{1,2}(/|$))[A-Za-z0-9_.\-]+)*")


@dataclass(frozen=True)
class AdapterSpec:
    """One CLI. Placeholders in ``argv``: ``{prompt_file}``, ``{max_turns}``, ``{workspace}``."""

    name: str
    executable: str | None  # None: argv is the policy's command
    install_hint: str
    argv: tuple[str, ...]
    prompt_via: PromptVia
    result_format: ResultFormat
    #: Asked on the host, outside the box: empty for anything Baton did not choose (a policy's command).
    version_argv: tuple[str, ...] = ("--version",)
    #: The version the adapter was verified with (.ci/agent-clis installs it; `baton doctor` compares).
    pinned: str | None = None
    #: Baton tool -> the CLI's own tool names: granted ones follow allow_flag, the rest deny_flag.
    tool_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allow_flag: str | None = None
    deny_flag: str | None = None
    #: Extra argv per Baton tool, when granted or when not.
    when_granted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    when_denied: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Last in argv, after the tool switches and the configure hook's argv.
    trailing: tuple[str, ...] = ()
    fixed_env: Mapping[str, str] = field(default_factory=dict)
    #: (env name, path) set to the model gateway's root plus path (``/anthropic``: the provider's place
    #: on the gateway) when the agent has a model.
    base_url_env: tuple[tuple[str, str], ...] = ()
    #: Env names this CLI reads a model key from, preferred first.
    key_envs: tuple[str, ...] = ()
    #: Where the key goes when the policy names none of ``key_envs`` (the CLI will not start without one).
    placeholder_key_env: str | None = None
    #: Look the executable up here, not on the given PATH (the script agent wants the system python3).
    system_path: str | None = None
    #: The script agent: stdin carries its program, not the prompt.
    stdin_program: bool = False
    configure: Configure | None = None
    home_files: HomeFiles | None = None
    #: The policy tools this CLI has at all. Each is denied by the invocation when not granted,
    #: unless the catalogue counts it as the CLI's own (``worker.policy.INHERENT_TOOLS``): the
    #: adapter tests hold every spec to that. Empty: not a CLI Baton knows the tools of.
    repertoire: tuple[str, ...] = ()
    #: Where the CLI writes its own account of the run, relative to HOME (read instead of stdout).
    result_file: str | None = None

    def __post_init__(self) -> None:
        for name in ("tool_names", "when_granted", "when_denied", "fixed_env"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        if self.result_file is not None and not _RELATIVE.fullmatch(self.result_file):
            raise ValueError(f"{self.name}: result_file {self.result_file!r} is not a plain relative path")

    def parse_result(self, stdout: bytes | str, exit_code: int | None) -> AgentResult:
        """The agent's own account of its run; never raises (see :mod:`worker.runner.results`)."""
        return results.parse(self.result_format, stdout, exit_code)


def max_turns(agent: Agent) -> int:
    """A turn bound from the timeout (one turn per 20 s, 10 to 200); the timeout stays the real bound."""
    return max(10, min(200, agent.timeout // 20))


def locate(spec: AdapterSpec, agent: Agent, search_path: str) -> str:
    """The executable, looked up on ``search_path`` (or the spec's system path).

    A policy command whose argv[0] has a slash is used as written: an absolute one
    must be executable here; a relative one is resolved in the workspace, in the box.
    """
    name = spec.executable if spec.executable is not None else (agent.command or ("",))[0]
    if not name:
        raise AgentMissing(spec.name, "a command", "give the agent command: [...] in the org policy")
    if "/" in name:
        if os.path.isabs(name) and not os.access(name, os.X_OK):
            raise AgentMissing(spec.name, name, spec.install_hint)
        return name
    found = shutil.which(name, path=spec.system_path or search_path)
    if found is None:
        raise AgentMissing(spec.name, name, spec.install_hint)
    return os.path.abspath(found)


def build_invocation(
    spec: AdapterSpec,
    agent: Agent,
    *,
    granted_tools: Collection[str],
    model_base_url: str | None,
    env_values: Mapping[str, str],
    prompt_path: str,
    workspace: str,
    search_path: str,
    prompt_text: str | None = None,
    model_key: str | None = None,
) -> Invocation:
    """argv, env and stdin for one run.

    ``env_values``: values of the env names the policy passes; only names the agent
    lists are used, and they never override Baton's own settings. A model key's name
    (``MODEL_KEYS``) never gets its value here, whatever ``env_values`` holds: with a
    model (``model_base_url``, the gateway's root in the box) it gets ``model_key``,
    the run's placeholder, and without one it is left out. ``prompt_path`` and
    ``workspace`` are paths as seen inside the box. ``prompt_text`` is required by
    every adapter that reads the prompt on stdin (a ValueError says so).
    """
    executable = locate(spec, agent, search_path)
    base = _base_url(model_base_url)
    if (base is None) != (model_key is None):
        raise ValueError("model_base_url and model_key go together: the gateway and its placeholder")
    passed = _passed_env(agent, env_values)
    keys = [name for name in agent.env if name in MODEL_KEYS]
    key_env = next((name for name in spec.key_envs if name in keys), spec.placeholder_key_env)
    granted = frozenset(granted_tools)

    values = {"{prompt_file}": prompt_path, "{max_turns}": str(max_turns(agent)), "{workspace}": workspace}
    template = spec.argv if spec.executable is not None else (agent.command or ())[1:]
    argv = [executable, *(_substitute(token, values) for token in template), *_tool_switches(spec, granted)]
    env = dict(passed)
    if base is not None and model_key is not None:
        env.update({name: base + path for name, path in spec.base_url_env})
        env.update(dict.fromkeys([*keys, *([key_env] if key_env else [])], model_key))
    else:
        key_env = None
    env.update(spec.fixed_env)
    context = Context(agent, granted, base, key_env, workspace=workspace, prompt_text=prompt_text)
    if spec.configure is not None:
        extra_argv, extra_env = spec.configure(context)
        argv += extra_argv
        env.update(extra_env)
    argv += spec.trailing
    env["PATH"] = f"{os.path.dirname(executable)}:{SYSTEM_PATH}" if os.path.isabs(executable) else SYSTEM_PATH
    files = dict(spec.home_files(context)) if spec.home_files is not None else {}
    for path in files:
        if not _RELATIVE.fullmatch(path):
            raise ValueError(f"{spec.name}: home file {path!r} is not a plain relative path")
    return Invocation(
        tuple(argv),
        MappingProxyType(dict(sorted(env.items()))),
        _stdin(spec, prompt_text),
        MappingProxyType(dict(sorted(files.items()))),
    )


def version(spec: AdapterSpec, executable: str) -> str | None:
    """The CLI's version (``claude --version`` -> ``2.1.197``), asked on the host; None if it will not say."""
    return run_version([executable, *spec.version_argv] if spec.version_argv else [])


def _base_url(url: str | None) -> str | None:
    if url is None:
        return None
    if _BASE_URL.fullmatch(url) is None:
        raise ValueError(f"{url!r} is not a model base URL like http://host:port (no query or quotes)")
    return url.rstrip("/")


def _passed_env(agent: Agent, env_values: Mapping[str, str]) -> dict[str, str]:
    passed: dict[str, str] = {}
    for name in agent.env:
        if name in env_values and name not in MODEL_KEYS:
            value = env_values[name]
            if not isinstance(value, str) or "\x00" in value:
                raise ValueError(f"the value of {name} cannot go in an environment (not text, or has a NUL)")
            passed[name] = value
    return passed


def _substitute(token: str, values: Mapping[str, str]) -> str:
    for placeholder, value in values.items():
        token = token.replace(placeholder, value)
    return token


def _tool_switches(spec: AdapterSpec, granted: frozenset[str]) -> list[str]:
    allowed = [n for tool, names in spec.tool_names.items() if tool in granted for n in names]
    denied = [n for tool, names in spec.tool_names.items() if tool not in granted for n in names]
    argv: list[str] = []
    if spec.allow_flag is not None and allowed:
        argv += [spec.allow_flag, ",".join(allowed)]
    if spec.deny_flag is not None and denied:
        argv += [spec.deny_flag, ",".join(denied)]
    for tool, extra in spec.when_granted.items():
        argv += extra if tool in granted else ()
    for tool, extra in spec.when_denied.items():
        argv += extra if tool not in granted else ()
    return argv


def _stdin(spec: AdapterSpec, prompt_text: str | None) -> bytes | None:
    if spec.stdin_program:
        return script_agent_source()
    if spec.prompt_via in (PromptVia.FILE, PromptVia.HOME_FILE):
        return None
    if prompt_text is None:
        raise ValueError(f"the {spec.name} adapter reads the prompt on standard input: pass prompt_text")
    return prompt_text.encode("utf-8")


# --- The table ---------------------------------------------------------------------------------------

#: Model key env name -> provider name, for CLIs that must be told which provider a key is for.
_PROVIDER_OF_KEY = {"ANTHROPIC_API_KEY": "anthropic", "OPENAI_API_KEY": "openai", "GOOGLE_API_KEY": "google",
                    "GEMINI_API_KEY": "google", "OPENROUTER_API_KEY": "openrouter", "GROQ_API_KEY": "groq",
                    "MISTRAL_API_KEY": "mistral", "DEEPSEEK_API_KEY": "deepseek"}  # fmt: skip
_ANY_KEY = tuple(_PROVIDER_OF_KEY)


def _codex_provider(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    """The model gateway as a Codex provider [observed: OPENAI_BASE_URL is not honoured, and
    wire_api="chat" is rejected]; env_key names the variable holding the placeholder, sent as Bearer."""
    if context.model_base_url is None:
        return (), {}
    fields = ['name="baton"', f'base_url="{context.model_base_url}/openai/v1"', 'wire_api="responses"']
    if context.key_env is not None:
        fields.append(f'env_key="{context.key_env}"')
    return ("-c", "model_provider=baton", "-c", "model_providers.baton={" + ",".join(fields) + "}"), {}


#: Baton tool -> OpenCode permission keys [observed 1.18.33: a denied key's tools are not offered at all,
#: and a call to one comes back "Model tried to call unavailable tool 'bash'"]; ``edit`` covers write,
#: edit and apply_patch; ``list`` has no tool in 1.18.33 but is a known key.
_OPENCODE_PERMISSIONS = {"read_repo": ("read",), "search_repo": ("glob", "grep", "list"),
                         "edit_files": ("edit",), "run_shell": ("bash",), "web_fetch": ("webfetch",),
                         "web_search": ("websearch",)}  # fmt: skip
#: Claude Code's WebSearch, Codex's web search and Gemini CLI's google_web_search are run by the
#: provider (a server tool), not by the CLI: they follow ``model_server_tools``, which the model
#: gateway also needs before it passes such a request on.
_CLAUDE_TOOLS = {"read_repo": ("Read",), "search_repo": ("Glob", "Grep"),
                 "edit_files": ("Edit", "Write", "NotebookEdit"), "run_shell": ("Bash",),
                 "web_fetch": ("WebFetch",), "model_server_tools": ("WebSearch",)}  # fmt: skip


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: Key env -> (gateway path and API version, OpenCode provider package, model) for the providers OpenCode
#: reaches through the gateway. [observed 1.18.33] The three packages are bundled in the binary (no npm
#: download, works offline): @ai-sdk/openai-compatible streams Chat Completions from
#: {baseURL}/chat/completions with Bearer, @ai-sdk/anthropic {baseURL}/messages with x-api-key, and
#: @ai-sdk/google {baseURL}/models/M:streamGenerateContent with x-goog-api-key. The models are Baton's
#: choice (a policy cannot name one yet), not checked against the vendors.
_OPENCODE_PROVIDERS = {
    "OPENAI_API_KEY": ("openai/v1", "@ai-sdk/openai-compatible", "gpt-5.5"),
    "ANTHROPIC_API_KEY": ("anthropic/v1", "@ai-sdk/anthropic", "claude-sonnet-4-5"),
    "MISTRAL_API_KEY": ("mistral/v1", "@ai-sdk/openai-compatible", "devstral-medium-latest"),
    "DEEPSEEK_API_KEY": ("deepseek/v1", "@ai-sdk/openai-compatible", "deepseek-chat"),
    "GROQ_API_KEY": ("groq/v1", "@ai-sdk/openai-compatible", "openai/gpt-oss-120b"),
    "OPENROUTER_API_KEY": ("openrouter/v1", "@ai-sdk/openai-compatible", "openai/gpt-5.5"),
    "GEMINI_API_KEY": ("gemini/v1beta", "@ai-sdk/google", "gemini-3.5-flash"),
    "GOOGLE_API_KEY": ("gemini/v1beta", "@ai-sdk/google", "gemini-3.5-flash"),
}
#: Nothing listens on the box's loopback but Baton's two forwarders, so a connection here is refused at
#: once [observed 1.18.33: its background fetch of @opencode-ai/plugin from the npm registry, which no
#: flag stops, then gives up silently and the run goes on; through the egress proxy it would show as a
#: refused host in every run's egress].
_NO_REGISTRY = "http://127.0.0.1:9/"
_OPENCODE_ENV = {"OPENCODE_DISABLE_PROJECT_CONFIG": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                 "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
                 "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "npm_config_registry": _NO_REGISTRY}  # fmt: skip


def _opencode_config(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    """The run's whole config in OPENCODE_CONFIG_CONTENT, with the repository's own config off
    (OPENCODE_DISABLE_PROJECT_CONFIG): every mapped permission explicit, one provider "baton" at the
    gateway for both the model and the small model, and the repository's AGENTS.md kept by path."""
    permission = {name: "allow" if tool in context.granted else "deny"
                  for tool, names in _OPENCODE_PERMISSIONS.items() for name in names}  # fmt: skip
    permission["external_directory"] = "deny"
    config: dict[str, object] = {"$schema": "https://opencode.ai/config.json", "autoupdate": False,
                                 "share": "disabled", "permission": permission,
                                 "instructions": [f"{context.workspace}/AGENTS.md"]}  # fmt: skip
    if context.model_base_url is not None and context.key_env is not None:
        path, package, model = _OPENCODE_PROVIDERS.get(context.key_env, _OPENCODE_PROVIDERS["OPENAI_API_KEY"])
        base = f"{context.model_base_url}/{path}"
        options = {"baseURL": base, "apiKey": "{env:" + context.key_env + "}"}
        config["provider"] = {"baton": {"npm": package, "name": "Baton model gateway", "options": options,
                                        "models": {model: {}}}}  # fmt: skip
        config["model"] = config["small_model"] = f"baton/{model}"
    return (), {"OPENCODE_CONFIG_CONTENT": json.dumps(config, sort_keys=True)}


#: The model Aider and mini-swe-agent ask for unless the policy passes AIDER_MODEL or MSWEA_MODEL_NAME:
#: one both know [observed: aider's settings for it, litellm's bundled price map] and the gateway prices.
DEFAULT_OPENAI_MODEL = "openai/gpt-5-mini"
_MINI_CONFIG = ".baton/mini.yaml"
_MINI_TRAJECTORY = ".baton/traj.json"


def _chosen_model(context: Context, env_name: str) -> str | None:
    """None when the policy passes ``env_name`` (its value names the model), else Baton's default."""
    return None if env_name in context.agent.env else DEFAULT_OPENAI_MODEL


def _aider_model(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    """The model and the gateway as flags, which win over the workspace's .env and .aider.conf.yml
    [observed: a repository's .env OPENAI_API_BASE overrides the environment Baton sets]."""
    argv: list[str] = []
    model = _chosen_model(context, "AIDER_MODEL")
    if model is not None:
        argv += ["--model", model]
    if context.model_base_url is not None:
        argv += ["--openai-api-base", f"{context.model_base_url}/openai/v1"]
    return tuple(argv), {}


def _aider_home(context: Context) -> Mapping[str, str]:
    """Aider fetches its own copy of litellm's price map from raw.githubusercontent.com unless this
    cache is under a day old and not empty [observed, even with LITELLM_LOCAL_MODEL_COST_MAP]: a
    fresh one that knows no model makes it use the map bundled with litellm."""
    note = {"_baton": "written by Baton so aider uses litellm's bundled model map, not a download"}
    return {".aider/caches/model_prices_and_context_window.json": json.dumps(note)}


def _mini_model(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    model = _chosen_model(context, "MSWEA_MODEL_NAME")
    return (), ({"MSWEA_MODEL_NAME": model} if model is not None else {})


#: mini-swe-agent's prompts (its own config's are replaced whole): the bash tool, and how to finish.
_MINI_SYSTEM = "You are a software engineer working in the repository in your current directory.\n"
_MINI_INSTANCE = (
    "{{task}}\n\n"
    "You act only through the bash tool: each call runs in a new shell in the repository; read, search "
    "and edit files with ordinary commands. When the task is done, run exactly "
    "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own, as a command of its own.\n"
)


def _mini_config(context: Context) -> Mapping[str, str]:
    """One config file with every setting and the task: the prompt never goes in argv. Its turn and
    time limits follow the agent's timeout (the box's timeout stays the real bound); cost is the
    gateway's to cap."""
    timeout = context.agent.timeout
    config = {
        "agent": {
            "agent_class": "interactive",
            "mode": "yolo",
            "confirm_exit": False,
            "step_limit": max_turns(context.agent),
            "cost_limit": 0,
            "wall_time_limit_seconds": timeout,
            "system_template": _MINI_SYSTEM,
            "instance_template": _MINI_INSTANCE,
        },
        "environment": {
            "environment_class": "local",
            "timeout": min(timeout, 600),
            "env": {"PAGER": "cat", "MANPAGER": "cat", "GIT_PAGER": "cat"},
        },
        "model": {"model_class": "litellm", "model_kwargs": {"drop_params": True}},
        "run": {"task": context.prompt_text or ""},
    }
    return {_MINI_CONFIG: yaml.safe_dump(config, allow_unicode=True, sort_keys=False, width=1 << 20)}


#: Gemini CLI 0.61.0's tool names per Baton tool [observed: the functionDeclarations it sends]; its
#: background-shell readers go with the shell.
_GEMINI_TOOLS = {"read_repo": ("read_file", "list_directory"), "search_repo": ("grep_search", "glob"),
                 "edit_files": ("write_file", "replace"),
                 "run_shell": ("run_shell_command", "list_background_processes", "read_background_output"),
                 "web_fetch": ("web_fetch",), "model_server_tools": ("google_web_search",)}  # fmt: skip
#: The admin-tier policy file Gemini CLI is pointed at, relative to HOME.
_GEMINI_POLICY = ".gemini/baton-policy.toml"
_GEMINI_POLICY_PATH = f"{AGENT_HOME}/{_GEMINI_POLICY}"
#: Without a model Gemini CLI first asks a lite model to route [observed]; 0.61.0's own default model.
GEMINI_DEFAULT_MODEL = "gemini-2.5-pro"
#: Qwen Code 0.15.10's tool names per Baton tool [observed]; ``monitor`` runs a shell command.
_QWEN_TOOLS = {"read_repo": ("read_file", "list_directory"), "search_repo": ("grep_search", "glob"),
               "edit_files": ("edit", "write_file"), "run_shell": ("run_shell_command", "monitor"),
               "web_fetch": ("web_fetch",)}  # fmt: skip
#: Qwen Code's settings file (its system tier), relative to HOME.
_QWEN_SETTINGS = ".qwen/baton-settings.json"
#: Qwen Code: an empty allow-list of MCP servers (even one a repository names "" stays off) [observed].
_NO_MCP = ("--allowed-mcp-server-names", "")
#: Qwen Code will not start without a model name; the policy may pass its own OPENAI_MODEL.
QWEN_DEFAULT_MODEL = "gpt-5.4-mini"


def _denied(table: Mapping[str, tuple[str, ...]], granted: frozenset[str]) -> list[str]:
    return [name for tool, names in table.items() if tool not in granted for name in names]


def _gemini_model(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    """GEMINI_MODEL unless the policy passes its own (so no routing call to a model it did not pick)."""
    return (), ({} if "GEMINI_MODEL" in context.agent.env else {"GEMINI_MODEL": GEMINI_DEFAULT_MODEL})


def _gemini_home(context: Context) -> Mapping[str, str]:
    """User settings (the auth type the base URL needs, no usage statistics, one attempt per call) and
    the admin-tier policy that denies every tool not granted (admin rules outrank a repository's)."""
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"maxAttempts": 1, "enableAutoUpdate": False,
                            "enableAutoUpdateNotification": False}}  # fmt: skip
    denied = _denied(_GEMINI_TOOLS, context.granted)
    policy = "# Baton: every tool the policy did not grant is denied (taken out of the model's view).\n"
    if denied:
        policy += f'[[rule]]\ntoolName = {json.dumps(denied)}\ndecision = "deny"\npriority = 999\n'
    return {".gemini/settings.json": json.dumps(settings, indent=2) + "\n", _GEMINI_POLICY: policy}


def _qwen_model(context: Context) -> tuple[tuple[str, ...], Mapping[str, str]]:
    return (), ({} if "OPENAI_MODEL" in context.agent.env else {"OPENAI_MODEL": QWEN_DEFAULT_MODEL})


def _qwen_home(context: Context) -> Mapping[str, str]:
    """Baton's settings as Qwen Code's *system* settings (QWEN_CODE_SYSTEM_SETTINGS_PATH), which
    override the user's and the repository's: no usage statistics, no retries, no memory-extraction
    call, no hooks (a repository's .qwen/settings.json hooks run otherwise [observed]), and
    permissions.deny for every tool not granted (deny outranks any allow, in every scope)."""
    settings = {"privacy": {"usageStatisticsEnabled": False},
                "general": {"enableAutoUpdate": False},
                "model": {"generationConfig": {"maxRetries": 0}},
                "memory": {"enableManagedAutoMemory": False},
                "disableAllHooks": True,
                "permissions": {"deny": _denied(_QWEN_TOOLS, context.granted)}}  # fmt: skip
    return {_QWEN_SETTINGS: json.dumps(settings, indent=2) + "\n"}


_SPECS = (
    AdapterSpec(
        # [observed] prompt on stdin with -p and no positional; the tool lists remove Bash, WebFetch and
        # WebSearch from what the model is offered; --setting-sources user and --strict-mcp-config stop a
        # repository's .claude/settings.json hooks and .mcp.json servers (without them a repository's
        # SessionStart hook ran in -p mode); no key at all -> "Not logged in", rc=1.
        name="claude-code",
        executable="claude",
        install_hint="npm install -g @anthropic-ai/claude-code@2.1.197",
        pinned="2.1.197",
        argv=_words(
            "-p --output-format json --permission-mode acceptEdits --max-turns {max_turns} "
            "--no-session-persistence --setting-sources user --strict-mcp-config"
        ),
        prompt_via=PromptVia.STDIN,
        result_format=ResultFormat.CLAUDE_JSON,
        tool_names=_CLAUDE_TOOLS,
        allow_flag="--allowedTools",
        deny_flag="--disallowedTools",
        fixed_env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        base_url_env=(("ANTHROPIC_BASE_URL", "/anthropic"),),
        repertoire=tuple(_CLAUDE_TOOLS),
        key_envs=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
        placeholder_key_env="ANTHROPIC_API_KEY",
    ),
    AdapterSpec(
        # [observed] `exec ... -` reads the prompt on stdin; the three --disable flags and
        # analytics.enabled=false leave only model traffic; runs outside a git repository. Codex's shell
        # (exec_command) is also how it edits files, so run_shell has no switch here: the box bounds it.
        # web_search="disabled"|"live" is accepted [observed]; "live" is the Responses API's server-side
        # web_search tool, so it follows model_server_tools.
        name="codex",
        executable="codex",
        install_hint="npm install -g @openai/codex@0.171.0",
        pinned="0.171.0",
        argv=_words(
            "exec --json --skip-git-repo-check -c analytics.enabled=false --disable plugins "
            "--disable remote_plugin --disable apps --dangerously-bypass-approvals-and-sandbox"
        ),
        prompt_via=PromptVia.STDIN,
        result_format=ResultFormat.CODEX_JSONL,
        when_granted={"model_server_tools": ("-c", 'web_search="live"')},
        when_denied={"model_server_tools": ("-c", 'web_search="disabled"')},
        trailing=("-",),
        repertoire=("read_repo", "search_repo", "edit_files", "run_shell", "model_server_tools"),
        key_envs=("OPENAI_API_KEY", "CODEX_API_KEY"),
        placeholder_key_env="OPENAI_API_KEY",
        configure=_codex_provider,
    ),
    AdapterSpec(
        # [observed 0.61.0] `-p` with the prompt on stdin runs headless ("appended to input on stdin");
        # GEMINI_API_KEY is sent as x-goog-api-key to GOOGLE_GEMINI_BASE_URL + /v1beta/models/
        # M:streamGenerateContent?alt=sse; without settings' security.auth.selectedType it exits 41;
        # without a model it first asks a lite model to route; headless in an untrusted folder it exits
        # 55, so --skip-trust; the approval mode "default" still asks (= refuses, headless) for
        # run_shell_command even when a policy rule allows it, hence yolo, and an admin-tier policy file
        # (--admin-policy) denies each tool not granted: a global deny takes the tool out of the
        # request's functionDeclarations, a call to it anyway gets 'Tool "…" not found', and it holds
        # against a repository's .gemini/settings.json (tools.core/tools.allowed) [observed]. Its
        # google_web_search asks the provider to search (a server tool): model_server_tools. With
        # usageStatisticsEnabled false and maxAttempts 1 the only traffic is the model's. Its own
        # sandbox (-s) is off by default. Errors: exit code = HTTP status mod 256 (400 -> 144) and the
        # error as JSON on stderr, stdout empty.
        name="gemini",
        executable="gemini",
        install_hint="npm install -g @google/gemini-cli@0.61.0",
        pinned="0.61.0",
        argv=(
            *_words("--output-format json --skip-trust --approval-mode yolo --admin-policy"),
            _GEMINI_POLICY_PATH,
        ),
        prompt_via=PromptVia.STDIN,
        result_format=ResultFormat.GEMINI_JSON,
        trailing=("--prompt", STDIN_POINTER),
        fixed_env={"GEMINI_CLI_HOME": AGENT_HOME},
        base_url_env=(("GOOGLE_GEMINI_BASE_URL", "/gemini"),),
        key_envs=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        placeholder_key_env="GEMINI_API_KEY",
        configure=_gemini_model,
        home_files=_gemini_home,
        repertoire=tuple(_GEMINI_TOOLS),
    ),
    AdapterSpec(
        # [observed 0.15.10] a Gemini CLI fork on OpenAI Chat Completions: OPENAI_API_KEY (Bearer),
        # OPENAI_BASE_URL (+ /chat/completions, always stream:true) and OPENAI_MODEL, all three or it
        # exits 1 "No auth type is selected"; settings go in its system tier, which outranks a
        # repository's .qwen/settings.json (it rewrites the file and keeps a .orig). A repository's
        # hooks and MCP servers run unless disableAllHooks (system tier) and --allowed-mcp-server-names
        # "" (a workspace's mcp.allowed beats an empty system-tier list). The positional prompt is
        # appended to stdin. It ignores NO_PROXY, so
        # its model calls reach the gateway through the box's proxy. settings' permissions.deny takes a
        # tool out of the request's tools and refuses a call to it anyway ("Matching deny rule"), listed
        # in the result's permission_denials; `monitor` starts a shell command, so it goes with
        # run_shell. Without memory.enableManagedAutoMemory false every run ends with a second,
        # "memory extraction" model call; without usageStatisticsEnabled false it calls an analytics
        # host. In json mode a model error still exits 0 with is_error false (the result text starts
        # "[API Error:"); HTTP 500 is retried for over a minute whatever maxRetries says.
        name="qwen-code",
        executable="qwen",
        install_hint="npm install -g @qwen-code/qwen-code@0.15.10",
        pinned="0.15.10",
        argv=(*_words("--output-format json --approval-mode yolo --max-session-turns {max_turns}"), *_NO_MCP),
        prompt_via=PromptVia.STDIN,
        result_format=ResultFormat.QWEN_JSON,
        trailing=(STDIN_POINTER,),
        fixed_env={
            "QWEN_HOME": f"{AGENT_HOME}/.qwen",
            "QWEN_CODE_SYSTEM_SETTINGS_PATH": f"{AGENT_HOME}/{_QWEN_SETTINGS}",
        },
        base_url_env=(("OPENAI_BASE_URL", "/openai/v1"),),
        key_envs=("OPENAI_API_KEY",),
        placeholder_key_env="OPENAI_API_KEY",
        configure=_qwen_model,
        home_files=_qwen_home,
        repertoire=tuple(_QWEN_TOOLS),
    ),
    AdapterSpec(
        # [observed 0.86.2] --message-file runs one message and exits (rc 0 even when every model call
        # failed: the result parser reads its output); Baton's workspace has no .git, so --no-git (no
        # commits, no repo map: aider sees only what the model is told). No tools: edits come back in
        # the reply text ("whole" listing or SEARCH/REPLACE), one POST /v1/chat/completions (streamed,
        # Bearer) per message. Without --no-check-update, --analytics-disable and the bundled price map
        # (LITELLM_LOCAL_MODEL_COST_MAP) it calls pypi.org, an analytics host and GitHub. It reads
        # .aider.conf.yml and .env from the workspace (the .env with override): the flags here win over
        # both, --openai-api-base included, and --load /dev/null stops a repository's `load:` running
        # /run commands. The model's shell suggestions are never run (--yes-always answers no to them
        # by itself; --no-suggest-shell-commands drops the invitation from the system prompt);
        # run_shell is still counted as its own (see INHERENT_TOOLS). Chat and input history would be
        # written into the workspace: they go to /dev/null.
        name="aider",
        executable="aider",
        install_hint="python -m pip install aider-chat==0.86.2 (in a virtual environment of its own)",
        pinned="0.86.2",
        argv=_words(
            "--message-file {prompt_file} --yes-always --no-git --no-auto-commits --no-dirty-commits "
            "--no-check-update --analytics-disable --no-analytics --no-show-release-notes "
            "--no-show-model-warnings --no-pretty --no-fancy-input --disable-playwright "
            "--no-suggest-shell-commands --no-auto-lint --no-auto-test --no-notifications --no-gui "
            "--no-watch-files --no-copy-paste --load /dev/null --chat-history-file /dev/null "
            "--input-history-file /dev/null --no-restore-chat-history"
        ),
        prompt_via=PromptVia.FILE,
        result_format=ResultFormat.AIDER_TEXT,
        when_denied={"web_fetch": ("--no-detect-urls",), "edit_files": ("--chat-mode", "ask")},
        fixed_env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        base_url_env=(("OPENAI_API_BASE", "/openai/v1"),),
        repertoire=("edit_files", "run_shell", "web_fetch"),
        key_envs=("OPENAI_API_KEY",),
        placeholder_key_env="OPENAI_API_KEY",
        configure=_aider_model,
        home_files=_aider_home,
    ),
    AdapterSpec(
        # [observed 2.4.6] `mini -c FILE -o FILE` with every setting, the task included (run.task), in
        # one config file in HOME: -c replaces the built-in config, and a relative -c name would be
        # looked up in the workspace first. MSWEA_CONFIGURED (else a setup wizard, rc 1 without a
        # TTY), MSWEA_COST_TRACKING=ignore_errors (else an unpriced model is a crash),
        # MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1 (else 10 tries with back-off). Non-streaming
        # POST /v1/chat/completions, one tool (bash): the shell is how it reads, searches and edits,
        # so all four count as its own. Its trajectory (JSON: info.exit_status, model_stats,
        # messages) is the result; a model error ends rc 1 with exit_status the exception's name
        # (typer's rich traceback of it took ~6 s more: _TYPER_STANDARD_TRACEBACK).
        name="mini-swe-agent",
        executable="mini",
        install_hint="python -m pip install mini-swe-agent==2.4.6 (in a virtual environment of its own)",
        pinned="2.4.6",
        argv=(
            "-c",
            f"{AGENT_HOME}/{_MINI_CONFIG}",
            "-o",
            f"{AGENT_HOME}/{_MINI_TRAJECTORY}",
            "--yolo",
            "--exit-immediately",
        ),
        prompt_via=PromptVia.HOME_FILE,
        result_format=ResultFormat.MINI_TRAJECTORY,
        version_argv=("--help",),
        fixed_env={
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "_TYPER_STANDARD_TRACEBACK": "1",
        },
        base_url_env=(("OPENAI_API_BASE", "/openai/v1"),),
        repertoire=("read_repo", "search_repo", "edit_files", "run_shell"),
        key_envs=("OPENAI_API_KEY",),
        placeholder_key_env="OPENAI_API_KEY",
        configure=_mini_model,
        home_files=_mini_config,
        result_file=_MINI_TRAJECTORY,
    ),
    AdapterSpec(
        # [observed 1.18.33] `run --format json --title T MESSAGE` with the prompt on stdin: OpenCode reads
        # stdin to its end and sends `"MESSAGE"\nSTDIN` as one user message; JSON events on stdout, errors
        # too (one {"type":"error"} line, rc 1). --title skips the title request (a tool-less call to the
        # small model). Edits need no approval flag; a permission left at "ask" is auto-rejected in `run`,
        # never waited on. A repository's opencode.json or .opencode/ (agents, plugins, custom tools) is
        # skipped with OPENCODE_DISABLE_PROJECT_CONFIG=1: without it a repository's
        # agent.build.permission.bash="allow" overrides the top-level deny, and its plugins are code run
        # inside the CLI. OPENCODE_DISABLE_MODELS_FETCH=1 stops the fetch of models.dev. It writes under
        # ~/.config/opencode, ~/.local/share/opencode (its database, logs, a snapshot git repository of
        # the worktree), ~/.local/state/opencode and ~/.cache/opencode: the box's HOME.
        name="opencode",
        executable="opencode",
        install_hint="npm install -g opencode-ai@1.18.33",
        pinned="1.18.33",
        argv=("run", "--format", "json", "--title", "baton"),
        prompt_via=PromptVia.STDIN,
        result_format=ResultFormat.OPENCODE_JSONL,
        trailing=(STDIN_POINTER,),
        fixed_env=_OPENCODE_ENV,
        repertoire=tuple(_OPENCODE_PERMISSIONS),
        key_envs=tuple(_OPENCODE_PROVIDERS),
        placeholder_key_env="OPENAI_API_KEY",
        configure=_opencode_config,
    ),
    AdapterSpec(
        # The policy's own argv, {prompt_file} substituted, the prompt on stdin as well. Never run on the
        # host for a version: nothing says its --version only prints one.
        name="command",
        executable=None,
        install_hint="install the program the policy's command names, on the runner's PATH",
        argv=(),
        prompt_via=PromptVia.FILE_AND_STDIN,
        result_format=ResultFormat.TEXT,
        version_argv=(),
        base_url_env=(("BATON_MODEL_BASE_URL", ""),),
        placeholder_key_env="BATON_MODEL_KEY",
    ),
    AdapterSpec(
        # Baton's deterministic script agent (script_agent.py), its program on stdin to the system
        # python3 in isolated mode, so the box needs no bind for it; the recipe comes from the prompt file.
        name="script",
        executable="python3",
        install_hint="the system python3 (3.8 or newer) in /usr/bin",
        argv=("-I", "-", "{prompt_file}"),
        prompt_via=PromptVia.FILE,
        result_format=ResultFormat.SCRIPT,
        version_argv=("-I", "{script_agent}", "--version"),
        base_url_env=(("BATON_MODEL_BASE_URL", ""),),
        placeholder_key_env="BATON_MODEL_KEY",
        system_path=SYSTEM_PATH,
        stdin_program=True,
    ),
)

#: Policy adapter name -> spec; the keys are exactly worker.policy.schema.ADAPTERS.
SPECS: Mapping[str, AdapterSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})

__all__ = [
    "SPECS",
    "AdapterSpec",
    "AgentMissing",
    "AgentResult",
    "Context",
    "Invocation",
    "PromptVia",
    "ResultFormat",
    "build_invocation",
    "install_dirs",
    "locate",
    "max_turns",
    "parse_version",
    "version",
]
