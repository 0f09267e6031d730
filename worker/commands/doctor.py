"""`baton doctor`: does everything Baton needs work on this machine, and what fixes what does not.

Checks, in order: the configuration (every known variable, set or unset, no
secret's value shown), Redis (reachable and writable in a transaction, Lua
scripts, persistence, eviction; from INFO where a managed Redis refuses CONFIG),
the GitHub App (its JWT against ``GET /app``, its permissions and events
against ``app-manifest.yml``, its installations), the webhook secret, the
signing key and audit secret, the public URL, the model gateway (which provider
keys the worker holds, never their values, and whether each provider it would
call answers), what the box can enforce here (the runner's own probe), and the
agent CLIs on the runner's PATH.

This module gathers the facts (the only I/O); ``_doctor_checks`` judges them.
Exit 0 when nothing failed (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis
import yaml
from githubkit import AppAuthStrategy, GitHub
from githubkit.exception import GitHubException, RequestFailed

from baton import envfile, keys, records, redis_client, redis_server, settings
from baton.errors import BatonError
from worker import context
from worker.commands import _doctor_checks as judge
from worker.github.client import USER_AGENT, error_detail
from worker.github.retry import RetryPolicy, unwrap
from worker.runner import adapters, box, gateway, probe
from worker.runner.gateway import providers

#: Next to the packages in a source checkout (and the Docker image, which installs it editable).
DEFAULT_MANIFEST = Path(__file__).resolve().parents[2] / "app-manifest.yml"
#: One retry, quickly: a doctor that waits a minute on a dead GitHub helps nobody.
_RETRY = RetryPolicy(max_retries=1, base_delay=0.2, max_delay=0.5, max_wait=2.0)
_TIMEOUT = httpx.Timeout(10.0, connect=5.0, pool=5.0)
_PAGES = 50  # of 100 installations each
_REDIS_KEYS = ("appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="check that everything Baton needs works here, and say how to fix what does not",
        description="One line per check (ok, warn, FAIL with its fix). Exit 0 when nothing failed.",
    )
    p.add_argument(
        "--manifest",
        type=Path,
        default=DEFAULT_MANIFEST,
        help="the App manifest to compare the App with (default: the one Baton ships)",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    checks = diagnose(dict(os.environ), args.manifest, Path.cwd() / envfile.ENV_NAME)
    if args.json:
        print(json.dumps({"ok": judge.passed(checks), "checks": [c.to_data() for c in checks]}, indent=2))
    else:
        for check in checks:
            print(check.line(), flush=True)
            for note in check.notes:
                print(f"        {note}")
        failed = sum(1 for c in checks if c.status is judge.Status.FAIL)
        print(f"baton doctor: {failed} failed" if failed else "baton doctor: everything Baton needs works")
    return 0 if judge.passed(checks) else 1


def diagnose(env: dict[str, str], manifest_path: Path, env_file: Path | None = None) -> list[judge.Check]:
    """Every check, in order. ``env_file`` (``./.env``) fills in ``env`` as it does for serve and worker."""
    config: settings.Settings | None = None
    error: str | None = None
    loaded: list[str] = []
    try:
        loaded = envfile.load_into(env, env_file) if env_file is not None else []
        config = settings.load(env)
    except BatonError as exc:
        error = exc.message
    checks = [judge.configuration(env, error, loaded)]
    if config is None:
        why = "the configuration did not load"
        names = (
            "redis",
            "redis persistence",
            "redis eviction",
            "github app",
            "github permissions",
            "github installations",
            "webhook secret",
            "signing key",
            "audit secret",
            "public url",
            "data dir",
            "model gateway",
        )
        checks += [judge.Check(name, judge.Status.SKIP, f"not checked: {why}") for name in names]
    else:
        found = gather_redis(config)
        checks += [judge.redis_reachable(found), judge.redis_persistence(found), judge.redis_eviction(found),
                   judge.redis_replication(found)]  # fmt: skip
        manifest, manifest_error = load_manifest(manifest_path)
        github = gather_github(config)
        checks += [
            judge.github_app(github),
            judge.app_slug(github, config.app_slug),
            judge.github_permissions(github, manifest, manifest_error),
            judge.github_installations(github, manifest),
            judge.webhook_secret(len(config.webhook_secrets)),
        ]
        key = config.signing_key
        checks += [
            judge.signing_key(
                None if key is None else key.algorithm,
                None if key is None else key.keyid,
                f"{settings.HOW_TO_SIGN} (or put the PEM in BATON_SIGNING_KEY)",
            ),
            judge.audit_secret(config.audit_secret is not None, settings.HOW_TO_AUDIT),
            judge.public_url(config.public_url),
            judge.data_dir(str(config.data_dir), *probe_data_dir(config.data_dir)),
            gather_gateway(config, env),
        ]
    checks.append(judge.git(git_version(env.get("PATH") or os.defpath)))
    checks += gather_box()
    checks.append(judge.agent_clis(gather_agents(env.get("PATH") or os.defpath)))
    return checks


# -- Redis --------------------------------------------------------------------------------------


def gather_redis(config: settings.Settings) -> judge.RedisFacts:
    url, where = config.redis_url, ""
    if url is None:
        try:
            url = redis_server.discover()
        except BatonError:
            return judge.RedisFacts(where="", configured=False)
        where = f"the embedded server of the `baton serve` here ({settings.redact_url(url)})"
    where = where or redis_client.describe(url)
    client = redis_client.connect(url, timeout=config.redis_timeout)
    try:
        facts = _ask_redis(client, where)
        if facts.error is not None or facts.refused is not None:
            return facts
        found = dataclasses.replace(facts, sentinel=redis_client.is_sentinel(url),
                                    required_replicas=config.redis_replicas)  # fmt: skip
        if found.sentinel:
            host, port = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
            found = dataclasses.replace(found, where=f"{where}, primary {host}:{port}")
        if config.redis_replicas > 0:
            try:
                redis_client.Replication(config.redis_replicas, config.redis_timeout).confirm(
                    client, "a probe write"
                )
                found = dataclasses.replace(found, confirmed_replicas=config.redis_replicas)
            except (redis_client.NotReplicated, redis.ResponseError) as exc:
                message = (
                    exc.message if isinstance(exc, BatonError) else f"WAIT was refused: {_first_line(exc)}"
                )
                found = dataclasses.replace(found, confirmed_replicas=0, replica_error=message)
        return found
    finally:
        client.close()


def _ask_redis(client: redis.Redis, where: str) -> judge.RedisFacts:
    """What the server says of itself. A managed Redis may refuse CONFIG, INFO or CLIENT (an ACL's
    NOPERM, or "unknown command" where the provider renamed it away) or answer CONFIG GET only for
    some names: each refusal is kept for the judge to say what it could not check, and why."""
    try:
        client.ping()
        probe = keys.DOCTOR_PROBE_PREFIX + uuid.uuid4().hex  # a write, as every task makes; gone in 10 s
        with client.pipeline(transaction=True) as pipe:  # MULTI/EXEC, as every state change is
            pipe.set(probe, b"1", px=10_000)
            pipe.delete(probe)
            pipe.execute()
    except redis.RedisError as exc:
        return judge.RedisFacts(where=where, error=f"{type(exc).__name__}: {exc}")
    try:
        client.eval(_LUA_PROBE, 1, probe)  # queueing, locks and leases are Lua scripts
    except redis.ResponseError as exc:
        return judge.RedisFacts(where=where, refused=f"EVAL: {_first_line(exc)}")
    except redis.RedisError as exc:
        return judge.RedisFacts(where=where, error=f"{type(exc).__name__}: {exc}")
    version: str | None = None
    info: dict[str, str] = {}
    info_error: str | None = None
    try:
        server = client.info("server")
        version = str(server.get("redis_version")) if isinstance(server, dict) else None
        for section in ("persistence", "memory"):  # Upstash has no persistence section: an empty one
            fields = client.info(section)
            info.update({str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {})
    except redis.ResponseError as exc:
        info_error = _first_line(exc)
    config: dict[str, str] = {}
    config_error: str | None = None
    for name in _REDIS_KEYS:  # one at a time: Redis Cloud refuses the names it does not expose
        try:
            answer = client.config_get(name)
        except redis.ResponseError as exc:
            config_error = config_error or _first_line(exc)
            continue
        config.update({records.text(k): records.text(v) for k, v in answer.items()})
    client_error: str | None = None
    try:
        client.client_setname("baton-doctor")
    except redis.ResponseError as exc:
        client_error = _first_line(exc)
    return judge.RedisFacts(where=where, version=version, config=config, config_error=config_error,
                            info=None if info_error else info, info_error=info_error,
                            client_error=client_error)  # fmt: skip


#: Reads the key it is given, as Baton's scripts do (a managed Redis may lock by KEYS).
_LUA_PROBE = "return redis.call('EXISTS', KEYS[1])"


def _first_line(exc: BaseException) -> str:
    return str(exc).split("\n")[0][:200]


# -- GitHub -------------------------------------------------------------------------------------


def load_manifest(path: Path) -> tuple[judge.Manifest | None, str | None]:
    try:
        return judge.manifest_from(yaml.safe_load(path.read_text(encoding="utf-8"))), None
    except OSError as exc:
        return None, f"cannot read {path} ({exc.strerror})"
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as exc:
        return None, f"{path}: {' '.join(str(exc).split())[:200]}"


def gather_github(config: settings.Settings) -> judge.GitHubFacts:
    api = config.github_api_url
    missing = tuple(
        name
        for name, value in (("APP_ID", config.app_id), ("PRIVATE_KEY", config.private_key))
        if value is None
    )
    if missing or config.app_id is None or config.private_key is None:
        return judge.GitHubFacts(api, missing=missing or ("APP_ID",))
    gh: GitHub[AppAuthStrategy] = GitHub(
        AppAuthStrategy(config.app_id, config.private_key),
        base_url=api,
        user_agent=USER_AGENT,
        timeout=_TIMEOUT,
        auto_retry=_RETRY,
        http_cache=False,
    )
    try:
        app = _json(gh, "/app")
    except GitHubException as exc:
        return judge.GitHubFacts(api, error=error_detail(exc), status=_status(exc))
    if not isinstance(app, dict):
        return judge.GitHubFacts(api, error="GitHub answered something that is not an App", status=200)
    installations: list[Mapping[str, Any]] = []
    try:
        for page in range(1, _PAGES + 1):
            batch = _json(gh, "/app/installations", params={"per_page": 100, "page": page})
            installations += [i for i in batch if isinstance(i, dict)] if isinstance(batch, list) else []
            if not isinstance(batch, list) or len(batch) < 100:
                break
    except GitHubException as exc:
        return judge.GitHubFacts(api, app=app, installations_error=error_detail(exc), status=_status(exc))
    return judge.GitHubFacts(api, app=app, installations=tuple(installations))


def _json(gh: GitHub[AppAuthStrategy], path: str, **kwargs: Any) -> Any:
    try:
        return gh.request("GET", path, **kwargs).json()
    except ValueError as exc:  # not JSON: a proxy's error page, a wrong GITHUB_API_URL
        raise GitHubException(f"GET {path}: the answer is not JSON") from exc


def _status(exc: GitHubException) -> int | None:
    cause = unwrap(exc)
    return cause.response.status_code if isinstance(cause, RequestFailed) else None


# -- the worker's disk and git ------------------------------------------------------------------


def probe_data_dir(path: Path) -> tuple[str | None, int | None]:
    """(why a file cannot be written there, or None; free bytes). Makes the directory, as the worker would."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".baton-doctor-"):
            pass
        return None, shutil.disk_usage(path).free
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})", None


