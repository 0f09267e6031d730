"""Inspection with real git repositories: every violation named with its path, nothing the
workspace holds ever run (hooks, filters, fsmonitor), and a commit that touches nothing else."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from worker.runner import inspect as ins
from worker.runner.inspect import Code, InspectError, Inspection, Violation
from worker.runner.inspect_rules import (
    Change,
    ChangeKind,
    compile_glob,
    glob_matches,
    is_git_name,
    resolve_link,
    violations,
)

AUTHOR = ("Baton", "baton@users.noreply.github.com")
EVIL_SCRIPT = "#!/bin/sh\ntouch {canary}\n"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
    return env


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=t@example.com", "-c", "core.hooksPath=/dev/null",
         "-C", str(cwd), *args],
        input=stdin, capture_output=True, check=True, env=_env(),
    )  # fmt: skip
    return done.stdout.decode().strip()


@dataclass
class Repo:
    top: Path
    base: str
    tmp: Path

    @property
    def git_dir(self) -> Path:
        return self.top / ".git"

    def workspace(self, name: str = "ws") -> Path:
        """A plain copy of the base commit, as the runner gives the agent: no .git."""
        ws = self.tmp / name
        ws.mkdir()
        archive = ["git", "-C", str(self.top), "archive", self.base]
        tar = subprocess.run(archive, capture_output=True, check=True, env=_env()).stdout
        subprocess.run(["tar", "-x", "-C", str(ws)], input=tar, check=True)
        return ws

    def judge(
        self,
        ws: Path,
        *,
        protected: Sequence[str] = (),
        max_diff_lines: int = 2000,
        max_blob_bytes: int = ins.DEFAULT_MAX_BLOB_BYTES,
    ) -> Inspection:
        tree = ins.snapshot(self.git_dir, ws, self.base)
        return ins.inspect(self.git_dir, self.base, tree, ws, protected=protected,
                           max_diff_lines=max_diff_lines, max_blob_bytes=max_blob_bytes)  # fmt: skip

    def tree_entries(self, tree: str) -> dict[str, str]:
        """path -> mode, every entry of a tree."""
        out = git(self.top, "ls-tree", "-r", "-z", tree)
        entries = {}
        for record in filter(None, out.split("\0")):
            head, path = record.split("\t", 1)
            entries[path] = head.split(" ")[0]
        return entries


def make_repo(tmp: Path, files: dict[str, str], links: dict[str, str] | None = None) -> Repo:
    top = tmp / "repo"
    top.mkdir()
    git(top, "init", "-q", "-b", "main")
    for path, text in files.items():
        (top / path).parent.mkdir(parents=True, exist_ok=True)
        (top / path).write_text(text)
    for path, target in (links or {}).items():
        (top / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, top / path)
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "base")
    return Repo(top, git(top, "rev-parse", "HEAD"), tmp)


def lines(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(n))


BASE_FILES = {
    "README.md": lines(10, "readme"),
    "src/app.py": lines(30, "code"),
    "docs/guide.md": lines(5, "guide"),
    ".github/workflows/ci.yml": "on: push\n",
    ".github/baton.yml": "version: 1\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path, BASE_FILES)


def codes(result: Inspection) -> list[tuple[str, str]]:
    return [(v.code, v.path) for v in result.violations]


# --- changes, stat, no changes, renames ------------------------------------------------------------


def test_a_clean_edit_gives_its_changes_and_stat(repo: Repo) -> None:
    ws = repo.workspace()
    readme = (ws / "README.md").read_text().replace("readme 3\n", "README THREE\n") + "extra 1\nextra 2\n"
    (ws / "README.md").write_text(readme)
    (ws / "src" / "util.py").write_text("def f():\n    return 1\n")
    (ws / "docs" / "guide.md").unlink()

    result = repo.judge(ws)

    assert result.ok
    assert not result.no_changes
    assert [(c.path, c.kind, c.added, c.removed, c.binary) for c in result.changes] == [
        ("README.md", ChangeKind.MODIFIED, 3, 1, False),
        ("docs/guide.md", ChangeKind.DELETED, 0, 5, False),
        ("src/util.py", ChangeKind.ADDED, 2, 0, False),
    ]
    assert (result.stat.files, result.stat.insertions, result.stat.deletions) == (3, 5, 6)
    assert result.diff_lines == 11
    assert result.stat_data() == {"files": 3, "insertions": 5, "deletions": 6, "diff_lines": 11}
    assert result.changes[0].to_data()["kind"] == "modified"
    assert git(repo.top, "cat-file", "-p", f"{result.tree}:src/util.py") == "def f():\n    return 1"


def test_an_untouched_workspace_is_no_changes(repo: Repo) -> None:
    result = repo.judge(repo.workspace())
    assert result.no_changes
    assert result.ok
    assert result.tree == result.base_tree == git(repo.top, "rev-parse", f"{repo.base}^{{tree}}")
    assert (result.stat.files, result.diff_lines) == (0, 0)


def test_a_moved_file_is_a_rename(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "src" / "app.py").rename(ws / "src" / "main.py")
    with (ws / "src" / "main.py").open("a") as f:
        f.write("one more\n")

    result = repo.judge(ws)

    assert [(c.kind, c.old_path, c.path, c.added, c.removed) for c in result.changes] == [
        (ChangeKind.RENAMED, "src/app.py", "src/main.py", 1, 0)
    ]
    assert result.ok


def test_a_file_replaced_by_a_symlink_is_a_type_change(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "docs" / "guide.md").unlink()
    os.symlink("../README.md", ws / "docs" / "guide.md")
    result = repo.judge(ws)
    assert [(c.path, c.kind) for c in result.changes] == [("docs/guide.md", ChangeKind.TYPE_CHANGED)]
    assert result.ok, result.violations


def test_the_git_dir_or_the_repository_top_both_work(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "new.txt").write_text("x\n")
    assert ins.snapshot(repo.top, ws, repo.base) == ins.snapshot(repo.git_dir, ws, repo.base)


# --- protected paths --------------------------------------------------------------------------------


def test_a_workflow_edit_is_protected_whatever_the_policy_says(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / ".github" / "workflows" / "ci.yml").write_text("on: push\njobs: {steal: {}}\n")
    (ws / ".github" / "workflows" / "new.yml").write_text("on: push\n")
    (ws / ".github" / "baton.yml").write_text("version: 2\n")

    result = repo.judge(ws, protected=())

    assert codes(result) == [
        (Code.PROTECTED_PATH, ".github/baton.yml"),
        (Code.PROTECTED_PATH, ".github/workflows/ci.yml"),
        (Code.PROTECTED_PATH, ".github/workflows/new.yml"),
    ]
    assert "'.github/workflows/**'" in result.violations[1].detail
    assert not result.ok


def test_policy_globs_match_at_any_depth_and_in_any_case(repo: Repo) -> None:
    ws = repo.workspace()
    for path in ("secrets/prod/token", "deep/dir/key.pem", ".GitHub/Workflows/x.yml", "docs/ok.md"):
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text("x\n")

    result = repo.judge(ws, protected=["secrets/**", "*.pem"])

    assert codes(result) == [
        (Code.PROTECTED_PATH, ".GitHub/Workflows/x.yml"),
        (Code.PROTECTED_PATH, "deep/dir/key.pem"),
        (Code.PROTECTED_PATH, "secrets/prod/token"),
    ]


def test_a_rename_out_of_a_protected_path_names_both_sides(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / ".github" / "workflows" / "ci.yml").rename(ws / "ci.yml")
    result = repo.judge(ws)
    assert codes(result) == [(Code.PROTECTED_PATH, ".github/workflows/ci.yml")]
    assert result.changes[0].kind == ChangeKind.RENAMED


def test_the_workflows_directory_replaced_by_a_symlink(repo: Repo) -> None:
    ws = repo.workspace()
    for child in (ws / ".github" / "workflows").iterdir():
        child.unlink()
    (ws / ".github" / "workflows").rmdir()
    os.symlink("../docs", ws / ".github" / "workflows")

    result = repo.judge(ws)

    assert codes(result) == [
        (Code.PROTECTED_PATH, ".github/workflows"),
        (Code.PROTECTED_SYMLINK, ".github/workflows"),
        (Code.PROTECTED_PATH, ".github/workflows/ci.yml"),
    ]


def test_any_symlink_change_in_a_protected_path(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / ".github" / "actions").mkdir()
    os.symlink("../../src/app.py", ws / ".github" / "actions" / "tool")  # stays inside the tree
    os.symlink("../.github/workflows", ws / "docs" / "ci")  # a way into a protected directory

    result = repo.judge(ws)

    assert (Code.PROTECTED_SYMLINK, ".github/actions/tool") in codes(result)
    assert (Code.PROTECTED_PATH, ".github/actions/tool") in codes(result)
    assert (Code.PROTECTED_SYMLINK, "docs/ci") in codes(result)
    assert Code.SYMLINK_ESCAPE not in {v.code for v in result.violations}


def test_an_edit_reached_through_a_protected_symlink_is_protected(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path, {"ci/build.yml": "on: push\n"}, {".github/workflows/build.yml": "../../ci/build.yml"}
    )
    ws = repo.workspace()
    (ws / "ci" / "build.yml").write_text("on: push\njobs: {steal: {}}\n")

    result = repo.judge(ws)

    assert codes(result) == [(Code.PROTECTED_PATH, "ci/build.yml")]
    assert ".github/workflows/build.yml" in result.violations[0].detail


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        (".github/workflows/**", ".github/workflows/ci.yml", True),
        (".github/workflows/**", ".github/workflows/nested/deep.yml", True),
        (".github/workflows/**", ".github/workflows", True),  # the directory itself
        (".github/workflows/**", ".github/workflowsX/ci.yml", False),
        (".github/workflows/**", "src/.github/workflows/ci.yml", False),  # anchored
        (".github/workflows/**", ".GITHUB/WORKFLOWS/CI.YML", True),  # case folds
        (".github/workflows/**", ".github/workflows. /ci.yml", True),  # so do NTFS's trailing dots
        (".github/workflows/**", ".git\u200chub/workflows/ci.yml", True),  # and HFS's ignored code points
        (".github/baton.yml", ".github/baton.yml", True),
        (".github/baton.yml", ".github/baton.yml.bak", False),
        ("/Makefile", "Makefile", True),
        ("/Makefile", "sub/Makefile", False),
        ("Makefile", "sub/Makefile", True),  # no slash: any depth
        ("*.pem", "a/b/key.pem", True),
        ("*.pem", "key.pem.txt", False),
        ("secrets/", "secrets/a/b", True),  # a directory protects what is under it
        ("src/*/gen.py", "src/a/gen.py", True),
        ("src/*/gen.py", "src/a/b/gen.py", False),  # * stays in one component
        ("src/**/gen.py", "src/gen.py", True),  # ** is zero or more components
        ("src/**/gen.py", "src/a/b/gen.py", True),
        ("docs/a?.md", "docs/ab.md", True),
        ("docs/[ab].md", "docs/c.md", False),
    ],
)
def test_glob_semantics(pattern: str, path: str, matches: bool) -> None:
    glob = compile_glob(pattern)
    assert glob is not None
    assert glob_matches(glob, path) is matches


# --- size of the diff ---------------------------------------------------------------------------


def test_a_diff_over_the_limit(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "new.txt").write_text(lines(6))
    assert codes(repo.judge(ws, max_diff_lines=5)) == [(Code.DIFF_TOO_LARGE, "")]
    assert repo.judge(ws, max_diff_lines=6).ok


def test_the_agents_gitattributes_cannot_hide_lines(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / ".gitattributes").write_text("* -diff binary\n")
    with (ws / "src" / "app.py").open("a") as f:
        f.write(lines(10, "more"))

    result = repo.judge(ws, max_diff_lines=5)

    app = next(c for c in result.changes if c.path == "src/app.py")
    assert (app.binary, app.added) == (False, 10)
    assert (Code.DIFF_TOO_LARGE, "") in codes(result)


def test_a_credential_the_agent_wrote_is_never_committed(repo: Repo) -> None:
    """The branch is pushed before any merge gate reads it: a token in it would be public at once."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    ws = repo.workspace()
    (ws / ".gitattributes").write_text("* -diff binary\n")  # cannot hide the line from the scan
    (ws / "src" / "config.py").write_text(f'TOKEN = "{token}"\n')

    result = repo.judge(ws)

    assert not result.ok
    assert (Code.SECRET_MATERIAL, "src/config.py") in codes(result)
    found = next(v for v in result.violations if v.code == Code.SECRET_MATERIAL)
    assert "line 1" in found.detail
    assert token not in str(found)  # the finding never repeats the secret


