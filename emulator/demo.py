"""`baton demo`: Baton end to end on this machine, with no credentials and no network.

Starts an embedded Redis-protocol server, the GitHub emulator, and `baton serve
--worker` as real processes; creates an App (a fresh key pair and webhook
secret), its installation and a private sample repository with a policy; then
plays scenarios the way GitHub would deliver them (signed webhooks from the
emulator's state changes, and GitHub's own published `issues.labeled` example)
and checks what Baton did. Exit 0 only if every scenario ended as expected.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from bot.app import WEBHOOK_PATH
from bot.redis_server import EmbeddedRedis
from emulator import world
from emulator.admin_client import AdminClient
from emulator.server import EmulatorServer, free_port
from worker import lifecycle
from worker.handlers import DECISION_PREFIX

EXAMPLE = Path(__file__).parent / "examples" / "issues.labeled.json"
WAIT_S = 30.0


@dataclass
class Outcome:
    name: str
    expected: str
    observed: str
    passed: bool


class Demo:
    """The running pieces and the few questions scenarios ask about them."""

    def __init__(self, admin: AdminClient, rdb: redis.Redis, w: world.World) -> None:
        self.admin = admin
        self.rdb = rdb
        self.world = w

    def wait(self, task_id: str) -> str:
        """The task's final state, once Baton has also published what it had to say."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            state = lifecycle.current(self.rdb, task_id)
            if state in lifecycle.TERMINAL and self.rdb.hexists(lifecycle.PREFIX + task_id, "published"):
                return str(state)
            time.sleep(0.05)
        return f"not finished after {WAIT_S:g}s"

    def status_comment(self, number: int) -> dict[str, Any] | None:
        ours = self.baton_comments(number)
        return ours[-1] if ours else None

    def baton_comments(self, number: int, repo: str = world.REPO) -> list[dict[str, Any]]:
        return [c for c in self.admin.comments() if c["issue_number"] == number and c["repository"] == repo
                and (c.get("performed_via_github_app") or {}).get("id") == self.world.app_id]  # fmt: skip

    def issue(self, title: str, user: str) -> int:
        return int(self.admin.create_issue(world.REPO, title=title, user=user)["number"])

    def label(self, number: int, agent: str, sender: str) -> dict[str, Any]:
        deliveries = self.admin.label(world.REPO, number, [f"agent:{agent}"], sender=sender)["deliveries"]
        return dict(deliveries[-1])


# -- scenarios: each returns (expected, observed, passed) ---------------------------------------

Result = tuple[str, str, bool]


def maintainer_labels(demo: Demo) -> Result:
    number = demo.issue("Spinner stutters on resize", "maria")
    state = demo.wait(demo.label(number, "claude-code", "maria")["guid"])
    comment = demo.status_comment(number)
    said = comment is not None and "Accepted" in comment["body"]
    return (
        "accepted, status comment",
        f"{state}, status comment {'says accepted' if said else 'missing'}",
        (state == "accepted" and said),
    )


def reader_labels(demo: Demo) -> Result:
    number = demo.issue("Please add dark mode", "rita")
    guid = demo.label(number, "claude-code", "rita")["guid"]
    state = demo.wait(guid)
    comment = demo.status_comment(number)
    # The login may be shown as code (`rita`): either way the comment names her access.
    explained = comment is not None and "`rita` has read access" in comment["body"]
    ran = demo.rdb.exists(DECISION_PREFIX + guid)  # the gate never ran for a refused sender
    return (
        "refused with an explanation, no run",
        f"{state}, {'explained' if explained else 'not explained'}",
        (state == "refused" and explained and not ran),
    )


def stranger_comments(demo: Demo) -> Result:
    """Anyone can comment; only people the policy trusts make Baton speak."""
    number = demo.issue("Cache the thumbnails", "maria")
    demo.wait(demo.label(number, "claude-code", "maria")["guid"])
    before = demo.status_comment(number)
    reply = demo.admin.comment(world.REPO, number, "/baton run researcher", user="rita")
    state = demo.wait(reply["deliveries"][-1]["guid"])
    after = demo.status_comment(number)
    unchanged = before is not None and after is not None and (before["id"], before["body"]) == (
        after["id"], after["body"])  # fmt: skip
    replies = demo.baton_comments(number)
    return (
        "refused silently, status comment unchanged",
        f"{state}, {len(replies)} comment(s), status {'unchanged' if unchanged else 'CHANGED'}",
        (state == "refused" and unchanged and len(replies) == 1),
    )


