"""GitHub's response shapes for issues, comments, pull requests, changed files, check runs.

Same rule as :mod:`emulator.rest.shapes`: every property the OpenAPI description
marks required is present with GitHub's type, so githubkit parses the answers.
"""

from __future__ import annotations

from typing import Any

from emulator import hierarchy
from emulator.gitrepo import FileChange
from emulator.rest.shapes import account, integration, label, node_id, repository
from emulator.state import CheckRun, Comment, Issue, Pull, Repo, State, iso
from emulator.types import JSONObject

_REACTIONS_KEYS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")


def reactions(url: str) -> JSONObject:
    out: JSONObject = {"url": f"{url}/reactions", "total_count": 0}
    out.update(dict.fromkeys(_REACTIONS_KEYS, 0))
    return out


def author_association(repo: Repo, login: str, *, contributed: bool | None = None) -> str:
    """OWNER, MEMBER (admin/maintain/write), COLLABORATOR (triage/read), else by ``contributed``.

    ``contributed`` (a pull request's author: has a commit on the default
    branch?) gives CONTRIBUTOR or FIRST_TIME_CONTRIBUTOR; None (issues and
    comments) gives NONE.
    """
    role = repo.collaborators.get(login)
    if login.lower() == repo.owner.lower():
        return "OWNER"
    if role in {"admin", "maintain", "write"}:
        return "MEMBER"
    if role is not None:
        return "COLLABORATOR"
    if contributed is not None:
        return "CONTRIBUTOR" if contributed else "FIRST_TIME_CONTRIBUTOR"
    return "NONE"


def issue(base: str, state: State, repo: Repo, item: Issue, *, hook: bool = False) -> JSONObject:
    """An ``issue``, with its ``sub_issues_summary`` and (not with ``hook``) ``parent_issue_url``.

    ``hook``: as the ``issues`` and ``issue_comment`` webhooks carry it; their schemas (the
    community's and GitHub's ``webhooks_issue``) have the summary but no ``parent_issue_url``.
    """
    api = f"{base}/repos/{repo.full_name}/issues/{item.number}"
    comments = sum(
        1 for c in state.comments.values() if c.repo == repo.full_name and c.issue_number == item.number
    )
    labels = [label(base, lb) for name in item.labels if (lb := state.label(repo.full_name, name))]
    out: JSONObject = {
        "id": item.id,
        "node_id": node_id("Issue", item.id),
        "url": api,
        "repository_url": f"{base}/repos/{repo.full_name}",
        "labels_url": f"{api}/labels{{/name}}",
        "comments_url": f"{api}/comments",
        "events_url": f"{api}/events",
        "html_url": f"{base}/{repo.full_name}/{'pull' if item.is_pull else 'issues'}/{item.number}",
        "number": item.number,
        "state": item.state,
        "state_reason": item.state_reason,
        "title": item.title,
        "body": item.body,
        "user": account(base, state, item.user),
        "labels": labels,
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": comments,
        "closed_at": iso(item.closed_at) if item.closed_at else None,
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
        "author_association": author_association(repo, item.user),
        "reactions": reactions(api),
        "timeline_url": f"{api}/timeline",
        "performed_via_github_app": None,
        "sub_issues_summary": hierarchy.summary(state, item),
    }
    if not hook:
        parent = hierarchy.parent_of(state, item)
        out["parent_issue_url"] = f"{base}/repos/{parent.repo}/issues/{parent.number}" if parent else None
    if item.is_pull:
        pulls = f"{base}/repos/{repo.full_name}/pulls/{item.number}"
        out["pull_request"] = {
            "url": pulls,
            "html_url": f"{base}/{repo.full_name}/pull/{item.number}",
            "diff_url": f"{base}/{repo.full_name}/pull/{item.number}.diff",
            "patch_url": f"{base}/{repo.full_name}/pull/{item.number}.patch",
            "merged_at": None,
        }
        pull = state.pull(repo.full_name, item.number)
        if pull is not None and pull.merged_at is not None:
            out["pull_request"]["merged_at"] = iso(pull.merged_at)
        out["draft"] = pull.draft if pull is not None else False
    return out


def comment(base: str, state: State, repo: Repo, item: Comment) -> JSONObject:
    api = f"{base}/repos/{repo.full_name}/issues/comments/{item.id}"
    app = state.apps.get(item.app_id) if item.app_id is not None else None
    return {
        "id": item.id,
        "node_id": node_id("IssueComment", item.id),
        "url": api,
        "html_url": f"{base}/{repo.full_name}/issues/{item.issue_number}#issuecomment-{item.id}",
        "body": item.body,
        "user": account(base, state, item.user),
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
        "issue_url": f"{base}/repos/{repo.full_name}/issues/{item.issue_number}",
        "author_association": author_association(repo, item.user),
        "performed_via_github_app": integration(base, state, app) if app is not None else None,
        "reactions": reactions(api),
    }


def _link(href: str) -> JSONObject:
    return {"href": href}