def git_version(search_path: str) -> str | None:
    found = shutil.which("git", path=search_path)
    if found is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - the git on the worker's PATH, asked its version
            [found, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


# -- the model gateway --------------------------------------------------------------------------


def gather_gateway(config: settings.Settings, env: Mapping[str, str]) -> judge.Check:
    """Each provider: its upstream (BATON_MODEL_UPSTREAMS or the vendor), the variable holding its key
    here, and, where it has one or was chosen, whether a connection (and TLS) to it succeeds."""
    try:
        chosen = context.model_upstreams(config)
        table = context.model_prices(config)
    except BatonError as exc:
        return judge.model_gateway([], "", exc.message)
    found = []
    for name, wire in providers.WIRES.items():
        names = providers.key_envs(name)
        key_env = next((n for n in names if env.get(n, "").strip()), None)
        url = chosen.get(name, wire.base_url)
        reached, error = (None, None)
        if key_env is not None or name in chosen:
            error = reach(url)
            reached = error is None
        found.append(judge.Upstream(name, url, name in chosen, key_env, names, reached, error))
    prices = "built in" if table is gateway.BUILTIN else f"from {table.source}"
    return judge.model_gateway(found, prices, None)


def reach(url: str, timeout: float = 5.0) -> str | None:
    """None if a TCP connection (and, for https, a TLS handshake) to the URL's host succeeds."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if parts.scheme == "https":
                with ssl.create_default_context().wrap_socket(sock, server_hostname=host):
                    pass
    except (OSError, ssl.SSLError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# -- the box and the agents ---------------------------------------------------------------------


def gather_box() -> list[judge.Check]:
    facts = probe.host()
    which = judge.bwrap_binary(facts.bwrap, facts.bwrap_version, facts.bwrap_source)
    first = [which] if which is not None else []
    try:
        found = box.probe()
    except Exception as exc:  # whatever stops the probe is what the box check reports
        return first + judge.box(None, f"{type(exc).__name__}: {exc}")
    return first + judge.box(found)


def gather_agents(search_path: str) -> list[judge.AgentCli]:
    """Each adapter's executable on the runner's PATH (the worker's own PATH), and its version."""
    found = []
    for spec in adapters.SPECS.values():
        if spec.executable is None:
            continue  # a policy's own command: nothing to look for, and never run outside the box
        where = shutil.which(spec.executable, path=spec.system_path or search_path)
        path = os.path.abspath(where) if where else None
        version = adapters.version(spec, path) if path else None
        cli = judge.AgentCli(spec.name, spec.executable, path, version, spec.install_hint, spec.pinned)
        found.append(cli)
    return found
