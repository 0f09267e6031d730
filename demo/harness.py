"""The demo's running pieces: Baton serving as a real process, the questions scenarios ask of
the running world (`Demo`), playing scenarios and writing what they showed.

`demo.scenarios` holds the scenarios; `demo.play` is the `baton demo` command that puts the two
together.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

import emulator
from emulator import world
from emulator.admin.client import AdminClient
from emulator.model.standin import ModelStandin
from evidence.keys import SigningKey
from worker import lifecycle

#: GitHub's own published example delivery, kept with the emulator that plays GitHub.
EXAMPLE = Path(emulator.__file__).parent / "examples" / "issues.labeled.json"
RECEIPT = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
WAIT_S = 30.0


@dataclass
class Outcome:
    name: str
    expected: str
    observed: str
    passed: bool
    seconds: float = 0.0


class Demo:
    """The running pieces and the few questions scenarios ask about them."""

    def __init__(self, admin: AdminClient, rdb: redis.Redis, w: world.World, github_dir: Path, *,
                 clis: Mapping[str, Path] | None = None, model: ModelStandin | None = None,
                 work: Path | None = None, reviewer: ModelStandin | None = None) -> None:  # fmt: skip
        self.admin = admin
        self.rdb = rdb
        self.world = w
        self.github_dir = github_dir
        self.clis = dict(clis or {})  # adapter -> the directory of its installed CLI
        self.model = model  # the model stand-in behind Baton's model gateway
        self.work = work
        self.reviewer = reviewer  # the reviewer's model (``demo.reviewing``), another provider's stand-in

    def wait(self, task_id: str) -> str:
        """The task's final state, once Baton has also published what it had to say."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            state = lifecycle.current(self.rdb, task_id)
            if state in lifecycle.TERMINAL and self.rdb.hexists(lifecycle.PREFIX + task_id, "published"):
                return str(state)
            time.sleep(0.05)
        return f"not finished after {WAIT_S:g}s"

    def status_comment(self, number: int, repo: str = world.REPO) -> dict[str, Any] | None:
        ours = self.baton_comments(number, repo)
        return ours[-1] if ours else None

    def admitted(self, task_id: str, number: int, repo: str = world.REPO) -> str:
        """The status comment's body once task ``task_id`` has written it (queued, running or ended)."""
        deadline = time.monotonic() + WAIT_S
        body = ""
        while time.monotonic() < deadline:
            comment = self.status_comment(number, repo)
            body = comment["body"] if comment else ""
            if f"task `{task_id}`" in body:
                return body
            time.sleep(0.05)
        return body

    def said(self, number: int, repo: str = world.REPO) -> list[str]:
        """Every body Baton wrote to the issue's status comment, in order, as GitHub received them."""
        ours = self.baton_comments(number, repo)
        if not ours:
            return []
        made, edited = (
            f"/repos/{repo}/issues/{number}/comments",
            f"/repos/{repo}/issues/comments/{ours[0]['id']}",
        )
        wrote = {("POST", made), ("PATCH", edited)}
        return [str(r["body"]["body"]) for r in self.admin.requests()
                if r["status"] < 300 and (r["method"], r["path"]) in wrote]  # fmt: skip

    def baton_comments(self, number: int, repo: str = world.REPO) -> list[dict[str, Any]]:
        return [c for c in self.admin.comments() if c["issue_number"] == number and c["repository"] == repo
                and (c.get("performed_via_github_app") or {}).get("id") == self.world.app_id]  # fmt: skip

    def issue(
        self, title: str, user: str, recipe: dict[str, Any] | None = None, repo: str = world.REPO
    ) -> int:
        """An issue; with ``recipe``, its body tells Baton's script agent exactly what to do."""
        body = f"```baton-recipe\n{json.dumps(recipe)}\n```\n" if recipe is not None else ""
        return int(self.admin.create_issue(repo, title=title, user=user, body=body)["number"])

    def label(self, number: int, agent: str, sender: str, repo: str = world.REPO) -> dict[str, Any]:
        deliveries = self.admin.label(repo, number, [f"agent:{agent}"], sender=sender)["deliveries"]
        return dict(deliveries[-1])

    def pulls(self, number: int, repo: str = world.REPO) -> list[dict[str, Any]]:
        """The pull requests GitHub holds for the issue's branch (the emulator's state, not Baton's word)."""
        state = self.admin.call("GET", "/state")
        bodies = {(i["repo"], i["number"]): i for i in state["issues"]}
        return [{**p, "body": bodies[(repo, p["number"])]["body"] or ""} for p in state["pulls"]
                if p["repo"] == repo and p["head_ref"] == f"baton/issue-{number}"]  # fmt: skip

    def _git(self, repo: str, *args: str) -> str | None:
        """Read the emulator's bare repository: what GitHub holds."""
        bare = self.github_dir / "repos" / f"{repo}.git"
        found = subprocess.run(["git", "-C", str(bare), *args], capture_output=True, text=True, check=False)  # noqa: S603, S607
        return found.stdout if found.returncode == 0 else None

    def branch(self, number: int, repo: str = world.REPO) -> str | None:
        found = self._git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/baton/issue-{number}")
        return found.strip() if found else None

    def file_at(self, sha: str, path: str, repo: str = world.REPO) -> str | None:
        return self._git(repo, "show", f"{sha}:{path}")

    def parents(self, sha: str, repo: str = world.REPO) -> list[str]:
        found = self._git(repo, "log", "-1", "--format=%P", sha)
        return found.split() if found else []

    def gate_run(self, sha: str) -> dict[str, Any] | None:
        """The newest ``baton/merge-gate`` run on ``sha``, as the emulator holds it."""
        runs = [
            c for c in self.admin.check_runs() if c["name"] == "baton/merge-gate" and c["head_sha"] == sha
        ]
        return max(runs, key=lambda c: c["id"]) if runs else None

    def checks(self, sha: str) -> dict[str, str]:
        return {
            c["name"]: f"{c['status']}/{c['conclusion']}"
            for c in self.admin.check_runs()
            if c["head_sha"] == sha
        }


