"""The emulator's world: plain records in memory, dumped to ``DIR/state.json``.

Everything GitHub would remember between requests lives here (apps,
installations, tokens, repositories, issues, pulls, comments, reviews and
review comments, check runs, webhook deliveries). Git objects do not: they live in the bare repositories.
Records hold only JSON-able fields, so the dump is each record's fields as they are.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson

#: Repository roles GitHub knows, strongest first, and the permission each maps to.
ROLE_PERMISSION: dict[str, str] = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}


def iso(ts: float) -> str:
    """GitHub's timestamp format (githubkit parses ``expires_at`` with exactly this)."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class User:
    id: int
    login: str
    type: str = "User"  # User | Organization | Bot
    site_admin: bool = False
    name: str | None = None
    email: str | None = None


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: str
    public_key_pem: str
    client_id: str
    webhook_url: str | None
    webhook_secret: str | None
    hook_id: int
    bot_user_id: int
    permissions: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    description: str = ""
    created_at: float = 0.0


@dataclass
class Installation:
    id: int
    app_id: int
    account: str
    permissions: dict[str, str]
    repository_selection: str  # all | selected
    repositories: list[str]  # full names; ignored when selection is "all"
    events: list[str] = field(default_factory=list)
    created_at: float = 0.0
    suspended_at: float | None = None
    suspended_by: str | None = None  # the login of who suspended it


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    private: bool
    default_branch: str
    description: str | None = None
    #: login -> role (admin | maintain | write | triage | read)
    collaborators: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    #: the org's custom property values for this repository (name -> value)
    custom_properties: dict[str, Any] = field(default_factory=dict)
    #: for a fork, the full name of the repository it was forked from (GitHub's ``parent``)
    parent: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Label:
    id: int
    repo: str
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass
class Issue:
    id: int
    repo: str
    number: int
    title: str
    body: str | None
    user: str
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    state_reason: str | None = None  # completed | not_planned | reopened (issues only)
    is_pull: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    closed_at: float | None = None
    app_id: int | None = None  # set when created through an installation token
    #: the parent issue's ``id`` when this is a sub-issue (it may be in another repository of the owner)
    parent_id: int | None = None
    #: this sub-issue's place among its parent's (lowest first); see ``emulator.hierarchy``
    sub_issue_rank: int = 0


@dataclass
class Pull:
    id: int
    repo: str
    number: int
    head_ref: str
    base_ref: str
    draft: bool = False
    merged: bool = False
    maintainer_can_modify: bool = False
    #: full name of the repository holding ``head_ref`` when it is not ``repo`` (a fork); None: ``repo``
    head_repo: str | None = None
    #: set by a merge (see ``emulator.merging``): when, by whom (a login), and GitHub's ``merge_commit_sha``
    merged_at: float | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    #: the head and the base branch's tip as they were at the merge: a merged pull's ``head.sha``/``base.sha``
    merged_head_sha: str | None = None
    merged_base_sha: str | None = None


@dataclass
class Comment:
    id: int
    repo: str
    issue_number: int
    body: str
    user: str
    created_at: float = 0.0
    updated_at: float = 0.0
    app_id: int | None = None


@dataclass
class Review:
    """A pull request review: ``PENDING`` until submitted, then ``COMMENTED``, ``APPROVED`` or
    ``CHANGES_REQUESTED``. Every review comment belongs to one (a single comment or a reply
    is a review of its own, as on GitHub)."""

    id: int
    repo: str
    number: int  # the pull request's
    user: str
    body: str | None
    state: str
    commit_id: str
    created_at: float = 0.0
    submitted_at: float | None = None
    app_id: int | None = None


@dataclass
class ReviewComment:
    """A comment on a line of a pull request's diff; a reply names its thread's first comment."""

    id: int
    repo: str
    number: int  # the pull request's
    review_id: int
    user: str
    body: str
    path: str
    commit_id: str
    diff_hunk: str
    position: int
    line: int
    side: str  # LEFT | RIGHT
    start_line: int | None = None
    start_side: str | None = None
    in_reply_to_id: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    app_id: int | None = None


@dataclass
class CheckRun:
    id: int
    repo: str
    app_id: int
    check_suite_id: int
    head_sha: str
    name: str
    status: str = "queued"
    conclusion: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    details_url: str | None = None
    external_id: str | None = None
    output_title: str | None = None
    output_summary: str | None = None
    output_text: str | None = None
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckSuite:
    id: int
    repo: str
    app_id: int
    head_sha: str
    head_branch: str | None = None
    before: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class Token:
    token: str
    installation_id: int
    expires_at: float
    permissions: dict[str, str]
    #: full names this token may reach; None means every repository of the installation
    repositories: list[str] | None


