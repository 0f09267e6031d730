"""The GitHub calls the worker makes, each turning GitHub's failures into a GitHubError.

Reads tolerate what they may meet (a missing file is None); writes respect
GitHub's limits (``worker.github.limits``) before they are sent. Nothing here
decides anything: callers pass what to write and get back what GitHub said.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from githubkit import GitHub
from githubkit.exception import GitHubException, RequestFailed

from baton import keys, records
from worker.authorize import Permission
from worker.github.client import GitHubError, error_detail, github_error
from worker.github.limits import Action, Annotation, Output, actions_to_api, annotation_batches
from worker.github.retry import maybe_done, unwrap

#: Comments read when looking for Baton's status comment (100 a page).
MAX_COMMENT_PAGES = 10
#: + request path -> {etag, body}: the last answer to a conditional GET (``conditional_get``).
ETAG_PREFIX = keys.ETAG_PREFIX
ETAG_TTL_S = 24 * 3600


#: GitHub's rules for names that Baton puts into request paths (payload data, so checked).
_REPO_NAME = re.compile(r"[A-Za-z0-9-]{1,39}/[A-Za-z0-9._-]{1,100}")
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def repo_path(full_name: str) -> str:
    """``/repos/OWNER/REPO``, refusing anything that is not a GitHub repository name."""
    if not _REPO_NAME.fullmatch(full_name) or full_name.endswith(("/.", "/..")):
        raise GitHubError("bad-name", f"{full_name!r} is not a GitHub repository name")
    return f"/repos/{full_name}"


def request(gh: GitHub[Any], method: str, path: str, **kwargs: Any) -> Any:
    """One REST call by its documented path; GitHub's failure becomes a GitHubError."""
    try:
        return gh.request(method, path, **kwargs).json()
    except GitHubException as exc:
        raise github_error(exc, f"{method} {path} failed") from unwrap(exc)


def _status(exc: GitHubException) -> int | None:
    """GitHub's status for the call itself. A failed token exchange is wrapped by githubkit in
    a bare RequestError and gives None here: its 404 means the installation is gone, not the file."""
    return exc.response.status_code if isinstance(exc, RequestFailed) else None


# -- who --------------------------------------------------------------------------------------


def permission(gh: GitHub[Any], full_name: str, login: str) -> Permission:
    """The sender's permission, or an error saying why there is none (never raises)."""
    if not _LOGIN.fullmatch(login):
        return Permission(error=f"{login!r} is not a GitHub login")
    try:
        data = gh.request("GET", f"{repo_path(full_name)}/collaborators/{login}/permission").json()
    except GitHubException as exc:
        return Permission(error=error_detail(exc))
    if not isinstance(data, dict):
        return Permission(error="unexpected answer from the collaborator-permission endpoint")
    perm, role = data.get("permission"), data.get("role_name")
    return Permission(
        permission=perm if isinstance(perm, str) else None,
        role_name=role if isinstance(role, str) else None,
    )


# -- files ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepoHead:
    """A repository as GitHub describes it now: visibility and its default branch's head."""

    full_name: str
    private: bool
    branch: str
    sha: str


def repo_head(
    gh: GitHub[Any], full_name: str, cache: redis.Redis | None = None, *, private_branch: str = ""
) -> RepoHead:
    """Fresh: with ``cache``, both reads are conditional (a 304 is fresh, and free of the limit).

    ``private_branch``: the default branch of a repository the signed payload calls private, so
    the repository itself is not read again (its body changes with every issue opened, so a
    conditional read of it is rarely a 304). Only "private" is taken on the payload's word: it
    can only add the private-data leg; "public" is always checked against GitHub."""
    read: Callable[[str], Any] = (
        functools.partial(conditional_get, gh, cache)
        if cache is not None
        else functools.partial(request, gh, "GET")
    )
    if private_branch:
        branch_data = read(f"{repo_path(full_name)}/branches/{private_branch}")
        return RepoHead(full_name, True, private_branch, str(branch_data["commit"]["sha"]))
    repo = read(repo_path(full_name))
    branch = str(repo["default_branch"])
    sha = str(read(f"{repo_path(full_name)}/branches/{branch}")["commit"]["sha"])
    return RepoHead(full_name, repo.get("private") is not False, branch, sha)


