"""One bare mirror clone per repository, fetched and pushed with tokens no file or argv ever holds.

The worker keeps a repository's objects between runs so a run fetches only what changed.
An installation token reaches git only as ``http.extraHeader`` in the environment of the one
git process that talks to GitHub (``GIT_CONFIG_COUNT``, as actions/checkout does) and the
helpers it starts (``git-remote-http``): never in a URL, on a command line (``ps`` shows argv
to every user), in the mirror's config or any file, or in any other process's environment.
Every git call runs with a minimal environment, an empty private ``HOME``, no system or global
config, no credential helper, no prompt, no hooks, only https (http for loopback, the
emulator), no redirects, and a timeout on the whole process group.

Pushes never force: the branch must not exist (``expect=None``) or must be at ``expect`` on the
remote, checked atomically by ``--force-with-lease``. A lease alone lets git overwrite a
non-fast-forward (it counts as a force), so ``push`` first checks here that ``commit``
descends from ``expect``.

Callers hold ``locked()`` around a fetch, the work on the mirror and the push: two workers on
one machine share the mirrors.
"""

from __future__ import annotations

import base64
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from baton import codes
from baton.errors import BatonError
from baton.settings import is_loopback

#: Stable error codes (tests and logs match on these, never on messages).
FETCH_FAILED = codes.GIT_FETCH_FAILED
PUSH_FAILED = codes.GIT_PUSH_FAILED
PUSH_REJECTED = codes.PUSH_REJECTED
AUTH_FAILED = codes.GIT_AUTH_FAILED
MIRROR_BUSY = codes.MIRROR_BUSY
GIT_FAILED = codes.GIT_FAILED

#: Stands in for a secret in anything Baton prints or stores.
REDACTED = "<redacted>"

#: An askpass that answers nothing, so git never waits for a password on a 401.
_ASKPASS = next((p for p in ("/bin/false", "/usr/bin/false") if os.access(p, os.X_OK)), "")
_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
#: Longest tail of git's stderr an error message carries.
_STDERR_TAIL = 800

#: Config for every git call, on argv: none of it is secret.
_HARDENING = (
    "credential.helper=",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.askPass=",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "http.sslVerify=true",
    # An extra header follows redirects; a redirect to another host would carry the token.
    "http.followRedirects=false",
    "http.lowSpeedLimit=1000",
    "http.lowSpeedTime=60",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "init.defaultBranch=main",
    "commit.gpgSign=false",
)

_AUTH_FAILURE = re.compile(
    r"returned error: 40[13]|Authentication failed|could not read (?:Username|Password)"
    r"|terminal prompts disabled|Invalid username or (?:password|token)|Permission to \S+ denied",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(r"(authorization\s*:\s*)[^\r\n]*", re.IGNORECASE)
_USERINFO = re.compile(r"(://)[^/@\s]+@")
_GITHUB_TOKEN = re.compile(r"\b(?:gh[opsuar]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})")


class MirrorError(BatonError):
    """A fetch or push failed; ``code`` says how, the message names the repository and the fix."""


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret, ``Authorization`` value, URL password and GitHub token replaced.

    Git's stderr goes into error messages, logs and issue comments; the server or a trace could
    echo what it was sent."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _AUTH_HEADER.sub(rf"\1{REDACTED}", text)
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return _GITHUB_TOKEN.sub(REDACTED, text)


def basic_credential(token: str) -> str:
    """The ``Authorization`` value git sends: GitHub takes a token as the Basic password."""
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")


@dataclass(frozen=True)
class Remote:
    """A repository's http(s) URL with no credentials in it, and the token to reach it with."""

    url: str
    token: str = field(repr=False)

    def __post_init__(self) -> None:
        _check_url(self.url)
        if not self.token or any(not ("!" <= c <= "~") for c in self.token):
            raise ValueError(f"the token for {self.url} must be non-empty printable ASCII with no spaces")

    @property
    def http_allowed(self) -> bool:
        """Plain http only to this machine (the emulator); GitHub is https."""
        return urlsplit(self.url).scheme == "http"

    @property
    def secrets(self) -> tuple[str, str]:
        """What must never appear in a message: the token, and its base64 form in the header."""
        return self.token, basic_credential(self.token).removeprefix("Basic ")


def _check_url(url: str) -> None:
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ValueError(f"the remote URL {url!r} has whitespace or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the remote URL {url!r} must be http(s), like GitHub's clone_url")
    if "@" in parts.netloc:
        raise ValueError("the remote URL must carry no user or password; pass the token as Remote.token")
    if not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"the remote URL {url!r} needs a host and no query or fragment")
    _ = parts.port  # raises ValueError for a malformed port
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"the remote URL {url!r} is plain http to another machine; use https")


