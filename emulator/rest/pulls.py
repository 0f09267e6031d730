"""Pull requests: create (→ ``pull_request.opened``), get, list, update, changed files, commits.

Merging is :mod:`emulator.merging` (its REST paths :mod:`emulator.rest.merges`).

Also the changes only a person makes here (draft ↔ ready for review, and the
checks GitHub runs before reopening); closing and reopening go through
:func:`emulator.rest.issues.change_state`, as on GitHub. The single-commit
read (``GET …/commits/{ref}``) lives here too, next to the pull's commit list
it shares a shape with.

A pull's head and base SHAs are read from the branches on every request, so a
push to the head branch shows up exactly as it does on GitHub. The head may
live in a fork (``head: "owner:branch"``); the base repository keeps
``refs/pull/<n>/head`` at the head's tip while the pull is open (see
:mod:`emulator.forks`), and keeps it after the head branch is deleted.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.convertors import Convertor, register_url_convertor

from emulator import forks
from emulator.core import ApiRequest, Emulator, Reply, RouteSpec, emit, paginate
from emulator.errors import ApiError, invalid_request, not_found, validation_failed
from emulator.gitrepo import EMPTY_TREE, GitError, safe_ref
from emulator.rest import shapes, shapes_items
from emulator.state import App, Delivery, Issue, Pull, Repo
from emulator.types import JSONObject

_CREATE_DOCS = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
_UPDATE_DOCS = "https://docs.github.com/rest/pulls/pulls#update-a-pull-request"
_GET_DOCS = "https://docs.github.com/rest/pulls/pulls#get-a-pull-request"
_COMMIT_DOCS = "https://docs.github.com/rest/commits/commits#get-a-commit"
#: GitHub lists at most this many commits of a pull request.
MAX_PULL_COMMITS = 250
#: The single-commit read lists at most this many files (GitHub pages the rest; we stop).
MAX_COMMIT_FILES = 300
#: A pull's author is a CONTRIBUTOR with a commit among this many of the default branch's last.
MAX_CONTRIBUTION_SCAN = 10_000
NULL_SHA = "0" * 40


def pull_shas(emu: Emulator, repo: Repo, pull: Pull) -> tuple[str, str]:
    """(head, base): the head branch's tip in its repository, else the last one ``refs/pull/<n>/head`` kept.

    An open pull's ``refs/pull/<n>/head`` is brought up to the head first, so
    a state written before the ref existed (or a move no push announced) heals here.
    A merged pull keeps the two as they were at the merge (its commits and files stay listed).
    """
    if pull.merged and pull.merged_head_sha and pull.merged_base_sha:
        return pull.merged_head_sha, pull.merged_base_sha
    git = emu.git(repo)
    head_repo = emu.state.pull_head_repo(pull)
    head = emu.git(head_repo).branch_sha(pull.head_ref) if head_repo is not None else None
    item = emu.state.issue(repo.full_name, pull.number)
    if head is not None and item is not None and item.state == "open":
        with contextlib.suppress(GitError):  # another writer holds the ref's lock: the next read retries
            forks.sync_pull_ref(emu, repo, pull)
    if head is None:
        head = git.ref_sha(forks.pull_ref(pull.number))
    base = git.branch_sha(pull.base_ref) or NULL_SHA
    return head or NULL_SHA, base


def pull_association(emu: Emulator, repo: Repo, login: str) -> str:
    """The pull author's ``author_association``: by role, else CONTRIBUTOR if one of the default
    branch's commits is theirs (by email, as GitHub links commits), else FIRST_TIME_CONTRIBUTOR."""
    by_role = shapes_items.author_association(repo, login)
    if by_role != "NONE":
        return by_role
    state = emu.state
    emails = emu.git(repo).author_emails(repo.default_branch, MAX_CONTRIBUTION_SCAN)
    contributed = any(
        (user := shapes.user_for_email(state, email)) is not None and user.login.lower() == login.lower()
        for email in emails
    )
    return shapes_items.author_association(repo, login, contributed=contributed)


