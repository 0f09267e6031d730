"""Loading the capability policy from GitHub: the org's ceiling and the repo's file.

- Repository: `.github/baton.yml` at the head of the default branch, never a
  PR's head, so a pull request cannot change the rules it is judged by.
- Organisation (or user): `baton.yml` at the root of its `.github` repository.

A missing file means the built-in defaults (which are the ceiling when there
is no org file). A malformed one fails the task closed with file, line and
column. File bytes are cached in Redis per commit SHA, so every worker reads a
given commit once. If the App cannot reach the owner's `.github` repository at
all (not part of the installation), the built-in ceiling applies: it is the
most restrictive policy Baton has, so nothing opens up by being unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from githubkit import GitHub

from worker.github import api
from worker.github.client import GitHubApp, GitHubError
from worker.policy import Merged, PolicyDoc, merge, org_policy, parse

ORG_REPO = ".github"
ORG_PATH = "baton.yml"
REPO_PATH = ".github/baton.yml"
CACHE_PREFIX = "baton:config:"
CACHE_TTL_S = 24 * 3600
_MISSING = b"\x00missing"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a policy file came from, for the evidence trail: repo, path and commit."""

    repository: str
    path: str
    sha: str
    found: bool

    def label(self) -> str:
        state = "" if self.found else " (absent: built-in defaults)"
        return f"{self.repository}/{self.path}@{self.sha[:12]}{state}"


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    merged: Merged
    sources: tuple[Source, ...]
    repo: api.RepoHead  # as GitHub reported it while loading (fresh visibility)


def _cached_file(
    cache: redis.Redis, gh: GitHub[Any], full_name: str, path: str
) -> tuple[bytes | None, Source, api.RepoHead]:
    head = api.repo_head(gh, full_name)
    key = f"{CACHE_PREFIX}{full_name}:{head.sha}:{path}"
    raw = cache.get(key)
    if raw is None:
        data = api.read_file(gh, full_name, path, head.sha)
        cache.set(key, _MISSING if data is None else data, ex=CACHE_TTL_S)
    else:
        cached = raw if isinstance(raw, bytes) else str(raw).encode()
        data = None if cached == _MISSING else cached
    return data, Source(full_name, path, head.sha, data is not None), head


def _doc(data: bytes | None, source: Source) -> PolicyDoc | None:
    """Parse a file; PolicyError (with file:line:col) propagates to fail the task."""
    return parse(data, f"{source.repository}/{source.path}") if data is not None else None


def load(app: GitHubApp, cache: redis.Redis, installation_id: int, full_name: str) -> LoadedPolicy:
    owner = full_name.split("/", 1)[0]
    org_full = f"{owner}/{ORG_REPO}"
    sources: list[Source] = []
    org_doc: PolicyDoc | None = None
    if full_name != org_full:
        try:
            org_gh = app.for_repository(installation_id, org_full, "read")
            org_data, org_source, _ = _cached_file(cache, org_gh, org_full, ORG_PATH)
        except GitHubError as exc:
            if not _not_installed(exc):
                raise
        else:
            sources.append(org_source)
            org_doc = _doc(org_data, org_source)
    repo_gh = app.for_repository(installation_id, full_name, "read")
    repo_data, repo_source, head = _cached_file(cache, repo_gh, full_name, REPO_PATH)
    sources.append(repo_source)
    repo_doc = _doc(repo_data, repo_source)
    return LoadedPolicy(merge(org_policy(org_doc), repo_doc), tuple(sources), head)


def _not_installed(exc: GitHubError) -> bool:
    """The org's .github repo is outside the installation (token refused, or not found)."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    status = getattr(response, "status_code", None)
    return status in (404, 422)
