"""Configuration from the environment, with the names Probot made familiar.

Everything Baton reads from the environment is declared in ``KNOWN``; a
``BATON_*`` variable that is not declared is a typo and stops start-up, because
a silently ignored setting is worse than a refused start.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from baton import redis_client
from baton.errors import ConfigError
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, SigningKey, read_keys

DEFAULT_GITHUB_API_URL = "https://api.github.com"
#: GitHub caps webhook payloads at 25 MB; larger bodies cannot be real deliveries.
DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024
_Getter = Callable[[str], "str | None"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: RFC 6750's token characters; long enough that guessing is not an option.
METRICS_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
#: A GitHub App's slug: what `github.com/apps/<slug>` and an `@<slug>` mention spell.
APP_SLUG = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,48}[A-Za-z0-9])?")
#: An HMAC key shorter than this is guessable; 32 hex characters are 128 bits.
MIN_AUDIT_SECRET = 32
HOW_TO_SIGN = "run `baton keys generate --out DIR` and set BATON_SIGNING_KEY_PATH=DIR/baton-signing-key.pem"
HOW_TO_AUDIT = "set BATON_AUDIT_SECRET to 32+ random characters (e.g. the output of `openssl rand -hex 32`)"

KNOWN: dict[str, str] = {
    "APP_ID": "the GitHub App's id (a number)",
    "BATON_APP_SLUG": "the App's slug, as people mention it (`@slug fix this`); the setup page writes it",
    "PRIVATE_KEY": "the App's PEM private key (or use PRIVATE_KEY_PATH)",
    "PRIVATE_KEY_PATH": "path to the App's PEM private key",
    "WEBHOOK_SECRET": "webhook secret; several, comma-separated, while rotating",
    "REDIS_URL": "redis://, rediss://, unix:// or redis+sentinel:// URL; unset starts an embedded server",
    "GITHUB_API_URL": "REST API root (GitHub Enterprise Server: https://HOST/api/v3)",
    "LOG_LEVEL": "one of " + ", ".join(LOG_LEVELS),
    "HOST": "address `baton serve` binds (default 127.0.0.1)",
    "PORT": "port `baton serve` binds (default 3000)",
    "BATON_MAX_BODY_BYTES": "largest webhook body accepted, in bytes (default 25 MiB)",
    "BATON_REDIS_TIMEOUT": "seconds to wait for Redis before answering 503 (default 2)",
    "BATON_REDIS_REPLICAS": "replicas that must hold a delivery, publication or log entry first (default 0)",
    "BATON_REDIS_FAILOVER_WAIT": "seconds workers and commands wait for a new Redis primary (default 60)",
    "BATON_AGENT_WORKERS": "agent-run worker processes started by `baton worker` (default 1)",
    "BATON_METRICS_PORT": "serve /metrics on HOST at this port only, not on PORT (default: on PORT)",
    "BATON_METRICS_TOKEN": "require `Authorization: Bearer <token>` for /metrics (16+ characters)",
    "BATON_REQUIRE_ORG_POLICY": "true: refuse where the owner's .github repo is not visible (default false)",
    "BATON_REDELIVERY_INTERVAL": "seconds between passes redelivering failed webhooks (default 300; 0: off)",
    "BATON_REDELIVER_4XX": "true: also redeliver deliveries Baton answered 4xx (default false)",
    "BATON_DATA_DIR": "where the worker keeps repository mirrors (default ~/.local/share/baton)",
    "BATON_AGENT_ROUTES": "HOST=IP:PORT,...: the egress proxy sends agents' traffic for HOST there",
    "BATON_MODEL_UPSTREAMS": "PROVIDER=URL,...: the model gateway calls PROVIDER there instead of its vendor",
    "BATON_MODEL_PRICES": "a JSON file of model prices (US dollars per million tokens) for metering",
    "BATON_SIGNING_KEY": "PEM private key that signs receipts and checkpoints (or BATON_SIGNING_KEY_PATH)",
    "BATON_SIGNING_KEY_PATH": "path to that key; make one with `baton keys generate --out DIR`",
    "BATON_VERIFY_KEYS_PATH": "retired public keys still published for verification (PEM or a keys document)",
    "BATON_AUDIT_SECRET": "the audit chain's master secret (32+ characters, e.g. `openssl rand -hex 32`)",
    "BATON_PUBLIC_URL": "http(s) URL where this `baton serve` is reachable; check runs link receipts there",
}


#: Settings Baton no longer reads, with what replaced them: set, they stop start-up with the fix.
RETIRED: dict[str, str] = {
    "BATON_AGENT_MODEL_URL": (
        "BATON_AGENT_MODEL_URL is retired: agent CLIs now reach their model only through Baton's model "
        "gateway; remove it, and to send a provider's calls to a gateway of your own set "
        "BATON_MODEL_UPSTREAMS (e.g. anthropic=https://llm.example.com/anthropic)"
    ),
}
#: A provider's name as BATON_MODEL_UPSTREAMS spells it (which names exist, the worker checks).
_PROVIDER = re.compile(r"[a-z][a-z0-9-]{0,31}")


def redact_url(url: str) -> str:
    """``url`` with its passwords (in the authority, a ``password=`` or ``sentinel_password=`` query)
    shown as ``***``. A Sentinel URL's authority lists several hosts, which ``urlsplit`` cannot
    parse, so the userinfo is cut off by hand."""
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    elif at and userinfo:  # "secret@host": a bare password
        netloc = f"***@{hostport}"
    query = re.sub(r"(?i)(^|&)((?:sentinel_)?password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(netloc=netloc, query=query).geturl()


@dataclass(frozen=True, repr=False)
class Settings:
    app_id: str | None = None
    #: How people call the App by name (``@slug``); None: mentions are not answered (doctor says so).
    app_slug: str | None = None
    private_key: str | None = field(default=None, repr=False)
    webhook_secrets: tuple[bytes, ...] = field(default=(), repr=False)
    redis_url: str | None = None  # may hold a password: shown redacted
    github_api_url: str = DEFAULT_GITHUB_API_URL
    log_level: str = "INFO"
    host: str = "127.0.0.1"
    port: int = 3000
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    redis_timeout: float = 2.0
    #: Replicas that must confirm a write before Baton acknowledges it (a delivery's 2xx, a
    #: publication on GitHub, a transparency-log entry); 0: the primary's word is enough.
    redis_replicas: int = 0
    #: How long workers and commands ride out a lost primary (a failover) before they exit.
    redis_failover_wait: float = 60.0
    agent_workers: int = 1
    metrics_port: int | None = None  # /metrics on its own port (and not on ``port``)
    metrics_token: str | None = field(default=None, repr=False)
    #: Refuse, rather than fall back to the built-in ceiling, where the owner's `.github` is not visible.
    require_org_policy: bool = False
    #: How often idle workers look for failed deliveries to redeliver (``worker.redeliver``); 0: never.
    redelivery_interval_s: float = 300.0
    redeliver_4xx: bool = False
    data_dir: Path = field(default_factory=lambda: Path.home() / ".local" / "share" / "baton")
    #: Host -> (ip, port) for agents' egress proxy, instead of DNS.
    agent_routes: tuple[tuple[str, str, int], ...] = ()
    #: Provider -> API root the model gateway calls instead of the vendor's.
    model_upstreams: tuple[tuple[str, str], ...] = ()
    #: The operator's price table for metering (None: the built-in one).
    model_prices_path: Path | None = None
    #: Signs every receipt and checkpoint; None only in setup mode (`baton serve` refuses otherwise).
    signing_key: SigningKey | None = field(default=None, repr=False)
    #: Keys that signed older receipts: still published, so those receipts keep verifying.
    retired_keys: tuple[PublicKey, ...] = ()
    audit_secret: bytes | None = field(default=None, repr=False)
    public_url: str | None = None  # no trailing slash

    @property
    def setup_mode(self) -> bool:
        """No App credentials yet (APP_ID or its private key missing): `GET /` offers the manifest
        flow that makes them. Whether webhooks are accepted is a separate question: only with a
        webhook secret (``webhook_secrets``), which that same flow creates."""
        return self.app_id is None or self.private_key is None

    @property
    def public_keys(self) -> tuple[PublicKey, ...]:
        """What /.well-known/baton/keys publishes: the current key first, then the retired ones."""
        current = (self.signing_key.public,) if self.signing_key is not None else ()
        return tuple(dict.fromkeys((*current, *self.retired_keys)))

    def missing_evidence(self) -> str | None:
        """Why this Baton cannot sign its evidence, with the fix; None when it can."""
        missing = []
        if self.signing_key is None:
            missing.append(f"no signing key: {HOW_TO_SIGN} (or put the PEM in BATON_SIGNING_KEY)")
        if self.audit_secret is None:
            missing.append(f"no audit secret: {HOW_TO_AUDIT}")
        if not missing:
            return None
        return "Baton never publishes unsigned evidence: " + "; ".join(missing)

    def __repr__(self) -> str:
        """Secrets are left out, and the Redis URL's password is shown as ``***``."""
        shown = []
        for f in fields(self):
            if f.repr:
                value = getattr(self, f.name)
                if f.name == "redis_url" and value is not None:
                    value = redact_url(value)
                shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings; raise ConfigError naming the variable and the fix."""
    env = os.environ if environ is None else environ
    _check_names(env)

    def get(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    app_id = get("APP_ID")
    if app_id is not None and not app_id.isdigit():
        raise ConfigError("bad-setting", f"APP_ID must be the App's numeric id, got {app_id!r}")

    private_key = get("PRIVATE_KEY")
    key_path = get("PRIVATE_KEY_PATH")
    if private_key and key_path:
        raise ConfigError("bad-setting", "set PRIVATE_KEY or PRIVATE_KEY_PATH, not both")
    if key_path:
        try:
            private_key = Path(key_path).read_text()
        except OSError as exc:
            raise ConfigError(
                "bad-setting", f"PRIVATE_KEY_PATH={key_path}: cannot read it ({exc.strerror})"
            ) from exc
    if private_key is not None:
        # Probot accepts keys with literal "\n" (as some hosts store them); so do we.
        private_key = private_key.replace("\\n", "\n")
        if "-----BEGIN" not in private_key:
            raise ConfigError("bad-setting", "PRIVATE_KEY is not a PEM key (no -----BEGIN line)")

    secrets = tuple(s.strip().encode() for s in (get("WEBHOOK_SECRET") or "").split(",") if s.strip())

    redis_url = get("REDIS_URL")
    if redis_url is not None:
        try:
            redis_client.check_url(redis_url)
        except ValueError as exc:
            raise ConfigError("bad-setting", str(exc)) from None

    api_url = (get("GITHUB_API_URL") or DEFAULT_GITHUB_API_URL).rstrip("/")
    if not api_url.startswith(("https://", "http://")):
        raise ConfigError("bad-setting", f"GITHUB_API_URL must be an http(s) URL, got {api_url!r}")

    level = (get("LOG_LEVEL") or "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConfigError("bad-setting", f"LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {level!r}")

    port = _int(get, "PORT", 3000, 0, 65535)
    metrics_port = _int(get, "BATON_METRICS_PORT", 0, 1, 65535) or None
    if metrics_port is not None and metrics_port == port:
        raise ConfigError(
            "bad-setting",
            f"BATON_METRICS_PORT must differ from PORT ({port}): /metrics moves off the main port",
        )
    metrics_token = get("BATON_METRICS_TOKEN")
    if metrics_token is not None and not METRICS_TOKEN.fullmatch(metrics_token):
        raise ConfigError(
            "bad-setting",
            "BATON_METRICS_TOKEN must be 16 to 512 letters, digits or -._~+/= "
            "(for example the output of `openssl rand -hex 32`)",
        )

    return Settings(
        app_id=app_id,
        app_slug=_app_slug(get("BATON_APP_SLUG")),
        private_key=private_key,
        webhook_secrets=secrets,
        redis_url=redis_url,
        github_api_url=api_url,
        log_level=level,
        host=get("HOST") or "127.0.0.1",
        port=port,
        max_body_bytes=_int(get, "BATON_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1, 1 << 31),
        redis_timeout=_float(get, "BATON_REDIS_TIMEOUT", 2.0, 0.05, 30.0),
        redis_replicas=_int(get, "BATON_REDIS_REPLICAS", 0, 0, 16),
        redis_failover_wait=_float(get, "BATON_REDIS_FAILOVER_WAIT", 60.0, 0.0, 3600.0),
        agent_workers=_int(get, "BATON_AGENT_WORKERS", 1, 0, 64),
        metrics_port=metrics_port,
        metrics_token=metrics_token,
        require_org_policy=_bool(get, "BATON_REQUIRE_ORG_POLICY", default=False),
        redelivery_interval_s=_float(get, "BATON_REDELIVERY_INTERVAL", 300.0, 0.0, 86400.0),
        redeliver_4xx=_bool(get, "BATON_REDELIVER_4XX", default=False),
        data_dir=_data_dir(get("BATON_DATA_DIR")),
        agent_routes=_routes(get("BATON_AGENT_ROUTES")),
        model_upstreams=_upstreams(get("BATON_MODEL_UPSTREAMS")),
        model_prices_path=_prices_path(get("BATON_MODEL_PRICES")),
        signing_key=_signing_key(get("BATON_SIGNING_KEY"), get("BATON_SIGNING_KEY_PATH")),
        retired_keys=_retired_keys(get("BATON_VERIFY_KEYS_PATH")),
        audit_secret=_audit_secret(get("BATON_AUDIT_SECRET")),
        public_url=_public_url(get("BATON_PUBLIC_URL")),
    )


def _check_names(env: Mapping[str, str]) -> None:
    """A retired setting, or a ``BATON_*`` Baton does not know (a typo), stops start-up."""
    retired = sorted(k for k in env if k in RETIRED)
    if retired:
        raise ConfigError("retired-setting", RETIRED[retired[0]])
    unknown = sorted(k for k in env if k.startswith("BATON_") and k not in KNOWN)
    if unknown:
        raise ConfigError(
            "unknown-setting",
            f"unknown setting {unknown[0]}; Baton knows "
            + ", ".join(k for k in KNOWN if k.startswith("BATON_")),
        )


def _app_slug(raw: str | None) -> str | None:
    if raw is not None and not APP_SLUG.fullmatch(raw):
        raise ConfigError(
            "bad-setting",
            f"BATON_APP_SLUG must be the App's slug as its page shows it (letters, digits, -), got {raw!r}",
        )
    return raw.lower() if raw else None


def _data_dir(raw: str | None) -> Path:
    if raw is None:
        return Settings().data_dir
    path = Path(raw)
    if not path.is_absolute():
        raise ConfigError("bad-setting", f"BATON_DATA_DIR must be an absolute path, got {raw!r}")
    return path


def parse_route(text: str) -> tuple[str, str, int]:
    """``HOST=IP:PORT`` (as `baton run --route` takes it) -> (host, ip, port); ValueError says the form."""
    host, _, where = text.strip().partition("=")
    ip, _, port = where.rpartition(":")
    if not host or not ip or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: expected HOST=IP:PORT, e.g. api.anthropic.com=127.0.0.1:8788")
    return host.lower(), ip.strip("[]"), int(port)


def _routes(raw: str | None) -> tuple[tuple[str, str, int], ...]:
    try:
        return tuple(parse_route(part) for part in (raw or "").split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError("bad-setting", f"BATON_AGENT_ROUTES: {exc}") from None


def is_loopback(host: str) -> bool:
    """Is ``host`` (a URL's hostname) this machine: ``localhost`` or a loopback address?"""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_url(url: str) -> bool:
    """An http(s) URL with a host, and no credentials, query, fragment, space or bad port."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        return False
    return bool(
        parts.scheme in ("http", "https")
        and parts.hostname
        and "@" not in parts.netloc
        and not parts.query
        and not parts.fragment
        and not any(c.isspace() for c in url)
    )


def parse_upstream(text: str) -> tuple[str, str]:
    """``PROVIDER=URL`` (as `baton run --upstream` takes it) -> (provider, url without a trailing slash)."""
    provider, _, url = text.strip().partition("=")
    if not _PROVIDER.fullmatch(provider) or not plain_http_url(url):
        raise ValueError(
            f"{text!r}: expected PROVIDER=URL with an http(s) URL and no credentials, query or fragment, "
            "e.g. anthropic=https://llm.example.com/anthropic"
        )
    return provider, url.rstrip("/")


def _upstreams(raw: str | None) -> tuple[tuple[str, str], ...]:
    try:
        found = [parse_upstream(part) for part in (raw or "").split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError("bad-setting", f"BATON_MODEL_UPSTREAMS: {exc}") from None
    names = [name for name, _ in found]
    if len(set(names)) != len(names):
        raise ConfigError("bad-setting", "BATON_MODEL_UPSTREAMS names a provider twice; give each one URL")
    return tuple(found)


def _prices_path(raw: str | None) -> Path | None:
    if raw is None:
        return None
    path = Path(raw)
    if not path.is_absolute():
        raise ConfigError(
            "bad-setting", f"BATON_MODEL_PRICES must be an absolute path to a JSON file, got {raw!r}"
        )
    return path


def _signing_key(literal: str | None, path: str | None) -> SigningKey | None:
    if literal and path:
        raise ConfigError("bad-setting", "set BATON_SIGNING_KEY or BATON_SIGNING_KEY_PATH, not both")
    if path is not None:
        source = f"BATON_SIGNING_KEY_PATH={path}"
        text = _read(path, source, f"check the path, or {HOW_TO_SIGN}")
    elif literal is not None:
        # Accept literal "\n" line breaks, as PRIVATE_KEY does (some hosts store PEMs that way).
        source, text = "BATON_SIGNING_KEY", literal.replace("\\n", "\n")
    else:
        return None
    if "-----BEGIN" not in text:
        raise ConfigError(
            "bad-setting", f"{source} is not a PEM private key (no -----BEGIN line); {HOW_TO_SIGN}"
        )
    try:
        return SigningKey.from_pem(text, source)
    except EvidenceError as exc:
        raise ConfigError("bad-setting", f"{_one_line(exc.message)}; {HOW_TO_SIGN}") from None


def _retired_keys(path: str | None) -> tuple[PublicKey, ...]:
    if path is None:
        return ()
    source = f"BATON_VERIFY_KEYS_PATH={path}"
    text = _read(path, source, "point it at the retired keys' PEM file or keys document")
    try:
        return tuple(read_keys(text, source).values())
    except EvidenceError as exc:
        raise ConfigError(
            "bad-setting", f"{_one_line(exc.message)} (it holds PEM public keys or a keys document)"
        ) from None


def _read(path: str, source: str, fix: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError("bad-setting", f"{source}: cannot read it ({why}); {fix}") from None


def _one_line(text: str) -> str:
    """Library messages (cryptography's included) as one line: start-up errors are printed as one."""
    return " ".join(text.split())


def _audit_secret(raw: str | None) -> bytes | None:
    if raw is not None and len(raw) < MIN_AUDIT_SECRET:
        raise ConfigError(
            "bad-setting",
            f"BATON_AUDIT_SECRET is {len(raw)} characters, it must be at least {MIN_AUDIT_SECRET}: "
            "use the output of `openssl rand -hex 32`",
        )
    return None if raw is None else raw.encode("utf-8")


def _public_url(raw: str | None) -> str | None:
    if raw is None:
        return None
    url = raw.rstrip("/")
    if not plain_http_url(url):
        raise ConfigError(
            "bad-setting",
            "BATON_PUBLIC_URL must be the http(s) URL where `baton serve` is reachable, without "
            f"credentials, query or fragment (e.g. https://baton.example.com), got {redact_url(raw)!r}",
        )
    return url


def _int(get: _Getter, name: str, default: int, lo: int, hi: int) -> int:
    raw = get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError("bad-setting", f"{name} must be a whole number, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ConfigError("bad-setting", f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _bool(get: _Getter, name: str, *, default: bool) -> bool:
    raw = get(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ConfigError("bad-setting", f"{name} must be true or false, got {raw!r}")


def _float(get: _Getter, name: str, default: float, lo: float, hi: float) -> float:
    raw = get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError("bad-setting", f"{name} must be a number of seconds, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ConfigError("bad-setting", f"{name} must be between {lo} and {hi}, got {value}")
    return value


def bearer_matches(header: str | None, token: str) -> bool:
    """True if ``header`` is ``Bearer <token>`` (the scheme in any case), compared in constant time."""
    scheme, _, given = (header or "").partition(" ")
    ok = hmac.compare_digest(given.strip().encode(), token.encode())
    return scheme.lower() == "bearer" and ok
