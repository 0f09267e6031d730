"""`baton serve` and `baton worker` as real processes: embedded Redis and REDIS_URL."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from baton.redis_server import free_port
from bot.app import WEBHOOK_PATH
from tests.conftest import SECRET, EvidenceKeys, delivery_headers, labeled
from worker import lifecycle


def _env(tmp_path: Path, keys: EvidenceKeys | None, **extra: str) -> dict[str, str]:
    """The environment for `baton`: with ``keys`` (which serve and worker need to start) or none."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "WEBHOOK_SECRET", "APP_ID")}
    env = {k: v for k, v in env.items() if not k.startswith("BATON_")}
    env.update({"XDG_CACHE_HOME": str(tmp_path / "cache"), "LOG_LEVEL": "WARNING"})
    env.update({**(keys.env() if keys else {}), **extra})
    return env


def _baton(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start baton with its output in a log file beside the cache (pipes could fill and block it)."""
    log = Path(env["XDG_CACHE_HOME"]).parent / f"baton-{args[0]}-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "baton", *args], env=env, stdout=out, stderr=out)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _output(proc: subprocess.Popen[bytes]) -> str:
    return proc.log.read_text()[-3000:]  # type: ignore[attr-defined, no-any-return]


def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"baton exited early: {_output(proc)}")
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail("baton serve never became ready")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()


def _deliver_and_wait(base: str, client: redis.Redis) -> None:
    body = json.dumps(labeled()).encode()
    delivery = str(uuid.uuid4())
    r = httpx.post(
        base + WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues", delivery), timeout=5
    )
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = lifecycle.current(client, delivery)
        if state in lifecycle.TERMINAL:
            # No App credentials in this test: the run ends failed, saying why.
            assert state == lifecycle.State.FAILED
            assert b"no-app-credentials" in (client.hget(lifecycle.PREFIX + delivery, "detail") or b"")
            return
        time.sleep(0.1)
    pytest.fail("the worker never finished the task")


@pytest.fixture
def port() -> int:
    return free_port()


def test_serve_with_worker_on_the_embedded_server(
    tmp_path: Path, port: int, evidence_keys: EvidenceKeys
) -> None:
    env = _env(tmp_path, evidence_keys, WEBHOOK_SECRET=SECRET.decode(), PORT=str(port))
    serve = _baton("serve", "--worker", env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, serve)
        state_file = tmp_path / "cache" / "baton" / "redis" / "server.json"
        assert oct(state_file.stat().st_mode & 0o777) == "0o600"
        url = json.loads(state_file.read_text())["url"]
        client = redis.Redis.from_url(url)
        _deliver_and_wait(base, client)

        # A separate `baton worker` finds the same embedded server by itself.
        lone = _baton("worker", "--queues", "baton-agents", "--burst", env=env)
        assert lone.wait(timeout=60) == 0, _output(lone)
        client.close()
    finally:
        assert _stop(serve) == 0, _output(serve)
    assert not state_file.exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()


def test_serve_and_worker_as_separate_processes_on_redis_url(
    tmp_path: Path, port: int, redis_url: str, evidence_keys: EvidenceKeys
) -> None:
    env = _env(tmp_path, evidence_keys, WEBHOOK_SECRET=SECRET.decode(), PORT=str(port), REDIS_URL=redis_url)
    serve = _baton("serve", env=env)
    work = _baton("worker", env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, serve)
        client = redis.Redis.from_url(redis_url)
        _deliver_and_wait(base, client)
        # The supervisor runs one process per pool: control, gates and agents (each registers itself).
        deadline = time.monotonic() + 30
        while len(client.smembers("rq:workers")) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        queues_served = sorted(
            (client.hget(w, "queues") or b"").decode() for w in client.smembers("rq:workers")
        )
        assert queues_served == ["baton-agents", "baton-control", "baton-gates"]
        client.close()
    finally:
        assert _stop(work) == 0, _output(work)
        assert _stop(serve) == 0, _output(serve)


def test_worker_burst_without_queues_drains_every_queue_and_exits(
    tmp_path: Path, port: int, redis_url: str, evidence_keys: EvidenceKeys
) -> None:
    """`baton worker --burst` alone: burst means exit once the queues it serves (all of them) are
    empty, also when a task it ran queued another; it never runs forever."""
    env = _env(tmp_path, evidence_keys, WEBHOOK_SECRET=SECRET.decode(), PORT=str(port), REDIS_URL=redis_url)
    serve = _baton("serve", env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, serve)
        client = redis.Redis.from_url(redis_url)
        body = json.dumps(labeled()).encode()
        delivery = str(uuid.uuid4())
        headers = delivery_headers(body, "issues", delivery)
        assert httpx.post(base + WEBHOOK_PATH, content=body, headers=headers, timeout=5).status_code == 202
        burst = _baton("worker", "--burst", env=env)
        try:
            assert burst.wait(timeout=60) == 0, _output(burst)
        finally:
            _stop(burst)
        assert lifecycle.current(client, delivery) in lifecycle.TERMINAL
        assert all(
            client.llen(f"rq:queue:{q}") == 0 for q in ("baton-agents", "baton-gates", "baton-control")
        )
        client.close()
    finally:
        assert _stop(serve) == 0, _output(serve)


def test_serve_without_secret_starts_in_setup_mode(tmp_path: Path, port: int) -> None:
    """Setup mode needs no signing key either: nothing is accepted, so nothing is signed."""
    serve = _baton("serve", env=_env(tmp_path, None, PORT=str(port)))
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, serve)
        body = json.dumps(labeled()).encode()
        r = httpx.post(base + WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues"), timeout=5)
        assert r.status_code == 503
        assert httpx.get(base + "/healthz").json()["setup_mode"] is True
        assert httpx.get(base + "/.well-known/baton/keys").status_code == 404  # no key to publish
        # The setup page opens only from the link serve printed, whose token is drawn at each start.
        assert httpx.get(base + "/").status_code == 403
        link = re.search(r"register the App at (http://\S+/\?token=[\w-]{32})", _output(serve))
        assert link is not None, _output(serve)
        assert link.group(1).startswith(base + "/?token=")
        opened = httpx.get(link.group(1))
        assert opened.status_code == 200
        assert 'name="manifest"' in opened.text
    finally:
        _stop(serve)
    assert "SETUP MODE" in _output(serve)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("serve",), {"APP_ID": "abc"}, "APP_ID must be the App's numeric id"),
        (("serve",), {"BATON_MAX_BODY": "1"}, "unknown setting BATON_MAX_BODY"),
        (("serve",), {"PRIVATE_KEY_PATH": "/nonexistent/key.pem"}, "PRIVATE_KEY_PATH=/nonexistent/key.pem"),
        (("serve",), {"LOG_LEVEL": "loud"}, "LOG_LEVEL must be one of"),
        (("serve",), {"BATON_METRICS_PORT": "3000"}, "BATON_METRICS_PORT must differ from PORT"),
        (("serve",), {"BATON_METRICS_TOKEN": "guessable"}, "BATON_METRICS_TOKEN must be 16 to 512"),
        (("worker",), {}, "no `baton serve` with an embedded Redis is running"),
        (
            ("worker", "--queues", "nope"),
            {"REDIS_URL": "redis://127.0.0.1:1/0"},
            "--queues must name Baton queues",
        ),
    ],
)
def test_bad_settings_give_one_clear_line(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str, evidence_keys: EvidenceKeys
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "baton", *args], env=_env(tmp_path, evidence_keys, **env),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]
    assert "Traceback" not in done.stderr


def test_serve_and_worker_refuse_to_start_without_evidence_keys(
    tmp_path: Path, port: int, evidence_keys: EvidenceKeys
) -> None:
    """Baton never publishes unsigned evidence: serve (outside setup mode) and every worker stop at
    once, in one line naming the variable. Started side by side: each start costs a second or two."""
    secret, key_only = SECRET.decode(), {"BATON_SIGNING_KEY_PATH": str(evidence_keys.key_path)}
    unsigned = "BATON_SIGNING_KEY_PATH="  # the fix named in missing_evidence()
    cases = [
        (("serve",), _env(tmp_path, None, WEBHOOK_SECRET=secret, PORT=str(port)), unsigned),
        (("serve",), _env(tmp_path, None, WEBHOOK_SECRET=secret, **key_only), "BATON_AUDIT_SECRET"),
        # Setup mode needs no key, but the worker beside it would sign: refused before it starts.
        (("serve", "--worker"), _env(tmp_path, None, PORT=str(port)), unsigned),
        (("worker",), _env(tmp_path, None, REDIS_URL="redis://127.0.0.1:1/0"), unsigned),
        (
            ("worker",),
            _env(tmp_path, evidence_keys, BATON_AUDIT_SECRET="too-short"),
            "BATON_AUDIT_SECRET is 9",
        ),
        (("serve",), _env(tmp_path, evidence_keys, BATON_PUBLIC_URL="example.com"), "BATON_PUBLIC_URL must"),
    ]
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "baton", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args, env, _ in cases
    ]
    try:
        for proc, (args, _, message) in zip(started, cases, strict=True):
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 2, (args, err)
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith(f"baton {args[0]}: ")
            assert message in lines[0]
            if message in (unsigned, "BATON_AUDIT_SECRET"):
                assert "Baton never publishes unsigned evidence" in lines[0]
            if message == unsigned:
                assert "run `baton keys generate --out DIR` and set" in lines[0]
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_worker_supervisor_exits_nonzero_when_a_pool_process_stops_on_its_own(
    tmp_path: Path, redis_url: str, evidence_keys: EvidenceKeys
) -> None:
    """Even a clean exit of one child (its own warm shutdown) is a lost pool: the platform must restart."""
    client = redis.Redis.from_url(redis_url)
    supervisor = _baton("worker", env=_env(tmp_path, evidence_keys, REDIS_URL=redis_url))
    try:
        deadline = time.monotonic() + 30
        while len(client.smembers("rq:workers")) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        children = Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children").read_text().split()
        assert len(children) == 3  # control, gates, agents
        os.kill(int(children[0]), signal.SIGTERM)  # RQ finishes up and exits 0
        assert supervisor.wait(timeout=40) == 1, _output(supervisor)
        for pid in children:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    finally:
        _stop(supervisor)
        client.close()


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_serve_exits_nonzero_when_its_worker_exits(
    tmp_path: Path, port: int, evidence_keys: EvidenceKeys
) -> None:
    """`serve --worker` with no worker left would answer 202 to tasks nothing runs: it must stop."""
    env = _env(tmp_path, evidence_keys, WEBHOOK_SECRET=SECRET.decode(), PORT=str(port))
    serve = _baton("serve", "--worker", env=env)
    state_file = tmp_path / "cache" / "baton" / "redis" / "server.json"
    try:
        _wait_ready(f"http://127.0.0.1:{port}", serve)
        client = redis.Redis.from_url(json.loads(state_file.read_text())["url"])
        deadline = time.monotonic() + 30
        while len(client.smembers("rq:workers")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        client.close()
        workers = [c for c in _children(serve.pid) if b"worker" in _cmdline(c)]
        assert len(workers) == 1, _output(serve)
        os.kill(workers[0], signal.SIGTERM)  # a clean, warm shutdown: the worker exits 0
        code = serve.wait(timeout=60)
    finally:
        _stop(serve)
    assert code != 0, _output(serve)
    assert "worker" in _output(serve)
    assert "exited" in _output(serve)
    assert not state_file.exists()  # the embedded Redis was still stopped and its state removed


def test_metrics_on_their_own_port_with_a_token(
    tmp_path: Path, port: int, redis_url: str, evidence_keys: EvidenceKeys
) -> None:
    metrics_port = free_port()
    token = "0123456789abcdef0123456789abcdef"
    env = _env(tmp_path, evidence_keys, WEBHOOK_SECRET=SECRET.decode(), PORT=str(port), REDIS_URL=redis_url,
               BATON_METRICS_PORT=str(metrics_port), BATON_METRICS_TOKEN=token)  # fmt: skip
    serve = _baton("serve", env=env)
    try:
        base, private = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
        _wait_ready(base, serve)
        body = json.dumps(labeled()).encode()
        queued = httpx.post(base + WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues"))
        assert queued.status_code == 202
        # Not on the main port at all, even with the token.
        public = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {token}"})
        assert public.status_code == 404
        assert "baton_" not in public.text
        assert httpx.get(private + "/metrics").status_code == 401
        r = httpx.get(private + "/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        assert 'baton_deliveries_total{outcome="queued"} 1' in r.text
        # The metrics port serves nothing else.
        assert httpx.get(private + "/readyz").status_code == 404
        other = httpx.post(private + WEBHOOK_PATH, content=body, headers=delivery_headers(body, "issues"))
        assert other.status_code in (404, 405)
    finally:
        assert _stop(serve) == 0, _output(serve)


def test_a_port_in_use_is_one_clear_line(tmp_path: Path, port: int, redis_url: str) -> None:
    env = _env(tmp_path, None, PORT=str(port), REDIS_URL=redis_url)  # setup mode: no key needed
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        done = subprocess.run(
            [sys.executable, "-m", "baton", "serve"], env=env,
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_host_and_port_flags_win_over_the_variables(tmp_path: Path, port: int, redis_url: str) -> None:
    """HOST=127.0.0.2 and PORT=other are set; serve listens where --host and --port say, and nowhere else."""
    other = free_port()
    env = _env(tmp_path, None, HOST="127.0.0.2", PORT=str(other), REDIS_URL=redis_url)  # setup mode
    serve = _baton("serve", "--host", "127.0.0.1", "--port", str(port), env=env)
    try:
        _wait_ready(f"http://127.0.0.1:{port}", serve)
        for where in (f"127.0.0.2:{port}", f"127.0.0.1:{other}", f"127.0.0.2:{other}"):
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://{where}/healthz", timeout=2)
    finally:
        assert _stop(serve) == 0, _output(serve)
    assert f"http://127.0.0.1:{port}/" in _output(serve)


def test_bad_host_and_port_flags(tmp_path: Path, port: int) -> None:
    env = _env(tmp_path, None, BATON_METRICS_PORT=str(port))
    clash = subprocess.run([sys.executable, "-m", "baton", "serve", "--port", str(port)], env=env,
                           capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert clash.returncode == 2
    assert clash.stderr.strip() == (
        f"baton serve: --port {port} is BATON_METRICS_PORT too: /metrics moves off the main port, "
        "so choose another"
    )
    for flag, value in (("--port", "70000"), ("--port", "http"), ("--host", " ")):
        done = subprocess.run([sys.executable, "-m", "baton", "serve", flag, value], env=env,
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"argument {flag}:" in done.stderr
        assert "Traceback" not in done.stderr