@dataclass
class Delivery:
    id: int
    guid: str
    app_id: int
    event: str
    action: str | None
    payload: dict[str, Any]
    status_code: int | None = None
    error: str | None = None
    delivered_at: float | None = None
    duration_ms: float | None = None
    redelivery: bool = False
    #: What was sent where and what came back, kept for ``GET /app/hook/deliveries/{id}``.
    url: str | None = None
    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] | None = None
    response_body: str | None = None
    #: GitHub's word for an attempt that got no HTTP answer ("timed out", "failed to connect to host").
    failure: str | None = None


@dataclass
class ManifestCode:
    """A code the manifest flow handed to ``redirect_url``: exchanged once, within the hour."""

    code: str
    app_id: int
    pem: str = field(repr=False)
    client_secret: str = field(repr=False)
    created_at: float


T = TypeVar("T")

#: The collections whose records belong to one repository (``repo``), forgotten with it.
_PER_REPO = (
    "labels",
    "issues",
    "pulls",
    "comments",
    "reviews",
    "review_comments",
    "check_runs",
    "check_suites",
)

#: Each collection: its attribute name and record type, in dump order.
_COLLECTIONS: dict[str, type[Any]] = {
    "users": User,
    "apps": App,
    "installations": Installation,
    "repos": Repo,
    "labels": Label,
    "issues": Issue,
    "pulls": Pull,
    "comments": Comment,
    "reviews": Review,
    "review_comments": ReviewComment,
    "check_runs": CheckRun,
    "check_suites": CheckSuite,
    "tokens": Token,
    "deliveries": Delivery,
}


@dataclass
class Settings:
    """Knobs tests turn (token lifetime is the one GitHub fixes at one hour)."""

    token_ttl_seconds: float = 3600.0
    rate_limit: int = 5000