#: What a scenario returns: (expected, observed, passed).
Result = tuple[str, str, bool]


@contextlib.contextmanager
def baton_serving(
    work: Path, w: world.World, redis_url: str, api_url: str, *, port: int, env_extra: dict[str, str]
) -> Iterator[None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    env.update(APP_ID=str(w.app_id), PRIVATE_KEY=w.private_key, WEBHOOK_SECRET=w.webhook_secret,
               REDIS_URL=redis_url, GITHUB_API_URL=api_url, PORT=str(port), LOG_LEVEL="WARNING",
               BATON_DATA_DIR=str(work / "data"), BATON_REDELIVERY_INTERVAL="2", **env_extra)  # fmt: skip
    with (work / "baton.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "baton.cli", "serve", "--worker"], env=env, stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"baton serve exited; see {work / 'baton.log'}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"baton serve did not become ready; see {work / 'baton.log'}")
            time.sleep(0.1)
        time.sleep(1.0)  # let the worker processes register before the first delivery
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()


def signing_env(work: Path, public_url: str) -> dict[str, str]:
    """A signing key made for this run (DIR/keys, the public half beside it) and an audit secret."""
    keys = work / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    private = keys / "baton-signing-key.pem"
    private.touch(mode=0o600)
    private.write_bytes(key.private_pem())
    (keys / "baton-signing-key.pub.pem").write_text(key.public.pem())
    return {"BATON_SIGNING_KEY_PATH": str(private), "BATON_AUDIT_SECRET": secrets.token_hex(32),
            "BATON_PUBLIC_URL": public_url}  # fmt: skip


def run_baton(
    *args: str, env: dict[str, str] | None = None, module: str = "baton.cli"
) -> subprocess.CompletedProcess[str]:
    """`baton ARGS` as a user runs it (``evidence.cli``: the verifier alone, as offline users have it)."""
    argv = [sys.executable, "-m", module, *args]
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ, check=False)  # noqa: S603


def play_all(demo: Demo, scenarios: list[tuple[str, Callable[[Demo], Result]]]) -> list[Outcome]:
    outcomes = []
    for name, play in scenarios:
        began = time.monotonic()
        try:
            expected, observed, passed = play(demo)
        except Exception as exc:
            expected, observed, passed = "(see scenario)", f"error: {type(exc).__name__}: {exc}", False
        outcomes.append(Outcome(name, expected, observed, passed, round(time.monotonic() - began, 1)))
    return outcomes


def find_cli(executable: str) -> Path | None:
    """The directory of an installed agent CLI: on PATH, or where `.ci/agent-clis` puts it."""
    found = shutil.which(executable)
    if found is not None:
        return Path(found).parent
    prefix = Path(os.environ.get("AGENT_CLI_PREFIX") or Path.home() / ".cache" / "baton-ci" / "agent-clis")
    pinned = prefix / "bin"
    return pinned if (pinned / executable).exists() else None


def write_evidence(work: Path, admin: AdminClient, github_dir: Path, outcomes: list[Outcome]) -> None:
    (work / "summary.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    (work / "checks.json").write_text(json.dumps(admin.check_runs(), indent=2) + "\n")
    (work / "comments.json").write_text(json.dumps(admin.comments(), indent=2) + "\n")
    log = github_dir / "github-requests.jsonl"
    if log.exists():
        shutil.copyfile(log, work / "github-requests.jsonl")


def print_table(outcomes: list[Outcome], seconds: float, work: Path) -> None:
    width = max(len(o.name) for o in outcomes)
    print(f"{'scenario':<{width}}  {'':4}  {'secs':>5}  observed (expected)")
    for o in outcomes:
        verdict = "ok" if o.passed else "FAIL"
        print(f"{o.name:<{width}}  {verdict:4}  {o.seconds:5.1f}  {o.observed} ({o.expected})")
    passed = sum(o.passed for o in outcomes)
    print(f"\n{passed}/{len(outcomes)} scenarios as expected in {seconds:.1f}s; files in {work}")
