"""Forks, and the ``refs/pull/<n>/head`` refs GitHub keeps in a pull request's base repository.

A fork is another account's repository whose git starts as a copy of its
parent's branches and tags (a real fetch of the parent's bare repository);
``parent`` is the repository it was forked from and ``source`` the root of the
fork network. A pull request may take its head from any repository of the
base's network (``head: "owner:branch"``). Whichever repository holds the
head, the base keeps ``refs/pull/<n>/head`` at the head's tip (fetching the
fork's commits into the base), so anyone who may read the base can fetch and
check out an outside contributor's commits without any access to the fork.
"""

from __future__ import annotations

from emulator.core import Emulator, emit
from emulator.rest.shapes import webhook_repository
from emulator.state import Delivery, Pull, Repo, State, User
from emulator.types import JSONObject


def pull_ref(number: int) -> str:
    """GitHub's ref for a pull request's head in the base repository."""
    return f"refs/pull/{number}/head"


def in_network(state: State, a: Repo, b: Repo) -> bool:
    """Both repositories descend from the same source (a repository is in its own network)."""
    return state.source_repo(a).full_name == state.source_repo(b).full_name


def head_repository(state: State, base_repo: Repo, owner: str, name: str | None = None) -> Repo | None:
    """The repository of ``owner`` in ``base_repo``'s network a ``head: "owner:branch"`` names.

    ``name`` (the create call's ``head_repo``) picks one when the owner has
    several; otherwise the base itself for the base's owner, else the owner's
    repository of the base's name first. None: the owner has no repository in the network.
    """
    if name is None and owner.lower() == base_repo.owner.lower():
        return base_repo
    candidates = [
        r
        for r in state.repos.values()
        if r.owner.lower() == owner.lower() and in_network(state, r, base_repo)
    ]
    if name is not None:
        candidates = [r for r in candidates if r.name.lower() == name.lower()]
    candidates.sort(key=lambda r: (r.name.lower() != base_repo.name.lower(), r.id))
    return candidates[0] if candidates else None


def write_pull_ref(emu: Emulator, repo: Repo, number: int, head_repo: Repo, head_ref: str) -> str | None:
    """Point ``refs/pull/<number>/head`` of ``repo`` at the head branch's tip; answers that sha.

    A fork's commits are fetched into the base first. None (and nothing
    written) when the head branch does not exist.
    """
    head_git = emu.git(head_repo)
    tip = head_git.branch_sha(head_ref)
    if tip is None:
        return None
    git = emu.git(repo)
    ref = pull_ref(number)
    if git.ref_sha(ref) == tip:
        return tip
    git.hide_pull_refs()  # repositories made before refs/pull existed lack it
    if head_repo.full_name == repo.full_name:
        git.set_ref(ref, tip)
        return tip
    git.fetch(head_git, [f"+refs/heads/{head_ref}:{ref}"])
    return git.ref_sha(ref)


def sync_pull_ref(emu: Emulator, repo: Repo, pull: Pull) -> str | None:
    """:func:`write_pull_ref` for an existing pull (None when its head repository or branch is gone)."""
    head_repo = emu.state.pull_head_repo(pull)
    if head_repo is None:
        return None
    return write_pull_ref(emu, repo, pull.number, head_repo, pull.head_ref)


def forkee(base: str, state: State, fork: Repo) -> JSONObject:
    """The ``forkee`` of a ``fork`` webhook: the new repository, plus ``public``."""
    out = webhook_repository(base, state, fork)
    out["public"] = not fork.private
    return out


def create_fork(
    emu: Emulator,
    base: str,
    parent: Repo,
    owner: User,
    name: str,
    *,
    sender: str,
    pending: list[Delivery],
) -> Repo:
    """Fork ``parent`` into ``owner``/``name``: same visibility, default branch and description;
    every branch and tag copied. Queues ``fork`` (to the parent's Apps) into ``pending``.

    The caller checks that the name is free and the owner is not the parent's owner.
    """
    state = emu.state
    fork = Repo(
        id=state.new_id(),
        owner=owner.login,
        name=name,
        private=parent.private,
        default_branch=parent.default_branch,
        description=parent.description,
        created_at=state.now(),
        parent=parent.full_name,
    )
    git = emu.git(fork)
    if git.exists():
        raise ValueError(f"{git.path} already exists on disk")
    git.init(parent.default_branch)
    git.fetch(emu.git(parent), ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
    state.repos[fork.full_name] = fork
    emit(emu, base, parent, "fork", {"forkee": forkee(base, state, fork)}, pending=pending, sender=sender)
    return fork
