"""Pull requests: create (→ ``pull_request.opened``), get, list, changed files, all from git.

Also the changes only a person makes here (draft ↔ ready for review, and the
checks GitHub runs before reopening); closing and reopening go through
:func:`emulator.routes_issues.change_state`, as on GitHub.

A pull's head and base SHAs are read from the branches on every request, so a
push to the head branch shows up exactly as it does on GitHub.
"""

from __future__ import annotations

from emulator import shapes_items
from emulator.core import ApiRequest, Emulator, Reply, RouteSpec, emit, paginate
from emulator.errors import ApiError, not_found, validation_failed
from emulator.gitrepo import safe_ref
from emulator.state import App, Delivery, Issue, Pull, Repo
from emulator.types import JSONObject

_CREATE_DOCS = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
_UPDATE_DOCS = "https://docs.github.com/rest/pulls/pulls#update-a-pull-request"


def pull_shas(emu: Emulator, repo: Repo, pull: Pull) -> tuple[str, str]:
    git = emu.git(repo)
    head = git.branch_sha(pull.head_ref) or "0" * 40
    base = git.branch_sha(pull.base_ref) or "0" * 40
    return head, base


def render_pull(emu: Emulator, base: str, repo: Repo, pull: Pull) -> JSONObject:
    state = emu.state
    item = state.issue(repo.full_name, pull.number)
    if item is None:
        raise not_found()
    head_sha, base_sha = pull_shas(emu, repo, pull)
    git = emu.git(repo)
    stats = (0, 0, 0, 0)
    merge_base = git.merge_base(base_sha, head_sha) if "0" * 40 not in (head_sha, base_sha) else None
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
    )


def _refuse_duplicate(emu: Emulator, repo: Repo, head_ref: str, base_ref: str, docs: str) -> None:
    """One open pull request per head and base, as on GitHub."""
    state = emu.state
    for other in state.pulls.values():
        issue = state.issue(repo.full_name, other.number)
        if (
            other.repo == repo.full_name
            and other.head_ref == head_ref
            and other.base_ref == base_ref
            and issue is not None
            and issue.state == "open"
        ):
            message = f"A pull request already exists for {repo.owner}:{head_ref}."
            raise validation_failed([{"resource": "PullRequest", "code": "custom", "message": message}], docs)


def check_reopenable(emu: Emulator, repo: Repo, pull: Pull) -> None:
    """GitHub refuses to reopen a pull whose head branch is gone, or that would duplicate an open one."""
    if emu.git(repo).branch_sha(pull.head_ref) is None:
        message = f"state cannot be changed. The {pull.head_ref} branch has been deleted."
        raise validation_failed(
            [{"resource": "PullRequest", "code": "custom", "message": message}], _UPDATE_DOCS
        )
    _refuse_duplicate(emu, repo, pull.head_ref, pull.base_ref, _UPDATE_DOCS)


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
    payload = {"action": action, "number": pull.number, "pull_request": render_pull(emu, base, repo, pull)}
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
) -> Pull:
    """Validate and open a pull request as GitHub does; queues ``pull_request.opened``."""
    state = emu.state
    head_ref = head.split(":", 1)[1] if ":" in head else head
    if ":" in head and head.split(":", 1)[0].lower() != repo.owner.lower():
        raise validation_failed(
            [{"resource": "PullRequest", "field": "head", "code": "invalid"}], _CREATE_DOCS
        )
    git = emu.git(repo)
    head_sha = git.branch_sha(head_ref) if safe_ref(head_ref) else None
    base_sha = git.branch_sha(base_ref) if safe_ref(base_ref) else None
    errors = []
    if head_sha is None:
        errors.append({"resource": "PullRequest", "field": "head", "code": "invalid"})
    if base_sha is None:
        errors.append({"resource": "PullRequest", "field": "base", "code": "invalid"})
    if errors or head_sha is None or base_sha is None:
        raise validation_failed(errors, _CREATE_DOCS)
    _refuse_duplicate(emu, repo, head_ref, base_ref, _CREATE_DOCS)
    merge_base = git.merge_base(base_sha, head_sha)
    if merge_base is None or git.count_commits(merge_base, head_sha) == 0:
        message = f"No commits between {base_ref} and {head_ref}"
        raise validation_failed(
            [{"resource": "PullRequest", "code": "custom", "message": message}], _CREATE_DOCS
        )
    now = state.now()
    number = state.next_issue_number(repo.full_name)
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
    )
    state.issues[item.id] = item
    state.pulls[pull.id] = pull
    payload = {"action": "opened", "number": number, "pull_request": render_pull(emu, base, repo, pull)}
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
    )
    out = render_pull(req.emu, req.base, repo, pull)
    return Reply(out, status=201, headers={"location": out["url"]})


def _pull(req: ApiRequest, repo: Repo) -> Pull:
    found = req.state.pull(repo.full_name, req.int_param("pull_number"))
    if found is None:
        raise not_found()
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
        if (head := req.query("head")) and head.split(":")[-1] != pull.head_ref:
            continue
        if (base_ref := req.query("base")) and base_ref != pull.base_ref:
            continue
        pulls.append(pull)
    page, headers = paginate(req, pulls)
    return Reply([render_pull(req.emu, req.base, repo, p) for p in page], headers=headers)


async def list_files(req: ApiRequest) -> Reply:
    repo = req.repo("pull_requests", "read")
    pull = _pull(req, repo)
    head_sha, base_sha = pull_shas(req.emu, repo, pull)
    git = req.emu.git(repo)
    merge_base = git.merge_base(base_sha, head_sha)
    changes = git.changes(merge_base, head_sha) if merge_base is not None else []
    page, headers = paginate(req, changes)
    return Reply([shapes_items.diff_entry(req.base, repo, c, head_sha) for c in page], headers=headers)


ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}/pulls", list_pulls),
    ("POST", "/repos/{owner}/{repo}/pulls", create_pull),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", get_pull),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files", list_files),
]