# --- symlinks ------------------------------------------------------------------------------------


def test_symlinks_that_leave_the_tree(repo: Repo) -> None:
    ws = repo.workspace()
    os.symlink("/etc/passwd", ws / "abs")
    os.symlink("../outside", ws / "up")
    os.symlink("../../x", ws / "docs" / "deep")
    os.symlink("../src/../../x", ws / "docs" / "sneaky")
    os.symlink("sub/../.git/hooks", ws / "hooks")
    os.symlink("../README.md", ws / "docs" / "fine")
    os.symlink("..", ws / "docs" / "root")

    result = repo.judge(ws)

    assert codes(result) == [
        (Code.SYMLINK_ESCAPE, "abs"),
        (Code.SYMLINK_ESCAPE, "docs/deep"),
        (Code.PROTECTED_SYMLINK, "docs/root"),  # the root holds .github/workflows
        (Code.SYMLINK_ESCAPE, "docs/sneaky"),
        (Code.SYMLINK_ESCAPE, "hooks"),
        (Code.SYMLINK_ESCAPE, "up"),
    ]
    assert "'/etc/passwd' is an absolute path" in result.violations[0].detail
    assert "git metadata" in result.violations[4].detail


def test_a_symlink_that_escapes_through_an_older_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"README.md": "x\n"}, {"vendor": "../../elsewhere"})
    ws = repo.workspace()
    os.symlink("vendor/file", ws / "innocent")
    result = repo.judge(ws)
    assert codes(result) == [(Code.SYMLINK_ESCAPE, "innocent")]
    assert "via 'vendor'" in result.violations[0].detail