def no_org_repo(demo: Demo) -> Result:
    """A personal account with no `.github` repository: the built-in ceiling, said once."""
    owner, repo = "solo", "solo/tool"
    demo.admin.create_user(owner)
    policy = "version: 1\nagents:\n  claude-code:\n    tools: [read_repo, edit_files]\n"
    demo.admin.create_repo(
        owner, "tool", private=True, files={"README.md": "# tool\n", ".github/baton.yml": policy}
    )
    demo.admin.create_installation(app_id=demo.world.app_id, account=owner, permissions=world.PERMISSIONS)
    demo.admin.set_role(repo, owner, "admin")
    number = int(demo.admin.create_issue(repo, title="Add a --version flag", user=owner)["number"])
    delivery = demo.admin.label(repo, number, ["agent:claude-code"], sender=owner)["deliveries"][-1]
    state = demo.wait(delivery["guid"])
    ours = demo.baton_comments(number, repo)
    said = sum(c["body"].count("the built-in defaults are the ceiling") for c in ours)
    return (
        "accepted under the built-in ceiling, said once",
        f"{state}, built-in ceiling said {said} time(s)",
        (state == "accepted" and said == 1),
    )


def duplicate_delivery(demo: Demo) -> Result:
    """GitHub's own example payload, made to point at the sample repo, then redelivered."""
    number = demo.issue("Typo in README", "maria")
    template = demo.admin.call("GET", f"/deliveries/{demo.label(number, 'claude-code', 'maria')['id']}")[
        "payload"
    ]
    payload = copy.deepcopy(json.loads(EXAMPLE.read_text()))
    for key in ("repository", "installation", "sender", "issue", "label"):
        payload[key] = template[key]
    first = demo.admin.send_event("issues", payload, delivery_id=str(uuid.uuid4()))
    state = demo.wait(first["guid"])
    again = demo.admin.redeliver(int(first["id"]))
    jobs = sum(1 for _ in demo.rdb.scan_iter(match=f"rq:job:{first['guid']}"))
    runs = [e for e in lifecycle.history(demo.rdb, first["guid"]) if e["to"] == "running"]
    observed = f"first {first['status_code']} ({state}), redelivery {again['status_code']}, {len(runs)} run"
    return (
        "second delivery answered 200, one task",
        observed,
        (first["status_code"] == 202 and again["status_code"] == 200 and jobs == 1 and len(runs) == 1),
    )


def pull_request_opened(demo: Demo) -> Result:
    head = demo.admin.commit(world.REPO, "faster-spin", {"src/widgets.py": "def spin():\n    return 43\n"},
                             base="main")  # fmt: skip
    opened = demo.admin.open_pull(world.REPO, head="faster-spin", user="wes", title="Spin faster")
    delivery = next(d for d in opened["deliveries"] if d["event"] == "pull_request")
    state = demo.wait(delivery["guid"])
    runs = [c for c in demo.admin.check_runs() if c["name"] == "baton/merge-gate" and c["head_sha"] == head]
    seen = f"{runs[0]['status']}/{runs[0]['conclusion']}" if runs else "no check run"
    return (
        "baton/merge-gate completed neutral",
        f"{state}, check run {seen}",
        (state == "done" and seen == "completed/neutral"),
    )


def web_fetch_denied(demo: Demo) -> Result:
    number = demo.issue("Summarise the upstream changelog", "maria")
    state = demo.wait(demo.label(number, "researcher", "maria")["guid"])
    comment = demo.status_comment(number)
    body = comment["body"] if comment else ""
    explained = "web_fetch" in body and "`/baton run researcher --offline`" in body
    demo.last_denied = number  # type: ignore[attr-defined]
    return (
        "denied before spawn, explained",
        f"{state}, {'explained' if explained else 'not explained'}",
        (state == "denied" and explained),
    )


