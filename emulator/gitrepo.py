"""Bare git repositories under ``DIR/repos/{owner}/{repo}.git``, driven by ``git``.

Plain ``git clone``/``git push`` work on these directories, and every read the
API serves (contents, pull heads, changed files) comes from them, so what a
client pushed is what it reads back. Only ``git`` subprocesses, each with a
timeout; refs and paths are validated before they reach a command line.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_SECONDS = 20.0
#: git's empty tree: what a root commit's changes are measured against.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_SAFE_REF = re.compile(r"^[A-Za-z0-9._/\-]+$")
_SHA = re.compile(r"^[0-9a-f]{4,40}$")
#: ``[+]refs/…:refs/…`` (``*`` allowed), the only refspecs :meth:`GitRepo.fetch` passes on.
_REFSPEC = re.compile(r"^\+?refs/[A-Za-z0-9._/\-*]+:refs/[A-Za-z0-9._/\-*]+$")
_ENV = {
    "GIT_AUTHOR_NAME": "Baton Emulator",
    "GIT_AUTHOR_EMAIL": "emulator@localhost",
    "GIT_COMMITTER_NAME": "Baton Emulator",
    "GIT_COMMITTER_EMAIL": "emulator@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


@dataclass(frozen=True, slots=True)
class CommitMeta:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    timestamp: int
    message: str
    committer_name: str = ""
    committer_email: str = ""
    committer_timestamp: int = 0


_META_FORMAT = "%H%n%T%n%P%n%an%n%ae%n%at%n%cn%n%ce%n%ct%n%B"


def _parse_meta(record: str) -> CommitMeta:
    sha, tree, parents, name, email, when, c_name, c_email, c_when, message = (
        record.split("\n", 9) + [""] * 10
    )[:10]
    return CommitMeta(
        sha,
        tree,
        tuple(parents.split()),
        name,
        email,
        int(when or 0),
        message.rstrip("\n"),
        committer_name=c_name,
        committer_email=c_email,
        committer_timestamp=int(c_when or 0),
    )


class GitError(Exception):
    """A git command failed; the message carries its stderr."""


@dataclass(frozen=True, slots=True)
class Signature:
    """Who authored or committed a commit, and when (epoch seconds, written as UTC)."""

    name: str
    email: str
    timestamp: int

    def env(self, role: str) -> dict[str, str]:
        """``GIT_<role>_NAME``/``_EMAIL``/``_DATE`` (``role``: AUTHOR or COMMITTER)."""
        return {
            f"GIT_{role}_NAME": self.name,
            f"GIT_{role}_EMAIL": self.email,
            f"GIT_{role}_DATE": f"@{self.timestamp} +0000",
        }


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    type: str  # blob | tree | commit
    sha: str
    size: int
    path: str


@dataclass(frozen=True)
class FileChange:
    filename: str
    status: str  # added | removed | modified | renamed
    additions: int
    deletions: int
    sha: str
    previous_filename: str | None
    patch: str | None


def safe_ref(ref: str) -> bool:
    """A ref we may put on a git command line (no options, no revision syntax)."""
    return bool(_SAFE_REF.match(ref)) and not ref.startswith(("-", "/")) and ".." not in ref


#: Commit metas by repository and full id (an id names one commit's content, for ever).
_META_CACHE: dict[tuple[str, str], CommitMeta] = {}
_META_CACHE_MAX = 10_000


class GitRepo:
    """One bare repository; every method is a bounded ``git`` call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(
        self, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """One bounded ``git`` call, whatever its exit status (:meth:`_git` insists on 0)."""
        full_env = {**os.environ, **_ENV, **(env or {})}
        try:
            return subprocess.run(  # noqa: S603 - fixed executable, validated arguments
                ["git", "--git-dir", str(self.path), *args],  # noqa: S607
                input=stdin,
                capture_output=True,
                timeout=GIT_TIMEOUT_SECONDS,
                env=full_env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {args[0]} timed out") from exc

    def _git(self, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        done = self._run(*args, stdin=stdin, env=env)
        if done.returncode != 0:
            raise GitError(done.stderr.decode("utf-8", "replace").strip() or f"git {args[0]} failed")
        return done.stdout

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    def exists(self) -> bool:
        return (self.path / "HEAD").exists()

    def init(self, default_branch: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._git("init", "--bare", "--quiet", f"--initial-branch={default_branch}")
        # Pushes from clones land here; allow deleting/creating refs like GitHub.
        self._git("config", "receive.denyDeleteCurrent", "warn")
        self.hide_pull_refs()

    def hide_pull_refs(self) -> None:
        """``refs/pull/*`` are GitHub's: fetchable by anyone who may read, never pushable.

        ``receive.hideRefs`` hides them from ``git push`` only (a push to one is
        refused with "deny updating a hidden ref", as on GitHub); upload-pack,
        so ``git ls-remote`` and ``git fetch``, still lists and serves them.
        """
        self._git("config", "receive.hideRefs", "refs/pull")

    def fetch(self, source: GitRepo, refspecs: list[str]) -> None:
        """Copy refs (and their objects) from another bare repository on this machine."""
        if not all(_REFSPEC.match(spec) and ".." not in spec for spec in refspecs):
            raise GitError(f"bad refspec in {refspecs}")
        self._git("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(source.path), *refspecs)

    def ref_sha(self, ref: str) -> str | None:
        """The commit a full ref name (``refs/pull/1/head``) points at, or None."""
        if not ref.startswith("refs/") or not safe_ref(ref):
            return None
        try:
            out = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except GitError:
            return None
        return out.decode().strip() or None

    def set_ref(self, ref: str, sha: str, *, old: str | None = None) -> None:
        """Point ``ref`` at ``sha``; with ``old``, only if it still points there (else :class:`GitError`)."""
        if not ref.startswith("refs/") or not safe_ref(ref) or not _SHA.match(sha):
            raise GitError(f"bad ref update {ref} -> {sha}")
        if old is not None and not _SHA.match(old):
            raise GitError(f"bad expected value {old} for {ref}")
        self._git("update-ref", ref, sha, *([old] if old is not None else []))

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """The tree of merging two commits (``git merge-tree --write-tree``), or None on a conflict.

        Nothing changes but new objects: no ref moves, no work tree is needed.
        """
        if not (_SHA.match(ours) and _SHA.match(theirs)):
            raise GitError(f"bad merge of {ours} and {theirs}")
        done = self._run("merge-tree", "--write-tree", "--no-messages", ours, theirs)
        if done.returncode == 1:  # conflicts: the first line is a tree with conflict markers
            return None
        if done.returncode != 0:
            raise GitError(done.stderr.decode("utf-8", "replace").strip() or "git merge-tree failed")
        return done.stdout.decode().split("\n", 1)[0].strip()

    def commit_tree(
        self, tree: str, parents: list[str], message: str, *, author: Signature, committer: Signature
    ) -> str:
        """A new commit object (no ref moves); the message goes in as given, through stdin."""
        if not all(_SHA.match(sha) for sha in (tree, *parents)):
            raise GitError(f"bad commit of {tree} on {parents}")
        env = {**author.env("AUTHOR"), **committer.env("COMMITTER")}
        args = [arg for parent in parents for arg in ("-p", parent)]
        text = message if message.endswith("\n") else message + "\n"  # as git commit ends one
        out = self._git("commit-tree", tree, *args, stdin=text.encode(), env=env)
        return out.decode().strip()

    def delete_ref(self, ref: str) -> None:
        if ref.startswith("refs/") and safe_ref(ref):
            self._git("update-ref", "-d", ref)

    def author_emails(self, ref: str, limit: int) -> set[str]:
        """Author emails of the last ``limit`` commits reachable from ``ref`` (empty if there is none)."""
        sha = self.resolve(ref)
        if sha is None:
            return set()
        out = self._git("log", f"--max-count={limit}", "--format=%ae", sha, "--")
        return {line for line in out.decode("utf-8", "replace").splitlines() if line}

    def resolve(self, ref: str) -> str | None:
        """A branch, tag or (short) sha → the full commit sha, or None."""
        if not safe_ref(ref):
            return None
        candidates = [ref] if _SHA.match(ref) or ref.startswith("refs/") else []
        if ref.startswith(("heads/", "tags/")):  # GitHub's documented ``heads/<branch>`` form
            candidates.append(f"refs/{ref}")
        candidates += [f"refs/heads/{ref}", f"refs/tags/{ref}"]
        for candidate in candidates:
            try:
                out = self._git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}")
            except GitError:
                continue
            sha = out.decode().strip()
            if sha:
                return sha
        return None

    def branch_sha(self, branch: str) -> str | None:
        if not safe_ref(branch):
            return None
        loose = self._loose_ref(f"refs/heads/{branch}")
        if loose is not None:
            return loose
        try:
            out = self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        except GitError:
            return None
        return out.decode().strip() or None

    def _loose_ref(self, ref: str) -> str | None:
        """A loose ref's commit id read from its file (no ``git`` process); None: ask git."""
        try:
            text = (self.path / ref).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if re.fullmatch(r"[0-9a-f]{40}", text) else None

    def commit_meta(self, sha: str) -> CommitMeta:
        """Tree, parents, author, committer and the full message (trailers included) of one commit."""
        return self.commit_metas([sha])[0]

    def commit_metas(self, shas: list[str]) -> list[CommitMeta]:
        """:meth:`commit_meta` for many commits in one ``git log`` (a page of a pull's commits).

        A commit named by its full id can never change, so its meta is remembered (a ``git``
        process per branch read was a tenth of the emulator's time under load)."""
        if not shas:
            return []
        where = str(self.path)
        if all((where, sha) in _META_CACHE for sha in shas):
            return [_META_CACHE[where, sha] for sha in shas]
        out = self._git("log", "--no-walk=unsorted", "-z", f"--format={_META_FORMAT}", *shas, "--")
        metas = [_parse_meta(record) for record in out.decode("utf-8", "replace").split("\0") if record]
        if len(_META_CACHE) > _META_CACHE_MAX:
            _META_CACHE.clear()
        for asked, meta in zip(shas, metas, strict=False):
            if asked == meta.sha:  # a full id, not a ref or an abbreviation
                _META_CACHE[where, asked] = meta
        return metas

    def branches(self) -> dict[str, str]:
        """Every branch name and its tip."""
        out = self._git("for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
        pairs = (line.split(" ", 1) for line in out.decode().splitlines() if line)
        return dict(pairs)

    def has_commit(self, sha: str) -> bool:
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return False
        try:
            self._git("cat-file", "-e", f"{sha}^{{commit}}")
        except GitError:
            return False
        return True

    def entry(self, commit: str, path: str) -> TreeEntry | None:
        """The tree entry at ``path`` in ``commit`` (root when path is empty)."""
        if not path:
            tree = self._git("rev-parse", f"{commit}^{{tree}}").decode().strip()
            return TreeEntry("040000", "tree", tree, 0, "")
        out = self._git("ls-tree", "-l", "-z", commit, "--", path)
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, name = record.partition(b"\t")
            mode, kind, sha, size = meta.decode().split()
            if name.decode() == path:
                return TreeEntry(mode, kind, sha, 0 if size == "-" else int(size), path)
        return None

    def list_dir(self, commit: str, path: str) -> list[TreeEntry]:
        target = f"{commit}:{path}" if path else f"{commit}^{{tree}}"
        out = self._git("ls-tree", "-l", "-z", target)
        entries = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, name = record.partition(b"\t")
            mode, kind, sha, size = meta.decode().split()
            full = f"{path}/{name.decode()}" if path else name.decode()
            entries.append(TreeEntry(mode, kind, sha, 0 if size == "-" else int(size), full))
        return entries

    def new_commits(self, head: str, exclude: list[str], limit: int) -> list[str]:
        """Commits reachable from ``head`` but from none of ``exclude``, oldest first (at most ``limit``)."""
        shas = [head, *exclude]
        if not all(_SHA.match(s) for s in shas):
            return []
        out = self._git("rev-list", "--reverse", head, "--not", *exclude, "--")
        return out.decode().split()[-limit:]

    def range_commits(self, base: str, head: str, limit: int) -> list[str]:
        """Commits in ``base..head``, oldest first, the first ``limit`` of them (a pull's commit list)."""
        if not (_SHA.match(base) and _SHA.match(head)):
            return []
        out = self._git("rev-list", "--reverse", "--topo-order", head, "--not", base, "--")
        return out.decode().split()[:limit]

    def touched(self, sha: str) -> tuple[list[str], list[str], list[str]]:
        """(added, removed, modified) paths of one commit against its first parent."""
        out = self._git("diff-tree", "--no-commit-id", "-r", "--root", "--name-status", "-z", sha)
        fields = out.decode("utf-8", "replace").split("\0")
        added: list[str] = []
        removed: list[str] = []
        modified: list[str] = []
        i = 0
        while i + 1 < len(fields) and fields[i]:
            code, name = fields[i], fields[i + 1]
            i += 2
            {"A": added, "D": removed}.get(code[0], modified).append(name)
        return added, removed, modified

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            self._git("merge-base", "--is-ancestor", ancestor, descendant)
        except GitError:
            return False
        return True

    def blob(self, sha: str) -> bytes:
        return self._git("cat-file", "blob", sha)

    def merge_base(self, a: str, b: str) -> str | None:
        try:
            return self._git("merge-base", a, b).decode().strip() or None
        except GitError:
            return None

    def count_commits(self, base: str, head: str) -> int:
        return int(self._git("rev-list", "--count", f"{base}..{head}").decode().strip() or "0")

    def changes(self, base: str, head: str) -> list[FileChange]:
        """Files changed from ``base`` to ``head``, as GitHub lists a PR's files."""
        status_out = self._git("diff", "--name-status", "-M", "-z", base, head).split(b"\0")
        numstat_out = self._git("diff", "--numstat", "-M", "-z", base, head).split(b"\0")
        counts: dict[str, tuple[int, int]] = {}
        i = 0
        while i < len(numstat_out) and numstat_out[i]:
            added, deleted, name = numstat_out[i].decode().split("\t", 2)
            if not name:  # rename: the next two fields are old and new names
                name = numstat_out[i + 2].decode()
                i += 2
            counts[name] = (int(added) if added != "-" else 0, int(deleted) if deleted != "-" else 0)
            i += 1
        changes = []
        i = 0
        while i < len(status_out) and status_out[i]:
            code = status_out[i].decode()
            previous = None
            if code.startswith(("R", "C")):
                previous, name = status_out[i + 1].decode(), status_out[i + 2].decode()
                i += 3
            else:
                name = status_out[i + 1].decode()
                i += 2
            status = {"A": "added", "D": "removed", "M": "modified", "R": "renamed", "C": "copied"}.get(
                code[0], "changed"
            )
            add, rem = counts.get(name, (0, 0))
            blob_ref = base if status == "removed" else head
            entry = self.entry(blob_ref, name)
            changes.append(
                FileChange(
                    filename=name,
                    status=status,
                    additions=add,
                    deletions=rem,
                    sha=entry.sha if entry else "0" * 40,
                    previous_filename=previous,
                    patch=self._patch(base, head, name, previous),
                )
            )
        return changes

    def _patch(self, base: str, head: str, name: str, previous: str | None) -> str | None:
        paths = [previous, name] if previous else [name]
        out = self._git("diff", "-M", base, head, "--", *paths).decode("utf-8", "replace")
        start = out.find("\n@@")
        return out[start + 1 :].rstrip("\n") if start >= 0 else None

    def commit_files(
        self,
        branch: str,
        files: dict[str, str | None],
        message: str,
        *,
        base: str | None = None,
        author: tuple[str, str] | None = None,
    ) -> str:
        """Commit ``files`` (path → text, None deletes) onto ``branch``; returns the sha.

        Uses a throw-away index, so no work tree is needed. ``base`` (a ref)
        seeds a new branch; an existing branch builds on its own tip. ``author`` (name, email)
        authors and commits it, as a person's own push would be (else the emulator's identity).
        """
        parent = self.branch_sha(branch)
        if parent is None and base is not None:
            parent = self.resolve(base)
        with tempfile.TemporaryDirectory(prefix="emu-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if parent is not None:
                self._git("read-tree", parent, env=env)
            lines = []
            for path, text in files.items():
                if text is None:  # mode 0 removes the path from the index
                    lines.append(f"0 {'0' * 40}\t{path}")
                    continue
                blob = self._git("hash-object", "-w", "--stdin", stdin=text.encode()).decode().strip()
                lines.append(f"100644 {blob}\t{path}")
            self._git("update-index", "--index-info", stdin="\n".join(lines).encode() + b"\n", env=env)
            tree = self._git("write-tree", env=env).decode().strip()
        parents = ["-p", parent] if parent is not None else []
        who = (
            {}
            if author is None
            else {
                "GIT_AUTHOR_NAME": author[0],
                "GIT_AUTHOR_EMAIL": author[1],
                "GIT_COMMITTER_NAME": author[0],
                "GIT_COMMITTER_EMAIL": author[1],
            }
        )
        commit = self._git("commit-tree", tree, *parents, "-m", message, env=who).decode().strip()
        self._git("update-ref", f"refs/heads/{branch}", commit)
        return commit