def conditional_get(gh: GitHub[Any], cache: redis.Redis, path: str) -> Any:
    """``GET path`` as a conditional request: GitHub answers 304 (which does not count against the
    installation's rate limit) when the ETag it gave last time still matches, and the body kept
    with that ETag is the answer. The ETag is GitHub's, of that body, so a 304 is as fresh as a 200."""
    key = ETAG_PREFIX + path
    etag, body = cache.hmget(key, ["etag", "body"])
    tag = records.text(etag)
    headers = {"If-None-Match": tag} if tag and body else {}
    try:
        response = gh.request("GET", path, headers=headers)
    except GitHubException as exc:
        raise github_error(exc, f"GET {path} failed") from unwrap(exc)
    if response.status_code == 304 and body:
        return orjson.loads(body)
    data = response.json()
    fresh = response.headers.get("etag")
    if fresh:
        with cache.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"etag": fresh, "body": response.content})
            pipe.expire(key, ETAG_TTL_S)
            pipe.execute()
    return data


def read_file(gh: GitHub[Any], full_name: str, path: str, ref: str) -> bytes | None:
    """A file's bytes at ``ref``; None if there is no such file (or it is not a file)."""
    try:
        data = gh.request("GET", f"{repo_path(full_name)}/contents/{path}", params={"ref": ref}).json()
    except GitHubException as exc:
        if _status(exc) == 404:
            return None
        raise github_error(exc, f"reading {full_name}/{path}@{ref}") from unwrap(exc)
    if not isinstance(data, dict) or data.get("type") != "file" or not isinstance(data.get("content"), str):
        return None
    return base64.b64decode(data["content"])


# -- the status comment ------------------------------------------------------------------------


