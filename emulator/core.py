"""The emulator's world and the per-request view handlers work with.

:class:`Emulator` ties state, git repositories, faults, rate limits and the
request log together; :class:`ApiRequest` is what one API handler sees (the
caller, the parsed body, the base URL) plus the webhooks to send once the
response is out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from starlette.requests import Request

from emulator import webhooks
from emulator.auth import Caller, authorize_repo
from emulator.errors import ApiError, not_found
from emulator.faults import Faults
from emulator.gitrepo import GitRepo
from emulator.persist import Persister
from emulator.ratelimit import RateLimiter
from emulator.requestlog import RequestLog
from emulator.state import App, Delivery, Issue, Repo, State
from emulator.types import JSONObject

MAX_PER_PAGE = 100


class Emulator:
    """Everything one emulator instance owns, rooted at ``directory``."""

    def __init__(self, directory: Path, *, token_ttl_seconds: float | None = None) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state = State.load(directory)
        if token_ttl_seconds is not None:
            self.state.settings.token_ttl_seconds = token_ttl_seconds
        self.persister = Persister(self.state)
        self.faults = Faults()
        self.rate = RateLimiter()
        self.requests = RequestLog(directory)
        self._send_locks: dict[int, asyncio.Lock] = {}
        self._hook_clients: dict[int, httpx.AsyncClient] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def git(self, repo: Repo) -> GitRepo:
        return GitRepo(self.directory / "repos" / repo.owner / f"{repo.name}.git")

    def changed(self) -> None:
        """The state may have changed: ``state.json`` is rewritten shortly (see :mod:`emulator.persist`)."""
        self.persister.changed()

    def flush(self) -> None:
        """Write ``state.json`` now if anything is unsaved (stop, exit, ``POST /_emulator/flush``)."""
        self.persister.flush()

    def hook_client(self) -> httpx.AsyncClient:
        """This event loop's webhook client, made on first use and kept: one pool, one SSL context."""
        key = id(asyncio.get_running_loop())
        client = self._hook_clients.get(key)
        if client is None or client.is_closed:
            client = self._hook_clients[key] = webhooks.new_client()
        return client

    async def deliver(self, deliveries: list[Delivery]) -> None:
        """Send deliveries one batch at a time, in the order their changes happened.

        GitHub promises no order; a steady one makes tests and the demo
        deterministic. Batches queue on a FIFO lock (one per event loop).
        """
        loop = asyncio.get_running_loop()
        lock = self._send_locks.setdefault(id(loop), asyncio.Lock())
        async with lock:
            client = self.hook_client()
            for delivery in deliveries:
                await webhooks.send(client, self.state, delivery)
                self.changed()

    async def schedule(self, deliveries: list[Delivery]) -> None:
        """Start delivering in the background and return at once.

        Run after the API response, detached from the request, so a slow
        receiver never holds up the caller's next request on the same connection.
        """
        task = asyncio.get_running_loop().create_task(self.deliver(deliveries))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Shut down on this loop: drop unsent deliveries, close the webhook client, write the state.

        Deliveries still queued are cancelled, as they were when the loop simply
        ended; only then is the client they would use closed.
        """
        loop = asyncio.get_running_loop()
        unsent = [task for task in self._tasks if task.get_loop() is loop]
        for task in unsent:
            task.cancel()
        await asyncio.gather(*unsent, return_exceptions=True)
        client = self._hook_clients.pop(id(loop), None)
        if client is not None:
            await client.aclose()
        self.persister.close()


@dataclass
class ApiRequest:
    """One API call as a handler sees it."""

    emu: Emulator
    request: Request
    caller: Caller
    body: Any
    base: str
    pending: list[Delivery] = field(default_factory=list)

    @property
    def state(self) -> State:
        return self.emu.state

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    def int_param(self, name: str) -> int:
        value = self.param(name)
        if not value.isdigit():
            raise not_found()
        return int(value)

    def query(self, name: str) -> str | None:
        return self.request.query_params.get(name)

    def json_object(self) -> JSONObject:
        """The body as a JSON object; GitHub answers 400 for anything else."""
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise ApiError(400, "Problems parsing JSON")
        return self.body

    def repo(self, permission: str = "metadata", level: str = "read") -> Repo:
        """The path's repository, if the caller may ``permission:level`` on it."""
        repo = self.state.repo(self.param("owner"), self.param("repo"))
        if repo is None:
            raise not_found()
        authorize_repo(self.caller, repo, permission, level)
        return repo

    def acting_login(self) -> str:
        """Whose name goes on things this caller creates (the App's bot for tokens)."""
        app = self.caller.app
        if app is not None:
            return webhooks.sender_for(self.state, None, app).login
        return "ghost"

    def acting_app_id(self) -> int | None:
        return self.caller.app.id if self.caller.kind == "installation" and self.caller.app else None

    def issue(self, repo: Repo, number: int) -> Issue:
        found = self.state.issue(repo.full_name, number)
        if found is None:
            raise not_found()
        return found

    def emit(
        self,
        repo: Repo,
        event: str,
        body: JSONObject,
        *,
        sender: str | None = None,
        only_app: App | None = None,
    ) -> None:
        """Queue ``event`` for every subscribed App (or just ``only_app``), sent after the response."""
        emit(
            self.emu,
            self.base,
            repo,
            event,
            body,
            pending=self.pending,
            sender=sender,
            acting=self.caller.app,
            only_app=only_app,
        )


