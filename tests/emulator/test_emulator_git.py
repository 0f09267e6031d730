"""Repositories are bare git repos: plain clone and push work, and the API reads what was pushed."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import httpx
from emulator_world import GIT_ENV, OWNER, REPO, World, authed

from emulator import EmulatorServer


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


def _content(api: httpx.Client, path: str, ref: str | None = None) -> httpx.Response:
    return api.get(f"/repos/{OWNER}/{REPO}/contents/{path}", params={"ref": ref} if ref else None)


def test_clone_push_then_read_back_and_open_pull(world: World, tmp_path: Path) -> None:
    token = world.token()
    with world.api(token) as api:
        clone_url = api.get(f"/repos/{OWNER}/{REPO}").json()["clone_url"]
        assert clone_url == f"{world.url}/{OWNER}/{REPO}.git"
        work = tmp_path / "work"
        git("clone", "--quiet", authed(clone_url, token), str(work), cwd=tmp_path)
        assert (work / ".github" / "baton.yml").read_text() == "agents:\n  claude-code: {}\n"
        git("checkout", "--quiet", "-b", "agent/7", cwd=work)
        (work / ".github" / "baton.yml").write_text("agents: {}\n")
        (work / "README.md").unlink()
        (work / "docs.md").write_text("one\ntwo\n")
        git("add", "-A", cwd=work)
        git("commit", "--quiet", "-m", "agent change", cwd=work)
        git("push", "--quiet", "origin", "agent/7", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work)

        # The default branch still holds the old config; the branch and the sha hold the new one.
        on_main = _content(api, ".github/baton.yml").json()
        assert base64.b64decode(on_main["content"]) == b"agents:\n  claude-code: {}\n"
        for ref in ("agent/7", head):
            changed = _content(api, ".github/baton.yml", ref).json()
            assert base64.b64decode(changed["content"]) == b"agents: {}\n"
        assert _content(api, "README.md", "agent/7").status_code == 404
        missing_ref = _content(api, "README.md", "no-such-branch")
        assert missing_ref.status_code == 404
        assert missing_ref.json()["message"] == "No commit found for the ref no-such-branch"
        listing = _content(api, "", "main").json()
        assert sorted((e["name"], e["type"]) for e in listing) == [
            (".github", "dir"),
            ("README.md", "file"),
            ("src", "dir"),
        ]

        pull = api.post(
            f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "agent/7", "base": "main"}
        )
        assert pull.status_code == 201
        assert pull.json()["head"]["sha"] == head
        files = api.get(f"/repos/{OWNER}/{REPO}/pulls/1/files").json()
        assert sorted((f["filename"], f["status"], f["additions"], f["deletions"]) for f in files) == [
            (".github/baton.yml", "modified", 1, 2),
            ("README.md", "removed", 0, 1),
            ("docs.md", "added", 2, 0),
        ]
        assert all(f["patch"].startswith("@@") for f in files)

        # A later push moves the pull's head, as on GitHub.
        (work / "docs.md").write_text("one\ntwo\nthree\n")
        git("commit", "--quiet", "-am", "more", cwd=work)
        git("push", "--quiet", "origin", "agent/7", cwd=work)
        assert api.get(f"/repos/{OWNER}/{REPO}/pulls/1").json()["head"]["sha"] == git(
            "rev-parse", "HEAD", cwd=work
        )


def _try_git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=30, check=False
    )


def test_http_git_enforces_token_scope(world: World, tmp_path: Path) -> None:
    public = f"{world.url}/{OWNER}/{REPO}.git"
    private = f"{world.url}/{OWNER}/secret-sauce.git"
    # Anyone may clone a public repository; nobody anonymous may push to it.
    anon = tmp_path / "anon"
    git("clone", "--quiet", public, str(anon), cwd=tmp_path)
    (anon / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=anon)
    git("commit", "--quiet", "-m", "x", cwd=anon)
    refused = _try_git("push", "origin", "HEAD:refs/heads/anon", cwd=anon)
    assert refused.returncode != 0
    # A private repository needs a token that reaches it.
    assert _try_git("clone", private, str(tmp_path / "p0"), cwd=tmp_path).returncode != 0
    narrowed = world.token(repositories=[REPO])
    assert _try_git("clone", authed(private, narrowed), str(tmp_path / "p1"), cwd=tmp_path).returncode != 0
    assert (
        _try_git("clone", authed(private, world.token()), str(tmp_path / "p2"), cwd=tmp_path).returncode == 0
    )
    # contents: read may fetch but not push.
    reader = world.token(permissions={"contents": "read"})
    git("remote", "set-url", "origin", authed(public, reader), cwd=anon)
    denied = _try_git("push", "origin", "HEAD:refs/heads/reader", cwd=anon)
    assert denied.returncode != 0
    assert "denied" in denied.stderr
    writer = world.token(permissions={"contents": "write"})
    git("remote", "set-url", "origin", authed(public, writer), cwd=anon)
    git("push", "--quiet", "origin", "HEAD:refs/heads/writer", cwd=anon)
    with world.api(writer) as api:
        assert api.get(f"/repos/{OWNER}/{REPO}/contents/x.txt", params={"ref": "writer"}).status_code == 200
    bad = _try_git("ls-remote", authed(private, "ghs_" + "z" * 36), cwd=tmp_path)
    assert bad.returncode != 0
    assert "Invalid username or token" in bad.stderr


def test_pull_validation(world: World) -> None:
    with world.api(world.token()) as api:
        same = api.post(f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "main", "base": "main"})
        assert same.status_code == 422
        assert same.json()["errors"][0]["message"] == "No commits between main and main"
        missing = api.post(
            f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "nope", "base": "main"}
        )
        assert missing.status_code == 422
        assert missing.json()["errors"] == [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
        world.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "b", "files": {"f.txt": "f\n"}})
        assert (
            api.post(
                f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "b", "base": "main"}
            ).status_code
            == 201
        )
        duplicate = api.post(f"/repos/{OWNER}/{REPO}/pulls", json={"title": "t", "head": "b", "base": "main"})
        assert duplicate.status_code == 422
        assert duplicate.json()["errors"][0]["message"] == f"A pull request already exists for {OWNER}:b."


def test_state_survives_restart(tmp_path: Path) -> None:
    directory = tmp_path / "gh"
    with EmulatorServer(directory) as first:
        from emulator_world import build_world

        world = build_world(first)
        world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "persisted", "user": "maria"})
        token = world.token()
        world.admin.close()
    assert (directory / "state.json").exists()
    with (
        EmulatorServer(directory) as second,
        httpx.Client(base_url=second.url, headers={"Authorization": f"token {token}"}) as api,
    ):
        assert api.get(f"/repos/{OWNER}/{REPO}/issues/1").json()["title"] == "persisted"
        assert api.get(f"/repos/{OWNER}/{REPO}/contents/README.md").status_code == 200


def test_download_url_and_large_files(world: World) -> None:
    world.post(
        f"/repos/{OWNER}/secret-sauce/commits", {"branch": "main", "files": {"big.txt": "z" * 1_100_000}}
    )
    token = world.token()
    with world.api(token) as api:
        readme = api.get(f"/repos/{OWNER}/{REPO}/contents/README.md").json()
        big = api.get(f"/repos/{OWNER}/secret-sauce/contents/big.txt").json()
    assert httpx.get(readme["download_url"]).text == "# widgets\n"
    assert (big["encoding"], big["content"], big["size"]) == ("none", "", 1_100_000)
    assert httpx.get(big["download_url"]).status_code == 404  # private: needs the token
    fetched = httpx.get(big["download_url"], headers={"Authorization": f"token {token}"})
    assert fetched.status_code == 200
    assert len(fetched.content) == 1_100_000