def test_symlink_resolution() -> None:
    links = {"a": "b", "b": "a", "c": "d/../e", "x/up": "../c", "w": "win\\..\\..\\x"}
    assert resolve_link("a", links).reason == "does not resolve (a symlink loop)"
    assert resolve_link("x/up", links).path == "e"
    assert resolve_link("w", links).path is None
    assert resolve_link("c", {"c": ".g\u200cit/config"}).path is None


# --- submodules -----------------------------------------------------------------------------------


def test_a_gitmodules_change(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = https://evil.example/x\n')
    assert codes(repo.judge(ws)) == [(Code.GITMODULES, ".gitmodules")]


def test_a_symlinked_gitmodules_is_named_not_a_crash(repo: Repo) -> None:
    ws = repo.workspace()
    os.symlink("README.md", ws / ".gitmodules")
    result = repo.judge(ws)
    assert codes(result) == [(Code.GITMODULES, ".gitmodules")]
    assert ".gitmodules" not in repo.tree_entries(result.tree)


def test_a_removed_submodule_is_a_gitlink_change(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, {"README.md": "x\n"})
    git(repo.top, "update-index", "--add", "--cacheinfo", f"160000,{repo.base},vendor/lib")
    git(repo.top, "commit", "-q", "-m", "submodule")
    repo.base = git(repo.top, "rev-parse", "HEAD")
    ws = repo.workspace()
    (ws / "vendor" / "lib").rmdir()

    result = repo.judge(ws)

    assert codes(result) == [(Code.GITLINK, "vendor/lib")]
    assert result.changes[0].kind == ChangeKind.DELETED


def test_an_added_gitlink_in_a_tree(repo: Repo) -> None:
    base_tree = git(repo.top, "rev-parse", f"{repo.base}^{{tree}}")
    listing = git(repo.top, "ls-tree", base_tree) + f"\n160000 commit {repo.base}\tvendored\n"
    tree = git(repo.top, "mktree", stdin=listing.encode())
    result = ins.inspect(repo.git_dir, repo.base, tree, repo.workspace(), protected=(), max_diff_lines=100)
    assert codes(result) == [(Code.GITLINK, "vendored")]


# --- git metadata in the workspace ------------------------------------------------------------------


def plant_git_dir(where: Path, canary: Path) -> None:
    """A .git an agent could leave: hooks, fsmonitor and a filter that would all touch ``canary``."""
    hooks = where / "hooks"
    hooks.mkdir(parents=True)
    for hook in ("post-checkout", "pre-commit", "post-commit", "reference-transaction", "post-index-change",
                 "fsmonitor-watchman", "pre-auto-gc", "post-rewrite"):  # fmt: skip
        (hooks / hook).write_text(EVIL_SCRIPT.format(canary=canary))
        (hooks / hook).chmod(0o755)
    (where / "config").write_text(
        f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks / 'fsmonitor-watchman'}\n"
        f'[filter "evil"]\n\tclean = touch {canary}\n\tsmudge = touch {canary}\n'
    )
    (where / "HEAD").write_text("ref: refs/heads/main\n")
    (where / "objects").mkdir()
    (where / "refs").mkdir()


