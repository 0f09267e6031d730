"""The mirror against the emulator's git over smart HTTP: real git, real installation tokens.

What matters most is where the token is not: in no file under the mirror, not in its config,
not in any git process's argv, not in the environment of git processes that do not talk to the
server, and not in any error message. And that a push never overwrites what is on the remote.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from worker.github.client import AppCredentials, GitHubApp
from worker.runs.mirror import (
    AUTH_FAILED,
    FETCH_FAILED,
    MIRROR_BUSY,
    PUSH_REJECTED,
    REDACTED,
    Mirror,
    MirrorError,
    Remote,
    basic_credential,
    redact,
)

REPO_ID = 4711
REAL_GIT = shutil.which("git") or "/usr/bin/git"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Baton Test",
    "GIT_AUTHOR_EMAIL": "test@baton.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "Baton Test",
    "GIT_COMMITTER_EMAIL": "test@baton.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


@dataclass
class GitHub:
    server: EmulatorServer
    admin: AdminClient
    world: world.World
    app: GitHubApp

    @property
    def clone_url(self) -> str:
        return f"{self.server.url}/{world.REPO}.git"

    def remote(self, *, write: bool = False) -> Remote:
        token = self.app.git_token(self.world.installation_id, world.REPO, write=write)
        return Remote(self.clone_url, token)

    def branch(self, name: str) -> str | None:
        """The branch's sha as the REST API reports it (None: 404)."""
        token = self.app.git_token(self.world.installation_id, world.REPO)
        response = httpx.get(
            f"{self.server.url}/repos/{world.REPO}/branches/{name}",
            headers={"Authorization": f"token {token}"},
            trust_env=False,
        )
        if response.status_code == 404:
            return None
        response.raise_for_status()
        sha: str = response.json()["commit"]["sha"]
        return sha


@pytest.fixture
def github(tmp_path: Path, rdb: redis.Redis) -> Iterator[GitHub]:
    with EmulatorServer(tmp_path / "github") as server, AdminClient(server.url) as admin:
        built = world.build(admin, server.url)
        app = GitHubApp(AppCredentials(str(built.app_id), built.private_key, server.url), rdb, timeout=10)
        yield GitHub(server, admin, built, app)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


