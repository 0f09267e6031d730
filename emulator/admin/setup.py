"""Admin API, part one: building the world (users, Apps, installations, repositories, roles).

Shared validation helpers and :class:`AdminBase` live here too.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from typing import Any

from cryptography.hazmat.primitives.serialization import load_pem_public_key

from emulator import webhooks
from emulator.core import Emulator
from emulator.gitrepo import safe_ref
from emulator.state import ROLE_PERMISSION, App, Delivery, Installation, Issue, Repo, User

REPO_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
LOGIN = re.compile(r"^[A-Za-z0-9\-]{1,39}(\[bot\])?$")


class AdminError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def need_str(body: dict[str, Any], key: str, pattern: re.Pattern[str] | None = None) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value or (pattern is not None and not pattern.match(value)):
        raise AdminError(422, f"'{key}' must be a valid non-empty string")
    return value


def str_dict(body: dict[str, Any], key: str) -> dict[str, str]:
    value = body.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise AdminError(422, f"'{key}' must be an object of strings")
    return {str(k): v for k, v in value.items()}


def str_list(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AdminError(422, f"'{key}' must be an array of strings")
    return list(value)


def ensure_user(emu: Emulator, login: str, kind: str = "User") -> User:
    found = emu.state.user(login)
    if found is None:
        found = User(id=emu.state.new_id(), login=login, type=kind)
        emu.state.users[login] = found
    return found


def checked_files(body: dict[str, Any]) -> dict[str, str | None]:
    files = body.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str | None) for v in files.values()):
        raise AdminError(422, "'files' must map paths to text (or null to delete)")
    for path in files:
        parts = str(path).split("/")
        control = any(ord(ch) < 32 for ch in str(path))  # would break git's index-info lines
        if (
            control
            or not path
            or str(path).startswith("/")
            or any(p in {"", ".", "..", ".git"} for p in parts)
        ):
            raise AdminError(422, f"bad path {path!r}")
    return {str(k): v for k, v in files.items()}


def role_of(repo: Repo, login: str) -> str | None:
    """A person's role on ``repo`` (its owner: admin), None without one; logins compare case-insensitively."""
    if login.lower() == repo.owner.lower():
        return "admin"
    return next((role for name, role in repo.collaborators.items() if name.lower() == login.lower()), None)


def canonical_repo(emu: Emulator, account: str, name: str) -> str:
    """A repository name (or ``owner/name``) of ``account``, spelled as the repository is when it exists."""
    full = name if "/" in name else f"{account}/{name}"
    owner, _, short = full.partition("/")
    if owner.lower() != account.lower():
        raise AdminError(422, f"{full} is not a repository of {account}")
    found = emu.state.repo(owner, short)
    return found.full_name if found is not None else full