def list_pages(
    gh: GitHub[Any], path: str, *, pages: int = MAX_COMMENT_PAGES, params: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """The objects of a listing ``path``, 100 a page (GitHub's most), for at most ``pages`` pages."""
    for page in range(1, pages + 1):
        items = request(gh, "GET", path, params={**(params or {}), "per_page": 100, "page": page})
        if not isinstance(items, list):
            return
        yield from (item for item in items if isinstance(item, dict))
        if len(items) < 100:
            return


def find_comment(
    gh: GitHub[Any], full_name: str, number: int, match: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    path = f"{repo_path(full_name)}/issues/{number}/comments"
    return next((comment for comment in list_pages(gh, path) if match(comment)), None)


def upsert_comment(
    gh: GitHub[Any], full_name: str, number: int, body: str, match: Callable[[dict[str, Any]], bool]
) -> int:
    """Edit the comment ``match`` finds, or create it. Returns its id."""
    existing = find_comment(gh, full_name, number, match)
    if existing is not None:
        comment_id = int(existing["id"])
        if existing.get("body") != body:
            request(gh, "PATCH", f"{repo_path(full_name)}/issues/comments/{comment_id}", json={"body": body})
        return comment_id
    return create_comment(gh, full_name, number, body)


def create_comment(gh: GitHub[Any], full_name: str, number: int, body: str) -> int:
    created = request(gh, "POST", f"{repo_path(full_name)}/issues/{number}/comments", json={"body": body})
    return int(created["id"])


# -- check runs ----------------------------------------------------------------------------------


def create_check_run(
    gh: GitHub[Any],
    full_name: str,
    *,
    name: str,
    head_sha: str,
    external_id: str,
    details_url: str | None,
    output: Output,
    conclusion: str | None = None,
) -> int:
    """A check run on ``head_sha``: in progress, or already completed with ``conclusion``."""
    data: dict[str, Any] = {
        "name": name,
        "head_sha": head_sha,
        "external_id": external_id,
        "status": "in_progress" if conclusion is None else "completed",
        "output": output.to_api(details_url),
    }
    if conclusion is not None:
        data["conclusion"] = conclusion
    if details_url:
        data["details_url"] = details_url
    try:
        return int(request(gh, "POST", f"{repo_path(full_name)}/check-runs", json=data)["id"])
    except GitHubError as exc:
        if not maybe_done(exc.__cause__):
            raise
        # Sent, and no answer: GitHub may have made it. A second POST would make a second run
        # (one of them left in progress for ever), so look for ours by its external id.
        found = check_run_by_external_id(gh, full_name, head_sha, name, external_id)
        if found is None:
            raise
        return found


def check_run_by_external_id(
    gh: GitHub[Any], full_name: str, head_sha: str, name: str, external_id: str
) -> int | None:
    """The id of this App's newest run ``name`` on ``head_sha`` made for ``external_id``, if GitHub
    has one (a task may open a second run on one head, the first completed: ids only grow)."""
    path = f"{repo_path(full_name)}/commits/{head_sha}/check-runs"
    found = request(gh, "GET", path, params={"check_name": name, "filter": "all", "per_page": 100})
    ids = [
        int(run["id"])
        for run in (found.get("check_runs", []) if isinstance(found, dict) else [])
        if isinstance(run, dict) and run.get("external_id") == external_id and isinstance(run.get("id"), int)
    ]
    return max(ids, default=None)


def complete_check_run(
    gh: GitHub[Any],
    full_name: str,
    check_run_id: int,
    *,
    conclusion: str,
    output: Output,
    details_url: str | None,
    annotations: Sequence[Annotation] = (),
    actions: Sequence[Action] = (),
) -> None:
    """Complete a run; annotations past GitHub's 50 per request follow in further updates."""
    batches = annotation_batches(annotations) or [[]]
    base_output = output.to_api(details_url)
    for i, batch in enumerate(batches):
        data: dict[str, Any] = {"output": {**base_output, **({"annotations": batch} if batch else {})}}
        if i == 0:
            data.update(status="completed", conclusion=conclusion)
            if details_url:  # the run was created before its receipt existed: link it now
                data["details_url"] = details_url
            if actions:
                data["actions"] = actions_to_api(actions)
        request(gh, "PATCH", f"{repo_path(full_name)}/check-runs/{check_run_id}", json=data)


def edit_comment(gh: GitHub[Any], full_name: str, comment_id: int, body: str) -> bool:
    """Replace a comment's body; False if the comment is gone (deleted by someone)."""
    path = f"{repo_path(full_name)}/issues/comments/{comment_id}"
    try:
        gh.request("PATCH", path, json={"body": body})
    except GitHubException as exc:
        if _status(exc) == 404:
            return False
        raise github_error(exc, f"PATCH {path} failed") from unwrap(exc)
    return True


# -- what the installation can see ----------------------------------------------------------------


def repo_installation(app_gh: GitHub[Any], full_name: str) -> int | None:
    """The id of this App's installation that covers ``full_name``, or None (GitHub's 404).

    Asked with the App's JWT: it answers for repositories outside any token's reach,
    which is the point (a selected-repositories installation may leave one out).
    """
    try:
        data = app_gh.request("GET", f"{repo_path(full_name)}/installation").json()
    except GitHubException as exc:
        if _status(exc) == 404:
            return None
        raise github_error(exc, f"GET {full_name}/installation") from unwrap(exc)
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, int) else None


def repo_if_exists(gh: GitHub[Any], full_name: str) -> dict[str, Any] | None:
    """The repository as ``gh`` can see it, or None where GitHub answers 404."""
    try:
        data = gh.request("GET", repo_path(full_name)).json()
    except GitHubException as exc:
        if _status(exc) == 404:
            return None
        raise github_error(exc, f"GET {repo_path(full_name)}") from unwrap(exc)
    return data if isinstance(data, dict) else None
