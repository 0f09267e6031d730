"""Repository endpoints: the repository, file contents read from git, collaborator permission."""

from __future__ import annotations

from emulator.core import ApiRequest, RawBody, Reply, RouteSpec
from emulator.errors import ApiError, not_found
from emulator.gitrepo import GitError
from emulator.rest import shapes
from emulator.state import ROLE_PERMISSION

_CONTENTS_DOCS = "https://docs.github.com/rest/repos/contents#get-repository-content"


async def get_repo(req: ApiRequest) -> Reply:
    repo = req.repo()
    return Reply(shapes.repository(req.base, req.state, repo, full=True))


async def get_contents(req: ApiRequest) -> Reply:
    """A file (base64) or a directory listing at ``ref`` (default: the default branch)."""
    repo = req.repo("contents", "read")
    path = str(req.request.path_params.get("path", "")).strip("/")
    git = req.emu.git(repo)
    ref = req.query("ref") or repo.default_branch
    commit = git.resolve(ref)
    if commit is None:
        if git.branch_sha(repo.default_branch) is None:
            raise ApiError(404, "This repository is empty.", documentation_url=_CONTENTS_DOCS)
        raise ApiError(404, f"No commit found for the ref {ref}", documentation_url=_CONTENTS_DOCS)
    try:
        entry = git.entry(commit, path)
    except GitError as exc:
        raise not_found(_CONTENTS_DOCS) from exc
    if entry is None:
        raise not_found(_CONTENTS_DOCS)
    if entry.type == "blob":
        data = git.blob(entry.sha)
        if "vnd.github.raw" in req.request.headers.get("accept", ""):
            return Reply(RawBody(data))
        return Reply(shapes.content_file(req.base, repo, path, sha=entry.sha, data=data, ref=ref))
    if entry.type != "tree":
        raise not_found(_CONTENTS_DOCS)
    listing = []
    for child in git.list_dir(commit, path):
        kind = {"blob": "file", "tree": "dir", "commit": "submodule"}.get(child.type, "file")
        listing.append(
            shapes.content_entry(req.base, repo, kind, child.path, sha=child.sha, size=child.size, ref=ref)
        )
    return Reply(listing)


async def get_branch(req: ApiRequest) -> Reply:
    repo = req.repo("contents", "read")
    name = str(req.request.path_params.get("branch", ""))
    git = req.emu.git(repo)
    sha = git.branch_sha(name)
    if sha is None:
        raise ApiError(
            404,
            "Branch not found",
            documentation_url="https://docs.github.com/rest/branches/branches#get-a-branch",
        )
    return Reply(shapes.branch(req.base, repo, name, git.commit_meta(sha)))


async def get_collaborator_permission(req: ApiRequest) -> Reply:
    """Legacy ``permission`` (admin/write/read/none) plus the precise ``role_name``."""
    repo = req.repo()
    user = req.state.user(req.param("username"))
    if user is None:
        raise not_found(
            "https://docs.github.com/rest/collaborators/collaborators#get-repository-permissions-for-a-user"
        )
    role = repo.collaborators.get(user.login)
    if role is None and user.login.lower() == repo.owner.lower():
        role = "admin"
    if role is None:
        role = "none" if repo.private else "read"
    permission = ROLE_PERMISSION.get(role, "none")
    return Reply(shapes.collaborator_permission(req.base, user, role, permission))


ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}", get_repo),
    ("GET", "/repos/{owner}/{repo}/branches/{branch:path}", get_branch),
    ("GET", "/repos/{owner}/{repo}/contents", get_contents),
    ("GET", "/repos/{owner}/{repo}/contents/{path:path}", get_contents),
    ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission", get_collaborator_permission),
]