def git(mirror: Mirror, *args: str, stdin: bytes = b"") -> str:
    """Plain git in the mirror, with a fixed identity (the test's hands, not Baton's)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(mirror.root), "GIT_CONFIG_NOSYSTEM": "1", **IDENTITY}
    done = subprocess.run(
        [REAL_GIT, f"--git-dir={mirror.path}", *args], input=stdin, capture_output=True, env=env, check=True
    )
    return done.stdout.decode().strip()


def commit_on(mirror: Mirror, parent: str, message: str) -> str:
    """A new commit on ``parent`` adding one file named after ``message``."""
    blob = git(mirror, "hash-object", "-w", "--stdin", stdin=message.encode())
    listing = git(mirror, "ls-tree", parent) + f"\n100644 blob {blob}\t{message}.txt\n"
    tree = git(mirror, "mktree", stdin=listing.lstrip("\n").encode())
    return git(mirror, "commit-tree", tree, "-p", parent, "-m", message)


def every_file(top: Path) -> Iterator[Path]:
    for path in sorted(top.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


# -- plain data: remotes and redaction ---------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "git@github.com:acme/widgets.git",
        "ssh://git@github.com/acme/widgets.git",
        "file:///srv/acme/widgets.git",
        "ext::sh -c touch% /tmp/pwned",
        "https://x-access-token:ghs_abc@github.com/acme/widgets.git",
        "https://user@github.com/acme/widgets.git",
        "http://github.com/acme/widgets.git",
        "http://10.0.0.1/acme/widgets.git",
        "https://github.com/acme/widgets.git?x=1",
        "https://github.com/acme/widgets.git\n",
        "https:///acme/widgets.git",
        "-uhttps://github.com/x.git",
    ],
)
def test_remote_refuses_urls_that_are_not_plain_http_s(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        Remote(url, "ghs_token")


@pytest.mark.parametrize("url", ["https://github.com/acme/widgets.git", "http://127.0.0.1:8765/a/b.git",
                                 "http://localhost/a/b.git", "http://[::1]:80/a/b.git"])  # fmt: skip
def test_remote_takes_https_and_loopback_http(url: str) -> None:
    remote = Remote(url, "ghs_secret123")
    assert "ghs_secret123" not in repr(remote)


@pytest.mark.parametrize("token", ["", "ghs abc", "ghs_abc\n", "ghs_\u00e9"])
def test_remote_refuses_a_token_that_is_empty_or_not_printable(token: str) -> None:
    with pytest.raises(ValueError, match="token") as caught:
        Remote("https://github.com/acme/widgets.git", token)
    assert token.strip() == "" or token not in str(caught.value)


def test_redact_removes_the_token_its_header_userinfo_and_github_tokens() -> None:
    token = (
        "ghs_" + "0123456789abcdefghijABCDEFGHIJ012345"
    )  # built, so no token-shaped literal sits in the repo
    basic = basic_credential(token)
    text = "\n".join([
        f"fatal: token {token} refused",
        f"=> Send header: Authorization: {basic}",
        "> authorization:Bearer something-else",
        "fatal: unable to access 'https://x-access-token:hunter2@github.com/acme/widgets.git/'",
        f"remote: odd echo {basic.split()[1]}",
        "remote: another ghp_AAAAAAAAAAAAAAAAAAAAAAAA and github_pat_11ABCDEFG0123456789_abcdefghij",
    ])  # fmt: skip
    cleaned = redact(text, Remote("https://github.com/acme/widgets.git", token).secrets)
    for secret in (token, basic.split()[1], "something-else", "hunter2", "ghp_AAAA", "github_pat_11"):
        assert secret not in cleaned
    assert cleaned.count(REDACTED) >= 6
    assert "fatal: unable to access 'https://<redacted>@github.com/acme/widgets.git/'" in cleaned


def test_a_lease_alone_would_force_a_non_fast_forward(tmp_path: Path) -> None:
    """Why ``push`` checks ancestry itself: git treats a matching lease as licence to force."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1", **IDENTITY}

    def run(*args: str, stdin: bytes = b"") -> str:
        done = subprocess.run([REAL_GIT, *args], input=stdin, capture_output=True, env=env, check=True)
        return done.stdout.decode().strip()

    run("init", "-q", "--bare", str(tmp_path / "remote.git"))
    run("init", "-q", "--bare", str(tmp_path / "local.git"))
    local = f"--git-dir={tmp_path / 'local.git'}"
    tree = run(local, "mktree")
    base = run(local, "commit-tree", tree, "-m", "base")
    tip = run(local, "commit-tree", tree, "-p", base, "-m", "tip")
    sideways = run(local, "commit-tree", tree, "-p", base, "-m", "sideways")
    run(local, "push", "-q", str(tmp_path / "remote.git"), f"{tip}:refs/heads/main")
    out = run(local, "push", "--porcelain", f"--force-with-lease=refs/heads/main:{tip}",
              str(tmp_path / "remote.git"), f"{sideways}:refs/heads/main")  # fmt: skip
    assert "(forced update)" in out
    assert run(f"--git-dir={tmp_path / 'remote.git'}", "rev-parse", "main") == sideways


# -- fetching ----------------------------------------------------------------------------------


