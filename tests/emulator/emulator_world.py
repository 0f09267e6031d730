"""Helpers for the emulator tests: keys, JWTs, and a populated world built via the admin API."""

from __future__ import annotations

import functools
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient

OWNER = "acme"
REPO = "widgets"
BASE_FILES = {
    "README.md": "# widgets\n",
    ".github/baton.yml": "agents:\n  claude-code: {}\n",
    "src/app.py": "print('hello')\n",
}
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
INSTALLATION_PERMISSIONS = {
    "metadata": "read",
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "checks": "write",
}


def run_git(
    *args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """git with a fixed identity and no system config, bounded; raises with its stderr on failure."""
    done = subprocess.run(["git", *args], cwd=cwd, env={**GIT_ENV, **(env or {})}, capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(f"git {args}: {done.stderr}")
    return done


@functools.cache
def keypair(name: str = "default") -> tuple[str, str]:
    """One key pair per name for the whole test run (RSA generation is slow); never committed."""
    return world.keypair()


def app_jwt(
    app_id: int | str,
    private_key: str,
    *,
    iat_offset: int = -60,
    lifetime: int = 600,
    algorithm: str = "RS256",
) -> str:
    now = int(time.time())
    claims = {"iss": str(app_id), "iat": now + iat_offset, "exp": now + iat_offset + lifetime}
    return jwt.encode(claims, private_key, algorithm=algorithm)


def authed(url: str, token: str) -> str:
    """GitHub's way to use an installation token with git: ``x-access-token:<token>@``."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://x-access-token:{token}@{rest}"


@dataclass
class World:
    server: EmulatorServer
    admin: httpx.Client
    app_id: int
    private_key: str
    installation_id: int
    head_sha: str
    webhook_secret: str

    @property
    def url(self) -> str:
        return self.server.url

    def jwt(self, **kwargs: Any) -> str:
        return app_jwt(self.app_id, self.private_key, **kwargs)

    def token(self, **body: Any) -> str:
        """An installation token, optionally narrowed (``repositories=``, ``permissions=``)."""
        response = httpx.post(
            f"{self.url}/app/installations/{self.installation_id}/access_tokens",
            headers={"Authorization": f"Bearer {self.jwt()}"},
            json=body or None,
            timeout=10,
        )
        response.raise_for_status()
        token: str = response.json()["token"]
        return token

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"token {token}"}, timeout=10)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.admin.post(f"/_emulator{path}", json=body)
        if response.status_code >= 300:
            raise AssertionError(f"admin {path}: {response.status_code} {response.text}")
        data: dict[str, Any] = response.json()
        return data


def build_world(server: EmulatorServer, *, webhook_url: str | None = None) -> World:
    """One App installed on ``acme`` (all repos), a public and a private repo, some people."""
    private, public = keypair()
    secret = "It's a Secret to Everybody"
    with AdminClient(server.url) as admin:
        app = admin.create_app(
            name="Baton Test",
            slug="baton-test",
            owner=OWNER,
            public_key_pem=public,
            webhook_url=webhook_url,
            webhook_secret=secret,
            permissions=INSTALLATION_PERMISSIONS,
            events=["issues", "issue_comment", "pull_request", "check_run"],
        )
        repo = admin.create_repo(OWNER, REPO, files=BASE_FILES)
        admin.create_repo(OWNER, "secret-sauce", private=True, files={"x.txt": "x\n"})
        admin.create_repo("other-org", "elsewhere", private=True, files={"y.txt": "y\n"})
        inst = admin.create_installation(
            app_id=app["id"], account=OWNER, permissions=INSTALLATION_PERMISSIONS
        )
        roles = {"maria": "maintain", "wes": "write", "tia": "triage", "rita": "read", "ada": "admin"}
        for login, role in roles.items():
            admin.set_role(f"{OWNER}/{REPO}", login, role)
        admin.create_user("nobody")
    return World(
        server=server,
        admin=httpx.Client(base_url=server.url, timeout=10),
        app_id=app["id"],
        private_key=private,
        installation_id=inst["id"],
        head_sha=repo["head_sha"],
        webhook_secret=secret,
    )
