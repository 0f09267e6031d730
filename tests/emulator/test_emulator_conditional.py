"""ETags and conditional requests as GitHub does them, write-behind state, one webhook client.

GitHub tags every 200 GET with a weak ETag of the body; ``If-None-Match`` with
it gets 304, empty, and "does not count against your primary rate limit".
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from emulator_world import OWNER, REPO, World, build_world

from emulator import EmulatorServer, webhooks
from emulator.persist import Persister
from emulator.state import State, User

FULL = f"{OWNER}/{REPO}"
WEAK_ETAG = re.compile(r'^W/"[0-9a-f]{64}"$')


@pytest.fixture
def reader(world: World) -> Iterator[httpx.Client]:
    """An installation token's client, with an issue (#1) and a pull (#2) in the repository."""
    world.post(f"/repos/{FULL}/issues", {"title": "an issue", "user": "maria"})
    world.post(f"/repos/{FULL}/commits", {"branch": "feature", "files": {"f.txt": "f\n"}})
    world.post(f"/repos/{FULL}/pulls", {"title": "a pull", "user": "wes", "head": "feature"})
    with world.api(world.token()) as api:
        yield api


READS = [
    f"/repos/{FULL}",
    f"/repos/{FULL}/branches/main",
    f"/repos/{FULL}/contents/README.md?ref=main",
    f"/repos/{FULL}/issues/1",
    f"/repos/{FULL}/collaborators/wes/permission",
    f"/repos/{FULL}/pulls/2",
]


@pytest.mark.parametrize("path", READS)
def test_a_get_is_tagged_and_a_matching_one_is_304(reader: httpx.Client, path: str) -> None:
    first = reader.get(path)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert WEAK_ETAG.match(etag)
    again = reader.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == etag
    assert "content-type" not in again.headers


def test_the_installation_lookup_is_tagged_too(world: World) -> None:
    jwt = {"Authorization": f"Bearer {world.jwt()}"}
    first = httpx.get(f"{world.url}/repos/{FULL}/installation", headers=jwt)
    assert first.status_code == 200
    assert WEAK_ETAG.match(first.headers["etag"])
    again = httpx.get(
        f"{world.url}/repos/{FULL}/installation", headers={**jwt, "If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304


def test_a_commit_moves_the_branch_and_its_etag(world: World, reader: httpx.Client) -> None:
    branch, readme = f"/repos/{FULL}/branches/main", f"/repos/{FULL}/contents/README.md?ref=main"
    before, old_readme = reader.get(branch), reader.get(readme).headers["etag"]
    sha = world.post(f"/repos/{FULL}/commits", {"branch": "main", "files": {"README.md": "# moved\n"}})["sha"]
    moved = reader.get(branch, headers={"If-None-Match": before.headers["etag"]})
    assert moved.status_code == 200
    assert moved.json()["commit"]["sha"] == sha != before.json()["commit"]["sha"]
    assert WEAK_ETAG.match(moved.headers["etag"])
    assert moved.headers["etag"] != before.headers["etag"]
    assert reader.get(branch, headers={"If-None-Match": moved.headers["etag"]}).status_code == 304
    assert reader.get(readme, headers={"If-None-Match": old_readme}).status_code == 200


def test_the_etag_is_a_hash_of_the_body_as_sent(reader: httpx.Client) -> None:
    answer = reader.get(f"/repos/{FULL}/issues/1")
    assert answer.headers["etag"] == f'W/"{hashlib.sha256(answer.content).hexdigest()}"'


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("{etag}", 304),
        ("{strong}", 304),  # If-None-Match compares weakly
        ('W/"other", {etag}', 304),
        ("*", 304),
        ('W/"other"', 200),
        ("", 200),
    ],
)
def test_if_none_match_forms(reader: httpx.Client, header: str, status: int) -> None:
    path = f"/repos/{FULL}"
    etag = reader.get(path).headers["etag"]
    value = header.format(etag=etag, strong=etag.removeprefix("W/"))
    assert reader.get(path, headers={"If-None-Match": value}).status_code == status


def test_only_successful_gets_are_tagged(reader: httpx.Client) -> None:
    missing = reader.get(f"/repos/{FULL}/issues/999", headers={"If-None-Match": "*"})
    assert missing.status_code == 404
    assert "etag" not in missing.headers
    created = reader.post(f"/repos/{FULL}/issues/1/comments", json={"body": "hi"})
    assert created.status_code == 201
    assert "etag" not in created.headers


def test_a_304_is_not_counted_against_the_rate_limit(world: World, reader: httpx.Client) -> None:
    path = f"/repos/{FULL}/pulls/2"
    first = reader.get(path)
    used = int(first.headers["x-ratelimit-used"])
    remaining = int(first.headers["x-ratelimit-remaining"])
    for _ in range(3):
        cached = reader.get(path, headers={"If-None-Match": first.headers["etag"]})
        assert cached.status_code == 304
        assert int(cached.headers["x-ratelimit-used"]) == used
        assert int(cached.headers["x-ratelimit-remaining"]) == remaining
    fresh = reader.get(path)
    assert fresh.status_code == 200
    assert int(fresh.headers["x-ratelimit-used"]) == used + 1
    assert int(fresh.headers["x-ratelimit-remaining"]) == remaining - 1
    log = [line for line in httpx.get(f"{world.url}/_emulator/requests").json() if line["path"] == path]
    assert [(line["status"], line["counted"]) for line in log] == [
        (200, True),
        (304, False),
        (304, False),
        (304, False),
        (200, True),
    ]
    assert all(line["duration_ms"] >= 0 for line in log)