def render_pull(emu: Emulator, base: str, repo: Repo, pull: Pull) -> JSONObject:
    state = emu.state
    item = state.issue(repo.full_name, pull.number)
    if item is None:
        raise not_found()
    head_sha, base_sha = pull_shas(emu, repo, pull)
    git = emu.git(repo)
    stats = (0, 0, 0, 0)
    merge_base = git.merge_base(base_sha, head_sha) if NULL_SHA not in (head_sha, base_sha) else None
    if merge_base is not None:
        changes = git.changes(merge_base, head_sha)
        stats = (
            git.count_commits(merge_base, head_sha),
            sum(c.additions for c in changes),
            sum(c.deletions for c in changes),
            len(changes),
        )
    return shapes_items.pull_request(
        base,
        state,
        repo,
        item,
        pull,
        head_sha=head_sha,
        base_sha=base_sha,
        stats=stats,
        head_repo=state.pull_head_repo(pull),
        association=pull_association(emu, repo, item.user),
    )


def hook_pull(emu: Emulator, base: str, repo: Repo, pull: Pull) -> JSONObject:
    """A pull request as ``pull_request`` webhooks carry it: ``base.repo`` and ``head.repo`` hold
    ``custom_properties`` (the webhook schemas' ``repository``); REST answers have none."""
    out = render_pull(emu, base, repo, pull)
    for side in ("base", "head"):
        shown = out[side]["repo"]
        found = emu.state.repos.get(shown["full_name"]) if shown is not None else None
        if shown is not None:
            shown["custom_properties"] = dict(found.custom_properties) if found is not None else {}
    return out


def _refuse_duplicate(
    emu: Emulator, repo: Repo, head_repo: Repo, head_ref: str, base_ref: str, *, docs: str
) -> None:
    """One open pull request per head (repository and branch) and base, as on GitHub."""
    state = emu.state
    for other in state.pulls.values():
        issue = state.issue(repo.full_name, other.number)
        if (
            other.repo == repo.full_name
            and (other.head_repo or other.repo) == head_repo.full_name
            and other.head_ref == head_ref
            and other.base_ref == base_ref
            and issue is not None
            and issue.state == "open"
        ):
            message = f"A pull request already exists for {head_repo.owner}:{head_ref}."
            raise validation_failed([{"resource": "PullRequest", "code": "custom", "message": message}], docs)


def check_reopenable(emu: Emulator, repo: Repo, pull: Pull) -> None:
    """GitHub refuses to reopen a merged pull, one whose head branch is gone, or one that would
    duplicate an open one."""
    if pull.merged:
        message = "state cannot be changed. The pull request cannot be reopened."
        raise validation_failed(
            [{"resource": "PullRequest", "code": "custom", "field": "state", "message": message}],
            _UPDATE_DOCS,
        )
    head_repo = emu.state.pull_head_repo(pull)
    if head_repo is None or emu.git(head_repo).branch_sha(pull.head_ref) is None:
        message = f"state cannot be changed. The {pull.head_ref} branch has been deleted."
        raise validation_failed(
            [{"resource": "PullRequest", "code": "custom", "field": "state", "message": message}],
            _UPDATE_DOCS,
        )
    _refuse_duplicate(emu, repo, head_repo, pull.head_ref, pull.base_ref, docs=_UPDATE_DOCS)


def set_draft(
    emu: Emulator, base: str, repo: Repo, pull: Pull, draft: bool, *, pending: list[Delivery], sender: str
) -> None:
    """Mark ready for review (``ready_for_review``) or convert back to a draft (``converted_to_draft``)."""
    item = emu.state.issue(repo.full_name, pull.number)
    if item is None:
        raise not_found()
    pull.draft = draft
    emu.state.touch(item)
    action = "converted_to_draft" if draft else "ready_for_review"
    payload = {"action": action, "number": pull.number, "pull_request": hook_pull(emu, base, repo, pull)}
    emit(emu, base, repo, "pull_request", payload, pending=pending, sender=sender)


