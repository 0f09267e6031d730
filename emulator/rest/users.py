"""``GET /users/{username}``: a person or an App's bot account, as anyone may read it.

The Baton worker reads its own bot account (for the commit author GitHub credits to
the App) and the requesting person's id (for the ``Co-authored-by`` address).
"""

from __future__ import annotations

from emulator.core import ApiRequest, Reply, RouteSpec
from emulator.errors import not_found
from emulator.rest import shapes
from emulator.state import User, iso


def _find(req: ApiRequest, login: str) -> User | None:
    found = req.state.user(login)
    if found is not None:
        return found
    for app in req.state.apps.values():  # bot accounts exist as soon as their App does
        if login.lower() == f"{app.slug}[bot]".lower():
            return shapes.bot_user(req.state, app)
    return None


async def get_user(req: ApiRequest) -> Reply:
    user = _find(req, req.param("username"))
    if user is None:
        raise not_found()
    created = iso(0.0)
    return Reply({
        **shapes.simple_user(req.base, user),
        "name": None, "company": None, "blog": "", "location": None, "email": None, "hireable": None,
        "bio": None, "twitter_username": None, "public_repos": 0, "public_gists": 0, "followers": 0,
        "following": 0, "created_at": created, "updated_at": created,
    })  # fmt: skip


ROUTES: list[RouteSpec] = [("GET", "/users/{username}", get_user)]
