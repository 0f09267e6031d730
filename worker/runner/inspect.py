"""What the agent changed, judged as hostile input, before anything is committed.

The agent worked in a plain directory (the workspace) filled from the base
commit with ``git archive``; the repository's git dir is elsewhere and was never
visible to it. Every byte in the workspace is the agent's, so git is run here as
if the workspace were an attacker's upload:

1. ``snapshot`` turns the workspace into a tree in the repository's object
   store: a private index (``GIT_INDEX_FILE``) started from the base tree, then
   ``git add --all`` over the workspace. Nothing the workspace holds is config:
   no system, global or caller config (``GIT_*`` is scrubbed, ``HOME`` is an
   empty directory), hooks and fsmonitor off, no attributes file, and no filter
   driver may be defined at all (refused, not overridden), so a
   ``.gitattributes`` naming one runs nothing. Anything named like ``.git`` is
   kept away from git, with the directory holding an exact ``.git`` (else git
   would read it as a nested repository, follow a ``gitdir:`` file wherever it
   points and add a gitlink); those paths, special files and a symlinked
   ``.gitmodules`` stay as they were in the base tree, and ``inspect`` names them.
   A FIFO or device where git reads ``.gitignore`` (or ``.gitattributes``,
   ``.gitmodules``) would hang git whatever the pathspec says: then git is not
   run at all and the snapshot is the base tree. The agent's ``.gitignore`` is
   honoured like anyone's: an ignored file is simply not in the tree.
2. ``inspect`` diffs the base tree against that tree (renames found, line
   counts with no attributes from the workspace, so ``*.py -diff`` hides
   nothing), walks the workspace with ``lstat`` for what git does not record,
   and hands the facts to ``inspect_rules.violations``. Added lines that look
   like a credential (``worker.gates.secrets``) are a violation too: the branch
   is pushed before any merge gate reads it, and a public branch is public.
3. ``commit`` writes one commit on a new branch with ``commit-tree`` and
   ``update-ref`` (the branch must not exist; HEAD, the index and any checked
   out branch are never touched; hooks off, never signed).

Git failing, a workspace that cannot be read and a filter driver in the
repository's config all fail closed with ``InspectError``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from worker.gates import secrets
from worker.runner import inspect_git as git_
from worker.runner.inspect_git import (
    BRANCH_EXISTS,
    FILTER_CONFIGURED,
    GIT_FAILED,
    UNKNOWN_REVISION,
    WORKSPACE_UNREADABLE,
    InspectError,
)
from worker.runner.inspect_rules import (
    DEFAULT_MAX_BLOB_BYTES,
    GITHUB_FILE_LIMIT,
    MODE_EXECUTABLE,
    MODE_FILE,
    Change,
    ChangeKind,
    Code,
    Stat,
    Violation,
    blocks_git,
    entry_violations,
    is_git_name,
    snapshot_excludes,
    stat_of,
    violations,
)

__all__ = [
    "BRANCH_EXISTS",
    "DEFAULT_MAX_BLOB_BYTES",
    "FILTER_CONFIGURED",
    "GITHUB_FILE_LIMIT",
    "GIT_FAILED",
    "UNKNOWN_REVISION",
    "WORKSPACE_UNREADABLE",
    "Change",
    "ChangeKind",
    "Code",
    "InspectError",
    "Inspection",
    "Stat",
    "Violation",
    "WorkspaceScan",
    "commit",
    "inspect",
    "scan_workspace",
    "snapshot",
]

#: Files named inside a planted ``.git`` directory, in its violation's detail (hooks first).
_SHOWN = 3
_GATHERED = 100


@dataclass(frozen=True)
class Inspection:
    """The verdict on one workspace: ``ok`` only with no violation at all."""

    base_tree: str
    tree: str
    changes: tuple[Change, ...]
    stat: Stat
    violations: tuple[Violation, ...]

    @property
    def diff_lines(self) -> int:
        return self.stat.insertions + self.stat.deletions

    @property
    def no_changes(self) -> bool:
        return not self.changes

    @property
    def ok(self) -> bool:
        return not self.violations

    def stat_data(self) -> dict[str, int]:
        return {
            "files": self.stat.files,
            "insertions": self.stat.insertions,
            "deletions": self.stat.deletions,
            "diff_lines": self.diff_lines,
        }


@dataclass(frozen=True)
class WorkspaceScan:
    """What ``lstat`` saw that git would not record, and what ``snapshot`` leaves out."""

    violations: tuple[Violation, ...]
    excluded: tuple[str, ...]
    #: Special files where git would read ``.gitignore`` and the like (see ``blocks_git``).
    blocking: tuple[str, ...] = ()


# --- the workspace, as lstat sees it --------------------------------------------------------------


def scan_workspace(workspace: Path) -> WorkspaceScan:
    """Walk every entry (symlinks never followed, ``.git`` directories entered too), sorted."""
    found: list[Violation] = []
    excluded: set[str] = set()
    blocking: list[str] = []
    samples: dict[str, list[str]] = {}
    pending: list[tuple[str, str | None]] = [("", None)]
    while pending:
        rel, git_root = pending.pop()
        try:
            with os.scandir(workspace / rel) as listing:
                entries = sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in listing)
        except OSError as exc:
            raise InspectError(WORKSPACE_UNREADABLE, f"cannot read {rel or '.'!r} in the workspace") from exc
        subdirs: list[tuple[str, str | None]] = []
        for name, mode in entries:
            path = f"{rel}/{name}" if rel else name
            found.extend(entry_violations(path, name, mode))
            excluded.update(snapshot_excludes(path, name, mode))
            if blocks_git(name, mode):
                blocking.append(path)
            root = git_root
            if root is not None:
                if not stat.S_ISDIR(mode) and len(samples[root]) < _GATHERED:
                    samples[root].append(path[len(root) + 1 :])
            elif is_git_name(name) and stat.S_ISDIR(mode):
                root = path
                samples[root] = []
            if stat.S_ISDIR(mode):
                subdirs.append((path, root))
        pending.extend(reversed(subdirs))
    found = [_with_samples(v, samples.get(v.path, [])) for v in found]
    return WorkspaceScan(tuple(found), tuple(sorted(excluded)), tuple(sorted(blocking)))


def _with_samples(violation: Violation, names: list[str]) -> Violation:
    if violation.code is not Code.GIT_METADATA or not names:
        return violation
    shown = sorted(names, key=lambda n: (not n.startswith("hooks/"), n))[:_SHOWN]
    more = ", ..." if len(names) > _SHOWN else ""
    return replace(violation, detail=f"{violation.detail} (holds {', '.join(shown)}{more})")


# --- the three steps -------------------------------------------------------------------------------


def snapshot(git_dir: Path, workspace: Path, base: str) -> str:
    """The tree the workspace holds, written into ``git_dir``'s object store.

    Paths in ``scan_workspace(workspace).excluded`` keep their base version; a workspace
    with a FIFO or device where git reads ``.gitignore`` and the like gives the base tree
    itself (git is never run on it). Either way ``inspect`` names what was left out."""
    top = _workspace(workspace)
    scan = scan_workspace(top)
    with git_.session(git_dir, work_tree=top) as git:
        git_.refuse_filters(git)
        base_tree = git.rev(base, "tree")
        if scan.blocking:
            return base_tree
        git.run("read-tree", base_tree)
        specs = [":(top)", *(f":(top,exclude,literal){p}" for p in scan.excluded)]
        git.run(
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            stdin=b"\0".join(os.fsencode(s) for s in specs),
        )
        return git.run("write-tree").decode("ascii").strip()


def inspect(
    git_dir: Path,
    base: str,
    tree: str,
    workspace: Path,
    *,
    protected: Sequence[str],
    max_diff_lines: int,
    max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
) -> Inspection:
    """Judge ``tree`` (from ``snapshot``) against ``base``, and ``workspace`` as lstat sees it.
    ``protected`` is the policy's ``paths.protected``; ``ALWAYS_PROTECTED`` applies regardless."""
    scan = scan_workspace(_workspace(workspace))
    with git_.session(git_dir) as git:
        base_tree, new_tree = git.rev(base, "tree"), git.rev(tree, "tree")
        changes = sorted(git_.diff(git, base_tree, new_tree), key=lambda c: (c.path, c.old_path or ""))
        blobs = {c.new_blob for c in changes if c.new_mode in (MODE_FILE, MODE_EXECUTABLE)}
        sizes = git_.blob_sizes(git, sorted(blobs))
        links, base_links = git_.symlinks(git, new_tree), git_.symlinks(git, base_tree)
        scanned = secrets.scan_patch(git_.patch(git, base_tree, new_tree))
    found = violations(
        changes,
        protected=protected,
        max_diff_lines=max_diff_lines,
        max_blob_bytes=max_blob_bytes,
        sizes=sizes,
        links=links,
        base_links=base_links,
    )
    leaked = [
        Violation(Code.SECRET_MATERIAL, f.path, f"line {f.line}: {f.description}") for f in scanned.findings
    ]
    ordered = sorted({*found, *scan.violations, *leaked}, key=lambda v: (v.path, v.code, v.detail))
    return Inspection(base_tree, new_tree, tuple(changes), stat_of(changes), tuple(ordered))