def open_pull(
    emu: Emulator,
    base: str,
    repo: Repo,
    *,
    title: str,
    body: str | None,
    head: str,
    base_ref: str,
    draft: bool,
    user: str,
    acting: App | None,
    pending: list[Delivery],
    head_repo_name: str | None = None,
) -> Pull:
    """Validate and open a pull request as GitHub does; queues ``pull_request.opened``.

    ``head`` is ``branch`` or ``owner:branch``; another owner's branch must be in
    a repository of the base's fork network (``head_repo_name`` picks which),
    else 422. ``refs/pull/<n>/head`` in the base is written before the check
    for commits (a fork's commits have to be in the base to count them).
    """
    state = emu.state
    head_owner, _, head_ref = head.rpartition(":")
    head_repo = forks.head_repository(state, repo, head_owner or repo.owner, head_repo_name)
    if head_repo is None:
        raise validation_failed(
            [{"resource": "PullRequest", "field": "head", "code": "invalid"}], _CREATE_DOCS
        )
    git = emu.git(repo)
    head_sha = emu.git(head_repo).branch_sha(head_ref) if safe_ref(head_ref) else None
    base_sha = git.branch_sha(base_ref) if safe_ref(base_ref) else None
    errors = []  # GitHub names a bad base before a bad head
    if base_sha is None:
        errors.append({"resource": "PullRequest", "field": "base", "code": "invalid"})
    if head_sha is None:
        errors.append({"resource": "PullRequest", "field": "head", "code": "invalid"})
    if errors or head_sha is None or base_sha is None:
        raise validation_failed(errors, _CREATE_DOCS)
    _refuse_duplicate(emu, repo, head_repo, head_ref, base_ref, docs=_CREATE_DOCS)
    number = state.next_issue_number(repo.full_name)
    head_sha = forks.write_pull_ref(emu, repo, number, head_repo, head_ref) or head_sha
    merge_base = git.merge_base(base_sha, head_sha)
    if merge_base is None or git.count_commits(merge_base, head_sha) == 0:
        git.delete_ref(forks.pull_ref(number))
        shown = head_ref if head_repo is repo else f"{head_repo.owner}:{head_ref}"
        message = f"No commits between {base_ref} and {shown}"
        raise validation_failed(
            [{"resource": "PullRequest", "code": "custom", "message": message}], _CREATE_DOCS
        )
    now = state.now()
    item = Issue(
        id=state.new_id(),
        repo=repo.full_name,
        number=number,
        title=title,
        body=body,
        user=user,
        is_pull=True,
        created_at=now,
        updated_at=now,
        app_id=acting.id if acting else None,
    )
    pull = Pull(
        id=state.new_id(),
        repo=repo.full_name,
        number=number,
        head_ref=head_ref,
        base_ref=base_ref,
        draft=draft,
        head_repo=None if head_repo is repo else head_repo.full_name,
    )
    state.issues[item.id] = item
    state.pulls[pull.id] = pull
    payload = {"action": "opened", "number": number, "pull_request": hook_pull(emu, base, repo, pull)}
    emit(emu, base, repo, "pull_request", payload, pending=pending, sender=user, acting=acting)
    return pull


async def create_pull(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "write")
    body = req.json_object()
    missing = [
        {"resource": "PullRequest", "code": "missing_field", "field": name}
        for name in ("title", "head", "base")
        if not isinstance(body.get(name), str) or not body.get(name)
    ]
    if missing:
        raise validation_failed(missing, _CREATE_DOCS)
    text = body.get("body")
    head_repo = body.get("head_repo")
    pull = open_pull(
        req.emu,
        req.base,
        repo,
        title=str(body["title"]),
        body=text if isinstance(text, str) else None,
        head=str(body["head"]),
        base_ref=str(body["base"]),
        draft=bool(body.get("draft", False)),
        user=req.acting_login(),
        acting=req.caller.app,
        pending=req.pending,
        head_repo_name=head_repo if isinstance(head_repo, str) and head_repo else None,
    )
    out = render_pull(req.emu, req.base, repo, pull)
    return Reply(out, status=201, headers={"location": out["url"]})


def _pull(req: ApiRequest, repo: Repo, docs: str = _GET_DOCS) -> Pull:
    found = req.state.pull(repo.full_name, req.int_param("pull_number"))
    if found is None:
        raise not_found(docs)
    return found


