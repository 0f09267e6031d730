"""`baton doctor`'s judgements: pure functions from gathered facts to one :class:`Check` each.

Nothing here touches the network, Redis or the box; ``worker.commands.doctor``
gathers the facts and prints what these functions say. Each failure names its
fix, and no function is given a secret's value, so none can print one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from baton.github_web import app_install_url, web_base
from baton.settings import KNOWN, is_loopback, redact_url
from worker.runner.bwrap_binary import SYSTEM, WHEEL
from worker.runner.probe import MIN_BWRAP, Probe

DEPLOY_DOC = "docs/deploy.md"

#: Variables whose values are shown; every other one is only said to be set (an allow-list, so a
#: variable added to ``KNOWN`` later is treated as a secret until someone decides otherwise).
SHOWN: frozenset[str] = frozenset({
    "APP_ID", "PRIVATE_KEY_PATH", "REDIS_URL", "GITHUB_API_URL", "LOG_LEVEL", "HOST", "PORT",
    "BATON_MAX_BODY_BYTES", "BATON_REDIS_TIMEOUT", "BATON_AGENT_WORKERS", "BATON_METRICS_PORT",
    "BATON_REQUIRE_ORG_POLICY", "BATON_REDELIVERY_INTERVAL", "BATON_REDELIVER_4XX", "BATON_DATA_DIR",
    "BATON_AGENT_ROUTES", "BATON_MODEL_UPSTREAMS", "BATON_MODEL_PRICES", "BATON_SIGNING_KEY_PATH",
    "BATON_VERIFY_KEYS_PATH", "BATON_PUBLIC_URL",
})  # fmt: skip
#: Shown with any password replaced by ``***``.
_URLS = frozenset({"REDIS_URL", "GITHUB_API_URL", "BATON_PUBLIC_URL"})
_LEVELS = {"read": 1, "write": 2, "admin": 3}
_USERNS_FIX = (
    "bubblewrap needs unprivileged user namespaces (Debian: sysctl kernel.unprivileged_userns_clone=1; "
    "Ubuntu 23.10+: kernel.apparmor_restrict_unprivileged_userns=0) or CAP_SYS_ADMIN; in Docker, run "
    "with --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt "
    f"systempaths=unconfined (see {DEPLOY_DOC})"
)


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # works, but worth fixing; does not change the exit code
    FAIL = "FAIL"  # something Baton needs does not work: exit 1
    SKIP = "skip"  # not checked, because a check it depends on failed


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None
    #: Lines printed under the check (the configuration's variables).
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.status.value:<5} {self.name}: {self.detail}{fix}"

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
            "notes": list(self.notes),
        }


def passed(checks: Sequence[Check]) -> bool:
    """Everything Baton needs works: no check failed (warnings are allowed)."""
    return all(check.status is not Status.FAIL for check in checks)


def _skip(name: str, why: str) -> Check:
    return Check(name, Status.SKIP, f"not checked: {why}")


# -- 1. configuration ---------------------------------------------------------------------------


def configuration(env: Mapping[str, str], error: str | None, from_file: Sequence[str] = ()) -> Check:
    """``error``: what ``baton.settings.load`` refused, if it did; ``from_file``: the names ``./.env`` set.
    Values are shown only for ``SHOWN``."""
    notes = [
        _variable(name, env.get(name, "").strip()) + " (from ./.env)" * (name in from_file) for name in KNOWN
    ]
    unknown = sorted(k for k in env if k.startswith("BATON_") and k not in KNOWN)
    notes += [
        f"{name:<26} unknown: not a Baton setting (a typo?), so Baton refuses to start" for name in unknown
    ]
    if error is not None:
        return Check(
            "configuration", Status.FAIL, error, "correct that variable (each is listed below)", tuple(notes)
        )
    count = sum(1 for name in KNOWN if env.get(name, "").strip())
    where = f", {len(from_file)} of them from ./.env" if from_file else ""
    detail = f"loaded; {count} of {len(KNOWN)} known variables set{where} (secret values are never shown)"
    return Check("configuration", Status.OK, detail, notes=tuple(notes))


def _variable(name: str, value: str) -> str:
    if not value:
        return f"{name:<26} unset"
    if name not in SHOWN:
        return f"{name:<26} set (secret: value not shown)"
    shown = redact_url(value) if name in _URLS else value
    shown = " ".join(shown.split())
    return f"{name:<26} {shown[:97] + '...' if len(shown) > 100 else shown}"


# -- 2. Redis -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisFacts:
    """What one connection to Redis found.

    A managed Redis may refuse CONFIG, INFO or CLIENT, or answer CONFIG GET only for the names it
    exposes (Upstash answers the others with nothing, Redis Cloud with an error): a name missing from
    ``config`` was not reported, and ``config_error`` is the first refusal. ``info`` holds the
    fields of INFO persistence and memory (None: INFO was refused, ``info_error`` says how)."""

    where: str  # the URL, password redacted, or where the embedded server was found
    configured: bool = True  # False: REDIS_URL unset and no embedded server running here
    error: str | None = None  # could not connect, or a write was refused
    refused: str | None = None  # a command Baton needs was refused (Lua scripts)
    version: str | None = None
    config: Mapping[str, str] | None = None
    config_error: str | None = None
    info: Mapping[str, str] | None = None
    info_error: str | None = None
    client_error: str | None = None  # CLIENT SETNAME refused: connections go unnamed
    sentinel: bool = False  # reached through Sentinels, which can promote a replica
    required_replicas: int = 0  # BATON_REDIS_REPLICAS
    confirmed_replicas: int | None = None  # how many confirmed a probe write (None: not asked)
    replica_error: str | None = None  # WAIT refused, or fewer confirmed in time


#: Said after "could not check", so an operator knows this is the provider's rule, not a fault.
_MANAGED = "as managed Redis services do"
_ASK_PERSISTENCE = (
    "ask the provider for persistence with an append-only file (appendonly yes, appendfsync everysec "
    "or always), or confirm it in its settings"
)
_ASK_EVICTION = (
    "ask the provider for maxmemory-policy noeviction (a full Redis then refuses writes instead of "
    "deleting keys), or confirm it in its settings"
)


def redis_reachable(facts: RedisFacts) -> Check:
    if not facts.configured:
        return Check(
            "redis",
            Status.WARN,
            "REDIS_URL is unset and no `baton serve` with an embedded Redis runs here: `baton serve` "
            "would start one on this machine, which workers on other machines cannot reach",
            f"set REDIS_URL to a Redis with AOF on and maxmemory-policy noeviction (see {DEPLOY_DOC})",
        )
    if facts.error is not None:
        return Check(
            "redis",
            Status.FAIL,
            f"{facts.where}: {facts.error}",
            "check REDIS_URL (host, port, password, rediss:// for TLS) and that this machine can reach it",
        )
    if facts.refused is not None:
        return Check(
            "redis",
            Status.FAIL,
            f"{facts.where} refused a Lua script ({facts.refused}): Baton queues tasks and holds its "
            "locks and leases with scripts",
            "use a Redis (or a plan of the provider's) that runs Lua scripts: EVAL, EVALSHA and SCRIPT LOAD",
        )
    version = f" (Redis {facts.version})" if facts.version else ""
    unnamed = (
        f"; refuses CLIENT ({facts.client_error}), so Baton's connections go unnamed"
        if facts.client_error
        else ""
    )
    return Check(
        "redis", Status.OK, f"{facts.where}{version} answers, accepts writes and runs Lua scripts{unnamed}"
    )


def redis_replication(facts: RedisFacts) -> Check:
    """BATON_REDIS_REPLICAS against what the replicas did with a probe write."""
    name = "redis replicas"
    if not facts.configured or facts.error is not None or facts.refused is not None:
        return _skip(name, "Redis was not reached")
    required = facts.required_replicas
    if required == 0:
        if facts.sentinel:
            return Check(
                name,
                Status.WARN,
                "BATON_REDIS_REPLICAS is 0 behind Sentinel: a delivery answered 2xx, or a status already on "
                "GitHub, can be lost with a primary that dies before its replicas have it",
                f"set BATON_REDIS_REPLICAS=1 (see {DEPLOY_DOC}#redis-with-replicas-and-sentinel)",
            )
        return Check(name, Status.OK, "BATON_REDIS_REPLICAS is 0: Baton waits for no replica")
    if facts.replica_error is not None or (facts.confirmed_replicas or 0) < required:
        return Check(
            name,
            Status.FAIL,
            f"BATON_REDIS_REPLICAS is {required}: {facts.replica_error or 'no replica confirmed a write'}; "
            "every delivery would be answered 503 and nothing published",
            "connect the replicas to this primary (`INFO replication` on it), or lower BATON_REDIS_REPLICAS "
            "to what it has",
        )
    return Check(
        name, Status.OK, f"{required} of the replicas BATON_REDIS_REPLICAS asks for confirmed a probe write"
    )


def _unread(facts: RedisFacts, setting: str, section: str, field: str | None) -> str:
    """Why neither CONFIG GET ``setting`` nor INFO ``section``'s ``field`` (None: INFO has none)
    said what it is."""
    config = (
        f"CONFIG GET was refused ({facts.config_error})"
        if facts.config_error is not None
        else f"CONFIG GET does not report {setting}"
    )
    if facts.info is None:
        info = f"; INFO was refused ({facts.info_error})" if facts.info_error else ""
    else:
        info = f"; INFO {section} has no {field}" if field else f"; INFO {section} does not say"
    return f"{config}{info}, {_MANAGED}"


def _reached(facts: RedisFacts, name: str) -> Check | None:
    return _skip(name, "no Redis reached") if not facts.configured or facts.error is not None else None


def redis_persistence(facts: RedisFacts) -> Check:
    """AOF is the safest (at most a second lost with appendfsync everysec); RDB snapshots alone lose
    every task since the last one; neither loses them all on a restart. Where CONFIG GET is refused,
    INFO persistence still says whether AOF is on (``aof_enabled``), though not how often it is flushed."""
    name = "redis persistence"
    skipped = _reached(facts, name)
    if skipped is not None:
        return skipped
    config, info = facts.config or {}, facts.info or {}
    if "appendonly" in config:
        return _persistence(config)
    aof = info.get("aof_enabled")
    if aof == "1":
        return Check(
            name,
            Status.WARN,
            f"AOF on (INFO persistence: aof_enabled:1), but how often it is flushed could not be checked: "
            f"{_unread(facts, 'appendfsync', 'persistence', None)}",
            "ask the provider for appendfsync everysec (or always): with appendfsync no, a crash loses "
            "what the OS had not yet written",
        )
    if aof == "0":
        return Check(
            name,
            Status.WARN,
            "AOF off (INFO persistence: aof_enabled:0), and whether RDB snapshots are taken could not "
            f"be checked: {_unread(facts, 'save', 'persistence', None)}; a restart loses "
            "every task written since the last snapshot, or all of them",
            _ASK_PERSISTENCE,
        )
    return Check(
        name,
        Status.WARN,
        f"could not check: {_unread(facts, 'appendonly', 'persistence', 'aof_enabled')}",
        _ASK_PERSISTENCE,
    )


def _persistence(config: Mapping[str, str]) -> Check:
    name = "redis persistence"
    save = " ".join(config.get("save", "").split())
    fsync = config.get("appendfsync", "")
    if config.get("appendonly", "").lower() == "yes":
        if fsync == "no":
            return Check(
                name,
                Status.WARN,
                "AOF is on, but appendfsync no leaves flushing to the OS",
                "CONFIG SET appendfsync everysec (and in redis.conf)",
            )
        also = f", plus RDB snapshots ({save})" if save else ""
        return Check(name, Status.OK, f"AOF on (appendfsync {fsync or 'everysec'}){also}")
    if save:
        return Check(
            name,
            Status.WARN,
            f"RDB snapshots only (save {save}): a crash loses every task, lock and audit entry written "
            "since the last snapshot; AOF is safer",
            "CONFIG SET appendonly yes (and appendonly yes in redis.conf, or the provider's setting)",
        )
    return Check(
        name,
        Status.FAIL,
        "no persistence (appendonly no, no save schedule): a restart loses every queued task, "
        "the audit chain and the transparency log",
        "CONFIG SET appendonly yes and put appendonly yes in redis.conf (AOF is safer than RDB snapshots)",
    )


def redis_eviction(facts: RedisFacts) -> Check:
    """noeviction, read from CONFIG GET or, where that is refused, from INFO memory."""
    name = "redis eviction"
    skipped = _reached(facts, name)
    if skipped is not None:
        return skipped
    config, info = facts.config or {}, facts.info or {}
    from_config = "maxmemory-policy" in config
    policy = config.get("maxmemory-policy") if from_config else info.get("maxmemory_policy")
    if policy is None:
        return Check(
            name,
            Status.WARN,
            f"could not check: {_unread(facts, 'maxmemory-policy', 'memory', 'maxmemory_policy')}",
            _ASK_EVICTION,
        )
    limit = config.get("maxmemory") if from_config else info.get("maxmemory")
    source = "" if from_config else " (INFO memory)"
    if policy == "noeviction":
        return Check(
            name,
            Status.OK,
            f"maxmemory-policy noeviction{source}: a full Redis refuses writes, deletes nothing",
        )
    fix = (
        "CONFIG SET maxmemory-policy noeviction, and the same in redis.conf (or the provider's setting)"
        if from_config
        else "set maxmemory-policy noeviction in the provider's settings (CONFIG is refused here)"
    )
    return Check(
        name,
        Status.FAIL,
        f"maxmemory-policy is {policy or 'unknown'}{source} (maxmemory {limit or 'unknown'}): when memory "
        "runs short Redis deletes keys, queued tasks and audit entries among them",
        fix,
    )


# -- 3. GitHub ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """What ``app-manifest.yml`` asks GitHub for."""

    permissions: Mapping[str, str]
    events: tuple[str, ...]


def manifest_from(data: object) -> Manifest:
    """The manifest's ``default_permissions`` and ``default_events``; ValueError if they are not there."""
    if not isinstance(data, Mapping):
        raise ValueError("not a YAML mapping")
    permissions, events = data.get("default_permissions"), data.get("default_events")
    if not isinstance(permissions, Mapping) or not all(
        isinstance(k, str) and v in _LEVELS for k, v in permissions.items()
    ):
        raise ValueError("default_permissions must map permission names to read, write or admin")
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ValueError("default_events must be a list of event names")
    return Manifest(dict(permissions), tuple(events))


