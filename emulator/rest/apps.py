"""App and installation endpoints: JWT-authenticated, plus installation token minting.

``GET /installation/repositories`` is the one here an installation token calls.
"""

from __future__ import annotations

from typing import Any

from emulator.auth import narrow_permissions, new_token_string, require_app
from emulator.core import ApiRequest, Reply, RouteSpec, paginate
from emulator.errors import ApiError, invalid_request, not_accessible, not_found, requires_authentication
from emulator.rest import shapes
from emulator.state import Installation, Repo, Token, iso

_MINT_DOCS = "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"
_REPO_INSTALLATION_DOCS = (
    "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app"
)
_NOT_ACCESSIBLE_REPOS = (
    "There is at least one repository that does not exist or is not accessible to the parent installation."
)


async def get_app(req: ApiRequest) -> Reply:
    app = require_app(req.caller)
    return Reply(shapes.integration(req.base, req.state, app))


async def list_installations(req: ApiRequest) -> Reply:
    app = require_app(req.caller)
    items = [i for i in req.state.installations.values() if i.app_id == app.id]
    return Reply([shapes.installation(req.base, req.state, i) for i in sorted(items, key=lambda i: i.id)])


def _own_installation(req: ApiRequest) -> Installation:
    app = require_app(req.caller)
    inst = req.state.installations.get(req.int_param("installation_id"))
    if inst is None or inst.app_id != app.id:
        raise not_found()
    return inst


async def get_installation(req: ApiRequest) -> Reply:
    return Reply(shapes.installation(req.base, req.state, _own_installation(req)))


async def get_repo_installation(req: ApiRequest) -> Reply:
    """The App's installation that covers the repository (a ``selected`` one must list it), else 404."""
    app = require_app(req.caller)
    repo = req.state.repo(req.param("owner"), req.param("repo"))
    inst = req.state.installation_for_repo(app.id, repo) if repo is not None else None
    if inst is None:
        raise not_found(_REPO_INSTALLATION_DOCS)
    return Reply(shapes.installation(req.base, req.state, inst))


async def list_installation_repos(req: ApiRequest) -> Reply:
    """``GET /installation/repositories``: what this installation token can reach, paginated."""
    caller = req.caller
    if caller.kind == "anonymous":
        raise requires_authentication()
    inst, token = caller.installation, caller.token
    if caller.kind != "installation" or inst is None or token is None:
        raise not_accessible()
    repos = sorted(req.state.installation_repos(inst), key=lambda r: r.id)
    if token.repositories is not None:
        repos = [r for r in repos if r.full_name in token.repositories]
    page, headers = paginate(req, repos)
    selection = "selected" if token.repositories is not None else inst.repository_selection
    return Reply(
        {
            "total_count": len(repos),
            "repositories": [shapes.repository(req.base, req.state, r) for r in page],
            "repository_selection": selection,
        },
        headers=headers,
    )


def _select_repos(req: ApiRequest, inst: Installation, body: dict[str, Any]) -> list[Repo] | None:
    """The repositories a new token is narrowed to (None = all of the installation's)."""
    names = body.get("repositories")
    ids = body.get("repository_ids")
    if names is None and ids is None:
        return None
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise invalid_request("For 'properties/repositories', value is not an array of strings.")
    if ids is not None and (
        not isinstance(ids, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in ids)
    ):
        raise invalid_request("For 'properties/repository_ids', value is not an array of integers.")
    reachable = req.state.installation_repos(inst)
    by_name = {r.name.lower(): r for r in reachable}
    by_id = {r.id: r for r in reachable}
    chosen: dict[int, Repo] = {}
    for name in names or []:
        repo = by_name.get(name.lower())
        if repo is None:
            raise ApiError(422, _NOT_ACCESSIBLE_REPOS, documentation_url=_MINT_DOCS)
        chosen[repo.id] = repo
    for ident in ids or []:
        repo = by_id.get(ident)
        if repo is None:
            raise ApiError(422, _NOT_ACCESSIBLE_REPOS, documentation_url=_MINT_DOCS)
        chosen[repo.id] = repo
    return list(chosen.values())


async def create_access_token(req: ApiRequest) -> Reply:
    inst = _own_installation(req)
    if inst.suspended_at is not None:
        raise ApiError(403, "This installation has been suspended")
    body = req.json_object()
    requested = body.get("permissions")
    if requested is not None and (
        not isinstance(requested, dict) or not all(isinstance(v, str) for v in requested.values())
    ):
        raise invalid_request("For 'properties/permissions', value is not an object of strings.")
    permissions = narrow_permissions(inst, requested)
    repos = _select_repos(req, inst, body)
    state = req.state
    token = Token(
        token=new_token_string(),
        installation_id=inst.id,
        expires_at=state.now() + state.settings.token_ttl_seconds,
        permissions=permissions,
        repositories=[r.full_name for r in repos] if repos is not None else None,
    )
    with state.lock:
        state.tokens[token.token] = token
    out: dict[str, Any] = {
        "token": token.token,
        "expires_at": iso(token.expires_at),
        "permissions": permissions,
        "repository_selection": "selected" if repos is not None else inst.repository_selection,
    }
    listed = (
        repos
        if repos is not None
        else (state.installation_repos(inst) if inst.repository_selection == "selected" else None)
    )
    if listed is not None:
        out["repositories"] = [shapes.repository(req.base, state, r) for r in listed]
    return Reply(out, status=201)


ROUTES: list[RouteSpec] = [
    ("GET", "/app", get_app),
    ("GET", "/app/installations", list_installations),
    ("GET", "/app/installations/{installation_id}", get_installation),
    ("POST", "/app/installations/{installation_id}/access_tokens", create_access_token),
    ("GET", "/repos/{owner}/{repo}/installation", get_repo_installation),
    ("GET", "/installation/repositories", list_installation_repos),
]