def pull_request(
    base: str,
    state: State,
    repo: Repo,
    item: Issue,
    pull: Pull,
    *,
    head_sha: str,
    base_sha: str,
    stats: tuple[int, int, int, int],
    head_repo: Repo | None,
    association: str,
) -> JSONObject:
    """A ``pull-request``; ``stats`` is (commits, additions, deletions, changed_files).

    ``head_repo`` holds the head branch (a fork, or ``repo``; None once the fork
    is deleted: ``head.repo`` null, as on GitHub); ``association`` is the author's.
    """
    api = f"{base}/repos/{repo.full_name}/pulls/{pull.number}"
    issue_api = f"{base}/repos/{repo.full_name}/issues/{pull.number}"
    html = f"{base}/{repo.full_name}/pull/{pull.number}"
    repo_obj = repository(base, state, repo)
    owner = account(base, state, repo.owner)
    head_owner = (pull.head_repo or repo.full_name).split("/", 1)[0]
    commits, additions, deletions, changed = stats
    labels = [label(base, lb) for name in item.labels if (lb := state.label(repo.full_name, name))]
    statuses = f"{base}/repos/{repo.full_name}/statuses/{head_sha}"
    return {
        "url": api,
        "id": pull.id,
        "node_id": node_id("PullRequest", pull.id),
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": issue_api,
        "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{base}/repos/{repo.full_name}/pulls/comments{{/number}}",
        "comments_url": f"{issue_api}/comments",
        "statuses_url": statuses,
        "number": pull.number,
        "state": item.state,
        "locked": False,
        "title": item.title,
        "user": account(base, state, item.user),
        "body": item.body,
        "labels": labels,
        "milestone": None,
        "active_lock_reason": None,
        "created_at": iso(item.created_at),
        "updated_at": iso(item.updated_at),
        "closed_at": iso(item.closed_at) if item.closed_at else None,
        "merged_at": iso(pull.merged_at) if pull.merged_at is not None else None,
        "merge_commit_sha": pull.merge_commit_sha,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "head": {
            "label": f"{head_owner}:{pull.head_ref}",
            "ref": pull.head_ref,
            "sha": head_sha,
            "user": account(base, state, head_owner),
            "repo": repository(base, state, head_repo) if head_repo is not None else None,
        },
        "base": {
            "label": f"{repo.owner}:{pull.base_ref}",
            "ref": pull.base_ref,
            "sha": base_sha,
            "user": owner,
            "repo": repo_obj,
        },
        "_links": {
            "self": _link(api),
            "html": _link(html),
            "issue": _link(issue_api),
            "comments": _link(f"{issue_api}/comments"),
            "review_comments": _link(f"{api}/comments"),
            "review_comment": _link(f"{base}/repos/{repo.full_name}/pulls/comments{{/number}}"),
            "commits": _link(f"{api}/commits"),
            "statuses": _link(statuses),
        },
        "author_association": association,
        "auto_merge": None,
        "draft": pull.draft,
        "merged": pull.merged,
        "mergeable": None,
        "rebaseable": None,
        "mergeable_state": "unknown",
        "merged_by": account(base, state, pull.merged_by) if pull.merged_by else None,
        "comments": sum(
            1 for c in state.comments.values() if c.repo == repo.full_name and c.issue_number == pull.number
        ),
        "review_comments": sum(
            1
            for c in state.review_comments.values()
            if c.repo == repo.full_name
            and c.number == pull.number
            and (rv := state.reviews.get(c.review_id)) is not None
            and rv.state != "PENDING"
        ),
        "maintainer_can_modify": pull.maintainer_can_modify,
        "commits": commits,
        "additions": additions,
        "deletions": deletions,
        "changed_files": changed,
    }


def diff_entry(base: str, repo: Repo, change: FileChange, head_sha: str) -> JSONObject:
    out: JSONObject = {
        "sha": change.sha,
        "filename": change.filename,
        "status": change.status,
        "additions": change.additions,
        "deletions": change.deletions,
        "changes": change.additions + change.deletions,
        "blob_url": f"{base}/{repo.full_name}/blob/{head_sha}/{change.filename}",
        "raw_url": f"{base}/{repo.full_name}/raw/{head_sha}/{change.filename}",
        "contents_url": f"{base}/repos/{repo.full_name}/contents/{change.filename}?ref={head_sha}",
    }
    if change.patch is not None:
        out["patch"] = change.patch
    if change.previous_filename is not None:
        out["previous_filename"] = change.previous_filename
    return out


def pull_request_minimal(base: str, repo: Repo, pull: Pull, head_sha: str, base_sha: str) -> JSONObject:
    repo_ref = {"id": repo.id, "url": f"{base}/repos/{repo.full_name}", "name": repo.name}
    return {
        "id": pull.id,
        "number": pull.number,
        "url": f"{base}/repos/{repo.full_name}/pulls/{pull.number}",
        "head": {"ref": pull.head_ref, "sha": head_sha, "repo": repo_ref},
        "base": {"ref": pull.base_ref, "sha": base_sha, "repo": repo_ref},
    }


def check_run(
    base: str, state: State, repo: Repo, run: CheckRun, pull_requests: list[JSONObject]
) -> JSONObject:
    api = f"{base}/repos/{repo.full_name}/check-runs/{run.id}"
    app = state.apps[run.app_id]
    out: dict[str, Any] = {
        "id": run.id,
        "head_sha": run.head_sha,
        "node_id": node_id("CheckRun", run.id),
        # Unset, GitHub answers "" for external_id and the App's homepage for details_url.
        "external_id": run.external_id if run.external_id is not None else "",
        "url": api,
        "html_url": f"{base}/{repo.full_name}/runs/{run.id}",
        "details_url": run.details_url or f"{base}/apps/{app.slug}",
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at) if run.started_at else None,
        "completed_at": iso(run.completed_at) if run.completed_at else None,
        "output": {
            "title": run.output_title,
            "summary": run.output_summary,
            "text": run.output_text,
            "annotations_count": len(run.annotations),
            "annotations_url": f"{api}/annotations",
        },
        "name": run.name,
        "check_suite": {"id": run.check_suite_id},
        "app": integration(base, state, app),
        "pull_requests": pull_requests,
    }
    return out