def test_fetch_of_the_private_default_branch_matches_the_api(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    got = mirror.fetch(github.remote(), ["main"])
    assert got == {"main": github.world.head_sha}
    assert got["main"] == github.branch("main")
    assert mirror.head("refs/remotes/origin/main") == github.world.head_sha
    assert mirror.path == root / "mirrors" / f"{REPO_ID}.git"
    assert git(mirror, "rev-parse", "--is-bare-repository") == "true"
    assert git(mirror, "show", f"{github.world.head_sha}:README.md") == "# widgets"


def test_the_token_is_in_no_file_config_or_argv(
    github: GitHub, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "git-calls.log"
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        {{ printf 'argv'; for a in "$@"; do printf '\\t%s' "$a"; done; printf '\\n'
          printf 'env'; env | sed 's/=.*//' | sort | tr '\\n' ' '; printf '\\n'; }} >> '{log}'
        exec '{REAL_GIT}' "$@"
        """))  # fmt: skip
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("BATON_CANARY", "the worker's own environment")
    read, write = github.remote(), github.remote(write=True)

    mirror = Mirror(root, REPO_ID)
    with mirror.locked():
        tip = mirror.fetch(read, ["main", "absent"])["main"]
        mirror.push(write, commit_on(mirror, tip, "shimmed"), "baton/shimmed", expect=None)
        assert mirror.head("refs/remotes/origin/main") == tip

    secrets = [s.encode() for s in (*read.secrets, *write.secrets)]
    for path in every_file(root):
        data = path.read_bytes()
        assert not any(s in data for s in secrets), f"a token is in {path}"
        assert b"x-access-token" not in data
        assert b"extraheader" not in data.lower(), f"an extra header is configured in {path}"
    assert "extraheader" not in mirror.run("config", "--list").decode().lower()

    calls = log.read_text()
    assert not any(s.decode() in calls for s in secrets)
    lines = calls.splitlines()
    records = [(lines[i].split("\t")[1:], set(lines[i + 1].split()[1:])) for i in range(0, len(lines), 2)]
    records = [
        (argv, env) for argv, env in records if any(str(root) in a for a in argv)
    ]  # not the emulator's
    networked = {"ls-remote", "fetch", "push"}
    verbs = set()
    for argv, env in records:
        verb = next(a for a in argv if not a.startswith("-") and "=" not in a)
        verbs.add(verb)
        assert "BATON_CANARY" not in env
        assert env - {"PWD", "SHLVL", "_", "OLDPWD"} <= {
            "PATH", "HOME", "XDG_CONFIG_HOME", "LANG", "LC_ALL", "TZ", "GIT_CONFIG_NOSYSTEM",
            "GIT_CONFIG_GLOBAL", "GIT_ATTR_NOSYSTEM", "GIT_TERMINAL_PROMPT", "GIT_ASKPASS",
            "SSH_ASKPASS", "GIT_PAGER", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0",
        }  # fmt: skip
        assert ("GIT_CONFIG_VALUE_0" in env) == (verb in networked), argv
        assert "credential.helper=" in argv
        assert "core.hooksPath=/dev/null" in argv
        assert "protocol.allow=never" in argv
    assert networked <= verbs


def test_fetch_with_a_bad_token_fails_naming_the_repo(github: GitHub, root: Path) -> None:
    bogus = "ghs_" + "x" * 36
    with pytest.raises(MirrorError) as caught:
        Mirror(root, REPO_ID).fetch(Remote(github.clone_url, bogus), ["main"])
    assert caught.value.code == AUTH_FAILED
    assert github.clone_url in caught.value.message
    assert "contents:read" in caught.value.message
    assert bogus not in caught.value.message
    assert basic_credential(bogus).split()[1] not in caught.value.message


def test_fetch_of_a_repository_the_token_cannot_reach_fails(github: GitHub, root: Path) -> None:
    github.admin.create_repo("acme", "secret", files={"x": "y"}, private=True)
    other = Remote(f"{github.server.url}/acme/secret.git", github.remote().token)
    with pytest.raises(MirrorError) as caught:
        Mirror(root, REPO_ID).fetch(other, ["main"])
    assert caught.value.code in {FETCH_FAILED, AUTH_FAILED}
    assert "acme/secret.git" in caught.value.message
    assert "token covers this repository" in caught.value.message
    assert other.token not in caught.value.message


def test_a_missing_branch_is_absent_and_its_old_tracking_ref_dropped(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    mirror.fetch(github.remote(), ["main"])
    mirror.run("update-ref", "refs/remotes/origin/gone", github.world.head_sha)  # fetched once, since deleted
    got = mirror.fetch(github.remote(), ["main", "gone", "never/was"])
    assert got == {"main": github.world.head_sha}
    assert mirror.head("refs/remotes/origin/gone") is None
    assert mirror.fetch(github.remote(), ["nope"]) == {}
    assert mirror.fetch(github.remote(), []) == {}


def test_fetch_follows_a_branch_that_moved_or_was_rewritten(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    remote = github.remote()
    first = github.admin.commit(world.REPO, "topic", {"a.txt": "1"}, base=github.world.head_sha)
    other = github.admin.commit(world.REPO, "other", {"b.txt": "2"}, base=github.world.head_sha)
    assert mirror.fetch(remote, ["topic", "other"]) == {"topic": first, "other": other}
    git(mirror, "update-ref", "refs/remotes/origin/topic", other)  # as if the remote had been rewritten
    moved = github.admin.commit(world.REPO, "other", {"c.txt": "3"})
    assert mirror.fetch(remote, ["topic", "other"]) == {"topic": first, "other": moved}


@pytest.mark.parametrize("branch", ["-upload-pack=sh", "a..b", "a b", "x:y", "refs/heads/../x", "", "a.lock"])
def test_branch_names_git_would_misread_are_refused(root: Path, branch: str) -> None:
    with pytest.raises(ValueError, match="branch"):
        Mirror(root, REPO_ID).fetch(Remote("https://github.com/acme/widgets.git", "ghs_x"), [branch])


def test_a_server_that_never_answers_is_cut_off(root: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/acme/widgets.git"
        started = time.monotonic()
        with pytest.raises(MirrorError) as caught:
            Mirror(root, REPO_ID, timeout_s=1).fetch(Remote(url, "ghs_slow"), ["main"])
    assert caught.value.code == FETCH_FAILED
    assert "took longer than 1s" in caught.value.message
    assert time.monotonic() - started < 10


# -- pushing -----------------------------------------------------------------------------------


def test_push_with_a_read_only_token_is_refused_and_the_remote_unchanged(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    read = github.remote()
    tip = mirror.fetch(read, ["main"])["main"]
    new = commit_on(mirror, tip, "readonly")
    for branch, expect in (("baton/readonly", None), ("main", tip)):
        with pytest.raises(MirrorError) as caught:
            mirror.push(read, new, branch, expect=expect)
        assert caught.value.code == AUTH_FAILED  # the emulator, like GitHub, answers 403
        assert "contents:write" in caught.value.message
        assert read.token not in caught.value.message
    assert github.branch("baton/readonly") is None
    assert github.branch("main") == tip


def test_push_creates_a_new_branch_with_a_write_token(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    tip = mirror.fetch(github.remote(), ["main"])["main"]
    new = commit_on(mirror, tip, "feature")
    mirror.push(github.remote(write=True), new, "baton/issue-1", expect=None)
    assert github.branch("baton/issue-1") == new
    assert github.branch("main") == tip


def test_push_with_expect_none_onto_an_existing_branch_is_refused(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    tip = mirror.fetch(github.remote(), ["main"])["main"]
    existing = github.admin.commit(world.REPO, "baton/taken", {"x.txt": "someone else's"}, base=tip)
    new = commit_on(mirror, tip, "mine")
    with pytest.raises(MirrorError) as caught:
        mirror.push(github.remote(write=True), new, "baton/taken", expect=None)
    assert caught.value.code == PUSH_REJECTED
    assert f"the remote has baton/taken at {existing}" in caught.value.message
    assert github.branch("baton/taken") == existing


def test_push_of_a_commit_not_descending_from_the_tip_is_refused(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    write = github.remote(write=True)
    tip = mirror.fetch(write, ["main"])["main"]
    first = commit_on(mirror, tip, "first")
    mirror.push(write, first, "baton/work", expect=None)
    sideways = commit_on(mirror, tip, "sideways")  # a sibling of ``first``, not its child
    with pytest.raises(MirrorError) as caught:
        mirror.push(write, sideways, "baton/work", expect=first)
    assert caught.value.code == PUSH_REJECTED
    assert "fast-forward" in caught.value.message
    assert github.branch("baton/work") == first
    with pytest.raises(MirrorError) as caught:
        mirror.push(write, sideways, "main", expect=first)  # an expect the commit never saw
    assert caught.value.code == PUSH_REJECTED
    assert github.branch("main") == tip


def test_push_with_a_stale_expect_is_refused_by_the_lease(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    write = github.remote(write=True)
    tip = mirror.fetch(write, ["main"])["main"]
    moved = github.admin.commit(world.REPO, "main", {"moved.txt": "someone pushed"}, base=tip)
    mirror.fetch(write, ["main"])
    on_moved = commit_on(mirror, moved, "on-moved")  # descends from ``tip`` too
    with pytest.raises(MirrorError) as caught:
        mirror.push(write, on_moved, "main", expect=tip)
    assert caught.value.code == PUSH_REJECTED
    assert "stale info" in caught.value.message
    assert f"the remote has main at {moved}" in caught.value.message
    assert github.branch("main") == moved


def test_push_of_a_fast_forward_with_the_right_expect_works(github: GitHub, root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    write = github.remote(write=True)
    tip = mirror.fetch(write, ["main"])["main"]
    first = commit_on(mirror, tip, "one")
    mirror.push(write, first, "baton/ff", expect=None)
    second = commit_on(mirror, first, "two")
    mirror.push(write, second, "baton/ff", expect=first)
    assert github.branch("baton/ff") == second
    mirror.push(write, second, "baton/ff", expect=second)  # already there: nothing to do
    assert mirror.fetch(write, ["baton/ff"]) == {"baton/ff": second}


def test_push_of_a_commit_the_mirror_lacks_fails_before_the_network(github: GitHub, root: Path) -> None:
    with pytest.raises(MirrorError, match="not in the mirror"):
        Mirror(root, REPO_ID).push(github.remote(write=True), "a" * 40, "baton/x", expect=None)
    with pytest.raises(ValueError, match="object id"):
        Mirror(root, REPO_ID).push(github.remote(write=True), "HEAD", "baton/x", expect=None)


# -- sharing the mirror ------------------------------------------------------------------------


def test_two_threads_fetch_one_new_mirror_under_the_lock(github: GitHub, root: Path) -> None:
    remote = github.remote()
    spans: list[tuple[float, float]] = []
    results: list[dict[str, str]] = []
    errors: list[BaseException] = []

    def work() -> None:
        mirror = Mirror(root, REPO_ID)  # each worker its own object, as two processes would
        try:
            with mirror.locked():
                start = time.monotonic()
                results.append(mirror.fetch(remote, ["main"]))
                spans.append((start, time.monotonic()))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert results == [{"main": github.world.head_sha}] * 2
    first, second = sorted(spans)
    assert first[1] <= second[0], "the lock let two fetches overlap"


def test_concurrent_first_use_makes_one_mirror(root: Path) -> None:
    heads: list[str | None] = []
    threads = [
        threading.Thread(target=lambda: heads.append(Mirror(root, REPO_ID).head("HEAD"))) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert heads == [None] * 6
    assert sorted(p.name for p in (root / "mirrors").iterdir()) == [f"{REPO_ID}.git"]


def test_the_lock_holds_across_processes(root: Path) -> None:
    script = textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        from worker.runs.mirror import Mirror
        with Mirror(Path({str(root)!r}), {REPO_ID}).locked():
            print("held", flush=True)
            sys.stdin.read()
        """)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).parents[3],
    ) as holder:  # fmt: skip
        assert holder.stdin is not None
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(MirrorError) as caught, Mirror(root, REPO_ID, lock_timeout_s=0.3).locked():
            pass
        assert caught.value.code == MIRROR_BUSY
        holder.stdin.close()
        assert holder.wait(timeout=10) == 0
    with Mirror(root, REPO_ID, lock_timeout_s=5).locked():
        pass


def test_run_refuses_options_before_the_subcommand(root: Path) -> None:
    mirror = Mirror(root, REPO_ID)
    with pytest.raises(ValueError, match="subcommand"):
        mirror.run("-c", "protocol.allow=always", "fetch")
    with pytest.raises(MirrorError, match="git cat-file in the mirror"):
        mirror.run("cat-file", "-e", "b" * 40)
    assert base64.b64decode(basic_credential("t").split()[1]) == b"x-access-token:t"