@dataclass(frozen=True)
class GitHubFacts:
    api_url: str
    #: Which of APP_ID and PRIVATE_KEY are unset (nothing was asked then).
    missing: tuple[str, ...] = ()
    error: str | None = None  # GET /app failed
    status: int | None = None  # GitHub's status for that failure; None: no answer
    app: Mapping[str, Any] | None = None
    installations: tuple[Mapping[str, Any], ...] | None = None
    installations_error: str | None = None


def github_app(facts: GitHubFacts) -> Check:
    name = "github app"
    if facts.missing:
        return Check(
            name,
            Status.FAIL,
            f"{' and '.join(facts.missing)} unset: the worker cannot act on GitHub",
            "set APP_ID and PRIVATE_KEY (or PRIVATE_KEY_PATH) from the App's settings page "
            "(General: App ID; Private keys: Generate)",
        )
    if facts.error is not None or facts.app is None:
        return Check(name, Status.FAIL, f"GET /app: {facts.error}", _github_fix(facts))
    app = facts.app
    return Check(
        name,
        Status.OK,
        f"GET /app: App {str(app.get('name'))!r} (slug {app.get('slug')}, id "
        f"{app.get('id')}) on {facts.api_url}",
    )


def app_slug(facts: GitHubFacts, configured: str | None) -> Check:
    """BATON_APP_SLUG against the slug GitHub gives the App: how people call Baton by name."""
    name = "app slug"
    if facts.app is None:
        return _skip(name, "the App was not reached")
    slug = str(facts.app.get("slug") or "")
    if configured is None:
        return Check(
            name,
            Status.WARN,
            f"BATON_APP_SLUG is unset: comments calling the App by name (@{slug} ...) are not answered",
            f"set BATON_APP_SLUG={slug} for `baton serve`",
        )
    if configured != slug.lower():
        return Check(
            name,
            Status.FAIL,
            f"BATON_APP_SLUG is {configured!r}, but GitHub calls this App {slug!r}: mentions go unanswered",
            f"set BATON_APP_SLUG={slug}",
        )
    return Check(name, Status.OK, f"people call the App @{slug}, as BATON_APP_SLUG says")


