"""What a job needs besides its task: Redis, the GitHub App, and the operator's settings.

Built once per job process from the environment and reused by every call in
it. Without APP_ID and a private key the worker still runs, and every task
that needs GitHub ends `failed` with that reason, rather than being silently
dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import redis

from baton import redis_client, settings
from baton.errors import ConfigError
from worker.github.client import AppCredentials, GitHubApp
from worker.receipts import Signer
from worker.runner import box, gateway
from worker.runner.gateway import prices, providers


@dataclass(frozen=True)
class Context:
    redis: redis.Redis
    github: GitHubApp | None
    app_id: int | None
    #: BATON_REQUIRE_ORG_POLICY: refuse where the owner's `.github` is not visible.
    require_org_policy: bool = False
    #: Can this machine cut an agent's network (the box's probe)? The gate's ``network_cutoff`` fact.
    network_cutoff: bool = False
    #: BATON_DATA_DIR: repository mirrors live under it.
    data_dir: Path = field(default_factory=lambda: settings.Settings().data_dir)
    #: BATON_AGENT_ROUTES, for every run's egress proxy.
    agent_routes: tuple[tuple[str, str, int], ...] = ()
    #: BATON_MODEL_UPSTREAMS and BATON_MODEL_PRICES, for every run's model gateway.
    model_upstreams: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    prices: gateway.PriceTable = gateway.BUILTIN
    #: BATON_SIGNING_KEY, BATON_AUDIT_SECRET, BATON_PUBLIC_URL: every check run's receipt and the
    #: audit chain (None only where nothing is ever published: `baton worker` refuses to start so).
    signer: Signer | None = None
    #: BATON_REDELIVERY_INTERVAL (0: off) and BATON_REDELIVER_4XX (``worker.redeliver``).
    redelivery_interval_s: float = 300.0
    redeliver_4xx: bool = False
    #: Does this machine's box filter the agent's system calls (the probe)? The gate's ``seccomp`` fact.
    seccomp: bool = False
    #: BATON_REDIS_REPLICAS: the replicas that must hold a publication or a log entry before it leaves.
    replication: redis_client.Replication = redis_client.NO_REPLICAS

    def need_github(self) -> GitHubApp:
        if self.github is None:
            raise ConfigError(
                "no-app-credentials",
                "the worker has no APP_ID and PRIVATE_KEY (or PRIVATE_KEY_PATH), so it cannot talk to GitHub",
            )
        return self.github


_redis_url: str | None = None
#: How long a worker waits for one Redis reply before it counts the connection as lost.
WORKER_REDIS_TIMEOUT_S = 10.0


def configure(redis_url: str | None) -> None:
    """Called by `baton worker` before it starts taking jobs (None: forget it again)."""
    global _redis_url  # noqa: PLW0603 - one value per process, set once at start-up
    _redis_url = redis_url


def configured_url() -> str | None:
    return _redis_url


def current() -> Context:
    """The context for jobs in this process (each forked job builds its own connections)."""
    if _redis_url is None:
        raise ConfigError(
            "worker-not-configured", "run jobs through `baton worker`, which knows the Redis URL"
        )
    return build(_redis_url)


@functools.cache
def build(redis_url: str) -> Context:
    return fresh(redis_url)


def fresh(redis_url: str) -> Context:
    """A context of its own (never shared): the worker's main process uses one, so the job
    processes it forks never inherit its connections through ``build``'s cache."""
    config = settings.load()
    # Every wait bounded (a frozen Redis costs a command WORKER_REDIS_TIMEOUT_S, then it is retried),
    # and a failover followed for as long as the operator allows.
    connection = redis_client.connect(
        redis_url, timeout=WORKER_REDIS_TIMEOUT_S, failover_wait=config.redis_failover_wait
    )
    app = None
    if config.app_id and config.private_key:
        credentials = AppCredentials(config.app_id, config.private_key, config.github_api_url)
        app = GitHubApp(credentials, connection)
    signer = None
    if config.signing_key is not None and config.audit_secret is not None:
        signer = Signer(config.signing_key, config.audit_secret, config.public_url)
    return Context(connection, app, int(config.app_id) if config.app_id else None, config.require_org_policy,
                   box.probe().network_cutoff, config.data_dir, config.agent_routes,
                   model_upstreams(config), model_prices(config), signer, config.redelivery_interval_s,
                   config.redeliver_4xx, seccomp=box.probe().seccomp,
                   replication=replication(config))  # fmt: skip


def replication(config: settings.Settings) -> redis_client.Replication:
    """BATON_REDIS_REPLICAS, each confirmation waited for up to BATON_REDIS_TIMEOUT."""
    return redis_client.Replication(config.redis_replicas, config.redis_timeout)


def model_upstreams(config: settings.Settings) -> Mapping[str, str]:
    """BATON_MODEL_UPSTREAMS, each provider checked against the ones the gateway serves."""
    for name, _ in config.model_upstreams:
        try:
            providers.served(name)
        except ValueError as exc:
            raise ConfigError("bad-setting", f"BATON_MODEL_UPSTREAMS: {exc}") from None
    return MappingProxyType(dict(config.model_upstreams))


def model_prices(config: settings.Settings) -> gateway.PriceTable:
    """BATON_MODEL_PRICES's table (ConfigError naming the file and the field), or the built-in one."""
    return prices.load(config.model_prices_path) if config.model_prices_path else gateway.BUILTIN
