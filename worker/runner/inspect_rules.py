"""What an agent's change may not do, decided on plain data: no git, no files.

``inspect`` gathers the facts (the diff between the base tree and the tree the
workspace holds, blob sizes, symlink targets, what ``lstat`` saw in the
workspace) and this module judges them. Every path and every symlink target
here was written by the agent, so nothing is taken at face value: protected
paths match case-insensitively and protect whatever lies beneath them, and a
symlink is resolved the way the kernel would, through the other symlinks in
the tree, before anyone decides it stays inside.

Protected globs (``paths.protected`` plus ``ALWAYS_PROTECTED``), gitignore-ish:

- matched against the repository-relative path, case-insensitively and with
  what HFS+ and NTFS ignore dropped (trailing dots and spaces, zero-width code
  points): a checkout on macOS or Windows makes ``.GitHub/Workflows.`` the same
  place as ``.github/workflows``;
- a pattern with no ``/`` (a trailing one aside) matches at any depth:
  ``*.pem`` is ``**/*.pem``; any other pattern is anchored at the root, and a
  leading ``/`` only says so;
- ``*``, ``?`` and ``[...]`` never cross a ``/``; a ``**`` component matches
  zero or more whole components (``a/**/b`` matches ``a/b``); ``**`` inside a
  component is a plain ``*``;
- a pattern that matches a directory protects everything beneath it, and
  ``dir/**`` protects ``dir`` itself too (a change that replaces
  ``.github/workflows`` with a file or a symlink touches a protected path).
"""

from __future__ import annotations

import enum
import posixpath
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from worker.policy.defaults import ALWAYS_PROTECTED

#: GitHub refuses any file over 100 MiB in a push.
GITHUB_FILE_LIMIT = 100 * 1024 * 1024
#: Largest binary blob an agent may add or change unless the caller says otherwise.
DEFAULT_MAX_BLOB_BYTES = 10 * 1024 * 1024

#: Git's tree entry modes.
MODE_FILE = 0o100644
MODE_EXECUTABLE = 0o100755
MODE_SYMLINK = 0o120000
MODE_GITLINK = 0o160000
MODE_TREE = 0o040000

#: Symlink hops followed before a chain is called a loop (Linux's own limit).
MAX_SYMLINK_HOPS = 40