class AdminBase:
    """Admin handlers get the JSON body (an object), path params and base URL; return (status, body)."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu

    def _repo(self, params: dict[str, str]) -> Repo:
        repo = self.emu.state.repo(params["owner"], params["repo"])
        if repo is None:
            raise AdminError(404, f"no repository {params['owner']}/{params['repo']}")
        return repo

    def _issue(self, repo: Repo, number: str) -> Issue:
        item = self.emu.state.issue(repo.full_name, int(number)) if number.isdigit() else None
        if item is None:
            raise AdminError(404, f"no issue #{number} in {repo.full_name}")
        return item

    async def _send(self, pending: list[Delivery], body: dict[str, Any]) -> None:
        """Deliver before answering, so a test sees the outcome at once; ``"wait": false`` sends later."""
        if body.get("wait", True):
            await self.emu.deliver(pending)
        elif pending:
            await self.emu.schedule(pending)


class SetupAdmin(AdminBase):
    """World set-up: nothing here sends a webhook."""

    async def create_user(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        login = need_str(body, "login", LOGIN)
        kind = body.get("type", "User")
        if kind not in {"User", "Organization", "Bot"}:
            raise AdminError(422, "'type' must be User, Organization or Bot")
        if self.emu.state.user(login) is not None:
            raise AdminError(409, f"user {login} exists")
        user = User(
            id=self.emu.state.new_id(), login=login, type=kind, site_admin=bool(body.get("site_admin", False))
        )
        self.emu.state.users[login] = user
        return 201, dataclasses.asdict(user)

    async def create_app(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        state = self.emu.state
        name = need_str(body, "name")
        slug = body.get("slug") or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        if not REPO_NAME.match(slug):
            raise AdminError(422, "'slug' must be letters, digits, '-', '_' or '.'")
        pem = need_str(body, "public_key_pem")
        try:
            load_pem_public_key(pem.encode())
        except ValueError as exc:
            raise AdminError(422, "'public_key_pem' is not a PEM public key") from exc
        webhook_url = body.get("webhook_url")
        if webhook_url is not None and (
            not isinstance(webhook_url, str) or not webhooks.is_loopback_url(webhook_url)
        ):
            raise AdminError(422, "'webhook_url' must be an http(s) URL on 127.0.0.1 or localhost")
        app_id = body.get("id") or state.new_id()
        if not isinstance(app_id, int) or app_id in state.apps:
            raise AdminError(409, f"app id {app_id} is taken or invalid")
        owner = need_str(body, "owner", LOGIN) if "owner" in body else "emulator"
        ensure_user(self.emu, owner, "Organization")
        bot = ensure_user(self.emu, f"{slug}[bot]", "Bot")
        app = App(
            id=app_id,
            slug=slug,
            name=name,
            owner=owner,
            public_key_pem=pem,
            client_id=str(body.get("client_id") or f"Iv1.{secrets.token_hex(8)}"),
            webhook_url=webhook_url,
            webhook_secret=body.get("webhook_secret"),
            hook_id=state.new_id(),
            bot_user_id=bot.id,
            permissions=str_dict(body, "permissions"),
            events=str_list(body, "events"),
            description=str(body.get("description", "")),
            created_at=state.now(),
        )
        state.apps[app.id] = app
        out = dataclasses.asdict(app)
        out["bot_login"] = bot.login
        return 201, out

    async def update_app(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        app = self.emu.state.apps.get(int(params["app_id"])) if params["app_id"].isdigit() else None
        if app is None:
            raise AdminError(404, "no such app")
        if "webhook_url" in body:
            url = body["webhook_url"]
            if url is not None and (not isinstance(url, str) or not webhooks.is_loopback_url(url)):
                raise AdminError(422, "'webhook_url' must be an http(s) URL on 127.0.0.1 or localhost")
            app.webhook_url = url
        if "webhook_secret" in body:
            app.webhook_secret = body["webhook_secret"]
        if "events" in body:
            app.events = str_list(body, "events")
        return 200, dataclasses.asdict(app)

    async def create_installation(
        self, body: dict[str, Any], _: dict[str, str], base: str
    ) -> tuple[int, Any]:
        state = self.emu.state
        app_id = body.get("app_id")
        if not isinstance(app_id, int) or app_id not in state.apps:
            raise AdminError(422, "'app_id' must name an existing app")
        account = need_str(body, "account", LOGIN)
        ensure_user(self.emu, account, "Organization")
        selection = body.get("repository_selection", "all")
        if selection not in {"all", "selected"}:
            raise AdminError(422, "'repository_selection' must be all or selected")
        permissions = str_dict(body, "permissions")
        bad = [k for k, v in permissions.items() if v not in {"read", "write", "admin"}]
        if bad:
            raise AdminError(422, f"permission levels must be read, write or admin: {bad}")
        repos = [canonical_repo(self.emu, account, r) for r in str_list(body, "repositories")]
        inst = Installation(
            id=int(body.get("id") or state.new_id()),
            app_id=app_id,
            account=account,
            permissions=permissions,
            repository_selection=selection,
            repositories=repos,
            events=str_list(body, "events") or list(state.apps[app_id].events),
            created_at=state.now(),
        )
        if inst.id in state.installations:
            raise AdminError(409, f"installation {inst.id} exists")
        state.installations[inst.id] = inst
        return 201, dataclasses.asdict(inst)

    async def create_repo(self, body: dict[str, Any], _: dict[str, str], base: str) -> tuple[int, Any]:
        state = self.emu.state
        owner = need_str(body, "owner", LOGIN)
        name = need_str(body, "name", REPO_NAME)
        if state.repo(owner, name) is not None:
            raise AdminError(409, f"repository {owner}/{name} exists")
        branch = body.get("default_branch", "main")
        if not isinstance(branch, str) or not safe_ref(branch):
            raise AdminError(422, "'default_branch' must be a plain branch name")
        files = checked_files(body)
        properties = body.get("custom_properties", {})
        if not isinstance(properties, dict):
            raise AdminError(422, "'custom_properties' must be an object")
        ensure_user(self.emu, owner, "Organization")
        repo = Repo(
            id=state.new_id(),
            owner=owner,
            name=name,
            private=bool(body.get("private", False)),
            default_branch=branch,
            description=body.get("description"),
            created_at=state.now(),
            custom_properties=dict(properties),
        )
        git = self.emu.git(repo)
        if git.exists():
            raise AdminError(409, f"{git.path} already exists on disk")
        git.init(branch)
        head = git.commit_files(branch, files, "Initial commit") if files else None
        state.repos[repo.full_name] = repo
        return 201, {
            **dataclasses.asdict(repo),
            "full_name": repo.full_name,
            "clone_url": f"{base}/{repo.full_name}.git",
            "file_url": git.url,
            "path": str(git.path),
            "head_sha": head,
        }

    async def set_collaborator(
        self, body: dict[str, Any], params: dict[str, str], base: str
    ) -> tuple[int, Any]:
        repo = self._repo(params)
        login = params["username"]
        if not LOGIN.match(login):
            raise AdminError(422, "invalid login")
        role = body.get("role")
        if role != "none" and role not in ROLE_PERMISSION:
            raise AdminError(422, "'role' must be admin, maintain, write, triage, read or none")
        user = ensure_user(self.emu, login, str(body.get("type", "User")))
        if role == "none":
            repo.collaborators.pop(user.login, None)
        else:
            repo.collaborators[user.login] = str(role)
        return 200, {"login": user.login, "role": role, "collaborators": repo.collaborators}

    # -- acting as people (these send webhooks like the REST API does) -------
