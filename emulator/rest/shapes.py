"""GitHub's response shapes for accounts, Apps, installations, repositories and labels.

Field lists follow the OpenAPI description (``@octokit/openapi``,
``generated/api.github.com.json``): every *required* property is present, with
GitHub's types, so githubkit's models parse the answers. URLs point back at the
emulator (``base``), so a client that follows them stays local.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from emulator.gitrepo import CommitMeta
from emulator.state import App, Installation, Label, Repo, State, User, iso
from emulator.types import JSONObject

#: Files above this size come back from the contents API without their content.
MAX_INLINE_CONTENT = 1024 * 1024
#: ``[<id>+]<login>@users.noreply.github.com``: the address GitHub links back to an account.
_NOREPLY = re.compile(r"^(?:(\d+)\+)?([^@+]+)@users\.noreply\.github\.com$", re.IGNORECASE)
#: GitHub's own account, the committer of what GitHub commits on the web (merges made there included),
#: and its address.
WEB_FLOW = User(id=19864447, login="web-flow")
WEB_FLOW_EMAIL = "noreply@github.com"


def node_id(kind: str, ident: int) -> str:
    """GitHub's legacy node ids are base64 of ``0<len>:<Kind><id>``."""
    raw = f"0{len(kind)}:{kind}{ident}"
    return base64.b64encode(raw.encode()).decode()


def simple_user(base: str, user: User) -> JSONObject:
    api = f"{base}/users/{user.login}"
    return {
        "login": user.login,
        "id": user.id,
        "node_id": node_id("User" if user.type != "Organization" else "Organization", user.id),
        "avatar_url": f"{base}/_emulator/avatars/{user.id}",
        "gravatar_id": "",
        "url": api,
        "html_url": f"{base}/{user.login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": user.type,
        "site_admin": user.site_admin,
        "user_view_type": "public",
    }


def account(base: str, state: State, login: str) -> JSONObject:
    """A login as a simple user; unknown logins render as plain users (id 0)."""
    user = state.user(login) or User(id=0, login=login)
    return simple_user(base, user)


def bot_user(state: State, app: App) -> User:
    """The ``<slug>[bot]`` account an App acts as through installation tokens."""
    login = f"{app.slug}[bot]"
    found = state.user(login)
    if found is not None:
        return found
    return User(id=app.bot_user_id, login=login, type="Bot")


def integration(base: str, state: State, app: App) -> JSONObject:
    return {
        "id": app.id,
        "slug": app.slug,
        "node_id": node_id("Integration", app.id),
        "client_id": app.client_id,
        "owner": account(base, state, app.owner),
        "name": app.name,
        "description": app.description,
        "external_url": f"{base}/apps/{app.slug}",
        "html_url": f"{base}/apps/{app.slug}",
        "created_at": iso(app.created_at),
        "updated_at": iso(app.created_at),
        "permissions": dict(app.permissions),
        "events": list(app.events),
        "installations_count": sum(1 for i in state.installations.values() if i.app_id == app.id),
    }