class State:
    """All records, keyed for the look-ups handlers need; saved soon after a change (see ``persist``)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.lock = threading.RLock()
        self.next_id = 1000
        self.settings = Settings()
        self.users: dict[str, User] = {}  # by login
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.repos: dict[str, Repo] = {}  # by full name
        self.labels: dict[int, Label] = {}
        self.issues: dict[int, Issue] = {}
        self.pulls: dict[int, Pull] = {}
        self.comments: dict[int, Comment] = {}
        self.reviews: dict[int, Review] = {}
        self.review_comments: dict[int, ReviewComment] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.check_suites: dict[int, CheckSuite] = {}
        self.tokens: dict[str, Token] = {}  # by token string
        self.deliveries: dict[int, Delivery] = {}
        #: Manifest-flow codes not yet exchanged (``emulator.manifests``), by code. Never saved:
        #: each holds a new App's private key, and is good for an hour only.
        self.manifest_codes: dict[str, ManifestCode] = {}

    # -- ids and time -------------------------------------------------------
    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    @staticmethod
    def now() -> float:
        return time.time()

    def touch(self, item: Issue) -> None:
        """Record a change to an issue or pull request that a webhook will carry.

        ``updated_at`` moves on by at least one whole second (GitHub's timestamps
        have second precision), so two deliveries about the same issue never
        carry the same ``updated_at``, and so never the same body.
        """
        item.updated_at = max(self.now(), float(int(item.updated_at) + 1))

    # -- look-ups -----------------------------------------------------------
    def user(self, login: str) -> User | None:
        """Logins are case-insensitive on GitHub."""
        found = self.users.get(login)
        if found is not None:
            return found
        lowered = login.lower()
        return next((u for u in self.users.values() if u.login.lower() == lowered), None)

    def repo(self, owner: str, name: str) -> Repo | None:
        found = self.repos.get(f"{owner}/{name}")
        if found is not None:
            return found
        key = f"{owner}/{name}".lower()
        return next((r for r in self.repos.values() if r.full_name.lower() == key), None)

    def issue(self, repo: str, number: int) -> Issue | None:
        return next((i for i in self.issues.values() if i.repo == repo and i.number == number), None)

    def pull(self, repo: str, number: int) -> Pull | None:
        return next((p for p in self.pulls.values() if p.repo == repo and p.number == number), None)

    def pull_head_repo(self, pull: Pull) -> Repo | None:
        """The repository a pull's head branch lives in (a fork, or the base); None once deleted."""
        return self.repos.get(pull.head_repo or pull.repo)

    def parent_repo(self, repo: Repo) -> Repo | None:
        return self.repos.get(repo.parent) if repo.parent else None

    def source_repo(self, repo: Repo) -> Repo:
        """The root of the repository's fork network (GitHub's ``source``; itself when not a fork)."""
        seen = {repo.full_name}
        while (up := self.parent_repo(repo)) is not None and up.full_name not in seen:
            seen.add(up.full_name)
            repo = up
        return repo

    def next_issue_number(self, repo: str) -> int:
        """Issues and pulls share one sequence per repository, as on GitHub."""
        return 1 + max((i.number for i in self.issues.values() if i.repo == repo), default=0)

    def label(self, repo: str, name: str) -> Label | None:
        lowered = name.lower()
        return next(
            (lb for lb in self.labels.values() if lb.repo == repo and lb.name.lower() == lowered), None
        )

    def installation_for_repo(self, app_id: int, repo: Repo) -> Installation | None:
        """The app's installation on the repository's owner that covers it, if any."""
        for inst in self.installations.values():
            if inst.app_id != app_id or inst.account.lower() != repo.owner.lower():
                continue
            if inst.repository_selection == "all" or repo.full_name in inst.repositories:
                return inst
        return None

    def installation_repos(self, inst: Installation) -> list[Repo]:
        if inst.repository_selection == "all":
            return [r for r in self.repos.values() if r.owner.lower() == inst.account.lower()]
        return [self.repos[n] for n in inst.repositories if n in self.repos]

    def delete_repo(self, repo: Repo) -> None:
        """Forget a repository and everything recorded under it (git objects are not here)."""
        name = repo.full_name
        with self.lock:
            self.repos.pop(name, None)
            for collection in _PER_REPO:
                records: dict[int, Any] = getattr(self, collection)
                for key in [k for k, rec in records.items() if rec.repo == name]:
                    del records[key]
            for item in self.issues.values():  # sub-issues elsewhere lose a parent that is gone
                if item.parent_id is not None and item.parent_id not in self.issues:
                    item.parent_id = None
            for inst in self.installations.values():
                inst.repositories = [n for n in inst.repositories if n != name]
            for token in self.tokens.values():
                if token.repositories is not None:
                    token.repositories = [n for n in token.repositories if n != name]

    def check_suite_for(self, repo: str, app_id: int, head_sha: str) -> CheckSuite:
        """One suite per (app, commit), created on first use as GitHub does."""
        for suite in self.check_suites.values():
            if suite.repo == repo and suite.app_id == app_id and suite.head_sha == head_sha:
                return suite
        suite = CheckSuite(id=self.new_id(), repo=repo, app_id=app_id, head_sha=head_sha)
        self.check_suites[suite.id] = suite
        return suite

    # -- persistence --------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Every record as plain data, sharing the records' own lists and dicts: serialise it at once.

        Not ``dataclasses.asdict``: its deep copy cost more than the JSON encoding itself.
        """
        out: dict[str, Any] = {"next_id": self.next_id, "settings": _plain(self.settings)}
        for name in _COLLECTIONS:
            out[name] = [_plain(rec) for rec in getattr(self, name).values()]
        return out

    def save(self) -> None:
        """Atomically rewrite ``state.json`` so a crash never leaves half a file.

        Unindented and with orjson: five times faster than the standard library's
        encoder on a 5 MB state (what a benchmark leaves); ``python -m json.tool``
        shows it laid out. Non-string keys become strings, as ``json.dumps`` makes them.
        """
        if self.directory is None:
            return
        with self.lock:
            data = orjson.dumps(self.to_json(), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-", suffix=".json")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            Path(tmp).replace(self.directory / "state.json")

    @classmethod
    def load(cls, directory: Path | None) -> State:
        """A state from ``DIR/state.json`` when present, else an empty one."""
        state = cls(directory)
        if directory is None:
            return state
        path = directory / "state.json"
        if not path.exists():
            return state
        data = json.loads(path.read_text(encoding="utf-8"))
        state.next_id = int(data.get("next_id", state.next_id))
        state.settings = Settings(**data.get("settings", {}))
        for name, record_type in _COLLECTIONS.items():
            target: dict[Any, Any] = getattr(state, name)
            for raw in data.get(name, []):
                rec = record_type(**raw)
                target[_key(name, rec)] = rec
        return state


#: Each record type's field names (``dataclasses.fields`` builds a new tuple on every call).
_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _plain(rec: Any) -> dict[str, Any]:
    """A record's fields as a dict (a shallow ``dataclasses.asdict``: records hold only JSON)."""
    names = _FIELD_NAMES.get(type(rec))
    if names is None:
        names = _FIELD_NAMES[type(rec)] = tuple(f.name for f in dataclasses.fields(rec))
    return {name: getattr(rec, name) for name in names}


def _key(collection: str, rec: Any) -> Any:
    if collection == "users":
        return rec.login
    if collection == "repos":
        return rec.full_name
    if collection == "tokens":
        return rec.token
    return rec.id