def commit(
    git_dir: Path,
    base: str,
    tree: str,
    *,
    branch: str,
    message: str,
    author: tuple[str, str],
    committer: tuple[str, str] | None = None,
    date: datetime | None = None,
    parents: Sequence[str] = (),
) -> str:
    """One commit of ``tree`` on the new branch ``branch``; its id.

    Its parents are ``parents`` in order (each must name a commit, none twice), or else
    ``base`` alone: a worker updating a PR branch gives (the branch's tip, base).
    Author and committer are ``author`` unless ``committer`` is given; both are dated
    ``date`` (timezone-aware), or else the base commit's committer date, so the same
    inputs always make the same commit. Refuses (``inspect.branch_exists``) if the
    branch exists, including one created meanwhile."""
    _check_branch(branch)
    for who in (author, committer or author):
        _check_identity(who)
    if "\0" in message:
        raise ValueError("a commit message cannot hold a NUL byte")
    if date is not None and date.utcoffset() is None:
        raise ValueError("the commit date must be timezone-aware")
    with git_.session(git_dir) as git:
        base_id, new_tree = git.rev(base, "commit"), git.rev(tree, "tree")
        ids_of_parents = [git.rev(p, "commit") for p in parents] or [base_id]
        if len(set(ids_of_parents)) != len(ids_of_parents):
            raise ValueError(f"parents {list(parents)} name the same commit twice; give each once")
        ref = f"refs/heads/{branch}"
        if git.call("check-ref-format", ref)[0] != 0:
            raise ValueError(f"{branch!r} is not a valid branch name")
        if git.call("rev-parse", "--verify", "--quiet", ref)[0] == 0:
            raise InspectError(BRANCH_EXISTS, f"branch {branch!r} already exists; nothing was committed")
        stamp = _git_date(date) if date is not None else git_.committer_date(git, base_id)
        (a_name, a_email), (c_name, c_email) = author, committer or author
        ids = {
            "GIT_AUTHOR_NAME": a_name,
            "GIT_AUTHOR_EMAIL": a_email,
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_NAME": c_name,
            "GIT_COMMITTER_EMAIL": c_email,
            "GIT_COMMITTER_DATE": stamp,
        }
        text = message if message.endswith("\n") else message + "\n"
        linked = [arg for parent in ids_of_parents for arg in ("-p", parent)]
        made = git.run(
            "commit-tree", "--no-gpg-sign", *linked, "-F", "-", new_tree, stdin=text.encode(), env=ids
        )
        sha = made.decode("ascii").strip()
        code, _, _ = git.call(
            "update-ref", "--no-deref", "-m", "baton: commit", ref, sha, "0" * len(sha), env=ids
        )
        if code != 0:
            raise InspectError(
                BRANCH_EXISTS, f"branch {branch!r} could not be created; nothing was committed"
            )
    return sha


def _workspace(path: Path) -> Path:
    top = path.resolve(strict=True)
    if not top.is_dir():
        raise ValueError(f"{path} is not a directory")
    return top


def _check_branch(branch: str) -> None:
    if not branch or branch.startswith("-") or any(ord(ch) < 0x20 for ch in branch):
        raise ValueError(f"{branch!r} is not a valid branch name")


def _check_identity(who: tuple[str, str]) -> None:
    for part in who:
        if not part.strip() or any(ch in part for ch in "<>\n\0"):
            raise ValueError(f"{who!r} is not a usable git identity (name, email)")


def _git_date(when: datetime) -> str:
    offset = when.utcoffset()
    minutes = int(offset.total_seconds()) // 60 if offset is not None else 0
    sign = "-" if minutes < 0 else "+"
    return f"{int(when.timestamp())} {sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
