"""GitHub's App manifest flow, Baton's side: the manifest, the one-use ``state``, the code exchange.

1. The setup page offers ``app-manifest.yml`` with the addresses of this Baton filled in
   (:func:`build`) and a fresh ``state`` (:class:`PendingStates`), which the browser posts to GitHub.
2. GitHub sends the browser back to ``redirect_url?code=…&state=…``: the state must be one this
   process handed out, not expired, and it is good once.
3. The code is exchanged (:func:`convert`, ``POST /app-manifests/{code}/conversions``, unauthenticated,
   within the hour GitHub gives) for the App's id, private key and webhook secret.
"""

from __future__ import annotations

import copy
import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml

from baton.errors import BatonError

#: The manifest at the repository's root (a source checkout, or an image built from one).
DEFAULT_MANIFEST = Path(__file__).resolve().parents[1] / "app-manifest.yml"
CALLBACK_PATH = "/setup/callback"
#: GitHub's codes are good for an hour; a state is good as long (the flow must end within it).
STATE_TTL_S = 3600.0
#: Pending states kept at most (each page view makes one); the oldest go first.
MAX_PENDING = 64
EXCHANGE_TIMEOUT_S = 10.0
#: GitHub's codes are 20 bytes of hex; allow any URL-safe token of sane length.
CODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class SetupError(BatonError):
    """The registration could not finish; the message says what to do."""


@dataclass(frozen=True)
class Conversion:
    """What GitHub returns for a code (the parts Baton keeps or shows)."""

    app_id: int
    slug: str
    name: str
    owner: str
    html_url: str
    pem: str = field(repr=False)
    webhook_secret: str = field(repr=False)


def load(path: Path) -> dict[str, Any]:
    """The manifest template; SetupError saying which file and why when it cannot be used."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SetupError("manifest-unreadable", f"{path}: cannot read the App manifest ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise SetupError("manifest-invalid", f"{path}: the App manifest must be a mapping with a name")
    return data


def build(template: Mapping[str, Any], base: str, webhook_path: str) -> dict[str, Any]:
    """The manifest for the Baton reached at ``base`` (no trailing slash): its addresses replaced."""
    manifest = copy.deepcopy(dict(template))
    hook = dict(manifest.get("hook_attributes") or {})
    hook["url"] = base + webhook_path
    hook.setdefault("active", True)
    manifest.update(
        url=base + "/",
        hook_attributes=hook,
        redirect_url=base + CALLBACK_PATH,
        setup_url=base + "/",
    )
    return manifest


class PendingStates:
    """``state`` values handed out and not yet used, in this process's memory (one `baton serve`).

    Only a digest of each is kept; each is good for ``STATE_TTL_S`` and once.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()

    @staticmethod
    def _key(state: str) -> str:
        return hashlib.sha256(state.encode("utf-8", "replace")).hexdigest()

    def new(self) -> str:
        self._prune()
        while len(self._expiry) >= MAX_PENDING:
            self._expiry.popitem(last=False)
        state = secrets.token_urlsafe(32)
        self._expiry[self._key(state)] = self._clock() + STATE_TTL_S
        return state

    def pending(self, state: str | None) -> bool:
        """Is ``state`` one of ours, unused and in time? (Does not use it up.)"""
        self._prune()
        return bool(state) and self._key(state or "") in self._expiry

    def consume(self, state: str) -> float | None:
        """Use ``state`` up: its expiry, or None if it was not pending (unknown, expired, or used)."""
        self._prune()
        return self._expiry.pop(self._key(state), None)

    def give_back(self, state: str, expiry: float) -> None:
        """Make a consumed ``state`` good again until its own expiry (its use failed before GitHub
        answered, so the same link may be tried again)."""
        self._expiry[self._key(state)] = expiry

    def _prune(self) -> None:
        now = self._clock()
        for key in [k for k, expiry in self._expiry.items() if expiry <= now]:
            del self._expiry[key]


def valid_code(code: str | None) -> bool:
    return bool(code) and len(code or "") <= 100 and set(code or "") <= CODE_CHARS


async def convert(api_url: str, code: str, *, timeout: float = EXCHANGE_TIMEOUT_S) -> Conversion:
    """Exchange ``code`` for the new App's credentials; SetupError with a fixed sentence otherwise."""
    url = f"{api_url}/app-manifests/{quote(code, safe='')}/conversions"
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": "baton-setup",
    }
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            response = await client.post(url, headers=headers)
    except httpx.HTTPError as exc:
        raise SetupError(
            "github-unreachable", "GitHub did not answer the code exchange: reload this page to try again"
        ) from exc
    if response.status_code == 404:
        raise SetupError(
            "code-unknown",
            "GitHub does not know this code: it was used already, or is more than an hour old. "
            "Start again from the setup page (the App GitHub made for it can be deleted in its settings).",
        )
    if response.status_code != 201:
        raise SetupError(
            "github-refused",
            f"GitHub answered {response.status_code} to the code exchange: reload this page to try again",
        )
    try:
        data = response.json()
    except ValueError as exc:
        raise SetupError("github-bad-answer", "GitHub's answer to the code exchange is not JSON") from exc
    return _conversion(data)


def _conversion(data: Any) -> Conversion:
    if not isinstance(data, dict):
        raise SetupError("github-bad-answer", "GitHub's answer to the code exchange is not an object")
    app_id, pem, secret = data.get("id"), data.get("pem"), data.get("webhook_secret")
    html_url, owner = data.get("html_url"), data.get("owner")
    problems = []
    if not isinstance(app_id, int) or isinstance(app_id, bool) or app_id <= 0:
        problems.append("id")
    if not isinstance(pem, str) or "-----BEGIN" not in pem:
        problems.append("pem")
    if not isinstance(secret, str) or not secret:
        problems.append("webhook_secret")
    if not isinstance(html_url, str) or not html_url.startswith(("https://", "http://")):
        problems.append("html_url")
    if problems:
        raise SetupError("github-bad-answer", "GitHub's answer lacks " + ", ".join(problems))
    login = owner.get("login") if isinstance(owner, dict) else None
    return Conversion(
        app_id=int(app_id),  # type: ignore[arg-type]
        slug=str(data.get("slug") or ""),
        name=str(data.get("name") or ""),
        owner=str(login or ""),
        html_url=str(html_url).rstrip("/"),
        pem=str(pem),
        webhook_secret=str(secret),
    )