def installation(base: str, state: State, inst: Installation) -> JSONObject:
    app = state.apps[inst.app_id]
    owner = state.user(inst.account) or User(id=0, login=inst.account, type="Organization")
    return {
        "id": inst.id,
        "account": simple_user(base, owner),
        "repository_selection": inst.repository_selection,
        "access_tokens_url": f"{base}/app/installations/{inst.id}/access_tokens",
        "repositories_url": f"{base}/installation/repositories",
        "html_url": f"{base}/organizations/{inst.account}/settings/installations/{inst.id}",
        "app_id": inst.app_id,
        "client_id": app.client_id,
        "app_slug": app.slug,
        "target_id": owner.id,
        "target_type": owner.type if owner.type != "Bot" else "User",
        "permissions": dict(inst.permissions),
        "events": list(inst.events),
        "created_at": iso(inst.created_at),
        "updated_at": iso(inst.created_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": account(base, state, inst.suspended_by) if inst.suspended_by else None,
        "suspended_at": iso(inst.suspended_at) if inst.suspended_at else None,
    }


def _repo_urls(base: str, repo: Repo) -> JSONObject:
    api = f"{base}/repos/{repo.full_name}"
    names = {
        "archive_url": "/{archive_format}{/ref}",
        "assignees_url": "/assignees{/user}",
        "blobs_url": "/git/blobs{/sha}",
        "branches_url": "/branches{/branch}",
        "collaborators_url": "/collaborators{/collaborator}",
        "comments_url": "/comments{/number}",
        "commits_url": "/commits{/sha}",
        "compare_url": "/compare/{base}...{head}",
        "contents_url": "/contents/{+path}",
        "contributors_url": "/contributors",
        "deployments_url": "/deployments",
        "downloads_url": "/downloads",
        "events_url": "/events",
        "forks_url": "/forks",
        "git_commits_url": "/git/commits{/sha}",
        "git_refs_url": "/git/refs{/sha}",
        "git_tags_url": "/git/tags{/sha}",
        "hooks_url": "/hooks",
        "issue_comment_url": "/issues/comments{/number}",
        "issue_events_url": "/issues/events{/number}",
        "issues_url": "/issues{/number}",
        "keys_url": "/keys{/key_id}",
        "labels_url": "/labels{/name}",
        "languages_url": "/languages",
        "merges_url": "/merges",
        "milestones_url": "/milestones{/number}",
        "notifications_url": "/notifications{?since,all,participating}",
        "pulls_url": "/pulls{/number}",
        "releases_url": "/releases{/id}",
        "stargazers_url": "/stargazers",
        "statuses_url": "/statuses/{sha}",
        "subscribers_url": "/subscribers",
        "subscription_url": "/subscription",
        "tags_url": "/tags",
        "teams_url": "/teams",
        "trees_url": "/git/trees{/sha}",
    }
    return {key: api + suffix for key, suffix in names.items()}


def repository(
    base: str,
    state: State,
    repo: Repo,
    *,
    full: bool = False,
    permissions: dict[str, bool] | None = None,
) -> JSONObject:
    """A ``repository`` (or, with ``full``, a ``full-repository``) object.

    ``clone_url`` is the emulator's smart-HTTP URL for the bare repository
    (``{base}/{owner}/{repo}.git``): plain git clones and pushes through it,
    with an installation token as the password, as on GitHub. A fork has
    ``fork: true``, and its full form ``parent`` and ``source`` (the network's root).
    """
    clone_url = f"{base}/{repo.full_name}.git"
    forks = sum(1 for r in state.repos.values() if r.parent == repo.full_name)
    open_issues = sum(1 for i in state.issues.values() if i.repo == repo.full_name and i.state == "open")
    created = iso(repo.created_at)
    out: JSONObject = {
        "id": repo.id,
        "node_id": node_id("Repository", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "owner": account(base, state, repo.owner),
        "private": repo.private,
        "html_url": f"{base}/{repo.full_name}",
        "description": repo.description,
        "fork": repo.parent is not None,
        "url": f"{base}/repos/{repo.full_name}",
        **_repo_urls(base, repo),
        "git_url": clone_url,
        "ssh_url": f"git@{base.split('://', 1)[-1].split('/', 1)[0]}:{repo.full_name}.git",
        "clone_url": clone_url,
        "svn_url": f"{base}/{repo.full_name}",
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks_count": forks,
        "forks": forks,
        "stargazers_count": 0,
        "watchers_count": 0,
        "watchers": 0,
        "size": 0,
        "default_branch": repo.default_branch,
        "open_issues_count": open_issues,
        "open_issues": open_issues,
        "is_template": False,
        "topics": [],
        "has_issues": True,
        "has_projects": False,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": True,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "private" if repo.private else "public",
        "license": None,
        "pushed_at": created,
        "created_at": created,
        "updated_at": created,
        "allow_forking": not repo.private,
        "web_commit_signoff_required": False,
    }
    if permissions is not None:
        out["permissions"] = permissions
    if full:
        source = state.source_repo(repo)
        out["network_count"] = sum(
            1 for r in state.repos.values() if r is not source and state.source_repo(r) is source
        )
        out["subscribers_count"] = 0
        out["allow_squash_merge"] = True
        out["allow_merge_commit"] = True
        out["allow_rebase_merge"] = True
        out["allow_auto_merge"] = False
        out["delete_branch_on_merge"] = False
        out["custom_properties"] = dict(repo.custom_properties)
        parent = state.parent_repo(repo)
        if parent is not None:  # GitHub's full repository of a fork names where it came from
            out["parent"] = repository(base, state, parent)
            out["source"] = repository(base, state, source)
    return out


def webhook_repository(base: str, state: State, repo: Repo) -> JSONObject:
    """A repository as webhooks carry it: the REST form plus ``custom_properties`` (``{}`` unless set).

    The webhook schemas want it on every full repository object: the top-level
    ``repository``, a pull request's ``base.repo`` and ``head.repo``, a fork's ``forkee``.
    """
    out = repository(base, state, repo)
    out["custom_properties"] = dict(repo.custom_properties)
    return out


def mini_repository(repo: Repo) -> JSONObject:
    """The short form installation webhooks list (``repositories``, ``repositories_added``...)."""
    return {
        "id": repo.id,
        "node_id": node_id("Repository", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
    }


def label(base: str, lb: Label) -> JSONObject:
    return {
        "id": lb.id,
        "node_id": node_id("Label", lb.id),
        "url": f"{base}/repos/{lb.repo}/labels/{lb.name}",
        "name": lb.name,
        "description": lb.description,
        "color": lb.color,
        "default": False,
        # Newer API versions (githubkit's 2026-03-10 models) require these two.
        "archived_at": None,
        "archived_by": None,
    }


def collaborator_permission(base: str, user: User, role: str, permission: str) -> JSONObject:
    """``repository-collaborator-permission``: legacy permission plus the role name."""
    flags = {
        "admin": role == "admin",
        "maintain": role in {"admin", "maintain"},
        "push": role in {"admin", "maintain", "write"},
        "triage": role in {"admin", "maintain", "write", "triage"},
        "pull": role != "none",
    }
    out = simple_user(base, user)
    out["permissions"] = flags
    out["role_name"] = role
    return {"permission": permission, "role_name": role, "user": out}


def content_file(base: str, repo: Repo, path: str, *, sha: str, data: bytes, ref: str) -> JSONObject:
    """``content-file``: base64 wrapped at 60 columns, as GitHub sends it.

    Over 1 MB GitHub leaves ``content`` empty with encoding ``none`` (use the
    raw media type or the blob API instead); so does the emulator.
    """
    too_big = len(data) > MAX_INLINE_CONTENT
    encoded = "" if too_big else base64.b64encode(data).decode()
    wrapped = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60))
    api = f"{base}/repos/{repo.full_name}/contents/{path}?ref={ref}"
    html = f"{base}/{repo.full_name}/blob/{ref}/{path}"
    git = f"{base}/repos/{repo.full_name}/git/blobs/{sha}"
    return {
        "type": "file",
        "encoding": "none" if too_big else "base64",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": wrapped + ("\n" if wrapped else ""),
        "sha": sha,
        "url": api,
        "git_url": git,
        "html_url": html,
        "download_url": f"{base}/_raw/{repo.full_name}/{path}?ref={ref}",
        "_links": {"self": api, "git": git, "html": html},
    }


def content_entry(
    base: str, repo: Repo, kind: str, path: str, *, sha: str, size: int, ref: str
) -> JSONObject:
    """One item of a directory listing (``content-directory``)."""
    api = f"{base}/repos/{repo.full_name}/contents/{path}?ref={ref}"
    html = f"{base}/{repo.full_name}/{'tree' if kind == 'dir' else 'blob'}/{ref}/{path}"
    git = f"{base}/repos/{repo.full_name}/git/{'trees' if kind == 'dir' else 'blobs'}/{sha}"
    entry: dict[str, Any] = {
        "type": kind,
        "size": size,
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "sha": sha,
        "url": api,
        "git_url": git,
        "html_url": html,
        "download_url": f"{base}/_raw/{repo.full_name}/{path}?ref={ref}" if kind == "file" else None,
        "_links": {"self": api, "git": git, "html": html},
    }
    return entry


def user_for_email(state: State, email: str) -> User | None:
    """The account GitHub credits a commit to: a noreply address (an App's bot too) or a known email.

    A noreply address with an id must carry the account's own id, as GitHub
    checks; GitHub's own ``noreply@github.com`` is its ``web-flow`` account; anything else stays
    unlinked (``author: null``).
    """
    if email.lower() == WEB_FLOW_EMAIL:
        return state.user(WEB_FLOW.login) or WEB_FLOW
    match = _NOREPLY.match(email)
    if match is None:
        lowered = email.lower()
        return next((u for u in state.users.values() if u.email and u.email.lower() == lowered), None)
    ident, login = match.groups()
    user = state.user(login)
    if user is None and login.lower().endswith("[bot]"):
        slug = login[: -len("[bot]")].lower()
        app = next((a for a in state.apps.values() if a.slug.lower() == slug), None)
        user = bot_user(state, app) if app is not None else None
    if user is None or (ident is not None and int(ident) != user.id):
        return None
    return user


def _git_person(name: str, email: str, when: int) -> JSONObject:
    return {"name": name, "email": email, "date": iso(float(when))}


def commit(
    base: str,
    repo: Repo,
    meta: CommitMeta,
    *,
    state: State | None = None,
    extra: JSONObject | None = None,
) -> JSONObject:
    """``commit``: what `GET /repos/{o}/{r}/commits/{ref}`, a pull's commit list and branches answer.

    With ``state``, ``author``/``committer`` name the accounts the emails
    belong to (else null, as GitHub does for unknown emails). ``extra`` adds
    the single-commit read's ``stats`` and ``files``.
    """
    api = f"{base}/repos/{repo.full_name}"
    committed = (meta.committer_name, meta.committer_email, meta.committer_timestamp or meta.timestamp)
    if not meta.committer_name and not meta.committer_email:
        committed = (meta.author_name, meta.author_email, meta.timestamp)
    author = user_for_email(state, meta.author_email) if state is not None else None
    committer = user_for_email(state, committed[1]) if state is not None else None
    out: JSONObject = {
        "url": f"{api}/commits/{meta.sha}",
        "sha": meta.sha,
        "node_id": node_id("Commit", int(meta.sha[:8], 16)),
        "html_url": f"{base}/{repo.full_name}/commit/{meta.sha}",
        "comments_url": f"{api}/commits/{meta.sha}/comments",
        "commit": {
            "url": f"{api}/git/commits/{meta.sha}",
            "author": _git_person(meta.author_name, meta.author_email, meta.timestamp),
            "committer": _git_person(*committed),
            "message": meta.message,
            "comment_count": 0,
            "tree": {"sha": meta.tree, "url": f"{api}/git/trees/{meta.tree}"},
            # Nothing here is signed; GitHub's answer for an unsigned commit.
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        },
        "author": simple_user(base, author) if author is not None else None,
        "committer": simple_user(base, committer) if committer is not None else None,
        "parents": [{"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{base}/{repo.full_name}/commit/{p}"}
                    for p in meta.parents],
    }  # fmt: skip
    if extra:
        out.update(extra)
    return out


def branch(base: str, repo: Repo, name: str, meta: CommitMeta) -> JSONObject:
    """``branch-with-protection`` (no protection rules are modelled)."""
    api = f"{base}/repos/{repo.full_name}"
    return {
        "name": name,
        "commit": commit(base, repo, meta),
        "_links": {"html": f"{base}/{repo.full_name}/tree/{name}", "self": f"{api}/branches/{name}"},
        "protected": False,
        "protection": {
            "enabled": False,
            "required_status_checks": {"enforcement_level": "off", "contexts": [], "checks": []},
        },
        "protection_url": f"{api}/branches/{name}/protection",
    }  # fmt: skip
