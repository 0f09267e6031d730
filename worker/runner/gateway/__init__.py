"""The model gateway: the agent's only way to its model, holding the key the agent never sees.

One gateway per run, outside the box, on a UNIX socket bound into it and reached
from inside at ``http://127.0.0.1:3129/<provider>`` (a forwarder in the box, as for
the egress proxy). The box holds a placeholder, random per run and useless
anywhere else; the gateway accepts a request only when every credential on it is
that placeholder, strips them all and sends the real key from the worker's
environment. It passes on inference only, in shapes that cannot make the provider
fetch, search, execute or connect for the agent, meters every answer, stops the
run at its spend cap, and journals every exchange.

Rooms, in the order a request meets them: ``operations`` (is it inference?),
``headers`` (whose key? which features?), ``shapes_*`` (what is in the body?),
``admit`` (the whole decision, pure), ``spend`` (the cap), ``server`` (the HTTP
side), ``meter`` and ``prices`` (what it cost), ``journal`` (what happened).
``providers`` is the wire table, ``engine`` the process's loop and connection pool.

Typical use, around one run::

    config = gateway.Config(placeholder, gateway.upstreams_for(agent, ...), ...)
    with gateway.ModelGateway(scratch / "model.sock", config) as gw:
        ...  # run the box with gateway.IN_BOX_URL and the placeholder
    record = gw.record()
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from worker.policy import MODEL_KEYS, Agent
from worker.runner.box import GATEWAY_PORT
from worker.runner.gateway import providers
from worker.runner.gateway.engine import engine
from worker.runner.gateway.journal import Journal
from worker.runner.gateway.prices import BUILTIN, Price, PriceTable
from worker.runner.gateway.providers import WIRES, provider_of
from worker.runner.gateway.refusals import Reason
from worker.runner.gateway.server import Config, GatewayServer, Upstream
from worker.runner.gateway.spend import Ledger, Left, SpendCap
from worker.runner.unix_socket import OwnedSocket

__all__ = [
    "BUILTIN",
    "IN_BOX_PORT",
    "IN_BOX_URL",
    "Config",
    "Ledger",
    "Left",
    "ModelGateway",
    "Price",
    "PriceTable",
    "Reason",
    "SpendCap",
    "Upstream",
    "placeholder",
    "upstreams_for",
    "worker_keys",
]

#: Where the box reaches the gateway: a forwarder on the box's loopback to the gateway's socket.
IN_BOX_PORT = GATEWAY_PORT
IN_BOX_URL = f"http://127.0.0.1:{IN_BOX_PORT}"
#: How long ``stop`` waits for requests in flight.
STOP_TIMEOUT = 10.0


def placeholder() -> str:
    """A run's placeholder credential: random, and worth nothing anywhere but its own gateway."""
    return "baton-placeholder-" + secrets.token_urlsafe(24)


def worker_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The model keys in the worker's environment (``MODEL_KEYS``): the gateway's, never the box's."""
    return {name: environ[name] for name in MODEL_KEYS if environ.get(name)}


def upstreams_for(
    agent: Agent, *, environ: Mapping[str, str], base_urls: Mapping[str, str] | None = None
) -> dict[str, Upstream]:
    """The providers the agent's ``model_endpoints`` grant, each with its API root and the worker's key.

    The key is read from the first name in the agent's ``env`` that is this provider's key
    (``ANTHROPIC_API_KEY`` for api.anthropic.com), else the provider's usual name.
    ``base_urls``: provider -> API root, where the operator points one at a gateway of their
    own (``BATON_MODEL_UPSTREAMS``), or the tests and the demo at the model stand-in.
    """
    found: dict[str, Upstream] = {}
    for host in agent.model_endpoints:
        name = provider_of(host)
        if name is None:
            continue  # a policy that loaded names only known providers (worker.policy.load)
        envs = providers.key_envs(name)
        key_env = next((e for e in agent.env if e in envs), envs[0])
        wire = WIRES[name]
        found[name] = Upstream(
            wire, (base_urls or {}).get(name, wire.base_url), environ.get(key_env) or None, key_env
        )
    return found


class ModelGateway:
    """One run's gateway: ``start`` binds its socket (and, with ``tcp``, a loopback port for a box that
    shares the host's network), ``stop`` ends it; ``journal`` and ``over_budget`` say what happened."""

    def __init__(self, socket_path: str | os.PathLike[str], config: Config, *, tcp: bool = False) -> None:
        self._path = Path(socket_path)
        self._tcp = tcp
        self._engine = engine()
        self.journal = Journal()
        self._server = GatewayServer(config, self._engine, self.journal)
        self._owned = OwnedSocket(self._path)
        self._started = False
        self.tcp_port: int | None = None

    @property
    def socket_path(self) -> Path:
        return self._path

    @property
    def over_budget(self) -> str | None:
        """Why a call was refused for the spend cap, if one was."""
        return self._server.over_budget

    def start(self) -> Self:
        if self._started:
            raise RuntimeError("a ModelGateway serves one run: make a new one")
        self._started = True
        unix = self._owned.bind()
        tcp: socket.socket | None = None
        try:
            if self._tcp:
                tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                tcp.bind(("127.0.0.1", 0))
                tcp.listen(128)
                tcp.setblocking(False)
                self.tcp_port = int(tcp.getsockname()[1])
            self._engine.call(self._server.serve(unix=unix, tcp=tcp), timeout=STOP_TIMEOUT)
        except BaseException:
            unix.close()
            if tcp is not None:
                tcp.close()
            self._owned.unlink()
            raise
        return self

    def stop(self) -> None:
        """End every connection and remove the socket; safe to call twice."""
        if not self._started:
            return
        with contextlib.suppress(Exception):
            self._engine.call(self._server.close(), timeout=STOP_TIMEOUT)
        self._owned.unlink()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def record(self) -> dict[str, Any]:
        """What goes in the run record: totals, the journal and its digest, the violations."""
        return {
            "totals": self.journal.totals(),
            "journal": self.journal.to_data(),
            "journal_sha256": self.journal.digest(),
            "violations": self.journal.violations(),
            "over_budget": self.over_budget,
        }
