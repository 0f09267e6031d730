"""The App's bot account, as git and GitHub know it: who Baton's commits and pull requests are by."""

from __future__ import annotations

import orjson

from baton import keys
from baton.errors import BatonError
from baton.tasks import Task
from worker.context import Context
from worker.github import api

_BOT_CACHE = keys.APP_BOT_PREFIX  # + App id -> [login, email], a day


def bot_identity(ctx: Context, task: Task) -> tuple[str, str]:
    """The App's bot user as git author: ``slug[bot]`` and its noreply address, as GitHub records it."""
    key = f"{_BOT_CACHE}{ctx.app_id}"
    cached = ctx.redis.get(key)
    if cached is not None:
        name, email = orjson.loads(cached)
        return str(name), str(email)
    app = ctx.need_github()
    repo, installation = task.repository, task.installation_id
    if repo is None or installation is None:
        raise BatonError("no-installation", "the delivery names no repository or installation")
    slug = str(api.request(app.app, "GET", "/app")["slug"])  # the JWT reads the App itself
    login = f"{slug}[bot]"
    user = api.request(app.for_repository(installation, repo.full_name, "read"), "GET", f"/users/{login}")
    found = (login, f"{user['id']}+{login}@users.noreply.github.com")
    ctx.redis.set(key, orjson.dumps(found), ex=24 * 3600)
    return found
