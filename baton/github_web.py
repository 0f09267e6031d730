"""GitHub's web pages, as opposed to its REST API: where the setup form posts, what the status
page links to, and where `baton doctor` sends an admin to install the App. Pure URL helpers, in the
kernel because both the web process and the worker's commands name GitHub's pages.

The web root is derived from ``GITHUB_API_URL``: ``https://api.github.com`` is served by
``https://github.com``, GitHub Enterprise Server's ``https://HOST/api/v3`` by ``https://HOST``, and
any other root (the emulator, which answers its stand-in web pages beside its API) by itself.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

#: GitHub's account names: letters, digits and single hyphens, at most 39 characters.
LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
FULL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


def web_base(api_url: str) -> str:
    parts = urlsplit(api_url.rstrip("/"))
    if (parts.hostname or "").lower() == "api.github.com":
        return "https://github.com"
    path = parts.path.rstrip("/")
    if path.endswith("/api/v3"):
        path = path[: -len("/api/v3")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (what a Content-Security-Policy source names)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def new_app_url(web: str, org: str | None) -> str:
    """Where the manifest form is posted: the signed-in person's account, or an organisation's."""
    if org is None:
        return f"{web}/settings/apps/new"
    if not LOGIN.fullmatch(org):
        raise ValueError(f"{org!r} is not a GitHub organisation name")
    return f"{web}/organizations/{quote(org)}/settings/apps/new"


def app_install_url(web: str, slug: str) -> str:
    """The App's public page, where an admin installs it: on github.com or an Enterprise Server."""
    return f"{web}/apps/{quote(slug)}"


def issue_url(web: str, full_name: str, number: int, *, pull: bool = False) -> str | None:
    if not FULL_NAME.fullmatch(full_name):
        return None
    return f"{web}/{full_name}/{'pull' if pull else 'issues'}/{number}"


def check_run_url(web: str, full_name: str, check_run_id: int) -> str | None:
    return f"{web}/{full_name}/runs/{check_run_id}" if FULL_NAME.fullmatch(full_name) else None
