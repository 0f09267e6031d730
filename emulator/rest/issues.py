"""Issues, issue comments and labels, with the webhooks GitHub sends for each change.

The mutations (:func:`add_labels`, :func:`remove_label`, :func:`create_comment`,
:func:`edit_comment`, :func:`change_state`) are plain functions so the admin API can perform them *as
a person* (the ``sender`` Baton must check) through the same code path as the
REST API. Each one moves the issue's ``updated_at`` on (:meth:`State.touch`).
"""

from __future__ import annotations

import json
from typing import Any

from emulator.auth import Caller, authorize_repo
from emulator.core import ApiRequest, Emulator, Reply, RouteSpec, emit, paginate
from emulator.errors import ApiError, invalid_request, not_found
from emulator.rest import shapes, shapes_items
from emulator.rest.pulls import hook_pull
from emulator.state import App, Comment, Delivery, Issue, Label, Repo

_LABELS_DOCS = "https://docs.github.com/rest/issues/labels#add-labels-to-an-issue"


def _issue_permission(caller: Caller, repo: Repo, item: Issue, level: str) -> None:
    """Issues need ``issues``; a pull request's conversation also accepts ``pull_requests``."""
    if not item.is_pull:
        authorize_repo(caller, repo, "issues", level)
        return
    try:
        authorize_repo(caller, repo, "pull_requests", level)
    except ApiError:
        authorize_repo(caller, repo, "issues", level)


def _issue_event(item: Issue) -> str:
    return "pull_request" if item.is_pull else "issues"


def _event_body(emu: Emulator, base: str, repo: Repo, item: Issue, action: str) -> dict[str, Any]:
    state = emu.state
    if item.is_pull:  # a pull's event carries the pull request
        pull = state.pull(repo.full_name, item.number)
        if pull is not None:
            return {
                "action": action,
                "number": item.number,
                "pull_request": hook_pull(emu, base, repo, pull),
            }
    return {"action": action, "issue": shapes_items.issue(base, state, repo, item, hook=True)}


