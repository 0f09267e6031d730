"""Git for ``inspect``, run as if the workspace were an attacker's upload.

Every command gets the same armour: an explicit git dir and work tree (no
discovery, so a ``.git`` planted anywhere is never found), no system, global or
caller config (``GIT_*`` from the caller is dropped, ``HOME`` is an empty
directory), the settings in ``_HARDENING`` over whatever the repository's own
config says (hooks, fsmonitor, attributes file, excludes file, CRLF conversion,
signing all off; symlinks recorded as symlinks), a private index, and an empty
directory as cwd. Commands that must not see the workspace at all get that empty
directory as their work tree too, so no ``.gitattributes`` of the agent's can
change how a diff is counted.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from baton import codes
from baton.errors import BatonError
from worker.runner.inspect_rules import Change, ChangeKind

#: Stable error codes (tests and logs match on these, never on messages).
GIT_FAILED = codes.INSPECT_GIT_FAILED
FILTER_CONFIGURED = codes.INSPECT_FILTER_CONFIGURED
UNKNOWN_REVISION = codes.INSPECT_UNKNOWN_REVISION
WORKSPACE_UNREADABLE = codes.INSPECT_WORKSPACE_UNREADABLE
BRANCH_EXISTS = codes.INSPECT_BRANCH_EXISTS

#: Seconds any one git command may take.
GIT_TIMEOUT_S = 600
#: Rename detection gives up (reporting adds and deletes) past this many candidates.
RENAME_LIMIT = 1000

#: Config for every git command here, over whatever the repository's own config says.
HARDENING = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.ignoreCase=false",
    "core.precomposeUnicode=false",
    "core.protectNTFS=true",
    "core.protectHFS=true",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.sparseCheckout=false",
    "core.splitIndex=false",
    # Past GitHub's limit a file is binary to diff (never held in memory to count lines).
    "core.bigFileThreshold=100m",
    "commit.gpgSign=false",
    "i18n.commitEncoding=UTF-8",
    "gc.auto=0",
    "maintenance.auto=false",
)


class InspectError(BatonError):
    """Inspection could not be done at all (as opposed to finding violations)."""


class Git:
    """One git dir and work tree, behind the armour; ``call`` returns, ``run`` raises."""

    def __init__(self, git_dir: Path, scratch: Path, work_tree: Path) -> None:
        self.git_dir = git_dir
        self.scratch = scratch
        self.work_tree = work_tree

    def call(
        self, *args: str, stdin: bytes = b"", env: Mapping[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        argv = ["git", f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", "--no-replace-objects"]
        for setting in (*HARDENING, f"safe.directory={self.git_dir}", f"safe.directory={self.work_tree}"):
            argv += ["-c", setting]
        home = self.scratch / "home"
        environ = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
            "GIT_INDEX_FILE": str(self.scratch / "index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_SYSTEM": "/dev/null",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_PAGER": "cat",
            **(env or {}),
        }
        try:
            done = subprocess.run(  # noqa: S603 (argv is ours; no shell)
                [*argv, *args],
                input=stdin,
                capture_output=True,
                cwd=self.scratch / "empty",
                env=environ,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise InspectError(GIT_FAILED, f"git {args[0]} took longer than {GIT_TIMEOUT_S}s") from exc
        return done.returncode, done.stdout, done.stderr

    def run(self, *args: str, stdin: bytes = b"", env: Mapping[str, str] | None = None) -> bytes:
        code, out, err = self.call(*args, stdin=stdin, env=env)
        if code != 0:
            tail = err.decode("utf-8", "replace").strip()[-500:]
            raise InspectError(GIT_FAILED, f"git {args[0]} failed (exit {code}): {tail}")
        return out

    def rev(self, rev: str, kind: str) -> str:
        """The object id ``rev`` names, peeled to ``kind`` (commit or tree)."""
        if not rev or rev.startswith("-"):
            raise ValueError(f"{rev!r} is not a revision")
        code, out, _ = self.call("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{{kind}}}")
        if code != 0:
            raise InspectError(UNKNOWN_REVISION, f"{rev!r} does not name a {kind} in {self.git_dir}")
        return out.decode("ascii").strip()


@contextmanager
def session(git_dir: Path, work_tree: Path | None = None) -> Iterator[Git]:
    """A scratch directory for one job: an empty HOME, the private index, and an empty
    work tree (and cwd) for the commands that must not see the workspace at all."""
    with tempfile.TemporaryDirectory(prefix="baton-inspect-") as tmp:
        scratch = Path(tmp)
        (scratch / "home").mkdir()
        (scratch / "empty").mkdir()
        yield Git(resolve_git_dir(git_dir), scratch, work_tree or scratch / "empty")


def resolve_git_dir(path: Path) -> Path:
    """A git dir, or a repository's top directory (then its ``.git``): both are Baton's own."""
    top = path.resolve(strict=True)
    dot = top / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():
        line = dot.read_text().strip()
        if line.startswith("gitdir:"):
            return (top / line.removeprefix("gitdir:").strip()).resolve(strict=True)
    return top


def refuse_filters(git: Git) -> None:
    """A clean filter defined anywhere in the config would run on workspace bytes as soon as a
    ``.gitattributes`` names it: refuse to snapshot rather than trust an override."""
    code, out, _ = git.call("config", "--null", "--name-only", "--get-regexp", r"^filter\.")
    if code not in (0, 1):
        raise InspectError(GIT_FAILED, "git config could not be read")
    names = sorted({n for n in out.decode("utf-8", "replace").split("\0") if n})
    if names:
        raise InspectError(
            FILTER_CONFIGURED,
            f"the repository's git config defines filter drivers ({', '.join(names)}); "
            "remove them so no workspace file can name one",
        )


def committer_date(git: Git, commit_id: str) -> str:
    """The committer date of a commit, as git stores it (``<epoch> <zone>``)."""
    body = git.run("cat-file", "commit", commit_id)
    for line in body.split(b"\n"):
        if not line:
            break
        if line.startswith(b"committer "):
            stamp, zone = line.rsplit(b" ", 2)[1:]
            return f"{int(stamp)} {zone.decode('ascii')}"
    raise InspectError(GIT_FAILED, f"commit {commit_id} has no committer line")


# --- reading git's answers ----------------------------------------------------------------------


def diff(git: Git, base_tree: str, new_tree: str) -> list[Change]:
    """The changes from ``base_tree`` to ``new_tree``: renames found, lines counted by myers."""
    out = git.run(
        "diff-tree", "-r", "-z", "--raw", "--numstat", "--no-abbrev", "-M", f"-l{RENAME_LIMIT}",
        "--diff-algorithm=myers", "--no-ext-diff", "--no-textconv", "--ignore-submodules=none",
        base_tree, new_tree,
    )  # fmt: skip
    return _parse_diff(out)


_OID = rb"[0-9a-f]{40}(?:[0-9a-f]{24})?"
_RAW = re.compile(rb":([0-7]{6}) ([0-7]{6}) (" + _OID + rb") (" + _OID + rb") ([ADMRT])([0-9]*)")
_NUMSTAT = re.compile(rb"([0-9]+|-)\t([0-9]+|-)\t(.*)", re.DOTALL)
_KIND = {
    b"A": ChangeKind.ADDED,
    b"D": ChangeKind.DELETED,
    b"M": ChangeKind.MODIFIED,
    b"R": ChangeKind.RENAMED,
    b"T": ChangeKind.TYPE_CHANGED,
}


def _parse_diff(out: bytes) -> list[Change]:
    """``diff-tree -z --raw --numstat``: every raw record, then every numstat record, in one order."""
    tokens = out.split(b"\0")
    if tokens and tokens[-1] == b"":
        tokens.pop()
    raws: list[tuple[re.Match[bytes], list[bytes]]] = []
    i = 0
    while i < len(tokens) and (raw := _RAW.fullmatch(tokens[i])) is not None:
        count = 2 if raw[5] == b"R" else 1
        raws.append((raw, tokens[i + 1 : i + 1 + count]))
        i += 1 + count
    changes: list[Change] = []
    for raw, paths in raws:
        numstat = _NUMSTAT.fullmatch(tokens[i]) if i < len(tokens) else None
        if numstat is None:
            raise InspectError(GIT_FAILED, "git diff-tree printed something unexpected")
        stat_paths = [numstat[3]] if numstat[3] else tokens[i + 1 : i + 3]
        i += 1 if numstat[3] else 3
        if stat_paths != paths or len(paths) != (2 if raw[5] == b"R" else 1):
            raise InspectError(GIT_FAILED, "git diff-tree's raw and numstat records disagree")
        binary = numstat[1] == b"-"
        old_mode, new_mode = int(raw[1], 8), int(raw[2], 8)
        changes.append(
            Change(
                path=os.fsdecode(paths[-1]),
                kind=_KIND[raw[5]],
                old_path=os.fsdecode(paths[0]) if len(paths) == 2 else None,
                added=0 if binary else int(numstat[1]),
                removed=0 if binary else int(numstat[2]),
                binary=binary,
                old_mode=old_mode,
                new_mode=new_mode,
                old_blob=raw[3].decode("ascii") if old_mode else "",
                new_blob=raw[4].decode("ascii") if new_mode else "",
            )
        )
    if i != len(tokens):
        raise InspectError(GIT_FAILED, "git diff-tree printed more than it described")
    return changes


def blob_sizes(git: Git, oids: Sequence[str]) -> dict[str, int]:
    """Object id -> size, for blobs only."""
    if not oids:
        return {}
    out = git.run("cat-file", "--batch-check", stdin="".join(f"{o}\n" for o in oids).encode())
    sizes: dict[str, int] = {}
    for line in out.decode("ascii").splitlines():
        oid, kind, size = [*line.split(" "), "", ""][:3]
        if kind != "blob":
            raise InspectError(GIT_FAILED, f"object {oid} is not a blob")
        sizes[oid] = int(size)
    return sizes


def symlinks(git: Git, tree: str) -> dict[str, str]:
    """Every symlink in ``tree``: path -> target."""
    listing = git.run("ls-tree", "-r", "-z", "--full-tree", tree)
    found: dict[str, str] = {}
    for record in listing.split(b"\0"):
        head, _, path = record.partition(b"\t")
        if head.startswith(b"120000 "):
            found[os.fsdecode(path)] = head.split(b" ")[2].decode("ascii")
    targets = read_blobs(git, sorted(set(found.values())))
    return {path: os.fsdecode(targets[oid]) for path, oid in found.items()}


def read_blobs(git: Git, oids: Iterable[str]) -> dict[str, bytes]:
    wanted = list(oids)
    if not wanted:
        return {}
    out = git.run("cat-file", "--batch", stdin="".join(f"{o}\n" for o in wanted).encode())
    found: dict[str, bytes] = {}
    pos = 0
    for oid in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        if len(header) != 3 or header[1] != b"blob":
            raise InspectError(GIT_FAILED, f"object {oid} is not a blob")
        size = int(header[2])
        found[oid] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


_MODES = {"100644": 0o644, "100755": 0o755}


def tree_tar(repo: Path, commit: str) -> tuple[bytes, frozenset[str]]:
    """The commit's tree as a tar (exact bytes, modes and symlinks) and its file paths.

    Built from git's objects, not ``git archive``: that honours the commit's own
    ``.gitattributes``, so ``export-ignore`` would hide files from the copy (an agent's
    workspace would then seem to delete them) and ``export-subst`` would rewrite others."""
    with session(repo) as git:
        listing = git.run("ls-tree", "-r", "-z", "--full-tree", git.rev(commit, "commit"))
        entries = []
        for record in listing.split(b"\0"):
            if record:
                head, _, name = record.partition(b"\t")
                mode, kind, oid = head.decode("ascii").split(" ")
                entries.append((mode, kind, oid, name.decode("utf-8", "surrogateescape")))
        blobs = read_blobs(git, sorted({oid for _, kind, oid, _ in entries if kind == "blob"}))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for mode, kind, oid, path in entries:
            info = tarfile.TarInfo(path)
            if kind == "commit":  # a submodule: an empty directory, as git archive makes it
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif mode == "120000":
                info.type, info.linkname = tarfile.SYMTYPE, blobs[oid].decode("utf-8", "surrogateescape")
                tar.addfile(info)
            else:
                info.size, info.mode = len(blobs[oid]), _MODES.get(mode, 0o644)
                tar.addfile(info, io.BytesIO(blobs[oid]))
    return buffer.getvalue(), frozenset(path for _, kind, _, path in entries if kind == "blob")


def commit_log(git: Git, base: str, tip: str) -> list[tuple[str, str, str]]:
    """(sha, author name, full message) of each commit reachable from ``tip`` and not from
    ``base``, oldest first."""
    out = git.run("log", "--reverse", "--format=%H%x00%an%x00%B%x01", tip, f"^{base}")
    found = []
    for entry in out.decode("utf-8", "replace").split("\x01"):
        sha, _, rest = entry.strip("\n").partition("\x00")
        author, _, message = rest.partition("\x00")
        if sha:
            found.append((sha, author, message))
    return found


def patch(git: Git, base: str, head: str) -> str:
    """The added and removed lines from ``base`` to ``head`` (no context, no config, textconv or
    external diff): what the secret scanner reads."""
    out = git.run(
        "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/",
        base, head,
    )  # fmt: skip
    return out.decode("utf-8", "replace")


def diff_digest(git: Git, base: str, head: str) -> str:
    """The sha256 a receipt names a change by: git's full binary patch from ``base`` to ``head``,
    with no config, textconv or external diff involved, so anyone can recompute it with
    ``git diff --binary --full-index --no-color --no-ext-diff --no-textconv --no-renames BASE HEAD``."""
    patch = git.run(
        "diff", "--binary", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
        "--src-prefix=a/", "--dst-prefix=b/", base, head,
    )  # fmt: skip
    return hashlib.sha256(patch).hexdigest()
