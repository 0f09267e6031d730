"""`GET /` once Baton has its App credentials: a small, read-only status page.

What it shows and where it comes from:

- the App's name and its installations: GitHub, with the App's JWT (``GET /app``,
  ``GET /app/installations``), time-bounded and cached for ``GITHUB_CACHE_S``; when GitHub does not
  answer, the page says so instead of failing;
- queue depths, the RQ workers registered in Redis, and the last ``RECENT`` tasks (their state, Baton's
  short reason, links to the issue or pull request, the pull request a run opened and the check runs):
  Redis, in two bounded round trips;
- the box probe each worker host recorded when it started (``records.BOX_PROBES_KEY``).

Nothing secret is ever read for it: not a token, not a payload (a task's issue text is in its job but
only the repository, number and kind are taken from there). Everything shown is escaped.

Without ``BATON_METRICS_TOKEN`` the page is anyone's, so a private repository's task shows only that
it is one, its state and the code of Baton's reason: not the repository's name, its issue, pull
request or check runs, nor the reason's words (they may name tools, people or policy). A task whose
repository is not known to be public counts as private.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from rq.job import Job
from rq.queue import Queue
from rq.worker import Worker
from starlette.requests import Request
from starlette.responses import Response

from baton import queues, records
from baton.github_web import check_run_url, issue_url, web_base
from baton.settings import Settings
from bot.html_page import esc, page

#: How many tasks the page lists, newest first.
RECENT = 20
#: Registered workers checked for liveness at most (a count past it is a floor).
MAX_WORKERS = 256
GITHUB_TIMEOUT_S = 5.0
#: GitHub's answer (or its silence) is reused this long: a reload storm costs GitHub nothing.
GITHUB_CACHE_S = 30.0
#: Every state a task can be in: each has a registry (``records.REGISTRY_PREFIX`` + state) scored by
#: when the task got there. The worker owns the list (``worker.lifecycle.State``; a test keeps the two
#: equal); the web side may not import it.
TASK_STATES = ("queued", "running", "refused", "denied", "pr_opened", "done", "failed",
               "timed-out", "cancelled")  # fmt: skip
#: States whose detail may hold exception text: only its error code is shown.
_FAILED = frozenset({"failed", "timed-out"})
_PULL_KINDS = frozenset({"merge_gate", "merge_gate_rerun", "check_action"})
_FIELDS = ("state", "detail", "updated_at", "kind", "pull_request", "check_run_ids", "publication")

log = logging.getLogger("baton.status")


@dataclass(frozen=True)
class AppInfo:
    """What GitHub says about the App; ``error`` set when it did not say it."""

    name: str | None = None
    html_url: str | None = None
    installations: tuple[tuple[str, int, str], ...] = ()  # (account, id, repository selection)
    more_installations: bool = False
    error: str | None = None


@dataclass
class TaskRow:
    task_id: str
    state: str
    decision: str
    updated_at: str
    kind: str = ""
    full_name: str | None = None
    number: int | None = None
    pull_request: int | None = None
    check_runs: list[int] = field(default_factory=list)
    private: bool = True  # until the task says its repository is public


@dataclass(frozen=True)
class RedisView:
    depths: Mapping[str, int]
    workers: int
    tasks: Sequence[TaskRow]
    #: Each worker host's box probe, newest start first: (host, network cut-off, problems, when).
    probes: Sequence[tuple[str, bool, tuple[str, ...], str]] = ()


class StatusPage:
    def __init__(self, settings: Settings, client: aioredis.Redis | None) -> None:
        self.settings = settings
        self.client = client
        self.web = web_base(settings.github_api_url)
        self.public = settings.metrics_token is None  # anyone may read it: private repositories unnamed
        self._app: tuple[float, AppInfo] | None = None
        self._lock = asyncio.Lock()

    async def __call__(self, _: Request) -> Response:
        app, view = await asyncio.gather(self.app_info(), self.redis_view())
        return page("Baton status", self._render(app, view))

    # -- GitHub -----------------------------------------------------------------------------

    async def app_info(self) -> AppInfo:
        async with self._lock:  # one request to GitHub at a time, whatever the number of viewers
            cached = self._app
            if cached is not None and time.monotonic() - cached[0] < GITHUB_CACHE_S:
                return cached[1]
            try:
                info = await asyncio.wait_for(self._ask_github(), GITHUB_TIMEOUT_S)
            except (httpx.HTTPError, TimeoutError, ValueError, KeyError, TypeError) as exc:
                log.warning("status: GitHub did not answer", extra={"error": type(exc).__name__})
                info = AppInfo(error="GitHub did not answer")
            except jwt.PyJWTError as exc:
                log.warning("status: cannot sign the App JWT", extra={"error": type(exc).__name__})
                info = AppInfo(error="the App's JWT could not be signed: check PRIVATE_KEY")
            self._app = (time.monotonic(), info)
            return info

    async def _ask_github(self) -> AppInfo:
        now = int(time.time())
        token = jwt.encode(
            # iat a minute back for clock drift; iss a string (PyJWT refuses an integer).
            {"iat": now - 60, "exp": now + 540, "iss": str(self.settings.app_id)},
            self.settings.private_key or "",
            algorithm="RS256",
        )
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "baton-status",
        }
        api = self.settings.github_api_url
        async with httpx.AsyncClient(timeout=GITHUB_TIMEOUT_S, headers=headers) as client:
            app, installs = await asyncio.gather(
                client.get(f"{api}/app"), client.get(f"{api}/app/installations", params={"per_page": 100})
            )
        app.raise_for_status()
        installs.raise_for_status()
        about, listed = app.json(), installs.json()
        rows = tuple(
            (
                str((i.get("account") or {}).get("login") or "?"),
                int(i["id"]),
                str(i.get("repository_selection")),
            )
            for i in listed
        )
        html_url = about.get("html_url")
        return AppInfo(
            name=str(about.get("name") or about.get("slug") or "?"),
            html_url=html_url
            if isinstance(html_url, str) and html_url.startswith(("https://", "http://"))
            else None,
            installations=rows,
            more_installations='rel="next"' in installs.headers.get("link", ""),
        )

    # -- Redis ------------------------------------------------------------------------------

    async def redis_view(self) -> RedisView | None:
        if self.client is None:
            return None
        try:
            return await asyncio.wait_for(self._read_redis(self.client), self.settings.redis_timeout)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("status: Redis did not answer", extra={"error": str(exc) or type(exc).__name__})
            return None

    async def _read_redis(self, client: aioredis.Redis) -> RedisView:
        async with client.pipeline(transaction=False) as pipe:
            for spec in queues.ALL:
                pipe.llen(Queue.redis_queue_namespace_prefix + spec.name)
            pipe.smembers(Worker.redis_workers_keys)
            pipe.hgetall(records.BOX_PROBES_KEY)
            for state in TASK_STATES:
                pipe.zrevrange(records.REGISTRY_PREFIX + state, 0, RECENT - 1, withscores=True)
            found = await pipe.execute()
        depths = {spec.name: int(n) for spec, n in zip(queues.ALL, found, strict=False)}
        workers = sorted(records.text(w) for w in found[len(queues.ALL)])[:MAX_WORKERS]
        probes = _probes(found[len(queues.ALL) + 1])
        newest: list[tuple[float, str]] = []
        for ranked in found[len(queues.ALL) + 2 :]:
            newest += [(float(score), records.text(task)) for task, score in ranked]
        ids = [task for _, task in sorted(newest, reverse=True)[:RECENT]]
        async with client.pipeline(transaction=False) as pipe:
            for name in workers:  # a worker that died without deregistering has no key any more
                pipe.exists(name if name.startswith(Worker.redis_worker_namespace_prefix) else
                            Worker.redis_worker_namespace_prefix + name)  # fmt: skip
            for task in ids:
                pipe.hmget(records.TASK_PREFIX + task, list(_FIELDS))
                pipe.hget(Job.redis_job_namespace_prefix + task, "data")
            more = await pipe.execute()
        alive = sum(1 for n in more[: len(workers)] if n)
        rest = more[len(workers) :]
        tasks = [_row(task, rest[2 * i], rest[2 * i + 1]) for i, task in enumerate(ids)]
        return RedisView(depths, alive, tasks, probes)

    # -- the page ---------------------------------------------------------------------------

    def _render(self, app: AppInfo, view: RedisView | None) -> str:
        parts = ["<h1>Baton</h1>", "<h2>GitHub App</h2>"]
        if app.error is not None:
            parts.append(f'<p>App id <code>{esc(self.settings.app_id)}</code>. '
                         f'<span class="refused">{esc(app.error)}</span>; its name and installations '
                         "are unknown for now.</p>")  # fmt: skip
        else:
            name = esc(app.name)
            if app.html_url:
                name = f'<a href="{esc(app.html_url)}">{name}</a>'
            parts.append(f"<p>{name}, App id <code>{esc(self.settings.app_id)}</code>.</p>")
            parts.append(self._installations(app))
        parts.append("<h2>Work</h2>")
        if view is None:
            parts.append(
                '<p class="refused">Redis did not answer: queues, workers and tasks are unknown.</p>'
            )
        else:
            depths = ", ".join(f"<code>{esc(q)}</code> {esc(n)}" for q, n in view.depths.items())
            parts.append(f"<p>Queued jobs: {depths}. Workers registered in Redis: {esc(view.workers)}.</p>")
        parts.append(self._probes(view.probes if view is not None else ()))
        if view is not None:
            parts.append(f"<h2>Last {RECENT} tasks</h2>")
            parts.append(self._tasks(view.tasks))
        return "".join(parts)

    def _probes(self, probes: Sequence[tuple[str, bool, tuple[str, ...], str]]) -> str:
        if not probes:
            return "<p>Box probe: unknown (no worker has started against this Redis yet).</p>"
        rows = []
        for host, cutoff, problems, at in probes:
            verdict = (
                "agents' network cut off" if cutoff else '<span class="refused">no network cut-off</span>'
            )
            said = f" ({esc('; '.join(problems))})" if problems else ""
            rows.append(f"<li><code>{esc(host)}</code>, started {esc(at)}: {verdict}{said}</li>")
        return f"<p>Box probe, per worker host:</p><ul>{''.join(rows)}</ul>"

    def _installations(self, app: AppInfo) -> str:
        if not app.installations:
            where = (
                f' at <a href="{esc(app.html_url)}/installations/new">its page</a>' if app.html_url else ""
            )
            return f"<p>Not installed anywhere yet: install it{where}.</p>"
        items = "".join(
            f"<li><code>{esc(account)}</code> (installation {esc(ident)}, {esc(selection)} repositories)</li>"
            for account, ident, selection in app.installations
        )
        more = "<li>… and more (the first 100 are listed)</li>" if app.more_installations else ""
        return f"<p>Installations: {len(app.installations)}</p><ul>{items}{more}</ul>"

    def _tasks(self, tasks: Sequence[TaskRow]) -> str:
        if not tasks:
            return "<p>No task yet.</p>"
        names = ("updated", "task", "kind", "where", "state", "decision", "links")
        head = "".join(f"<th>{h}</th>" for h in names)
        head = f"<tr>{head}</tr>"
        return f"<table>{head}{''.join(self._task(t) for t in tasks)}</table>"

    def _task(self, t: TaskRow) -> str:
        where, links, said = "", [], t.decision
        if t.full_name is not None and t.private and self.public:
            where, said = "a private repository", t.decision.split(":", 1)[0][:60]
        elif t.full_name is not None:
            where = esc(t.full_name)
            if t.number is not None:
                url = issue_url(self.web, t.full_name, t.number, pull=t.kind in _PULL_KINDS)
                if url is not None:
                    where = f'<a href="{esc(url)}">{esc(t.full_name)}#{esc(t.number)}</a>'
            if t.pull_request is not None:
                url = issue_url(self.web, t.full_name, t.pull_request, pull=True)
                if url is not None:
                    links.append(f'<a href="{esc(url)}">pull request #{esc(t.pull_request)}</a>')
            for run in t.check_runs:
                url = check_run_url(self.web, t.full_name, run)
                if url is not None:
                    links.append(f'<a href="{esc(url)}">check run {esc(run)}</a>')
        return (
            f"<tr><td>{esc(t.updated_at)}</td><td><code>{esc(t.task_id)}</code></td><td>{esc(t.kind)}</td>"
            f"<td>{where}</td><td>{esc(t.state)}</td>"
            f"<td>{esc(said)}</td><td>{' · '.join(links)}</td></tr>"
        )


def _int(raw: object) -> int | None:
    text = records.text(raw) if isinstance(raw, bytes | str) else raw
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    return int(text) if isinstance(text, str) and text.isdigit() and len(text) < 19 else None


def decision(state: str, detail: str) -> str:
    """Baton's short reason for a state; for a failure only its error code (the rest may quote an
    exception, which is the operator's log's to show)."""
    if state in _FAILED:
        return detail.split(":", 1)[0][:60]
    return detail if len(detail) <= 160 else detail[:159] + "…"


def _probes(found: Mapping[Any, Any]) -> list[tuple[str, bool, tuple[str, ...], str]]:
    """Each host's recorded probe, newest first, at most ``MAX_WORKERS``; unreadable ones skipped."""
    out = []
    for host, raw in found.items():
        try:
            data = orjson.loads(raw)
            entry = (records.text(host), data["network_cutoff"] is True,
                     tuple(str(p) for p in data.get("problems", ())), str(data.get("at", "")))  # fmt: skip
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue
        out.append(entry)
    return sorted(out, key=lambda e: e[3], reverse=True)[:MAX_WORKERS]