def add_labels(
    emu: Emulator,
    base: str,
    repo: Repo,
    item: Issue,
    names: list[str],
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """Add labels (creating unknown ones, as GitHub does); one ``labeled`` event per new label."""
    state = emu.state
    for name in names:
        lb = state.label(repo.full_name, name)
        if lb is None:
            lb = Label(id=state.new_id(), repo=repo.full_name, name=name)
            state.labels[lb.id] = lb
        if any(existing.lower() == lb.name.lower() for existing in item.labels):
            continue
        item.labels.append(lb.name)
        state.touch(item)
        body = _event_body(emu, base, repo, item, "labeled")
        body["label"] = shapes.label(base, lb)
        emit(emu, base, repo, _issue_event(item), body, pending=pending, sender=sender, acting=acting)


def remove_label(
    emu: Emulator,
    base: str,
    repo: Repo,
    item: Issue,
    name: str,
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    present = next((n for n in item.labels if n.lower() == name.lower()), None)
    lb = emu.state.label(repo.full_name, name)
    if present is None or lb is None:
        raise ApiError(
            404,
            "Label does not exist",
            documentation_url="https://docs.github.com/rest/issues/labels#remove-a-label-from-an-issue",
        )
    item.labels.remove(present)
    emu.state.touch(item)
    body = _event_body(emu, base, repo, item, "unlabeled")
    body["label"] = shapes.label(base, lb)
    emit(emu, base, repo, _issue_event(item), body, pending=pending, sender=sender, acting=acting)


def create_comment(
    emu: Emulator,
    base: str,
    repo: Repo,
    item: Issue,
    text: str,
    *,
    pending: list[Delivery],
    user: str,
    acting: App | None,
) -> Comment:
    state = emu.state
    now = state.now()
    created = Comment(
        id=state.new_id(),
        repo=repo.full_name,
        issue_number=item.number,
        body=text,
        user=user,
        created_at=now,
        updated_at=now,
        app_id=acting.id if acting is not None else None,
    )
    state.comments[created.id] = created
    state.touch(item)  # a comment is activity on the issue, as on GitHub
    body = {
        "action": "created",
        "issue": shapes_items.issue(base, state, repo, item, hook=True),
        "comment": shapes_items.comment(base, state, repo, created),
    }
    emit(emu, base, repo, "issue_comment", body, pending=pending, sender=user, acting=acting)
    return created


def edit_comment(
    emu: Emulator,
    base: str,
    repo: Repo,
    item: Issue,
    comment: Comment,
    *,
    text: str,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """New body; ``issue_comment.edited`` (with ``changes.body.from``) only if it changed."""
    state = emu.state
    previous = comment.body
    comment.body = text
    comment.updated_at = state.now()
    if previous == text:
        return
    state.touch(item)
    body = {
        "action": "edited",
        "changes": {"body": {"from": previous}},
        "issue": shapes_items.issue(base, state, repo, item, hook=True),
        "comment": shapes_items.comment(base, state, repo, comment),
    }
    emit(emu, base, repo, "issue_comment", body, pending=pending, sender=sender, acting=acting)


def change_state(
    emu: Emulator,
    base: str,
    repo: Repo,
    item: Issue,
    new_state: str,
    *,
    reason: str | None,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """Close or reopen an issue or pull request; sends ``closed``/``reopened`` (issues or pull_request).

    An issue's ``state_reason`` becomes ``reason`` (``completed`` by default) on
    closing and ``reopened`` on reopening; a pull request's stays null.
    """
    state = emu.state
    state.touch(item)
    item.state = new_state
    if new_state == "closed":
        item.closed_at = item.updated_at
        item.state_reason = None if item.is_pull else (reason or "completed")
        action = "closed"
    else:
        item.closed_at = None
        item.state_reason = None if item.is_pull else "reopened"
        action = "reopened"
    body = _event_body(emu, base, repo, item, action)
    emit(emu, base, repo, _issue_event(item), body, pending=pending, sender=sender, acting=acting)


def _ruby(value: Any) -> str:
    """A JSON value as GitHub's schema errors print it (Ruby's ``inspect``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}"=>{_ruby(v)}' for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_ruby(v) for v in value) + "]"
    return json.dumps(value)


def _label_names(body: Any, *, allow_empty: bool) -> list[str]:
    """``{"labels": [...]}`` or a bare array; items are names or ``{"name": ...}``.

    Adding labels needs at least one (GitHub's schema says ``minItems: 1``);
    setting them to an empty list removes them all.
    """
    raw = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(raw, list):
        raise invalid_request('"labels" wasn\'t supplied.')
    if not raw and not allow_empty:
        shown = _ruby(body)
        raise invalid_request(
            'No subschema in "anyOf" matched.\n'
            f"For 'anyOf/0', {shown} is not an array.\n"
            f"For 'anyOf/1', {shown} is not an array.\n"
            "1 item required; only 0 were supplied.",
            _LABELS_DOCS,
        )
    names: list[str] = []
    for item in raw:
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name.strip():
            raise ApiError(
                422,
                "Validation Failed",
                errors=[{"resource": "Label", "code": "invalid", "field": "name"}],
            )
        names.append(name)
    return names


async def get_issue(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "read")
    return Reply(shapes_items.issue(req.base, req.state, repo, item))


async def list_comments(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "read")
    found = sorted(
        (
            c
            for c in req.state.comments.values()
            if c.repo == repo.full_name and c.issue_number == item.number
        ),
        key=lambda c: c.id,
    )
    page, headers = paginate(req, found)
    return Reply([shapes_items.comment(req.base, req.state, repo, c) for c in page], headers=headers)


def _comment_body(req: ApiRequest) -> str:
    text = req.json_object().get("body")
    if not isinstance(text, str):
        raise invalid_request('"body" wasn\'t supplied.')
    if len(text) > 65536:
        raise ApiError(
            422,
            "Validation Failed",
            errors=[
                {
                    "resource": "IssueComment",
                    "code": "unprocessable",
                    "field": "data",
                    "message": "Body is too long (maximum is 65536 characters)",
                }
            ],
        )
    return text


async def post_comment(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "write")
    text = _comment_body(req)
    created = create_comment(
        req.emu,
        req.base,
        repo,
        item,
        text,
        pending=req.pending,
        user=req.acting_login(),
        acting=req.caller.app,
    )
    out = shapes_items.comment(req.base, req.state, repo, created)
    return Reply(out, status=201, headers={"location": out["url"]})


def _find_comment(req: ApiRequest, repo: Repo) -> tuple[Comment, Issue]:
    found = req.state.comments.get(req.int_param("comment_id"))
    if found is None or found.repo != repo.full_name:
        raise not_found()
    return found, req.issue(repo, found.issue_number)


async def get_comment(req: ApiRequest) -> Reply:
    repo = req.repo()
    found, item = _find_comment(req, repo)
    _issue_permission(req.caller, repo, item, "read")
    return Reply(shapes_items.comment(req.base, req.state, repo, found))


async def update_comment(req: ApiRequest) -> Reply:
    repo = req.repo()
    found, item = _find_comment(req, repo)
    _issue_permission(req.caller, repo, item, "write")
    text = _comment_body(req)
    edit_comment(
        req.emu,
        req.base,
        repo,
        item,
        found,
        text=text,
        pending=req.pending,
        sender=None,
        acting=req.caller.app,
    )
    return Reply(shapes_items.comment(req.base, req.state, repo, found))


def _labels_reply(req: ApiRequest, repo: Repo, item: Issue) -> Reply:
    labels = [lb for name in item.labels if (lb := req.state.label(repo.full_name, name))]
    return Reply([shapes.label(req.base, lb) for lb in labels])


async def list_labels(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "read")
    return _labels_reply(req, repo, item)


async def post_labels(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "write")
    names = _label_names(req.body, allow_empty=False)
    add_labels(req.emu, req.base, repo, item, names, pending=req.pending, sender=None, acting=req.caller.app)
    return _labels_reply(req, repo, item)


async def put_labels(req: ApiRequest) -> Reply:
    """Replace the issue's labels: ``unlabeled`` for dropped ones, ``labeled`` for new ones."""
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "write")
    names = _label_names(req.body, allow_empty=True)
    wanted = {n.lower() for n in names}
    for name in [n for n in item.labels if n.lower() not in wanted]:
        remove_label(
            req.emu, req.base, repo, item, name, pending=req.pending, sender=None, acting=req.caller.app
        )
    add_labels(req.emu, req.base, repo, item, names, pending=req.pending, sender=None, acting=req.caller.app)
    return _labels_reply(req, repo, item)


async def delete_label(req: ApiRequest) -> Reply:
    repo = req.repo()
    item = req.issue(repo, req.int_param("issue_number"))
    _issue_permission(req.caller, repo, item, "write")
    remove_label(
        req.emu,
        req.base,
        repo,
        item,
        req.param("name"),
        pending=req.pending,
        sender=None,
        acting=req.caller.app,
    )
    return _labels_reply(req, repo, item)


_CREATE_DOCS = "https://docs.github.com/rest/issues/issues#create-an-issue"
_LIST_DOCS = "https://docs.github.com/rest/issues/issues#list-repository-issues"
#: GitHub's limit on an issue's title (a longer one is a 422).
MAX_TITLE_CHARS = 256


def open_issue(
    emu: Emulator, base: str, repo: Repo, *, title: str, body: str | None, user: str, pending: list[Delivery],
    acting: App | None, labels: list[str] | None = None,
) -> Issue:  # fmt: skip
    """A new issue: ``issues.opened``, then one ``labeled`` per label (the admin API and REST alike)."""
    state = emu.state
    now = state.now()
    item = Issue(id=state.new_id(), repo=repo.full_name, number=state.next_issue_number(repo.full_name),
                 title=title, body=body, user=user, created_at=now, updated_at=now)  # fmt: skip
    state.issues[item.id] = item
    opened = {"action": "opened", "issue": shapes_items.issue(base, state, repo, item, hook=True)}
    emit(emu, base, repo, "issues", opened, pending=pending, sender=user if acting is None else None,
         acting=acting)  # fmt: skip
    add_labels(emu, base, repo, item, labels or [], pending=pending, sender=user if acting is None else None,
               acting=acting)  # fmt: skip
    return item


async def create_issue(req: ApiRequest) -> Reply:
    """``POST /repos/{owner}/{repo}/issues``: 201 with the issue; ``title`` required (422 without)."""
    repo = req.repo("issues", "write")
    body = req.json_object()
    title = body.get("title")
    if isinstance(title, int) and not isinstance(title, bool):
        title = str(title)  # GitHub takes a number as the title
    if not isinstance(title, str) or not title.strip():
        raise invalid_request('Invalid request.\n\n"title" wasn\'t supplied.', _CREATE_DOCS)
    if len(title) > MAX_TITLE_CHARS:
        raise invalid_request(f"title is too long (maximum is {MAX_TITLE_CHARS} characters)", _CREATE_DOCS)
    text = body.get("body")
    if text is not None and not isinstance(text, str):
        raise invalid_request("Invalid request.\n\nFor 'properties/body', it is not a string.", _CREATE_DOCS)
    names = _label_names(body, allow_empty=True) if "labels" in body else []
    item = open_issue(req.emu, req.base, repo, title=title, body=text, user=req.acting_login(),
                      pending=req.pending, acting=req.caller.app, labels=names)  # fmt: skip
    out = shapes_items.issue(req.base, req.state, repo, item)
    return Reply(out, status=201, headers={"location": out["url"]})


async def list_issues(req: ApiRequest) -> Reply:
    """``GET /repos/{owner}/{repo}/issues``: open ones by default, newest first; pull requests
    included (they carry ``pull_request``), as GitHub lists them."""
    repo = req.repo("issues", "read")
    wanted = req.query("state") or "open"
    if wanted not in ("open", "closed", "all"):
        raise invalid_request(f"{wanted!r} is not a valid state", _LIST_DOCS)
    creator = (req.query("creator") or "").lower()
    labels = {n.strip().lower() for n in (req.query("labels") or "").split(",") if n.strip()}
    found = [
        item for item in req.state.issues.values()
        if item.repo == repo.full_name and wanted in ("all", item.state)
        and (not creator or item.user.lower() == creator)
        and labels <= {n.lower() for n in item.labels}
    ]  # fmt: skip
    found.sort(key=lambda item: item.created_at, reverse=req.query("direction") != "asc")
    chunk, headers = paginate(req, found)
    return Reply([shapes_items.issue(req.base, req.state, repo, item) for item in chunk], headers=headers)


ROUTES: list[RouteSpec] = [
    ("GET", "/repos/{owner}/{repo}/issues", list_issues),
    ("POST", "/repos/{owner}/{repo}/issues", create_issue),
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", get_comment),
    ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}", update_comment),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}", get_issue),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments", list_comments),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments", post_comment),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/labels", list_labels),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels", post_labels),
    ("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels", put_labels),
    ("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name:path}", delete_label),
]
