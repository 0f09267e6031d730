"""Loading the capability policy from GitHub: the org's ceiling and the repo's file.

- Organisation (or user): `baton.yml` at the root of its `.github` repository.
  This is the ceiling, and it applies to every repository of the owner,
  `.github` itself included.
- Repository: `.github/baton.yml` at the head of the default branch, never a
  PR's head, so a pull request cannot change the rules it is judged by.

Whether the org's `.github` repository can be read is decided explicitly, never
by interpreting a failed call: it is *installed* (the App's installation
covers it), *public* (readable with the repository's own token), or *not
visible* (it does not exist, or a selected-repositories installation leaves it
out). Not visible: the built-in defaults are the ceiling and every status says
so, unless the operator set ``BATON_REQUIRE_ORG_POLICY``, which refuses
instead. Any failure to read a ceiling that is visible (5xx, a timeout, a 404
on a repository the installation lists) refuses, because a silently swapped
ceiling could be wider than the org's real one.

File bytes are cached in Redis per commit SHA, so every worker reads a given
commit once. A malformed file fails the task closed with file, line and column.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import redis
from githubkit import GitHub

from baton import keys, records
from baton.errors import BatonError
from baton.tasks import Repository, Task
from worker.github import api
from worker.github.client import GitHubApp, GitHubError
from worker.policy import Merged, PolicyDoc, merge, org_policy, parse

if TYPE_CHECKING:
    from worker.context import Context

ORG_REPO = ".github"
ORG_PATH = "baton.yml"
REPO_PATH = ".github/baton.yml"
CACHE_PREFIX = keys.CONFIG_PREFIX
CACHE_TTL_S = 24 * 3600
#: + installation id: how visible the owner's `.github` is; dropped on installation events.
VISIBILITY_PREFIX = keys.ORG_VISIBILITY_PREFIX
VISIBILITY_TTL_S = 300
_MISSING = b"\x00missing"


class Visibility(StrEnum):
    INSTALLED = "installed"
    PUBLIC = "public"
    NOT_VISIBLE = "not-visible"


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
    #: Said once in every status: the ceiling in force is the built-in one, and how to change that.
    notices: tuple[str, ...] = ()


def no_org_ceiling_notice(owner: str) -> str:
    return (
        f"No organisation policy applies: `{owner}/.github` is not visible to Baton, so the built-in "
        "defaults are the ceiling. To apply an org policy, add the `.github` repository (with a "
        "`baton.yml` at its root) to the App's installation, or make it public."
    )


def _cached_file(
    cache: redis.Redis, gh: GitHub[Any], full_name: str, path: str, *, private_branch: str = ""
) -> tuple[bytes | None, Source, api.RepoHead]:
    head = api.repo_head(gh, full_name, cache, private_branch=private_branch)
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
    return _parsed(data, f"{source.repository}/{source.path}") if data is not None else None


@functools.lru_cache(maxsize=256)
def _parsed(data: bytes, filename: str) -> PolicyDoc:
    """Each file's bytes are parsed once per worker process: every task reads its policy again
    (by ETag), and YAML parsing was a third of a control task's CPU. A PolicyDoc is read-only, so
    tasks may share it; a file that fails to parse raises again each time (errors are not cached)."""
    return parse(data, filename)


def visibility(
    app: GitHubApp, cache: redis.Redis, repo_gh: GitHub[Any], installation_id: int, org_full: str
) -> Visibility:
    """Is ``org_full`` in this installation, public, or neither? Raises GitHubError if unsure."""
    key = f"{VISIBILITY_PREFIX}{installation_id}:{org_full}"
    cached = cache.get(key)
    if cached is not None:
        return Visibility(records.text(cached))
    found = api.repo_installation(app.app, org_full)
    if found is not None and found == installation_id:
        seen = Visibility.INSTALLED
    else:
        repo = api.repo_if_exists(repo_gh, org_full)
        seen = (
            Visibility.PUBLIC if repo is not None and repo.get("private") is False else Visibility.NOT_VISIBLE
        )
    cache.set(key, seen.value, ex=VISIBILITY_TTL_S)
    return seen


def forget_visibility(cache: redis.Redis, installation_id: int) -> int:
    keys = list(cache.scan_iter(match=f"{VISIBILITY_PREFIX}{installation_id}:*", count=500))
    return int(cache.delete(*keys)) if keys else 0


def for_task(ctx: Context, task: Task) -> LoadedPolicy:
    """The policy in force for ``task``'s repository now, as every kind of task loads it."""
    repo, installation = task.repository, task.installation_id
    if repo is None or installation is None:
        raise BatonError("no-repository", "the delivery names no repository or installation")
    return load(ctx.need_github(), ctx.redis, installation, repo.full_name,
                require_org_policy=ctx.require_org_policy, facts=repo)  # fmt: skip


def load(
    app: GitHubApp,
    cache: redis.Redis,
    installation_id: int,
    full_name: str,
    *,
    require_org_policy: bool = False,
    facts: Repository | None = None,
) -> LoadedPolicy:
    """The effective policy. ``facts``: the repository as the signed payload described it (see
    ``api.repo_head`` for what is taken on its word)."""
    owner = full_name.split("/", 1)[0]
    org_full = f"{owner}/{ORG_REPO}"
    repo_gh = app.for_repository(installation_id, full_name, "read")
    sources: list[Source] = []
    notices: list[str] = []
    org_doc: PolicyDoc | None = None
    try:
        seen = visibility(app, cache, repo_gh, installation_id, org_full)
        if seen is Visibility.NOT_VISIBLE:
            if require_org_policy:
                raise BatonError(
                    "org-policy-required", f"{org_full} is not visible and the operator requires it"
                )
            notices.append(no_org_ceiling_notice(owner))
        else:
            org_gh = (
                repo_gh
                if seen is Visibility.PUBLIC
                else app.for_repository(installation_id, org_full, "read")
            )
            org_data, org_source, _ = _cached_file(cache, org_gh, org_full, ORG_PATH)
            sources.append(org_source)
            org_doc = _doc(org_data, org_source)
    except GitHubError as exc:
        raise BatonError(
            "org-policy-unreachable", f"reading the ceiling in {org_full}: {exc.message}"
        ) from exc
    known = (
        facts.default_branch if facts is not None and facts.private and facts.full_name == full_name else ""
    )
    repo_data, repo_source, head = _cached_file(cache, repo_gh, full_name, REPO_PATH, private_branch=known)
    sources.append(repo_source)
    repo_doc = _doc(repo_data, repo_source)
    return LoadedPolicy(merge(org_policy(org_doc), repo_doc), tuple(sources), head, tuple(notices))