def emit(
    emu: Emulator,
    base: str,
    repo: Repo,
    event: str,
    body: JSONObject,
    *,
    pending: list[Delivery],
    sender: str | None = None,
    acting: App | None = None,
    only_app: App | None = None,
) -> None:
    """Record one delivery per receiving App into ``pending``; the caller sends them.

    ``only_app`` narrows the receivers to one App (events GitHub sends only to
    the App that owns a check run or suite); it still has to be installed on
    the repository, not suspended, and subscribed to ``event``.
    """
    state = emu.state
    receivers = webhooks.subscribers(state, repo, event)
    if only_app is not None:
        receivers = [app for app in receivers if app.id == only_app.id]
    sender_user = webhooks.sender_for(state, sender, acting)
    for app in receivers:
        if not app.webhook_url:
            continue
        payload = dict(body)
        payload.update(webhooks.envelope(base, state, app, repo, sender=sender_user))
        pending.append(webhooks.record(state, app, event, payload))


@dataclass(frozen=True)
class RawBody:
    """Bytes answered as-is (``Accept: application/vnd.github.raw``), not as JSON."""

    data: bytes
    media_type: str = "application/vnd.github.raw"


@dataclass
class Reply:
    """A handler's answer: JSON body, status, extra headers."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[ApiRequest], Awaitable[Reply]]
#: A route module exports these: (HTTP method, path template, handler).
RouteSpec = tuple[str, str, Handler]


def per_page(req: ApiRequest) -> int:
    """``per_page`` as every list here reads it: default 30, clamped to 1..100, not a number: 30."""
    try:
        return min(MAX_PER_PAGE, max(1, int(req.query("per_page") or 30)))
    except ValueError:
        return 30


def paginate(req: ApiRequest, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """``per_page``/``page`` with GitHub's ``Link`` header.

    The links keep the caller's other query parameters (``ref``, ``status``,
    ``filter``...), as GitHub's do, so following ``next`` lists the same thing.
    """
    try:
        per_page = min(MAX_PER_PAGE, max(1, int(req.query("per_page") or 30)))
        page = max(1, int(req.query("page") or 1))
    except ValueError:
        per_page, page = 30, 1
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page : page * per_page]
    url = f"{req.base}{req.request.url.path}"
    kept = [(k, v) for k, v in req.request.query_params.multi_items() if k not in {"page", "per_page"}]

    def link(target: int, rel: str) -> str:
        query = urlencode([*kept, ("per_page", str(per_page)), ("page", str(target))])
        return f'<{url}?{query}>; rel="{rel}"'

    links = []
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    return chunk, ({"link": ", ".join(links)} if links else {})
