"""Merging a pull request: GitHub's refusals, the commits it makes, the records and the webhooks.

The REST API (:mod:`emulator.rest.merges`) and the admin API's people
(:mod:`emulator.admin.merges`) both merge through :func:`merge`. In GitHub's words and codes
(the OpenAPI description's ``pulls/merge`` and what GitHub answers): 405 ``Pull Request is not
mergeable`` (closed, already merged, a conflict, a rebase that cannot be made), 405 ``Pull
Request is still a draft``, 409 ``Head branch was modified. Review and try the merge again.``
(``sha`` is not the head), 405 ``Base branch was modified. Review and try the merge again.``
(the base moved while the merge was made). The order of those checks is the emulator's. A
refusal changes nothing: the commits are made first (:mod:`emulator.gitmerge`) and the base
branch moves only if it is still where it was.

The commits: a merge commit's author is the merger, a squash's the pull request's author, a
rebased commit keeps its own; the committer of all of them is GitHub (``GitHub
<noreply@github.com>``, its ``web-flow`` account), as for every commit GitHub makes on the
web. An account's address is its ``email``, else its ``<id>+<login>@users.noreply.github.com``.
Messages, as GitHub's defaults for a new repository: a merge commit ``Merge pull request #N
from owner/branch`` then a blank line and the pull's title; a squash of one commit that
commit's title with `` (#N)`` and its body, of several the pull's title with `` (#N)`` and
``* <message>`` for each; ``commit_title``/``commit_message`` replace the two parts (a rebase
has neither). The commits are not signed (GitHub signs its own).

Then, in GitHub's order: ``push`` to the base branch, ``pull_request.closed`` with ``merged:
true``, and, for a merge into the default branch, ``issues.closed`` for each issue its closing
keywords name (:mod:`emulator.closing`). A merged pull keeps its head and base as they were
(``head.sha``, ``base.sha``, its commits and files), and cannot be reopened.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator import closing, gitmerge
from emulator.core import Emulator, emit
from emulator.errors import ApiError, not_found
from emulator.gitmerge import Unmergeable
from emulator.gitrepo import CommitMeta, GitError, GitRepo, Signature
from emulator.pushes import push_events
from emulator.rest.pulls import MAX_PULL_COMMITS, NULL_SHA, hook_pull, pull_shas
from emulator.rest.shapes import WEB_FLOW_EMAIL, bot_user
from emulator.state import App, Delivery, Issue, Pull, Repo, State

DOCS = "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request"
CHECK_DOCS = "https://docs.github.com/rest/pulls/pulls#check-if-a-pull-request-has-been-merged"
METHODS = ("merge", "squash", "rebase")
MERGED = "Pull Request successfully merged"
NOT_MERGEABLE = "Pull Request is not mergeable"
DRAFT = "Pull Request is still a draft"
HEAD_MOVED = "Head branch was modified. Review and try the merge again."
BASE_MOVED = "Base branch was modified. Review and try the merge again."
#: Who commits what GitHub makes on the web (the address of its ``web-flow`` account).
GITHUB_COMMITTER = ("GitHub", WEB_FLOW_EMAIL)
#: At most this many of the merge's new commits are read for closing keywords.
MAX_KEYWORD_COMMITS = 2048


@dataclass(frozen=True)
class MergeAsk:
    """What the merger asked for: a method, the message's two parts, the head it expects."""

    method: str = "merge"
    title: str | None = None
    message: str | None = None
    sha: str | None = None


def identity(state: State, login: str) -> tuple[str, str]:
    """The name and address GitHub writes into a commit for an account (an App's bot included)."""
    if login.lower().endswith("[bot]"):
        app = next((a for a in state.apps.values() if f"{a.slug}[bot]".lower() == login.lower()), None)
        if app is not None:
            bot = bot_user(state, app)
            return bot.login, f"{bot.id}+{bot.login}@users.noreply.github.com"
    user = state.user(login)
    if user is None:
        return login, f"{login}@users.noreply.github.com"
    return user.name or user.login, user.email or f"{user.id}+{user.login}@users.noreply.github.com"


def _joined(subject: str, body: str) -> str:
    return f"{subject}\n\n{body}" if body else subject


@dataclass(frozen=True)
class _Target:
    """The pull being merged, its head and the base's tip as read, and who merges it."""

    repo: Repo
    pull: Pull
    item: Issue
    head: str
    base_tip: str
    merger: str


def merge_message(repo: Repo, pull: Pull, item: Issue, ask: MergeAsk) -> str:
    """``Merge pull request #N from owner/branch``, then the pull's title (GitHub's defaults)."""
    owner = (pull.head_repo or repo.full_name).split("/", 1)[0]
    subject = f"Merge pull request #{pull.number} from {owner}/{pull.head_ref}"
    body = ask.message if ask.message is not None else item.title
    return _joined(ask.title if ask.title is not None else subject, body)


