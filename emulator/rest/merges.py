"""Merging a pull request over REST, and asking whether one is merged.

``PUT …/pulls/{n}/merge`` (GitHub App permission ``contents: write``, as GitHub's list of the
permissions each endpoint needs says) takes ``merge_method`` (merge, squash, rebase; default
merge), ``commit_title``, ``commit_message`` and ``sha`` (the head it must still be), and
answers 200 ``{sha, merged: true, message: "Pull Request successfully merged"}``; a body off
the schema is 422 ``Invalid request.`` (``For 'properties/merge_method', "x" is not a possible
value.``). ``GET …/pulls/{n}/merge`` (``pull_requests: read``) answers 204 with no body when
merged, else 404. The refusals and what a merge does are :mod:`emulator.merging`'s.
"""

from __future__ import annotations

from emulator import merging
from emulator.core import ApiRequest, Reply, RouteSpec
from emulator.errors import not_found
from emulator.rest import reviews_validation as schema
from emulator.state import Pull, Repo


def _pull(req: ApiRequest, repo: Repo, docs: str) -> Pull:
    found = req.state.pull(repo.full_name, req.int_param("pull_number"))
    if found is None:
        raise not_found(docs)
    return found


def _ask(req: ApiRequest) -> merging.MergeAsk:
    """The body, checked against the description's schema (every property a string)."""
    body = req.json_object()
    docs = merging.DOCS
    title = schema.string(body, "commit_title", docs)
    message = schema.string(body, "commit_message", docs)
    sha = schema.string(body, "sha", docs)
    method = schema.one_of(body, "merge_method", merging.METHODS, docs) or "merge"
    return merging.MergeAsk(method=method, title=title, message=message, sha=sha)


async def merge_pull(req: ApiRequest) -> Reply:
    repo = req.repo("contents", "write")
    pull = _pull(req, repo, merging.DOCS)
    sha = merging.merge(
        req.emu, req.base, repo, pull, _ask(req), pending=req.pending, sender=None, acting=req.caller.app
    )
    return Reply({"sha": sha, "merged": True, "message": merging.MERGED})


async def check_merged(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo, merging.CHECK_DOCS)
    if not pull.merged:
        raise not_found(merging.CHECK_DOCS)
    return Reply(None, status=204)


ROUTES: list[RouteSpec] = [
    ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge", merge_pull),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/merge", check_merged),
]
