"""Check suites: one per (App, commit), created with the App's first run on that commit.

A suite's ``status`` and ``conclusion`` sum up its runs. Webhooks carry the
suite in full: ``check_suite`` events the whole object, and ``check_run``
events the same fields minus the commit details (GitHub's REST answers for a
check run carry only the suite's ``id``).
"""

from __future__ import annotations

from emulator.core import Emulator, emit
from emulator.rest import shapes_items
from emulator.rest.pulls import pull_shas
from emulator.rest.shapes import integration, node_id
from emulator.state import CheckRun, CheckSuite, Delivery, Repo, iso
from emulator.types import JSONArray, JSONObject

NULL_SHA = "0" * 40
#: A completed suite's conclusion: the first of these that any of its runs has.
_CONCLUSION_ORDER = ("action_required", "cancelled", "timed_out", "failure", "neutral", "success", "skipped")


def pull_requests_for(emu: Emulator, base: str, repo: Repo, sha: str) -> JSONArray:
    """The open pull requests whose head is ``sha`` (``pull_requests`` of runs and suites).

    Only pulls whose head branch is in ``repo``: as GitHub documents, a head in
    a fork is not detected, so its runs and suites list no pull requests.
    """
    prs = []
    for pull in sorted(emu.state.pulls.values(), key=lambda p: p.number):
        item = emu.state.issue(repo.full_name, pull.number)
        if pull.repo != repo.full_name or pull.head_repo is not None or item is None or item.state != "open":
            continue
        head_sha, base_sha = pull_shas(emu, repo, pull)
        if head_sha == sha:
            prs.append(shapes_items.pull_request_minimal(base, repo, pull, head_sha, base_sha))
    return prs


def _head_branch(emu: Emulator, repo: Repo, sha: str) -> str | None:
    """The branch the commit is on: an open pull's head, else a branch whose tip it is.

    A fork's head branch is not one of ``repo``'s: null, as on GitHub.
    """
    for pull in emu.state.pulls.values():
        item = emu.state.issue(repo.full_name, pull.number)
        same_repo = pull.repo == repo.full_name and pull.head_repo is None
        is_open = same_repo and item is not None and item.state == "open"
        if is_open and pull_shas(emu, repo, pull)[0] == sha:
            return pull.head_ref
    tips = emu.git(repo).branches()
    if tips.get(repo.default_branch) == sha:
        return repo.default_branch
    return next((name for name, tip in sorted(tips.items()) if tip == sha), None)


def suite_for(emu: Emulator, repo: Repo, app_id: int, head_sha: str) -> CheckSuite:
    """The App's suite for the commit (created on first use, with branch and ``before``); now updated."""
    state = emu.state
    suite = state.check_suite_for(repo.full_name, app_id, head_sha)
    now = state.now()
    if not suite.created_at:
        parents = emu.git(repo).commit_meta(head_sha).parents
        suite.before = parents[0] if parents else NULL_SHA
        suite.head_branch = _head_branch(emu, repo, head_sha)
        suite.created_at = now
    suite.updated_at = now
    return suite


def runs_of(emu: Emulator, suite: CheckSuite) -> list[CheckRun]:
    return sorted(
        (r for r in emu.state.check_runs.values() if r.check_suite_id == suite.id), key=lambda r: r.id
    )


def summary(runs: list[CheckRun]) -> tuple[str, str | None]:
    """(status, conclusion) of a suite from its runs."""
    if not runs or all(r.status == "queued" for r in runs):
        return "queued", None
    if any(r.status != "completed" for r in runs):
        return "in_progress", None
    conclusions = {r.conclusion for r in runs}
    return "completed", next((c for c in _CONCLUSION_ORDER if c in conclusions), None)


def _brief(emu: Emulator, base: str, repo: Repo, suite: CheckSuite) -> JSONObject:
    status, conclusion = summary(runs_of(emu, suite))
    return {
        "id": suite.id,
        "node_id": node_id("CheckSuite", suite.id),
        "head_branch": suite.head_branch,
        "head_sha": suite.head_sha,
        "status": status,
        "conclusion": conclusion,
        "url": f"{base}/repos/{repo.full_name}/check-suites/{suite.id}",
        "before": suite.before,
        "after": suite.head_sha,
        "pull_requests": pull_requests_for(emu, base, repo, suite.head_sha),
        "app": integration(base, emu.state, emu.state.apps[suite.app_id]),
        "created_at": iso(suite.created_at),
        "updated_at": iso(suite.updated_at),
    }


def for_run(emu: Emulator, base: str, repo: Repo, run: CheckRun) -> JSONObject:
    """The ``check_suite`` a ``check_run`` webhook carries."""
    return _brief(emu, base, repo, emu.state.check_suites[run.check_suite_id])


def render(emu: Emulator, base: str, repo: Repo, suite: CheckSuite) -> JSONObject:
    """The whole ``check_suite`` object of ``check_suite`` webhooks."""
    meta = emu.git(repo).commit_meta(suite.head_sha)
    person = {"name": meta.author_name, "email": meta.author_email}
    out = _brief(emu, base, repo, suite)
    out.update(
        {
            "latest_check_runs_count": len({(r.app_id, r.name) for r in runs_of(emu, suite)}),
            "check_runs_url": f"{out['url']}/check-runs",
            "head_commit": {
                "id": meta.sha,
                "tree_id": meta.tree,
                "message": meta.message,
                "timestamp": iso(float(meta.timestamp)),
                "author": person,
                "committer": person,
            },
            "rerequestable": True,
            "runs_rerequestable": True,
        }
    )
    return out


def rerequest(
    emu: Emulator, base: str, repo: Repo, suite: CheckSuite, *, pending: list[Delivery], sender: str | None
) -> None:
    """Someone asked to re-run the suite: ``check_suite.rerequested`` to the App that owns it."""
    app = emu.state.apps[suite.app_id]
    payload = {"action": "rerequested", "check_suite": render(emu, base, repo, suite)}
    emit(emu, base, repo, "check_suite", payload, pending=pending, sender=sender, only_app=app)
