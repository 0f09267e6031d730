"""A sample GitHub world for the demo and the worker's tests: one App, one org, people.

`acme` has a `.github` repository with the org policy (the ceiling) and a
private `widgets` repository whose `.github/baton.yml` narrows it. The App is
installed on every `acme` repository. People hold each repository role, so
every row of the permission table can be played.

``org_repo`` picks one of the org `.github` cases a policy loader meets:
``"public"`` (the above), ``"absent"`` (no `acme/.github` at all) or
``"excluded"`` (a private `acme/.github` with the org policy, and the App
installed on the selected repository `acme/widgets` only).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.admin.client import AdminClient

OWNER = "acme"
REPO = f"{OWNER}/widgets"
PERMISSIONS = {"metadata": "read", "contents": "write", "issues": "write", "pull_requests": "write",
               "checks": "write"}  # fmt: skip
EVENTS = ["issues", "issue_comment", "pull_request", "pull_request_review", "check_run", "check_suite"]
ORG_REPO_CASES = ("public", "absent", "excluded")
PEOPLE = {"ada": "admin", "maria": "maintain", "wes": "write", "tia": "triage", "rita": "read"}

ORG_POLICY = """\
# The org's ceiling: every repository's .github/baton.yml can only narrow it.
version: 1
trigger:
  min_permission: write
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  researcher:
    adapter: claude-code
    tools: [read_repo, edit_files, web_fetch]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  script:
    adapter: script
    tools: [read_repo, edit_files]
    timeout: 5m
  # One agent per real CLI (`baton demo --agents`): demo-<adapter> (claude-code is above).
  demo-codex:
    adapter: codex
    tools: [read_repo, edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
  demo-gemini:
    adapter: gemini
    tools: [read_repo, edit_files]
    model_endpoints: [generativelanguage.googleapis.com]
    env: [GEMINI_API_KEY]
  demo-qwen-code:
    adapter: qwen-code
    tools: [read_repo, edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
  demo-opencode:
    adapter: opencode
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
  demo-aider:
    adapter: aider
    tools: [read_repo, edit_files]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
  demo-mini-swe-agent:
    adapter: mini-swe-agent
    tools: [read_repo, edit_files, run_shell]
    model_endpoints: [api.openai.com]
    env: [OPENAI_API_KEY]
  # The script agent with a model: it does what its issue says, model calls included.
  helper:
    adapter: script
    tools: [read_repo, edit_files]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
    timeout: 5m
limits:
  max_concurrent_runs: 8
"""

REPO_POLICY = """\
# widgets narrows the org policy: shorter runs.
version: 1
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files]
    timeout: 20m
  researcher:
    adapter: claude-code
    tools: [read_repo, edit_files, web_fetch]
    timeout: 20m
  script:
    adapter: script
    tools: [read_repo, edit_files]
    timeout: 2m
  helper:
    timeout: 2m
  # The real CLIs of `baton demo --agents`, as the org defines them.
  demo-codex:
    timeout: 10m
  demo-gemini:
    timeout: 10m
  demo-qwen-code:
    timeout: 10m
  demo-opencode:
    timeout: 10m
  demo-aider:
    timeout: 10m
  demo-mini-swe-agent:
    timeout: 10m
"""


@dataclass(frozen=True)
class World:
    api_url: str
    app_id: int
    installation_id: int
    private_key: str = field(repr=False)
    webhook_secret: str = field(repr=False)
    head_sha: str


def keypair() -> tuple[str, str]:
    """A fresh RSA key pair (private PEM, public PEM), made for this run only."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def build(
    admin: AdminClient,
    api_url: str,
    *,
    webhook_url: str | None = None,
    repo_policy: str | None = REPO_POLICY,
    org_policy: str | None = ORG_POLICY,
    org_repo: str = "public",
) -> World:
    if org_repo not in ORG_REPO_CASES:
        raise ValueError(f"org_repo must be one of {', '.join(ORG_REPO_CASES)}, not {org_repo!r}")
    private, public = keypair()
    secret = secrets.token_hex(16)
    app = admin.create_app(name="Baton", slug="baton", public_key_pem=public, webhook_url=webhook_url,
                           webhook_secret=secret, permissions=PERMISSIONS, events=EVENTS)  # fmt: skip
    org_files = {"baton.yml": org_policy} if org_policy is not None else {"README.md": "org defaults\n"}
    if org_repo != "absent":
        admin.create_repo(OWNER, ".github", files=org_files, private=org_repo == "excluded")
    repo_files = {"README.md": "# widgets\n", "src/widgets.py": "def spin():\n    return 42\n"}
    if repo_policy is not None:
        repo_files[".github/baton.yml"] = repo_policy
    repo = admin.create_repo(OWNER, REPO.split("/")[1], files=repo_files, private=True)
    selected = [REPO] if org_repo == "excluded" else None
    installation = admin.create_installation(
        app_id=app["id"], account=OWNER, permissions=PERMISSIONS, repositories=selected
    )
    for login, role in PEOPLE.items():
        admin.set_role(REPO, login, role)
    return World(api_url, int(app["id"]), int(installation["id"]), private, secret, str(repo["head_sha"]))