def test_requests_refused_before_the_rate_limit_are_not_counted(world: World) -> None:
    refused = httpx.get(f"{world.url}/repos/{FULL}", headers={"Authorization": "token nope"})
    assert refused.status_code == 401
    line = httpx.get(f"{world.url}/_emulator/requests").json()[-1]
    assert (line["status"], line["counted"]) == (401, False)


# -- state on disk ------------------------------------------------------------


def _users_on_disk(directory: Path) -> set[str]:
    path = directory / "state.json"
    if not path.exists():
        return set()
    return {u["login"] for u in json.loads(path.read_text())["users"]}


def test_stop_writes_what_the_timer_had_not(tmp_path: Path) -> None:
    directory = tmp_path / "gh"
    with EmulatorServer(directory) as first:
        first.emulator.persister.delay = 3600  # only the stop can write it now
        httpx.post(f"{first.url}/_emulator/users", json={"login": "late"}).raise_for_status()
        assert "late" not in _users_on_disk(directory)
    assert "late" in _users_on_disk(directory)
    with EmulatorServer(directory) as second:
        assert httpx.get(f"{second.url}/users/late").status_code == 200


def test_changes_reach_disk_within_the_flush_delay(tmp_path: Path) -> None:
    directory = tmp_path / "gh"
    with EmulatorServer(directory) as server:
        httpx.post(f"{server.url}/_emulator/users", json={"login": "soon"}).raise_for_status()
        deadline = time.monotonic() + 5
        while "soon" not in _users_on_disk(directory) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "soon" in _users_on_disk(directory)


def test_admin_flush_writes_at_once(tmp_path: Path) -> None:
    directory = tmp_path / "gh"
    with EmulatorServer(directory) as server:
        server.emulator.persister.delay = 3600
        httpx.post(f"{server.url}/_emulator/users", json={"login": "now"}).raise_for_status()
        assert httpx.post(f"{server.url}/_emulator/flush").json() == {"flushed": True}
        assert "now" in _users_on_disk(directory)


class _CountingState(State):
    saves = 0

    def save(self) -> None:
        self.saves += 1
        super().save()


def test_a_burst_of_changes_is_one_write(tmp_path: Path) -> None:
    state = _CountingState(tmp_path)
    persister = Persister(state, delay=0.05)

    async def burst() -> int:
        for n in range(50):
            state.users[f"u{n}"] = User(id=n, login=f"u{n}")
            persister.changed()
        written_during_burst = state.saves
        await asyncio.sleep(0.2)
        return written_during_burst

    assert asyncio.run(burst()) == 0
    assert state.saves == 1
    persister.flush()  # nothing new: no write
    assert state.saves == 1
    assert len(json.loads((tmp_path / "state.json").read_text())["users"]) == 50


def test_without_an_event_loop_a_change_is_written_at_once(tmp_path: Path) -> None:
    state = _CountingState(tmp_path)
    Persister(state).changed()
    assert state.saves == 1


# -- webhooks: one client, kept-alive connections -----------------------------


@contextmanager
def _keep_alive_receiver(delay: float = 0.0) -> Iterator[tuple[str, list[int]]]:
    """An HTTP/1.1 receiver recording the client port of every delivery (one port: one connection)."""
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay)
            ports.append(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", ports
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _send(world: World) -> dict[str, Any]:
    response = world.admin.post("/_emulator/webhooks", json={"event": "ping", "payload": {"zen": "hi"}})
    response.raise_for_status()
    sent: dict[str, Any] = response.json()
    return sent


def test_deliveries_share_one_kept_alive_connection(
    github_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks, "KEEPALIVE_EXPIRY_SECONDS", 30.0)  # a slow machine is no reason to fail
    with _keep_alive_receiver() as (url, ports):
        world = build_world(github_emulator, webhook_url=url)
        try:
            statuses = [_send(world)["status_code"] for _ in range(3)]
        finally:
            world.admin.close()
    assert statuses == [200, 200, 200]
    assert len(ports) == 3
    assert len(set(ports)) == 1


def test_failures_are_recorded_and_the_client_keeps_working(
    github_emulator: EmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks, "DELIVERY_TIMEOUT_SECONDS", 0.3)
    world = build_world(github_emulator, webhook_url=f"http://127.0.0.1:{_closed_port()}/hook")
    try:
        refused = _send(world)
        assert refused["status_code"] is None
        assert (
            github_emulator.emulator.state.deliveries[refused["id"]].failure == "failed to connect to network"
        )
        with _keep_alive_receiver(delay=1.0) as (slow, _):
            world.admin.patch(
                f"/_emulator/apps/{world.app_id}", json={"webhook_url": slow}
            ).raise_for_status()
            late = _send(world)
        assert late["status_code"] is None
        assert github_emulator.emulator.state.deliveries[late["id"]].failure == "timed out"
        with _keep_alive_receiver() as (good, ports):
            world.admin.patch(
                f"/_emulator/apps/{world.app_id}", json={"webhook_url": good}
            ).raise_for_status()
            assert _send(world)["status_code"] == 200
        assert len(ports) == 1
    finally:
        world.admin.close()