def _github_fix(facts: GitHubFacts) -> str:
    if facts.status == 401:
        return (
            "GitHub refused the App's JWT: APP_ID and the private key must belong to the same App "
            "(generate a new key on the App's settings page if unsure), and this machine's clock "
            "must be right"
        )
    if facts.status == 404:
        return (
            f"no App API at {facts.api_url}: for GitHub Enterprise Server set "
            "GITHUB_API_URL=https://HOST/api/v3"
        )
    if facts.status is None:
        return (
            f"this machine cannot reach {facts.api_url}: check DNS, the firewall or proxy, and GITHUB_API_URL"
        )
    return f"GitHub answered {facts.status}; if it persists, check GitHub's status page and GITHUB_API_URL"


def _short(permissions: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    return [
        f"{perm}: {level}" + (f" (has {permissions[perm]})" if perm in permissions else "")
        for perm, level in sorted(wanted.items())
        if _LEVELS.get(str(permissions.get(perm)), 0) < _LEVELS[level]
    ]


def github_permissions(facts: GitHubFacts, manifest: Manifest | None, manifest_error: str | None) -> Check:
    """The App's permissions and events against what ``app-manifest.yml`` asks for."""
    name = "github permissions"
    if facts.app is None:
        return _skip(name, "the App was not reached")
    if manifest is None:
        return Check(
            name,
            Status.WARN,
            f"could not compare: {manifest_error}",
            "run `baton doctor --manifest PATH/app-manifest.yml`",
        )
    permissions = _str_map(facts.app.get("permissions"))
    events = {str(e) for e in facts.app.get("events") or ()}
    short = _short(permissions, manifest.permissions)
    missing_events = [e for e in manifest.events if e not in events]
    extra = sorted(p for p in permissions if p not in manifest.permissions)
    if short or missing_events:
        parts = ([f"missing permissions {', '.join(short)}"] if short else []) + (
            [f"missing events {', '.join(missing_events)}"] if missing_events else []
        )
        return Check(
            name,
            Status.FAIL,
            "; ".join(parts),
            "grant them on the App's settings page (Permissions & events), then accept the new "
            "permissions on every installation",
        )
    granted = ", ".join(f"{p}: {permissions[p]}" for p in sorted(manifest.permissions))
    if extra:
        more = ", ".join(f"{p}: {permissions[p]}" for p in extra)
        return Check(
            name,
            Status.WARN,
            f"everything app-manifest.yml asks for, and more: {more}",
            "remove what Baton does not use (least privilege), on the App's settings page",
        )
    return Check(name, Status.OK, f"{granted}; events {', '.join(manifest.events)}")


def github_installations(facts: GitHubFacts, manifest: Manifest | None) -> Check:
    name = "github installations"
    if facts.app is None:
        return _skip(name, "the App was not reached")
    if facts.installations is None:
        return Check(
            name, Status.FAIL, f"GET /app/installations: {facts.installations_error}", _github_fix(facts)
        )
    found = facts.installations
    slug = facts.app.get("slug")
    if not found:
        return Check(
            name,
            Status.WARN,
            "the App is installed nowhere: no webhook will arrive",
            "install it on an organisation or repository "
            f"({app_install_url(web_base(facts.api_url), str(slug))})",
        )
    accounts = [_account(i) for i in found]
    listed = ", ".join(accounts[:5]) + (f" and {len(accounts) - 5} more" if len(accounts) > 5 else "")
    problems = []
    for inst, account in zip(found, accounts, strict=True):
        if inst.get("suspended_at"):
            problems.append(f"{account} is suspended")
        short = _short(_str_map(inst.get("permissions")), manifest.permissions) if manifest else []
        if short:
            problems.append(f"{account} has not accepted {', '.join(short)}")
    if problems:
        return Check(
            name,
            Status.WARN,
            f"{len(found)} ({listed}); " + "; ".join(problems[:5]),
            "an owner of each accepts the App's permissions (or unsuspends it) under Settings > GitHub Apps",
        )
    return Check(name, Status.OK, f"{len(found)} ({listed})")


def _account(installation: Mapping[str, Any]) -> str:
    account = installation.get("account")
    login = account.get("login") if isinstance(account, Mapping) else None
    return f"{login or '?'} (id {installation.get('id')})"


def _str_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


# -- 4. secrets and keys ------------------------------------------------------------------------


def webhook_secret(count: int) -> Check:
    if count == 0:
        return Check(
            "webhook secret",
            Status.FAIL,
            "WEBHOOK_SECRET unset: `baton serve` answers every webhook 503 (it cannot verify one)",
            "set WEBHOOK_SECRET to the secret in the App's settings (Webhook secret)",
        )
    rotating = f" ({count}: rotating, each is accepted)" if count > 1 else ""
    return Check("webhook secret", Status.OK, f"set{rotating}")


def signing_key(algorithm: str | None, keyid: str | None, how: str) -> Check:
    if algorithm is None or keyid is None:
        return Check(
            "signing key",
            Status.FAIL,
            "no signing key: serve and worker refuse to start (Baton never publishes unsigned evidence)",
            how,
        )
    return Check("signing key", Status.OK, f"{algorithm}, keyid {keyid[:16]}…")


def audit_secret(present: bool, how: str) -> Check:
    if not present:
        return Check(
            "audit secret", Status.FAIL, "BATON_AUDIT_SECRET unset: serve and worker refuse to start", how
        )
    return Check("audit secret", Status.OK, "set")


def public_url(url: str | None) -> Check:
    if url is None:
        return Check(
            "public url",
            Status.WARN,
            "BATON_PUBLIC_URL unset: check runs carry no link to their receipt",
            "set it to the https URL where `baton serve` is reachable",
        )
    return Check("public url", Status.OK, url)


# -- 5. the worker's disk and git --------------------------------------------------------------

#: Below this, a few repository mirrors and agent workspaces may not fit.
LOW_DISK_BYTES = 1 << 30


def data_dir(path: str, error: str | None, free_bytes: int | None) -> Check:
    """``error``: why a file could not be written under BATON_DATA_DIR (the repository mirrors)."""
    if error is not None:
        return Check(
            "data dir",
            Status.FAIL,
            f"{path}: {error}",
            "make it writable by the worker's user, or set BATON_DATA_DIR to a directory that is",
        )
    free = f"{(free_bytes or 0) / (1 << 30):.1f} GiB free"
    if free_bytes is not None and free_bytes < LOW_DISK_BYTES:
        return Check(
            "data dir",
            Status.WARN,
            f"{path} is writable, but only {free}",
            "free some space, or give BATON_DATA_DIR a larger disk (a volume)",
        )
    return Check("data dir", Status.OK, f"{path} is writable ({free})")


def git(version: str | None) -> Check:
    if version is None:
        return Check(
            "git",
            Status.FAIL,
            "git is not on the worker's PATH: no repository can be mirrored",
            "apt-get install git",
        )
    return Check("git", Status.OK, version)


# -- 6. the box ---------------------------------------------------------------------------------


_MIN_BWRAP = ".".join(map(str, MIN_BWRAP))
_INSTALL_BWRAP = (
    f"pip install {WHEEL} (Baton's own dependency on Linux), or your distribution's bubblewrap "
    f"{_MIN_BWRAP} or later (Debian/Ubuntu: apt-get install bubblewrap)"
)


def bwrap_binary(path: str | None, version: tuple[int, ...] | None, source: str) -> Check | None:
    """Which bwrap the box runs (``probe.host()``'s); None when there is none (the box check says so).

    The wheel's works, but gets no distribution security updates: a warning, not a failure.
    """
    if path is None:
        return None
    what = f"{path}, bubblewrap {'.'.join(map(str, version or ()))} ({source})"
    if source == SYSTEM:
        return Check("box bwrap", Status.OK, what)
    return Check(
        "box bwrap",
        Status.WARN,
        f"{what}: no distribution security updates",
        f"install your distribution's bubblewrap {_MIN_BWRAP} or later, not setuid (Debian/Ubuntu: "
        "apt-get install bubblewrap); the box prefers it to the wheel's",
    )


def box(probe: Probe | None, error: str | None = None) -> list[Check]:
    """What the runner's probe found: whether a box runs, the network cut-off, its limits."""
    if probe is None:
        return [Check("box", Status.FAIL, f"the probe failed: {error}", _USERNS_FIX)]
    problems = "; ".join(probe.problems)
    if not probe.bwrap_runs:
        fix = _INSTALL_BWRAP if probe.bwrap is None else _USERNS_FIX
        return [
            Check(
                "box",
                Status.FAIL,
                f"cannot run a box: {problems or 'no reason given'}; no agent or command gate can run here",
                fix,
            ),
            _skip("box network cut-off", "no box runs"),
            _skip("box limits", "no box runs"),
        ]
    spaces = [
        kind for kind, ok in (("user", probe.user_namespaces), ("network", probe.network_namespace)) if ok
    ]
    checks = [Check("box", Status.OK, f"{probe.bwrap} runs boxes (own {' and '.join(spaces)} namespaces)")]
    if not (probe.user_namespaces and probe.network_namespace):
        checks[0] = Check(
            "box", Status.FAIL, "a box ran but without its own user and network namespaces", _USERNS_FIX
        )
    if probe.network_cutoff:
        checks.append(
            Check(
                "box network cut-off",
                Status.OK,
                "a box with no network reached out only through the egress proxy",
            )
        )
    else:
        fix = (
            "install the distribution's python3 (the box's init runs on it)"
            if not probe.python
            else f"see the problem named here, and {DEPLOY_DOC}"
        )
        checks.append(
            Check(
                "box network cut-off",
                Status.FAIL,
                f"not available ({problems or 'no reason given'}): the gate then counts every shell as "
                "external communication and denies such runs on private repositories",
                fix,
            )
        )
    checks.append(_limits(probe))
    return checks


def _limits(probe: Probe) -> Check:
    missing = []
    fixes = []
    if not probe.seccomp:
        missing.append(
            "seccomp (no filter for this machine or kernel: UNIX sockets, io_uring, ptrace... open)"
        )
        fixes.append("run workers on x86-64 or arm64 Linux with seccomp filters (CONFIG_SECCOMP_FILTER)")
    if not probe.rlimits:
        missing.append("file size (the box's init could not set rlimits)")
        fixes.append(f"see {DEPLOY_DOC}")
    if not probe.process_limit:
        missing.append("processes (the worker is root, which the kernel exempts from RLIMIT_NPROC)")
        fixes.append("run the worker as a non-root user (the Docker image does)")
    memory = (
        f"memory by cgroup ({probe.memory_cgroup_detail})"
        if probe.memory_cgroup
        else f"memory by Baton's supervisor, sampled ({probe.memory_cgroup_detail})"
    )
    if missing:
        return Check(
            "box limits", Status.WARN, f"{memory}; not enforced: " + "; ".join(missing), "; ".join(fixes)
        )
    return Check(
        "box limits", Status.OK, f"{memory}; disk by Baton's supervisor; file size, processes, seccomp"
    )


# -- 7. the model gateway -----------------------------------------------------------------------


@dataclass(frozen=True)
class Upstream:
    """One provider as the gateway would call it here: where, whether the worker holds its key (the
    variable's name, never its value), and whether it answered a connection."""

    provider: str
    url: str
    chosen: bool  # set in BATON_MODEL_UPSTREAMS (else the vendor's API)
    key_env: str | None  # the variable that holds its key here, if one does
    key_envs: tuple[str, ...]
    reached: bool | None = None  # None: not tried (no key and not chosen)
    error: str | None = None


def model_gateway(upstreams: Sequence[Upstream], prices: str, prices_error: str | None) -> Check:
    """The keys the gateway will inject and the providers it will call; what an agent gets otherwise."""
    name = "model gateway"
    if prices_error is not None:
        return Check(name, Status.FAIL, prices_error, "fix the file BATON_MODEL_PRICES names, or unset it")
    usable = [u for u in upstreams if u.key_env is not None]
    unreached = [u for u in upstreams if u.reached is False]
    if unreached:
        which = "; ".join(f"{u.provider} at {u.url}: {u.error}" for u in unreached)
        return Check(
            name,
            Status.FAIL,
            f"cannot reach {which}",
            "let the worker reach them, or point a provider elsewhere with BATON_MODEL_UPSTREAMS",
        )
    listed = "; ".join(f"{u.provider} at {u.url} with {u.key_env}" for u in usable)
    detail = f"{listed or 'no provider has a key'}; prices: {prices}"
    if not usable:
        wanted = ", ".join(sorted({u.key_envs[0] for u in upstreams}))
        return Check(
            name,
            Status.WARN,
            f"no model key is set ({wanted}): an agent's model calls get 503 from "
            f"the gateway; prices: {prices}",
            "set the keys of the providers your policies name, on every worker machine",
        )
    clear = [
        u for u in usable if u.url.startswith("http://") and not is_loopback(urlsplit(u.url).hostname or "")
    ]
    if clear:
        return Check(name, Status.WARN, f"{detail}; {', '.join(u.provider for u in clear)} over plain http",
                     "use https: the gateway sends the key with every call")  # fmt: skip
    return Check(name, Status.OK, detail)


# -- 8. agent CLIs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentCli:
    adapter: str
    executable: str
    path: str | None  # None: not on the runner's PATH
    version: str | None
    install_hint: str = field(default="", compare=False)
    pinned: str | None = None  # the version the adapter was verified with


def agent_clis(found: Sequence[AgentCli]) -> Check:
    name = "agent CLIs"
    present = [a for a in found if a.path is not None]
    absent = [a.adapter for a in found if a.path is None]
    listed = "; ".join(f"{a.adapter} {a.version or '(version unknown)'} ({a.path})" for a in present)
    missing = f"; not found: {', '.join(absent)}" if absent else ""
    broken = [a for a in present if a.version is None]
    vendors = [a for a in present if a.adapter != "script"]
    if broken:
        which = ", ".join(f"{a.executable} ({a.path})" for a in broken)
        return Check(
            name,
            Status.WARN,
            f"{listed}{missing}; no version from {which}: it may not run",
            "reinstall it; " + "; ".join(a.install_hint for a in broken),
        )
    drifted = [a for a in present if a.pinned is not None and a.version is not None and a.version != a.pinned]
    if drifted:
        which = ", ".join(f"{a.adapter} is {a.version}, verified with {a.pinned}" for a in drifted)
        return Check(
            name,
            Status.WARN,
            f"{listed}{missing}; {which}: a flag, an output format or its traffic may have changed",
            "install the verified version: " + "; ".join(a.install_hint for a in drifted),
        )
    if not vendors:
        hints = "; ".join(a.install_hint for a in found if a.adapter in ("claude-code", "codex"))
        return Check(
            name,
            Status.WARN,
            f"{listed or 'none'}{missing}: only the script agent can run here",
            f"install the CLIs your policies name ({hints}), or build the image with "
            '--build-arg AGENTS="claude-code codex"',
        )
    return Check(name, Status.OK, f"{listed}{missing}")