def _check_branch(branch: str) -> str:
    """A branch name git would take, and that cannot be read as an option or a revision range."""
    bad = (
        not branch
        or branch.startswith(("-", "/", "."))
        or branch.endswith(("/", ".", ".lock"))
        or any(s in branch for s in ("..", "//", "@{", "/.", ".lock/"))
        or branch == "@"
        or any(ord(c) < 0x21 or ord(c) == 0x7F or c in "~^:?*[\\" for c in branch)
    )
    if bad:
        raise ValueError(f"{branch!r} is not a branch name git accepts")
    return branch


def _check_oid(oid: str, what: str) -> str:
    if not _OID.fullmatch(oid):
        raise ValueError(f"{what} must be a full lower-case object id, got {oid!r}")
    return oid


def _porcelain(out: bytes, ref: str) -> tuple[str, str] | None:
    """``(flag, summary)`` for ``ref`` in ``git push --porcelain`` output."""
    for line in out.decode("utf-8", "replace").splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and len(fields[0]) == 1 and fields[1].endswith(f":{ref}"):
            return fields[0], fields[2]
    return None


class Mirror:
    """``root/mirrors/<repo_id>.git``: a bare repository with the remote's branches under
    ``refs/remotes/origin/``. Keyed by repository id so a rename or transfer keeps it."""

    def __init__(
        self, root: Path, repo_id: int, *, timeout_s: float = 600.0, lock_timeout_s: float | None = None
    ) -> None:
        if isinstance(repo_id, bool) or not isinstance(repo_id, int) or repo_id <= 0:
            raise ValueError(f"repo_id must be GitHub's positive repository id, got {repo_id!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.root = root
        self.repo_id = repo_id
        self.timeout_s = timeout_s
        #: How long ``locked`` waits for another worker's fetch, build and push.
        self.lock_timeout_s = lock_timeout_s if lock_timeout_s is not None else 3 * timeout_s
        self.path = root / "mirrors" / f"{repo_id}.git"
        self.lock_path = root / "mirrors" / f"{repo_id}.lock"

    # -- the lock -----------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the mirror alone (an ``flock``, so across threads and processes) until the block ends."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise MirrorError(
                            MIRROR_BUSY,
                            f"the mirror {self.path} stayed locked for {self.lock_timeout_s:.0f}s; "
                            "another worker's git is stuck or the lock_timeout_s is too short",
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    # -- talking to the remote ----------------------------------------------------------------

    def fetch(self, remote: Remote, branches: Sequence[str]) -> dict[str, str]:
        """Bring each branch to ``refs/remotes/origin/<branch>`` (forced); answer ``{branch: sha}``
        for those the remote has. A named branch the remote lacks is dropped here too."""
        names = [_check_branch(b) for b in dict.fromkeys(branches)]
        self._ensure()
        if not names:
            return {}
        for attempt in (1, 2):
            listed = self.ls_remote(remote, names)
            gone = [b for b in names if b not in listed]
            if gone:  # first, so a deleted ``a`` cannot block fetching a new ``a/b``
                deletes = "".join(f"delete refs/remotes/origin/{b}\n" for b in gone)
                self.run("update-ref", "--stdin", stdin=deletes.encode())
            if listed:
                refspecs = [f"+refs/heads/{b}:refs/remotes/origin/{b}" for b in listed]
                code, _, err = self._call(
                    "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
                    "--no-recurse-submodules", "--end-of-options", remote.url, *refspecs,
                    remote=remote, failure=FETCH_FAILED,
                )  # fmt: skip
                if code != 0:
                    # A branch deleted between the listing and the fetch: list again, once.
                    if attempt == 1 and b"couldn't find remote ref" in err:
                        continue
                    raise self._failure(FETCH_FAILED, "fetch", remote, err)
            tracking = self._tracking()
            return {b: tracking[b] for b in listed if b in tracking}
        raise MirrorError(FETCH_FAILED, f"the branches of {remote.url} kept changing during the fetch; retry")

    def fetch_pull(self, remote: Remote, number: int) -> str | None:
        """Bring the pull request's head (``refs/pull/<n>/head``, which the base repository keeps for
        every pull, from a fork too) to ``refs/remotes/origin/pull/<n>``; its sha, or None if none."""
        if number < 1:
            raise ValueError(f"{number!r} is not a pull request number")
        self._ensure()
        refspec = f"+refs/pull/{number}/head:refs/remotes/origin/pull/{number}"
        code, _, err = self._call(
            "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
            "--no-recurse-submodules", "--end-of-options", remote.url, refspec,
            remote=remote, failure=FETCH_FAILED,
        )  # fmt: skip
        if code != 0:
            if b"couldn't find remote ref" in err:
                return None
            raise self._failure(FETCH_FAILED, "fetch", remote, err)
        return self.head(f"refs/remotes/origin/pull/{number}")

    def ls_remote(self, remote: Remote, branches: Sequence[str]) -> dict[str, str]:
        """``{branch: sha}`` on the remote now, for those of ``branches`` that exist (one round trip)."""
        names = [_check_branch(b) for b in dict.fromkeys(branches)]
        self._ensure()
        if not names:
            return {}
        code, out, err = self._call(
            "ls-remote", "--heads", "--end-of-options", remote.url, *(f"refs/heads/{b}" for b in names),
            remote=remote, failure=FETCH_FAILED,
        )  # fmt: skip
        if code != 0:
            raise self._failure(FETCH_FAILED, "ls-remote", remote, err)
        found: dict[str, str] = {}
        wanted = set(names)
        for line in out.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition("\t")
            branch = ref.removeprefix("refs/heads/")
            if ref.startswith("refs/heads/") and branch in wanted and _OID.fullmatch(sha):
                found[branch] = sha
        return found

    def push(self, remote: Remote, commit: str, branch: str, *, expect: str | None) -> None:
        """Put ``commit`` at ``refs/heads/<branch>`` on the remote without forcing: the branch
        must not exist (``expect=None``) or must be at ``expect``, which ``commit`` descends from."""
        _check_oid(commit, "commit")
        _check_branch(branch)
        if expect is not None:
            _check_oid(expect, "expect")
        self._ensure()
        if self.head(commit) != commit:
            raise MirrorError(
                PUSH_FAILED,
                f"commit {commit} is not in the mirror {self.path}; build it there before pushing",
            )
        if expect is not None and not self._descends(commit, expect):
            raise MirrorError(
                PUSH_REJECTED,
                f"{commit} does not descend from {expect}, the tip of {branch} it was meant to extend on "
                f"{remote.url}; a push must fast-forward, so rebuild it on {expect}",
            )
        ref = f"refs/heads/{branch}"
        code, out, err = self._call(
            "push", "--porcelain", "--no-verify", "--no-follow-tags", "--no-recurse-submodules",
            f"--force-with-lease={ref}:{expect or ''}", "--end-of-options", remote.url, f"{commit}:{ref}",
            remote=remote, failure=PUSH_FAILED,
        )  # fmt: skip
        status = _porcelain(out, ref)
        if code == 0 and status is not None and status[0] in " *=":
            return
        if status is not None and status[0] == "!":
            had = self._remote_had(remote, branch)
            raise MirrorError(
                PUSH_REJECTED,
                f"{remote.url} refused {commit} for {branch} ({status[1]}): {had}, "
                f"expected {expect or 'no such branch'}; fetch {branch} and rebuild on its tip, "
                "or push to a new branch",
            )
        raise self._failure(PUSH_FAILED, "push", remote, err)

    # -- reading the mirror -------------------------------------------------------------------

    def head(self, ref: str) -> str | None:
        """The commit ``ref`` names in the mirror (``refs/remotes/origin/main``, a sha), or None."""
        if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 0x20 for c in ref):
            raise ValueError(f"{ref!r} is not a ref")
        self._ensure()
        code, out, _ = self._call("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        return out.decode("ascii").strip() if code == 0 else None

    def run(self, *args: str, stdin: bytes = b"") -> bytes:
        """A local git command on the mirror (no token, every protocol refused); raises on failure."""
        if not args or args[0].startswith("-"):
            raise ValueError(f"run takes a git subcommand first, got {args[:1]!r}")
        self._ensure()
        code, out, err = self._call(*args, stdin=stdin)
        if code != 0:
            tail = redact(err.decode("utf-8", "replace")).strip()[-_STDERR_TAIL:]
            raise MirrorError(
                GIT_FAILED, f"git {args[0]} in the mirror {self.path} failed (exit {code}): {tail}"
            )
        return out

    # -- internals ----------------------------------------------------------------------------

    def _ensure(self) -> None:
        """Create the bare repository on first use, atomically: init aside, then rename into place."""
        if (self.path / "HEAD").is_file():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        aside = Path(tempfile.mkdtemp(prefix=f".{self.repo_id}.", suffix=".init", dir=self.path.parent))
        try:
            code, _, err = self._call("init", "--bare", "--quiet", "--template=", str(aside), in_mirror=False)
            if code != 0:
                tail = redact(err.decode("utf-8", "replace")).strip()[-_STDERR_TAIL:]
                raise MirrorError(GIT_FAILED, f"git init of the mirror {self.path} failed: {tail}")
            try:
                aside.rename(self.path)
            except OSError:
                if not (self.path / "HEAD").is_file():  # not another worker's mirror: a real failure
                    raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)

    def _tracking(self) -> dict[str, str]:
        out = self.run("for-each-ref", "--format=%(objectname) %(refname)", "refs/remotes/origin/")
        found: dict[str, str] = {}
        for line in out.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition(" ")
            found[ref.removeprefix("refs/remotes/origin/")] = sha
        return found

    def _descends(self, commit: str, ancestor: str) -> bool:
        code, _, _ = self._call("merge-base", "--is-ancestor", ancestor, commit)
        return code == 0

    def _remote_had(self, remote: Remote, branch: str) -> str:
        try:
            now = self.ls_remote(remote, [branch]).get(branch)
        except MirrorError as exc:
            return f"what the remote has could not be read ({exc.code})"
        return f"the remote has {branch} at {now}" if now else f"the remote has no branch {branch}"

    def _failure(self, code: str, verb: str, remote: Remote, stderr: bytes) -> MirrorError:
        tail = redact(stderr.decode("utf-8", "replace"), remote.secrets).strip()[-_STDERR_TAIL:]
        if _AUTH_FAILURE.search(tail):
            need = "write" if code == PUSH_FAILED else "read"
            return MirrorError(
                AUTH_FAILED,
                f"{remote.url} refused the token for git {verb}: {tail}; mint an installation token "
                f"with contents:{need} on this repository",
            )
        hint = ""
        if "not found" in tail.lower():  # GitHub hides a private repository the token cannot reach
            hint = "; check the URL and that the installation token covers this repository"
        return MirrorError(code, f"git {verb} {remote.url} failed: {tail}{hint}")

    def _call(
        self,
        *args: str,
        remote: Remote | None = None,
        failure: str = GIT_FAILED,
        stdin: bytes = b"",
        in_mirror: bool = True,
    ) -> tuple[int, bytes, bytes]:
        """Run one git process behind the armour; only a call with ``remote`` gets its token."""
        argv = ["git", f"--git-dir={self.path}"] if in_mirror else ["git"]
        settings = [*_HARDENING, f"safe.directory={self.path}"]
        if remote is not None and remote.http_allowed:
            settings.append("protocol.http.allow=always")
        for setting in settings:
            argv += ["-c", setting]
        with tempfile.TemporaryDirectory(prefix="baton-mirror-") as home:
            env = {
                "PATH": os.environ.get("PATH", os.defpath),
                "HOME": home,
                "XDG_CONFIG_HOME": str(Path(home) / ".config"),
                "LANG": "C",
                "LC_ALL": "C",
                "TZ": "UTC",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_ATTR_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": _ASKPASS,
                "SSH_ASKPASS": _ASKPASS,
                "GIT_PAGER": "cat",
            }
            if remote is not None:
                env |= {
                    "GIT_CONFIG_COUNT": "1",
                    "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: {basic_credential(remote.token)}",
                }
            # A session of its own, so a timeout kills git's helpers (git-remote-https) too.
            proc = subprocess.Popen(  # noqa: S603 (argv is ours; no shell)
                [*argv, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=home,
                env=env,
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(stdin, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                where = f" {remote.url}" if remote is not None else f" in the mirror {self.path}"
                raise MirrorError(
                    failure,
                    f"git {args[0]}{where} took longer than {self.timeout_s:g}s and was stopped; "
                    "check the network to the server, or raise timeout_s for a very large repository",
                ) from None
        return proc.returncode, out, err