# Code points HFS+ ignores in names, so ``.g\u200cit`` is ``.git`` on a Mac (git's list).
_HFS_IGNORED = dict.fromkeys(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


class Code(enum.StrEnum):
    """Why an inspection fails: stable codes (tests, logs and receipts match on these)."""

    PROTECTED_PATH = "protected-path"
    PROTECTED_SYMLINK = "protected-symlink"
    DIFF_TOO_LARGE = "diff-too-large"
    SYMLINK_ESCAPE = "symlink-escape"
    GITMODULES = "gitmodules"
    GITLINK = "gitlink"
    GIT_METADATA = "git-metadata"
    SETUID = "setuid"
    SPECIAL_FILE = "special-file"
    BINARY_TOO_LARGE = "binary-too-large"
    FILE_TOO_LARGE = "file-too-large"
    SECRET_MATERIAL = "secret-material"  # noqa: S105 - a violation code, not a secret


class ChangeKind(enum.StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"
    TYPE_CHANGED = "type-changed"


@dataclass(frozen=True)
class Violation:
    """One thing the change may not do. ``path`` is ``""`` for the diff as a whole."""

    code: Code
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.path or '(whole diff)'}: {self.detail}"

    def to_data(self) -> dict[str, str]:
        return {"code": str(self.code), "path": self.path, "detail": self.detail}


@dataclass(frozen=True)
class Change:
    """One path the agent changed. Modes are git's (0 where a side is absent), blobs are
    object ids (``""`` where absent); ``old_path`` is set for renames only."""

    path: str
    kind: ChangeKind
    old_path: str | None = None
    added: int = 0
    removed: int = 0
    binary: bool = False
    old_mode: int = 0
    new_mode: int = 0
    old_blob: str = ""
    new_blob: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path this change touches (a rename touches two)."""
        return (self.path,) if self.old_path is None else (self.old_path, self.path)

    def to_data(self) -> dict[str, object]:
        return {
            "path": self.path,
            "kind": str(self.kind),
            "old_path": self.old_path,
            "added": self.added,
            "removed": self.removed,
            "binary": self.binary,
            "old_mode": f"{self.old_mode:06o}",
            "new_mode": f"{self.new_mode:06o}",
        }


@dataclass(frozen=True)
class Stat:
    files: int
    insertions: int
    deletions: int


def stat_of(changes: Sequence[Change]) -> Stat:
    return Stat(
        files=len(changes),
        insertions=sum(c.added for c in changes),
        deletions=sum(c.removed for c in changes),
    )


# --- names git treats as its own ---------------------------------------------------------------


def _fold(name: str) -> str:
    """A name the way a case-folding, HFS- or NTFS-like filesystem would see it."""
    return name.translate(_HFS_IGNORED).casefold().rstrip(". ")


def is_git_name(name: str) -> bool:
    """``.git`` in any spelling some filesystem reads as ``.git`` (``.GIT``, ``.git.``,
    ``.git::$INDEX_ALLOCATION``, ``git~1``, ``.g\\u200cit``): git metadata, never content."""
    folded = name.translate(_HFS_IGNORED).casefold()
    if folded == "git~1":
        return True
    return folded.startswith(".git") and not folded[4:].split(":", 1)[0].strip(". ")


def is_gitmodules_name(name: str) -> bool:
    folded = _fold(name)
    return folded == ".gitmodules" or folded.startswith("gitmod~")


# --- protected globs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Glob:
    """A compiled protected-path pattern (semantics in the module docstring)."""

    text: str
    parts: tuple[str, ...]

    @property
    def anywhere(self) -> bool:
        return self.parts[:1] == ("**",)


def compile_glob(text: str) -> Glob | None:
    """``None`` for a pattern that names nothing (empty, or only slashes)."""
    body = text.strip()
    anchored = body.startswith("/") or "/" in body.strip("/")
    parts: list[str] = []
    for part in body.split("/"):
        if not part or (part == "**" and parts[-1:] == ["**"]):
            continue
        parts.append(part.casefold())
    if not parts:
        return None
    if not anchored and parts[0] != "**":
        parts.insert(0, "**")
    return Glob(text=text, parts=tuple(parts))


def compile_globs(patterns: Iterable[str]) -> tuple[Glob, ...]:
    compiled = (compile_glob(p) for p in sorted(set(patterns)))
    return tuple(g for g in compiled if g is not None)


def _closure(parts: tuple[str, ...], states: Iterable[int]) -> frozenset[int]:
    out = set(states)
    todo = list(out)
    while todo:
        i = todo.pop()
        if i < len(parts) and parts[i] == "**" and i + 1 not in out:
            out.add(i + 1)
            todo.append(i + 1)
    return frozenset(out)


def _step(parts: tuple[str, ...], states: frozenset[int], component: str) -> frozenset[int]:
    nxt: set[int] = set()
    for i in states:
        if i < len(parts):
            if parts[i] == "**":
                nxt.add(i)
            elif fnmatchcase(component, parts[i]):
                nxt.add(i + 1)
    return _closure(parts, nxt)


def _components(path: str) -> list[str]:
    """Path components as a case-folding, HFS or NTFS checkout would name them."""
    return [_fold(c) for c in path.split("/") if c]


def glob_matches(glob: Glob, path: str) -> bool:
    """The pattern matches ``path`` or one of the directories above it."""
    states = _closure(glob.parts, {0})
    for component in _components(path):
        states = _step(glob.parts, states, component)
        if not states:
            return False
        if len(glob.parts) in states:
            return True
    return False


def glob_leads_to(glob: Glob, path: str) -> bool:
    """``path`` is, or is a directory on the way to, something an anchored pattern
    matches: a symlink here would decide where protected paths really live.
    Patterns that match at any depth lead everywhere, so they are left out."""
    if glob.anywhere:
        return False
    states = _closure(glob.parts, {0})
    for component in _components(path):
        states = _step(glob.parts, states, component)
        if not states:
            return False
    return True


def protected_by(globs: Sequence[Glob], path: str) -> Glob | None:
    """The first pattern protecting ``path`` (or a directory above it)."""
    return next((g for g in globs if glob_matches(g, path)), None)


def guards(globs: Sequence[Glob], path: str) -> Glob | None:
    """The first pattern for which ``path`` is protected or on the way to a protected path."""
    return next((g for g in globs if glob_matches(g, path) or glob_leads_to(g, path)), None)


# --- symlinks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """Where a symlink leads: ``path`` inside the tree (``""`` is the root), or ``None``
    with ``reason`` when it leaves the tree or cannot be resolved."""

    path: str | None
    reason: str = ""


def resolve_link(link: str, links: Mapping[str, str]) -> Resolved:
    """Follow the symlink at ``link`` as the kernel would in a checkout of the tree whose
    symlinks (path -> target) are ``links``: component by component, each symlink met on
    the way replaced by its own target. Leaving the root, an absolute or empty target, a
    ``.git`` component, a backslash (a separator on Windows) or a loop all count as
    escaping: nothing checks out a tree to find out."""
    stack = link.split("/")[:-1]
    pending: list[str] = []
    here: str | None = link
    for hop in range(MAX_SYMLINK_HOPS):
        if here is None:
            return Resolved("/".join(stack))
        target = links[here]
        via = "" if hop == 0 else f" (via {here!r})"
        if not target:
            return Resolved(None, f"has an empty target{via}")
        if target.startswith("/"):
            return Resolved(None, f"is an absolute path{via}")
        if "\\" in target:
            return Resolved(None, f"has a backslash (a separator on Windows){via}")
        pending.extend(reversed(target.split("/")))
        here = None
        while pending and here is None:
            component = pending.pop()
            if component in ("", "."):
                continue
            if component == "..":
                if not stack:
                    return Resolved(None, f"leads out of the repository{via}")
                stack.pop()
                continue
            if is_git_name(component):
                return Resolved(None, f"leads into git metadata (.git){via}")
            stack.append(component)
            if "/".join(stack) in links:
                here = "/".join(stack)
                stack.pop()
    if here is None:
        return Resolved("/".join(stack))
    return Resolved(None, "does not resolve (a symlink loop)")


# --- the judgement -------------------------------------------------------------------------------


def _is_blob(mode: int) -> bool:
    return mode in (MODE_FILE, MODE_EXECUTABLE)


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or beneath it (``""`` is the whole tree), as ``_components`` folds."""
    top = _components(root)
    return _components(path)[: len(top)] == top


def _protected_targets(globs: Sequence[Glob], *trees: Mapping[str, str]) -> list[tuple[str, str]]:
    """(target, link) for every symlink at or above a protected path, in either tree: an
    edit to its target is an edit to the protected path (a workflow that is a symlink to
    ``ci/build.yml`` makes ``ci/build.yml`` a workflow)."""
    found: set[tuple[str, str]] = set()
    for links in trees:
        for link in links:
            if guards(globs, link) is None:
                continue
            resolved = resolve_link(link, links)
            if resolved.path is not None:
                found.add((resolved.path, link))
    return sorted(found)


def violations(
    changes: Sequence[Change],
    *,
    protected: Iterable[str],
    max_diff_lines: int,
    max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
    sizes: Mapping[str, int],
    links: Mapping[str, str],
    base_links: Mapping[str, str],
) -> list[Violation]:
    """Everything wrong with ``changes``, sorted by path, then code, then detail.

    ``protected`` is the policy's ``paths.protected`` (``ALWAYS_PROTECTED`` is added here,
    whatever the caller passed); ``sizes`` maps every new blob id to its size; ``links``
    and ``base_links`` map each symlink path to its target in the new and the base tree.
    """
    globs = compile_globs((*protected, *ALWAYS_PROTECTED))
    through = _protected_targets(globs, base_links, links)
    found: set[Violation] = set()
    total = sum(c.added + c.removed for c in changes)
    if total > max_diff_lines:
        found.add(
            Violation(Code.DIFF_TOO_LARGE, "", f"{total} lines changed; the policy allows {max_diff_lines}")
        )
    for change in changes:
        found.update(_path_violations(change, globs, through))
        found.update(_link_violations(change, globs, links))
        found.update(_size_violations(change, sizes, max_blob_bytes))
    return sorted(found, key=lambda v: (v.path, v.code, v.detail))


def _path_violations(
    change: Change, globs: Sequence[Glob], through: Sequence[tuple[str, str]]
) -> list[Violation]:
    found: list[Violation] = []
    is_link = MODE_SYMLINK in (change.old_mode, change.new_mode)
    for path in change.paths:
        glob = protected_by(globs, path)
        if glob is not None:
            found.append(Violation(Code.PROTECTED_PATH, path, f"matches the protected pattern {glob.text!r}"))
        found.extend(
            Violation(Code.PROTECTED_PATH, path, f"is reached through the protected symlink {link!r}")
            for target, link in through
            if _under(path, target)
        )
        guard = guards(globs, path) if is_link else None
        if guard is not None:
            detail = f"a symlink changed at or above protected {guard.text!r}"
            found.append(Violation(Code.PROTECTED_SYMLINK, path, detail))
        if is_gitmodules_name(posixpath.basename(path)):
            found.append(
                Violation(Code.GITMODULES, path, ".gitmodules changed: submodules are not for agents")
            )
    if MODE_GITLINK in (change.old_mode, change.new_mode):
        detail = f"a submodule commit (mode 160000) was {change.kind}"
        found.append(Violation(Code.GITLINK, change.path, detail))
    return found


def _link_violations(change: Change, globs: Sequence[Glob], links: Mapping[str, str]) -> list[Violation]:
    if change.new_mode != MODE_SYMLINK:
        return []
    resolved = resolve_link(change.path, links)
    if resolved.path is None:
        target = links.get(change.path, "")
        return [Violation(Code.SYMLINK_ESCAPE, change.path, f"symlink to {target!r} {resolved.reason}")]
    guard = guards(globs, resolved.path)
    if guard is None:
        return []
    detail = f"points to {resolved.path or '.'!r}, protected by {guard.text!r}"
    return [Violation(Code.PROTECTED_SYMLINK, change.path, detail)]


def _size_violations(change: Change, sizes: Mapping[str, int], max_blob_bytes: int) -> list[Violation]:
    if not _is_blob(change.new_mode):
        return []
    size = sizes[change.new_blob]
    if size > GITHUB_FILE_LIMIT:
        return [
            Violation(Code.FILE_TOO_LARGE, change.path, f"{size} bytes; GitHub refuses files over 100 MiB")
        ]
    if change.binary and size > max_blob_bytes:
        detail = f"a {size}-byte binary; the limit is {max_blob_bytes}"
        return [Violation(Code.BINARY_TOO_LARGE, change.path, detail)]
    return []


def entry_violations(path: str, name: str, mode: int) -> list[Violation]:
    """What one workspace entry, as ``lstat`` saw it, may not be (git records none of this)."""
    found: list[Violation] = []
    if is_git_name(name):
        kind = "directory" if stat.S_ISDIR(mode) else "symlink" if stat.S_ISLNK(mode) else "file"
        found.append(Violation(Code.GIT_METADATA, path, f"a {kind} named like .git: planted git metadata"))
    if stat.S_ISLNK(mode) and is_gitmodules_name(name):
        found.append(Violation(Code.GITMODULES, path, "a symlinked .gitmodules (git refuses to add one)"))
    if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
        bits = " and ".join(b for b, m in (("setuid", stat.S_ISUID), ("setgid", stat.S_ISGID)) if mode & m)
        found.append(Violation(Code.SETUID, path, f"a {bits} file"))
    special = _special_kind(mode)
    if special:
        found.append(Violation(Code.SPECIAL_FILE, path, f"a {special}"))
    return found


def _special_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return kind
    return ""


#: Files git opens in the work tree while adding, whatever the pathspec leaves out.
_GIT_READS = frozenset({".gitignore", ".gitattributes", ".gitmodules"})


def blocks_git(name: str, mode: int) -> bool:
    """A FIFO or device where git would open a file it reads while adding: the read could block
    forever (a FIFO) or never end (``/dev/zero``), so ``snapshot`` must not run git at all."""
    return name in _GIT_READS and bool(_special_kind(mode))


def snapshot_excludes(path: str, name: str, mode: int) -> list[str]:
    """Paths ``snapshot`` must keep away from git: git metadata (and, for an exact
    ``.git``, the directory holding it, or git would read it as a nested repository and
    follow a ``gitdir:`` file wherever it points), special files, a symlinked
    ``.gitmodules``. Those paths stay as they were in the base tree."""
    excluded: list[str] = []
    if is_git_name(name):
        excluded.append(path)
        if name == ".git" and "/" in path:
            excluded.append(path.rsplit("/", 1)[0])
    elif _special_kind(mode) or (stat.S_ISLNK(mode) and is_gitmodules_name(name)):
        excluded.append(path)
    return excluded
