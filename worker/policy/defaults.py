"""The built-in policy: the ceiling when an org has no baton.yml.

Conservative on every axis: no egress beyond each agent's model endpoint, no env
but the model key, no bots, write permission to trigger, and Baton's own config
and CI definitions protected. ``ALWAYS_PROTECTED`` is a floor even an org file
cannot lower: an agent that edits a workflow gets CI to run its code with the
repository's secrets, which is the trifecta by another door.
"""

from __future__ import annotations

from worker.policy.model import Agent, InstallationLimits, Limits, Permission, Policy, Trigger

ALWAYS_PROTECTED: tuple[str, ...] = (".github/workflows/**", ".github/actions/**", ".github/baton.yml")

_LOCAL_TOOLS = ("read_repo", "search_repo", "edit_files", "run_shell")

DEFAULT_POLICY = Policy(
    trigger=Trigger(min_permission=Permission.WRITE, allow_bots=()),
    agents={
        "claude-code": Agent(
            adapter="claude-code",
            tools=_LOCAL_TOOLS,
            model_endpoints=("api.anthropic.com",),
            env=("ANTHROPIC_API_KEY",),
            timeout=30 * 60,
        ),
        "codex": Agent(
            adapter="codex",
            tools=_LOCAL_TOOLS,
            model_endpoints=("api.openai.com",),
            env=("OPENAI_API_KEY",),
            timeout=30 * 60,
        ),
        "gemini": Agent(
            adapter="gemini",
            tools=_LOCAL_TOOLS,
            model_endpoints=("generativelanguage.googleapis.com",),
            env=("GEMINI_API_KEY",),
            timeout=30 * 60,
        ),
    },
    tools={},
    protected_paths=ALWAYS_PROTECTED,
    gates=(),
    limits=Limits(
        max_concurrent_runs=2,
        max_diff_lines=2000,
        max_runs_per_day=50,
        max_agent_minutes_per_day=600,
        installation=InstallationLimits(),  # no installation-wide cap until the org file sets one
    ),
)