def offline_retry(demo: Demo) -> Result:
    number: int = getattr(demo, "last_denied", 0)
    before = demo.status_comment(number)
    reply = demo.admin.comment(world.REPO, number, "/baton run researcher --offline", user="maria")
    state = demo.wait(reply["deliveries"][-1]["guid"])
    after = demo.status_comment(number)
    same = before is not None and after is not None and before["id"] == after["id"]
    return (
        "allowed offline, same comment edited",
        f"{state}, {'same comment' if same else 'new comment'}",
        (state == "accepted" and same and after is not None and "offline" in after["body"]),
    )


SCENARIOS: list[tuple[str, Callable[[Demo], Result]]] = [
    ("maintainer labels an issue agent:claude-code", maintainer_labels),
    ("reader labels an issue agent:claude-code", reader_labels),
    ("a stranger comments /baton run", stranger_comments),
    ("an account with no .github repository", no_org_repo),
    ("GitHub redelivers a delivery", duplicate_delivery),
    ("a pull request is opened", pull_request_opened),
    ("web-fetch agent on a private repo", web_fetch_denied),
    ("maintainer: /baton run researcher --offline", offline_retry),
]


# -- running it ---------------------------------------------------------------------------------


@contextlib.contextmanager
def baton_serving(work: Path, w: world.World, redis_url: str, api_url: str, port: int) -> Iterator[None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    env.update(APP_ID=str(w.app_id), PRIVATE_KEY=w.private_key, WEBHOOK_SECRET=w.webhook_secret,
               REDIS_URL=redis_url, GITHUB_API_URL=api_url, PORT=str(port), LOG_LEVEL="WARNING")  # fmt: skip
    with (work / "baton.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "serve", "--worker"], env=env, stdout=log, stderr=log
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


def run(out: Path | None) -> int:
    started = time.monotonic()
    work = out or Path(tempfile.mkdtemp(prefix="baton-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    for ours in ("github", "redis"):  # a fresh world every run, also in a reused --out
        shutil.rmtree(work / ours, ignore_errors=True)
    outcomes: list[Outcome] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(EmbeddedRedis(data_dir=work / "redis", durable=False))
        github = stack.enter_context(EmulatorServer(work / "github"))
        admin = stack.enter_context(AdminClient(github.url))
        port = free_port()
        w = world.build(admin, github.url, webhook_url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}")
        stack.enter_context(baton_serving(work, w, server.url, github.url, port))
        demo = Demo(admin, stack.enter_context(contextlib.closing(redis.Redis.from_url(server.url))), w)
        for name, play in SCENARIOS:
            try:
                expected, observed, passed = play(demo)
            except Exception as exc:
                expected, observed, passed = "(see scenario)", f"error: {type(exc).__name__}: {exc}", False
            outcomes.append(Outcome(name, expected, observed, passed))
        _write(work, admin, github.directory, outcomes)
    _print(outcomes, time.monotonic() - started, work)
    return 0 if all(o.passed for o in outcomes) else 1


def _write(work: Path, admin: AdminClient, github_dir: Path, outcomes: list[Outcome]) -> None:
    (work / "summary.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    (work / "checks.json").write_text(json.dumps(admin.check_runs(), indent=2) + "\n")
    (work / "comments.json").write_text(json.dumps(admin.comments(), indent=2) + "\n")
    log = github_dir / "github-requests.jsonl"
    if log.exists():
        shutil.copyfile(log, work / "github-requests.jsonl")


def _print(outcomes: list[Outcome], seconds: float, work: Path) -> None:
    width = max(len(o.name) for o in outcomes)
    print(f"{'scenario':<{width}}  {'':4}  observed (expected)")
    for o in outcomes:
        print(f"{o.name:<{width}}  {'ok' if o.passed else 'FAIL':4}  {o.observed} ({o.expected})")
    passed = sum(o.passed for o in outcomes)
    print(f"\n{passed}/{len(outcomes)} scenarios as expected in {seconds:.1f}s; files in {work}")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="play Baton end to end against a local GitHub emulator (no network)")
    p.add_argument("--out", type=Path, help="also write summary.json, checks.json, comments.json and "
                   "github-requests.jsonl here")  # fmt: skip
    p.set_defaults(handler=lambda args: run(args.out))