async def get_pull(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    return Reply(render_pull(req.emu, req.base, repo, _pull(req, repo)))


async def list_pulls(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    wanted = req.query("state") or "open"
    if wanted not in {"open", "closed", "all"}:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "PullRequest", "field": "state", "code": "invalid"}],
        )
    pulls = []
    for pull in sorted(req.state.pulls.values(), key=lambda p: -p.number):
        item = req.state.issue(repo.full_name, pull.number)
        if pull.repo != repo.full_name or item is None or wanted not in {"all", item.state}:
            continue
        if (head := req.query("head")) and not _head_matches(pull, head):
            continue
        if (base_ref := req.query("base")) and base_ref != pull.base_ref:
            continue
        pulls.append(pull)
    page, headers = paginate(req, pulls)
    return Reply([render_pull(req.emu, req.base, repo, p) for p in page], headers=headers)


def _head_matches(pull: Pull, head: str) -> bool:
    """``head=owner:branch`` (GitHub's form, the head repository's owner) or a bare branch."""
    owner, _, ref = head.rpartition(":")
    head_owner = (pull.head_repo or pull.repo).split("/", 1)[0]
    return ref == pull.head_ref and (not owner or owner.lower() == head_owner.lower())


async def list_files(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo)
    head_sha, base_sha = pull_shas(req.emu, repo, pull)
    git = req.emu.git(repo)
    merge_base = git.merge_base(base_sha, head_sha)
    changes = git.changes(merge_base, head_sha) if merge_base is not None else []
    page, headers = paginate(req, changes)
    return Reply([shapes_items.diff_entry(req.base, repo, c, head_sha) for c in page], headers=headers)


def _string_or_null(body: JSONObject, name: str) -> str | None:
    """A field the schema types as a string; null counts as absent."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid_request(f"For 'properties/{name}', {_shown(value)} is not a string.", _UPDATE_DOCS)
    return value


def _shown(value: Any) -> str:
    """A value as GitHub's schema errors print it (JSON for scalars)."""
    return json.dumps(value)


def _edits(req: ApiRequest, repo: Repo, item: Issue, pull: Pull, body: JSONObject) -> dict[str, Any]:
    """Validate a PATCH body into the new values; nothing changes unless all of it is valid.

    As captured from the live API: a null or missing title leaves it alone and an empty
    one is ``missing_field``; a null or empty body clears it; a ``state`` other
    than open/closed is ignored; an unknown base names the branch.
    """
    out: dict[str, Any] = {}
    title = _string_or_null(body, "title")
    if title is not None and not title.strip():
        raise validation_failed(
            [{"resource": "PullRequest", "code": "missing_field", "field": "title"}], _UPDATE_DOCS
        )
    if title is not None:
        out["title"] = title
    if "body" in body:
        out["body"] = _string_or_null(body, "body") or None
    wanted = body.get("state")
    if wanted in {"open", "closed"} and wanted != item.state:
        if wanted == "open":
            check_reopenable(req.emu, repo, pull)
        out["state"] = wanted
    base_ref = _string_or_null(body, "base")
    if base_ref is not None and base_ref != pull.base_ref:
        if item.state == "closed" and out.get("state") != "open":
            message = "Cannot change the base branch of a closed pull request."
            raise validation_failed(
                [{"resource": "PullRequest", "code": "invalid", "field": "base", "message": message}],
                _UPDATE_DOCS,
            )
        if not safe_ref(base_ref) or req.emu.git(repo).branch_sha(base_ref) is None:
            message = f"Proposed base branch '{base_ref}' was not found"
            raise validation_failed(
                [{"resource": "PullRequest", "code": "invalid", "field": "base", "message": message}],
                _UPDATE_DOCS,
            )
        head_repo = req.state.pull_head_repo(pull) or repo
        _refuse_duplicate(req.emu, repo, head_repo, pull.head_ref, base_ref, docs=_UPDATE_DOCS)
        out["base"] = base_ref
    flag = body.get("maintainer_can_modify")
    if flag is not None and not isinstance(flag, bool):
        raise invalid_request(
            f"For 'properties/maintainer_can_modify', {_shown(flag)} is not a boolean.", _UPDATE_DOCS
        )
    if flag is not None:
        out["maintainer_can_modify"] = flag
    return out