def squash_message(pull: Pull, item: Issue, metas: list[CommitMeta], ask: MergeAsk) -> str:
    """One commit: its title `` (#N)`` and its body; several: the pull's title `` (#N)`` and
    ``* <message>`` for each."""
    own = [meta for meta in metas if len(meta.parents) <= 1]  # GitHub does not count merge commits
    if len(own) == 1:
        first, _, rest = own[0].message.partition("\n")
        subject, body = f"{first} (#{pull.number})", rest.strip()
    else:
        subject = f"{item.title} (#{pull.number})"
        body = "\n\n".join(f"* {meta.message}" for meta in own)
    return _joined(
        ask.title if ask.title is not None else subject, ask.message if ask.message is not None else body
    )


def _refuse(status: int, message: str) -> ApiError:
    return ApiError(status, message, documentation_url=DOCS)


def _commit(state: State, git: GitRepo, target: _Target, ask: MergeAsk) -> str:
    """The base's new tip, made by ``ask.method`` (no ref moves), or GitHub's 405."""
    head, base_tip = target.head, target.base_tip
    now = int(state.now())
    committer = Signature(*GITHUB_COMMITTER, now)
    try:
        if ask.method == "squash":
            metas = git.commit_metas(git.range_commits(base_tip, head, MAX_PULL_COMMITS))
            author = Signature(*identity(state, target.item.user), now)
            message = squash_message(target.pull, target.item, metas, ask)
            return gitmerge.squash(git, base_tip, head, message, author=author, committer=committer)
        if ask.method == "rebase":
            return gitmerge.rebase(git, base_tip, head, committer=committer)
        author = Signature(*identity(state, target.merger), now)
        message = merge_message(target.repo, target.pull, target.item, ask)
        return gitmerge.merge_commit(git, base_tip, head, message, author=author, committer=committer)
    except (Unmergeable, GitError) as exc:
        raise _refuse(405, NOT_MERGEABLE) from exc


def _record(state: State, target: _Target, tip: str) -> None:
    """The pull request is merged and closed (closed at the moment it was merged)."""
    pull, item = target.pull, target.item
    state.touch(item)
    item.state, item.state_reason, item.closed_at = "closed", None, item.updated_at
    pull.merged, pull.merged_at, pull.merged_by = True, item.updated_at, target.merger
    pull.merge_commit_sha = tip
    pull.merged_head_sha, pull.merged_base_sha = target.head, target.base_tip


def _merger(state: State, sender: str | None, acting: App | None) -> str:
    """The login of who merges: the person, else the App's bot."""
    if sender is not None:
        return sender
    return bot_user(state, acting).login if acting is not None else "ghost"


def merge(
    emu: Emulator,
    base: str,
    repo: Repo,
    pull: Pull,
    ask: MergeAsk,
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> str:
    """Merge ``pull`` as ``sender`` (a person) or ``acting`` (an App); answers the base's new tip.

    Queues ``push``, ``pull_request.closed`` and any ``issues.closed`` into ``pending``.
    """
    state = emu.state
    item = state.issue(repo.full_name, pull.number)
    if item is None:
        raise not_found(DOCS)
    if pull.merged or item.state != "open":
        raise _refuse(405, NOT_MERGEABLE)
    if pull.draft:
        raise _refuse(405, DRAFT)
    head, base_tip = pull_shas(emu, repo, pull)
    if ask.sha is not None and ask.sha != head:
        raise _refuse(409, HEAD_MOVED)
    if NULL_SHA in (head, base_tip):
        raise _refuse(405, NOT_MERGEABLE)
    target = _Target(repo, pull, item, head, base_tip, _merger(state, sender, acting))
    git = emu.git(repo)
    tip = _commit(state, git, target, ask)
    before = {**git.branches(), pull.base_ref: base_tip}
    try:
        git.set_ref(f"refs/heads/{pull.base_ref}", tip, old=base_tip)
    except GitError as exc:
        raise _refuse(405, BASE_MOVED) from exc
    after = git.branches()
    pending.extend(push_events(emu, base, repo, before=before, after=after, sender=sender, acting=acting))
    _record(state, target, tip)
    closed = {"action": "closed", "number": pull.number, "pull_request": hook_pull(emu, base, repo, pull)}
    emit(emu, base, repo, "pull_request", closed, pending=pending, sender=sender, acting=acting)
    if pull.base_ref == repo.default_branch:
        landed = git.commit_metas(git.new_commits(tip, [base_tip], MAX_KEYWORD_COMMITS))
        texts = [item.body, *(meta.message for meta in landed)]
        closing.close_named(emu, base, repo, item, texts, pending=pending, sender=sender, acting=acting)
    return tip