def test_a_planted_git_dir_is_named_and_its_hooks_never_run(repo: Repo, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    ws = repo.workspace()
    plant_git_dir(ws / ".git", canary)
    plant_git_dir(ws / "src" / ".git", canary)
    (ws / ".gitattributes").write_text("* filter=evil\n")
    (ws / "src" / "new.py").write_text("x = 1\n")

    tree = ins.snapshot(repo.git_dir, ws, repo.base)
    result = ins.inspect(repo.git_dir, repo.base, tree, ws, protected=(), max_diff_lines=100)
    ins.commit(repo.git_dir, repo.base, tree, branch="baton/planted", message="m", author=AUTHOR)

    assert not canary.exists()
    git_meta = [v for v in result.violations if v.code == Code.GIT_METADATA]
    assert [v.path for v in git_meta] == [".git", "src/.git"]
    assert "hooks/" in git_meta[0].detail
    entries = repo.tree_entries(tree)
    assert not any(".git/" in f"/{p}" or p.endswith(".git") for p in entries)
    assert "160000" not in entries.values()
    assert "src/new.py" not in entries  # the directory holding a .git stays as it was
    assert git(repo.top, "cat-file", "-p", f"{tree}:.gitattributes") == "* filter=evil"


def test_a_nested_repository_or_gitdir_file_never_becomes_a_gitlink(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "vendor" / "lib").mkdir(parents=True)
    git(ws / "vendor" / "lib", "init", "-q")
    git(ws / "vendor" / "lib", "commit", "-q", "--allow-empty", "-m", "nested")
    (ws / "other").mkdir()
    (ws / "other" / ".git").write_text(f"gitdir: {repo.git_dir}\n")  # points at the real repository
    (ws / "other" / "file").write_text("x\n")

    result = repo.judge(ws)

    assert codes(result) == [(Code.GIT_METADATA, "other/.git"), (Code.GIT_METADATA, "vendor/lib/.git")]
    assert repo.tree_entries(result.tree) == repo.tree_entries(repo.base)


def test_every_spelling_of_dot_git_is_metadata(repo: Repo) -> None:
    ws = repo.workspace()
    for name in (".GIT", "git~1", ".git.", ".Git "):
        (ws / "src" / name / "hooks").mkdir(parents=True)
        (ws / "src" / name / "hooks" / "post-checkout").write_text("x\n")

    result = repo.judge(ws)

    assert sorted(codes(result)) == sorted(
        (Code.GIT_METADATA, f"src/{n}") for n in (".GIT", "git~1", ".git.", ".Git ")
    )
    assert result.no_changes


@pytest.mark.parametrize(
    ("name", "is_git"),
    [(".git", True), (".GIT", True), (".git.", True), (".git::$INDEX_ALLOCATION", True), ("git~1", True),
     (".git. :x", True), (".git..x", False),
     (".g\u200cit", True), (".gitignore", False), (".github", False), ("git", False), (".gitmodules", False)],
)  # fmt: skip
def test_git_names(name: str, is_git: bool) -> None:
    assert is_git_name(name) is is_git


# --- filters, config and the caller's environment -------------------------------------------------


def test_a_gitattributes_filter_never_runs(
    repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = tmp_path / "canary"
    evil_global = tmp_path / "gitconfig"
    evil_global.write_text(f'[filter "evil"]\n\tclean = touch {canary}\n[core]\n\thooksPath = /nonexistent\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(evil_global))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "filter.evil.clean")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"touch {canary}")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'filter.evil.clean'='touch {canary}'")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "nowhere-index"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".gitconfig").write_text(evil_global.read_text())
    ws = repo.workspace()
    (ws / ".gitattributes").write_text("* filter=evil\n")
    (ws / "payload.txt").write_text("exact bytes\r\n")

    result = repo.judge(ws)

    assert not canary.exists()
    assert result.ok
    blob = subprocess.run(["git", "-C", str(repo.top), "cat-file", "blob", f"{result.tree}:payload.txt"],
                          capture_output=True, check=True, env=_env()).stdout  # fmt: skip
    assert blob == b"exact bytes\r\n"


def test_a_filter_in_the_repository_config_is_refused(repo: Repo, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    git(repo.top, "config", "filter.lfs.clean", f"touch {canary}")
    ws = repo.workspace()
    (ws / ".gitattributes").write_text("* filter=lfs\n")

    with pytest.raises(InspectError) as caught:
        ins.snapshot(repo.git_dir, ws, repo.base)

    assert caught.value.code == ins.FILTER_CONFIGURED
    assert "filter.lfs.clean" in caught.value.message
    assert not canary.exists()


def test_an_unknown_base_fails_closed(repo: Repo) -> None:
    with pytest.raises(InspectError) as caught:
        ins.snapshot(repo.git_dir, repo.workspace(), "no-such-ref")
    assert caught.value.code == ins.UNKNOWN_REVISION


# --- what lstat sees --------------------------------------------------------------------------------


def test_setuid_and_setgid_files(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "suid").write_text("x\n")
    (ws / "suid").chmod(0o4755)
    (ws / "sgid").write_text("x\n")
    (ws / "sgid").chmod(0o2755)
    (ws / "shared").mkdir()
    (ws / "shared").chmod(0o2775)  # a setgid directory is ordinary (group inheritance)

    result = repo.judge(ws)

    assert codes(result) == [(Code.SETUID, "sgid"), (Code.SETUID, "suid")]
    assert result.violations[1].detail == "a setuid file"


def test_special_files(repo: Repo, tmp_path: Path) -> None:
    ws = repo.workspace()
    os.mkfifo(ws / "docs" / "pipe")
    with socket.socket(socket.AF_UNIX) as sock:
        cwd = Path.cwd()
        os.chdir(ws)  # a short relative path: socket paths are limited to ~100 bytes
        try:
            sock.bind("sock")
        finally:
            os.chdir(cwd)
    expected = [(Code.SPECIAL_FILE, "docs/pipe"), (Code.SPECIAL_FILE, "sock")]
    if os.geteuid() == 0:
        os.mknod(ws / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        expected.insert(1, (Code.SPECIAL_FILE, "null"))

    result = repo.judge(ws)

    assert codes(result) == expected
    assert result.no_changes  # git never saw them


def test_a_fifo_where_git_reads_gitignore_never_hangs_git(repo: Repo) -> None:
    """git opens .gitignore and .gitattributes whatever the pathspec says; on a FIFO it would block."""
    ws = repo.workspace()
    os.mkfifo(ws / ".gitignore")
    os.mkfifo(ws / "src" / ".gitattributes")
    (ws / "README.md").write_text("changed\n")

    result = repo.judge(ws)

    assert codes(result) == [(Code.SPECIAL_FILE, ".gitignore"), (Code.SPECIAL_FILE, "src/.gitattributes")]
    assert result.no_changes  # the base tree: git never ran on this workspace


def test_a_binary_over_the_blob_limit(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "big.bin").write_bytes(b"\0" * 2048)
    (ws / "small.bin").write_bytes(b"\0" * 512)
    (ws / "big.txt").write_text("a" * 2047 + "\n")

    result = repo.judge(ws, max_blob_bytes=1024)

    assert codes(result) == [(Code.BINARY_TOO_LARGE, "big.bin")]
    assert next(c for c in result.changes if c.path == "big.bin").binary


def test_a_file_over_githubs_limit(repo: Repo) -> None:
    ws = repo.workspace()
    with (ws / "huge.dat").open("wb") as f:
        f.truncate(ins.GITHUB_FILE_LIMIT + 1)  # sparse: cheap to make, 100 MiB to git

    result = repo.judge(ws)

    assert codes(result) == [(Code.FILE_TOO_LARGE, "huge.dat")]


def test_the_size_rules_on_plain_data() -> None:
    text = Change(path="t", kind=ChangeKind.ADDED, added=1, new_mode=0o100644, new_blob="a")
    binary = Change(path="b", kind=ChangeKind.ADDED, binary=True, new_mode=0o100644, new_blob="b")
    found = violations([text, binary], protected=(), max_diff_lines=10, max_blob_bytes=10,
                       sizes={"a": ins.GITHUB_FILE_LIMIT + 1, "b": 11}, links={}, base_links={})  # fmt: skip
    assert [(v.code, v.path) for v in found] == [(Code.BINARY_TOO_LARGE, "b"), (Code.FILE_TOO_LARGE, "t")]


# --- commit ------------------------------------------------------------------------------------------


def test_commit_makes_one_commit_and_touches_nothing_else(repo: Repo) -> None:
    (repo.top / "README.md").write_text("a local edit in the checkout\n")  # the checkout is dirty
    before = (git(repo.top, "symbolic-ref", "HEAD"), git(repo.top, "rev-parse", "HEAD"),
              git(repo.top, "status", "--porcelain"), (repo.git_dir / "index").read_bytes())  # fmt: skip
    ws = repo.workspace()
    (ws / "src" / "app.py").write_text("print('fixed')\n")
    tree = ins.snapshot(repo.git_dir, ws, repo.base)
    when = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))

    sha = ins.commit(
        repo.git_dir, repo.base, tree, branch="baton/run-1", message="Fix it", author=AUTHOR, date=when
    )

    after = (git(repo.top, "symbolic-ref", "HEAD"), git(repo.top, "rev-parse", "HEAD"),
             git(repo.top, "status", "--porcelain"), (repo.git_dir / "index").read_bytes())  # fmt: skip
    assert after == before
    assert git(repo.top, "rev-parse", "refs/heads/baton/run-1") == sha
    assert git(repo.top, "rev-list", "--parents", "-n1", sha).split() == [sha, repo.base]
    assert git(repo.top, "rev-parse", f"{sha}^{{tree}}") == tree
    shown = git(repo.top, "log", "-1", "--format=%an|%ae|%cn|%ce|%at|%ct|%ai|%B", sha)
    stamp = str(int(when.timestamp()))
    ident = "Baton|baton@users.noreply.github.com"
    assert shown == f"{ident}|{ident}|{stamp}|{stamp}|2026-03-01 12:00:00 +0200|Fix it"


def test_commit_is_deterministic_and_refuses_an_existing_branch(repo: Repo) -> None:
    ws = repo.workspace()
    (ws / "new.txt").write_text("x\n")
    tree = ins.snapshot(repo.git_dir, ws, repo.base)

    first = ins.commit(repo.git_dir, repo.base, tree, branch="baton/a", message="m", author=AUTHOR)
    second = ins.commit(repo.git_dir, repo.base, tree, branch="baton/b", message="m", author=AUTHOR)
    assert first == second  # dated like the base commit unless a date is passed

    with pytest.raises(InspectError) as caught:
        ins.commit(repo.git_dir, repo.base, tree, branch="baton/a", message="other", author=AUTHOR)
    assert caught.value.code == ins.BRANCH_EXISTS
    with pytest.raises(InspectError):
        ins.commit(repo.git_dir, repo.base, tree, branch="main", message="m", author=AUTHOR)
    assert git(repo.top, "rev-parse", "main") == repo.base


@pytest.mark.parametrize("branch", ["", "-x", "a..b", "has space", "x.lock", "a\nb"])
def test_commit_refuses_bad_branch_names(repo: Repo, branch: str) -> None:
    with pytest.raises(ValueError, match="branch name"):
        ins.commit(repo.git_dir, repo.base, repo.base, branch=branch, message="m", author=AUTHOR)


def test_commit_refuses_bad_identities_and_naive_dates(repo: Repo) -> None:
    with pytest.raises(ValueError, match="identity"):
        ins.commit(repo.git_dir, repo.base, repo.base, branch="b", message="m", author=("A <x>", "a@b"))
    with pytest.raises(ValueError, match="timezone"):
        ins.commit(repo.git_dir, repo.base, repo.base, branch="b", message="m", author=AUTHOR,
                   date=datetime(2026, 1, 1))  # fmt: skip
    assert ins.commit(repo.git_dir, repo.base, repo.base, branch="b", message="m", author=AUTHOR,
                      date=datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip


def test_violation_codes_are_stable_constants() -> None:
    assert {str(c) for c in Code} == {
        "protected-path", "protected-symlink", "diff-too-large", "symlink-escape", "gitmodules", "gitlink",
        "git-metadata", "setuid", "special-file", "binary-too-large", "file-too-large", "secret-material",
    }  # fmt: skip
    assert Violation(Code.GITLINK, "x", "d").to_data() == {"code": "gitlink", "path": "x", "detail": "d"}


def test_the_repositorys_own_hooks_never_run(repo: Repo, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for hook in ("reference-transaction", "post-index-change", "pre-commit", "post-commit", "pre-auto-gc"):
        path = repo.git_dir / "hooks" / hook
        path.write_text(EVIL_SCRIPT.format(canary=canary))
        path.chmod(0o755)
    git(repo.top, "config", "core.fsmonitor", str(repo.git_dir / "hooks" / "post-commit"))
    ws = repo.workspace()
    (ws / "new.txt").write_text("x\n")

    tree = ins.snapshot(repo.git_dir, ws, repo.base)
    ins.inspect(repo.git_dir, repo.base, tree, ws, protected=(), max_diff_lines=10)
    ins.commit(repo.git_dir, repo.base, tree, branch="baton/hooks", message="m", author=AUTHOR)

    assert not canary.exists()
