"""What Baton knows about the tools agent CLIs expose: the one place tags live.

Tags are conservative: a tool gets an axis if it *can* touch it, not if it
usually does. The policy's ``tools:`` section may add tags to these (never
remove them) and declare tools Baton does not know. A tool that is neither here
nor declared counts as all three axes, because a tool we cannot describe is a
tool we cannot bound.

Two facts about a tool are not tags. ``runs_code``: a shell can reach the network
unless Baton cuts it off at run time, so it counts as unrestricted egress while
no cut-off exists (decided per task in decide.py). Model keys: see MODEL_KEYS.

The model channel is not a tool: an agent's ``model_endpoints`` are served by
Baton's model gateway (``worker.runner.gateway``), which holds the key, lets
only inference through and refuses every request that would make the provider
fetch, search, execute or connect for the agent. So a model endpoint carries
prompts and answers to the org's own account and nothing else, and counts as no
leg. A provider's server-side tools are the exception an org may grant, as the
tool ``model_server_tools``, tagged for what they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from worker.policy.model import ALL_AXES, Axis

P, U, E = Axis.PRIVATE_DATA, Axis.UNTRUSTED_INPUT, Axis.EXTERNAL_COMM


@dataclass(frozen=True)
class ToolSpec:
    name: str
    tags: frozenset[Axis]
    summary: str
    runs_code: bool = False


def _spec(name: str, tags: set[Axis], summary: str, *, runs_code: bool = False) -> ToolSpec:
    return ToolSpec(name, frozenset(tags), summary, runs_code)


CATALOGUE: Mapping[str, ToolSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            # The worktree itself is covered by the task's facts (a private repo is
            # private_data; issue text is untrusted_input), so these add nothing.
            _spec("read_repo", set(), "read files in the task's worktree"),
            _spec("search_repo", set(), "grep/glob inside the task's worktree"),
            _spec("edit_files", set(), "write files inside the task's worktree"),
            _spec("run_shell", set(), "run commands (tests, builds)", runs_code=True),
            _spec("web_fetch", {U, E}, "fetch a URL: the URL can carry data out, the page is attacker text"),
            _spec("web_search", {U, E}, "search the web: the query leaves, results are attacker text"),
            _spec("browser", {P, U, E}, "drive a browser: cookies, arbitrary pages and requests"),
            _spec("git_push", {E}, "push to a remote: data leaves the box"),
            _spec("github_api_read", {P, U}, "read issues, PRs and other repositories via the API"),
            _spec("github_api_write", {U, E}, "comment, open issues or PRs: publishes, and reads replies"),
            _spec("read_secrets", {P}, "read credentials or secret stores"),
            _spec("mcp", {P, U, E}, "a generic MCP server: capabilities unknown"),
            _spec(
                "model_server_tools",
                {U, E},
                "the model provider's own tools (web search and fetch, code execution, remote MCP), run "
                "by the provider for the agent: requests leave, fetched pages are attacker text",
            ),
        )
    }
)


#: Tools an adapter's CLI has whatever the policy lists, because no switch of the CLI takes them
#: away: adapter -> {tool: why}. The gate counts them for every agent with that adapter, so it
#: decides on what the agent can really do; the adapter spec (worker.runner.adapters) denies every
#: other tool the policy did not grant, and its tests hold the two to each other.
INHERENT_TOOLS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "codex": MappingProxyType(
            dict.fromkeys(
                ("read_repo", "search_repo", "edit_files", "run_shell"),
                "Codex reads, searches and edits through its shell tool (exec_command); no switch removes it",
            )
        ),
        "mini-swe-agent": MappingProxyType(
            dict.fromkeys(
                ("read_repo", "search_repo", "edit_files", "run_shell"),
                "mini-swe-agent's one tool is a shell (bash): it reads, searches and edits through it",
            )
        ),
        "aider": MappingProxyType(
            {
                "run_shell": "Aider reads the workspace's .aider.conf.yml and .env, and no switch stops it: "
                "a repository's settings can make it run programs (`upgrade: true` runs pip with the "
                "repository's PYTHONPATH, observed running the repository's code); the model's own shell "
                "suggestions are never run",
            }
        ),
    }
)


@dataclass(frozen=True)
class ModelProvider:
    """A model provider the gateway serves: its name in the gateway's paths, the host a policy names
    in ``model_endpoints``, and the env names its key is read from (preferred first)."""

    name: str
    host: str
    key_envs: tuple[str, ...]


#: Every model endpoint a policy may name, by host. An endpoint not here has no gateway route, so
#: a policy that names one is invalid (load.py) rather than silently without a model.
MODEL_PROVIDERS: Mapping[str, ModelProvider] = MappingProxyType(
    {
        p.host: p
        for p in (
            ModelProvider("anthropic", "api.anthropic.com", ("ANTHROPIC_API_KEY",)),
            ModelProvider("openai", "api.openai.com", ("OPENAI_API_KEY",)),
            ModelProvider(
                "gemini", "generativelanguage.googleapis.com", ("GEMINI_API_KEY", "GOOGLE_API_KEY")
            ),
            ModelProvider("mistral", "api.mistral.ai", ("MISTRAL_API_KEY",)),
            ModelProvider("deepseek", "api.deepseek.com", ("DEEPSEEK_API_KEY",)),
            ModelProvider("groq", "api.groq.com", ("GROQ_API_KEY",)),
            ModelProvider("openrouter", "openrouter.ai", ("OPENROUTER_API_KEY",)),
        )
    }
)

#: Env names that are model keys, and the model endpoint each is only useful for.
#: A key counts as "the model key" (exempt from private_data) only when its
#: endpoint is in the agent's model_endpoints; every other env name passed to an
#: agent is private_data. Keying on the endpoint, not on list position, means an
#: admin cannot exempt GITHUB_TOKEN by listing it first. No model key's value
#: ever enters the box: the gateway holds it and the agent gets a placeholder.
MODEL_KEYS: Mapping[str, str] = MappingProxyType(
    {name: p.host for p in MODEL_PROVIDERS.values() for name in p.key_envs}
)


def is_model_key(env_name: str, model_endpoints: tuple[str, ...]) -> bool:
    host = MODEL_KEYS.get(env_name)
    return host is not None and host in model_endpoints


def tool_tags(name: str, declared: Mapping[str, frozenset[Axis]]) -> tuple[frozenset[Axis], bool]:
    """(tags, known): catalogue tags plus any the policy adds; unknown means all three."""
    spec = CATALOGUE.get(name)
    extra = declared.get(name)
    if spec is None and extra is None:
        return ALL_AXES, False
    tags = spec.tags if spec is not None else frozenset()
    return (tags | extra if extra is not None else tags), True