async def update_pull(req: ApiRequest) -> Reply:
    """Edit title/body/base (``pull_request.edited`` with ``changes``), close or reopen.

    Only what actually changed is reported, and an edit that changes nothing
    sends nothing, as on GitHub. Closing and reopening share
    :func:`emulator.rest.issues.change_state` with the issues API.
    """
    from emulator.rest import issues as routes_issues  # noqa: PLC0415 - routes_issues imports this module

    repo = req.repo("pull_requests", "write")
    pull = _pull(req, repo, _UPDATE_DOCS)
    item = req.issue(repo, pull.number)
    edits = _edits(req, repo, item, pull, req.json_object())
    changes: JSONObject = {}
    if "title" in edits and edits["title"] != item.title:
        changes["title"] = {"from": item.title}
        item.title = edits["title"]
    if "body" in edits and edits["body"] != item.body:
        changes["body"] = {"from": item.body or ""}
        item.body = edits["body"]
    if "base" in edits:
        _, old_sha = pull_shas(req.emu, repo, pull)
        changes["base"] = {"ref": {"from": pull.base_ref}, "sha": {"from": old_sha}}
        pull.base_ref = edits["base"]
    pull.maintainer_can_modify = edits.get("maintainer_can_modify", pull.maintainer_can_modify)
    if changes:
        req.state.touch(item)
        payload = {
            "action": "edited",
            "number": pull.number,
            "changes": changes,
            "pull_request": hook_pull(req.emu, req.base, repo, pull),
        }
        req.emit(repo, "pull_request", payload)
    if "state" in edits:
        routes_issues.change_state(
            req.emu,
            req.base,
            repo,
            item,
            edits["state"],
            reason=None,
            pending=req.pending,
            sender=None,
            acting=req.caller.app,
        )
    return Reply(render_pull(req.emu, req.base, repo, pull))


async def list_commits(req: ApiRequest) -> Reply:
    """merge-base..head, oldest first, at most 250 (GitHub's cap), paged like every list."""
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo)
    head_sha, base_sha = pull_shas(req.emu, repo, pull)
    git = req.emu.git(repo)
    merge_base = git.merge_base(base_sha, head_sha) if NULL_SHA not in (head_sha, base_sha) else None
    shas = git.range_commits(merge_base, head_sha, MAX_PULL_COMMITS) if merge_base is not None else []
    page, headers = paginate(req, shas)
    items = [shapes.commit(req.base, repo, meta, state=req.state) for meta in git.commit_metas(page)]
    return Reply(items, headers=headers)


async def get_commit(req: ApiRequest) -> Reply:
    """One commit by sha, branch, tag or ``heads/…``/``tags/…``, with ``stats`` and ``files``."""
    repo = req.repo("contents", "read")
    ref = req.param("ref")
    git = req.emu.git(repo)
    sha = git.resolve(ref)
    if sha is None:
        if not git.branches():
            raise ApiError(409, "Git Repository is empty.", documentation_url=_COMMIT_DOCS)
        raise ApiError(422, f"No commit found for SHA: {ref}", documentation_url=_COMMIT_DOCS)
    meta = git.commit_meta(sha)
    changes = git.changes(meta.parents[0] if meta.parents else EMPTY_TREE, sha)
    additions = sum(c.additions for c in changes)
    deletions = sum(c.deletions for c in changes)
    extra: JSONObject = {
        "stats": {"total": additions + deletions, "additions": additions, "deletions": deletions},
        "files": [shapes_items.diff_entry(req.base, repo, c, sha) for c in changes[:MAX_COMMIT_FILES]],
    }
    return Reply(shapes.commit(req.base, repo, meta, state=req.state, extra=extra))


class _CommitRef(Convertor[str]):
    """A commit ref that may hold slashes (``heads/baton/issue-1``) but is not a commit sub-resource.

    Without the look-behinds ``…/commits/{ref}/check-runs`` (in routes_checks,
    registered after this module) would be read as a ref ending in ``/check-runs``.
    """

    regex = (
        "[^/].*"
        + "".join(
            f"(?<!/{name})"
            for name in ("check-runs", "check-suites", "status", "statuses", "comments", "pulls")
        )
        + "(?<!/branches-where-head)"
    )

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("commitref", _CommitRef())

ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}/pulls", list_pulls),
    ("POST", "/repos/{owner}/{repo}/pulls", create_pull),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", get_pull),
    ("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}", update_pull),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files", list_files),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/commits", list_commits),
    ("GET", "/repos/{owner}/{repo}/commits/{ref:commitref}", get_commit),
]