def _row(task_id: str, values: Sequence[bytes | None], data: bytes | None) -> TaskRow:
    got = dict(zip(_FIELDS, (records.text(v) for v in values), strict=True))
    state = got["state"] or "unknown"
    row = TaskRow(task_id, state, decision(state, got["detail"]), got["updated_at"], kind=got["kind"])
    row.pull_request = _int(got["pull_request"])
    row.check_runs = [n for n in (_int(i) for i in got["check_run_ids"].split(",")) if n is not None]
    task = _task_fields(data)
    row.kind = row.kind or str(task.get("kind") or "")
    repo = task.get("repository")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        row.full_name = repo["full_name"]
        row.private = repo.get("private") is not False
    row.number = _int(task.get("number"))
    if got["publication"]:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            published = orjson.loads(got["publication"])
            row.full_name = row.full_name or str(published.get("full_name") or "") or None
            row.number = row.number if row.number is not None else _int(published.get("number"))
            for run in published.get("check_runs") or ():
                ident = _int(run.get("check_run_id"))
                if ident is not None and ident not in row.check_runs:
                    row.check_runs.append(ident)
    return row


def _task_fields(data: bytes | None) -> Mapping[str, Any]:
    """The task in its RQ job (``[function, None, [task], {}]``, maybe zlib'd), or {} if gone."""
    if not data:
        return {}
    try:
        with contextlib.suppress(zlib.error):
            data = zlib.decompress(data)
        job = orjson.loads(data)
        task = job[2][0]
    except (ValueError, TypeError, IndexError, KeyError):
        return {}
    return task if isinstance(task, dict) else {}
