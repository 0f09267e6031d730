"""GitHub's side of the App manifest flow: the web form that registers an App, and the code exchange.

- ``POST /settings/apps/new`` (the signed-in person's account, here always ``SIGNED_IN_USER``) and
  ``POST /organizations/{org}/settings/apps/new``: web pages, not API. A browser posts a form with a
  ``manifest`` (JSON) and a ``state`` (form field or query). The real GitHub then shows a confirmation
  page, where the person may rename the App, and creates it only when they click "Create GitHub App";
  this stand-in checks the manifest against GitHub's rules (:func:`problems`), creates the App at
  once and redirects (302) to ``redirect_url?code=…&state=…``. A manifest that breaks a rule gets 422
  and a page listing each problem; nothing is created.
- ``POST /app-manifests/{code}/conversions`` (REST, no authentication): 201 with the App and its
  ``pem``, ``webhook_secret``, ``client_id`` and ``client_secret``, once; 404 for a code that is
  unknown, used, or more than an hour old.

The App made this way is like one made through the admin API: its JWT (signed with the returned
``pem``) works on every App endpoint. Its webhook URL is kept only when it is on this machine (the
emulator never sends anything off it); the real GitHub, the other way round, refuses webhook URLs
that are not reachable from the internet, a rule this stand-in cannot apply.
"""

from __future__ import annotations

import html
import json
import re
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from emulator import webhooks
from emulator.admin.setup import LOGIN, ensure_user
from emulator.core import ApiRequest, Emulator, Reply, RouteSpec
from emulator.errors import not_found
from emulator.rest import shapes
from emulator.state import App, ManifestCode

#: Whom the stand-in's web pages take as signed in (the personal-account form registers Apps for them).
SIGNED_IN_USER = "octocat"
CODE_TTL_SECONDS = 3600.0
MAX_NAME = 34  # GitHub: "Name is too long (maximum is 34 characters)"
MAX_CALLBACK_URLS = 10
MAX_FORM_BYTES = 1 << 20
_DOCS = "https://docs.github.com/rest/apps/apps#create-a-github-app-from-a-manifest"
LEVELS = frozenset({"read", "write", "admin"})
#: App permissions GitHub knows (its ``app-permissions`` schema).
PERMISSIONS = frozenset({
    "actions", "administration", "attestations", "checks", "codespaces", "contents", "custom_properties",
    "dependabot_secrets", "deployments", "discussions", "environments", "issues", "merge_queues",
    "metadata", "packages", "pages", "pull_requests", "repository_custom_properties", "repository_hooks",
    "repository_projects", "secret_scanning_alerts", "secrets", "security_events", "single_file",
    "statuses", "vulnerability_alerts", "workflows", "members", "organization_administration",
    "organization_announcement_banners", "organization_copilot_seat_management",
    "organization_custom_org_roles", "organization_custom_properties", "organization_custom_roles",
    "organization_events", "organization_hooks", "organization_packages",
    "organization_personal_access_token_requests", "organization_personal_access_tokens",
    "organization_plan", "organization_projects", "organization_secrets",
    "organization_self_hosted_runners", "organization_user_blocking", "team_discussions",
    "email_addresses", "followers", "git_ssh_keys", "gpg_keys", "interaction_limits", "profile",
    "starring",
})  # fmt: skip
#: Events an App may subscribe to, and the permissions that allow each (any one of them): GitHub
#: refuses an event none of whose permissions the App asks for. ``metadata`` is every App's.
EVENT_PERMISSIONS: dict[str, frozenset[str]] = {
    "check_run": frozenset({"checks"}),
    "check_suite": frozenset({"checks"}),
    "commit_comment": frozenset({"contents"}),
    "create": frozenset({"contents"}),
    "delete": frozenset({"contents"}),
    "deployment": frozenset({"deployments"}),
    "deployment_status": frozenset({"deployments"}),
    "discussion": frozenset({"discussions"}),
    "discussion_comment": frozenset({"discussions"}),
    "fork": frozenset({"contents"}),
    "gollum": frozenset({"contents"}),
    "issue_comment": frozenset({"issues", "pull_requests"}),
    "issues": frozenset({"issues"}),
    "label": frozenset({"metadata"}),
    "member": frozenset({"members", "metadata"}),
    "milestone": frozenset({"issues", "pull_requests"}),
    "public": frozenset({"metadata"}),
    "pull_request": frozenset({"pull_requests"}),
    "pull_request_review": frozenset({"pull_requests"}),
    "pull_request_review_comment": frozenset({"pull_requests"}),
    "pull_request_review_thread": frozenset({"pull_requests"}),
    "push": frozenset({"contents"}),
    "release": frozenset({"contents"}),
    "repository": frozenset({"metadata"}),
    "star": frozenset({"metadata"}),
    "status": frozenset({"statuses"}),
    "watch": frozenset({"metadata"}),
    "workflow_dispatch": frozenset({"actions"}),
    "workflow_job": frozenset({"actions"}),
    "workflow_run": frozenset({"actions"}),
}
_BOOLEANS = ("public", "request_oauth_on_install", "setup_on_update")


def _is_url(value: Any) -> bool:
    if not isinstance(value, str) or any(c.isspace() for c in value):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def problems(manifest: Any) -> list[str]:
    """Every way ``manifest`` breaks GitHub's rules (GitHub's parameter table, plus what its form
    enforces: name length, known permissions and levels, events the permissions allow)."""
    if not isinstance(manifest, dict):
        return ["the manifest must be a JSON object"]
    return [*_named(manifest), *_addresses(manifest), *_grants(manifest)]


def _named(manifest: dict[str, Any]) -> list[str]:
    found = []
    name = manifest.get("name")
    if not isinstance(name, str) or not name.strip():
        found.append("name is missing (the confirmation page would ask for one; this stand-in cannot)")
    elif len(name.strip()) > MAX_NAME:
        found.append(f"name is too long (maximum is {MAX_NAME} characters)")
    if "description" in manifest and not isinstance(manifest["description"], str):
        found.append("description must be a string")
    found += [f"{key} must be true or false" for key in _BOOLEANS
              if key in manifest and not isinstance(manifest[key], bool)]  # fmt: skip
    return found


def _addresses(manifest: dict[str, Any]) -> list[str]:
    found = []
    if not _is_url(manifest.get("url")):
        found.append("url is required: the App's homepage, an http(s) URL")
    hook = manifest.get("hook_attributes")
    if hook is not None and not isinstance(hook, dict):
        found.append("hook_attributes must be an object")
    elif hook is not None:
        if not _is_url(hook.get("url")):
            found.append("hook_attributes.url is required: an http(s) URL")
        if "active" in hook and not isinstance(hook["active"], bool):
            found.append("hook_attributes.active must be true or false")
    found += [f"{key} must be an http(s) URL" for key in ("redirect_url", "setup_url")
              if key in manifest and not _is_url(manifest[key])]  # fmt: skip
    if "redirect_url" not in manifest:
        found.append("redirect_url is missing: this stand-in has nowhere to send the code")
    callbacks = manifest.get("callback_urls", [])
    if not isinstance(callbacks, list) or not all(_is_url(u) for u in callbacks):
        found.append("callback_urls must be a list of http(s) URLs")
    elif len(callbacks) > MAX_CALLBACK_URLS:
        found.append(f"callback_urls: at most {MAX_CALLBACK_URLS}")
    return found


def _grants(manifest: dict[str, Any]) -> list[str]:
    permissions = manifest.get("default_permissions", {})
    if not isinstance(permissions, dict):
        return ["default_permissions must be an object"]
    found = []
    for perm, level in permissions.items():
        if perm not in PERMISSIONS:
            found.append(f"default_permissions: unknown permission {perm!r}")
        elif level not in LEVELS or (perm == "metadata" and level != "read"):
            found.append(f"default_permissions.{perm}: {level!r} is not an access level it can have")
    events = manifest.get("default_events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        return [*found, "default_events must be a list of event names"]
    granted = {*permissions, "metadata"}
    for event in events:
        allowed_by = EVENT_PERMISSIONS.get(event)
        if allowed_by is None:
            found.append(f"default_events: unknown event {event!r}")
        elif not allowed_by & granted:
            needs = ", ".join(sorted(allowed_by))
            found.append(f"default_events: {event!r} needs one of the permissions {needs}")
    return found


def _keypair() -> tuple[str, str]:
    """The new App's private key (PEM, as GitHub hands it out: PKCS#1 RSA) and its public half."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()  # fmt: skip
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


def _page(status: int, title: str, items: list[str]) -> HTMLResponse:
    listed = "".join(f"<li>{html.escape(i)}</li>" for i in items)
    return HTMLResponse(f"<!doctype html><title>{html.escape(title)}</title><h1>{html.escape(title)}</h1>"
                        f"<ul>{listed}</ul>", status_code=status)  # fmt: skip


def create_from_manifest(emu: Emulator, manifest: dict[str, Any], owner: str) -> tuple[App, ManifestCode]:
    """Register the App ``manifest`` describes for ``owner``, and the code that hands over its key."""
    state = emu.state
    name = str(manifest["name"]).strip()
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    private, public = _keypair()
    hook = manifest.get("hook_attributes") or {}
    hook_url = hook.get("url") if hook.get("active", True) else None
    with state.lock:
        if not slug or any(a.slug == slug or a.name.lower() == name.lower() for a in state.apps.values()):
            raise ValueError("Name is already in use")
        ensure_user(emu, owner, "User" if owner == SIGNED_IN_USER else "Organization")
        bot = ensure_user(emu, f"{slug}[bot]", "Bot")
        app = App(
            id=state.new_id(),
            slug=slug,
            name=name,
            owner=owner,
            public_key_pem=public,
            client_id=f"Iv1.{secrets.token_hex(8)}",
            webhook_url=hook_url
            if isinstance(hook_url, str) and webhooks.is_loopback_url(hook_url)
            else None,
            webhook_secret=secrets.token_hex(20),
            hook_id=state.new_id(),
            bot_user_id=bot.id,
            permissions={str(k): str(v) for k, v in (manifest.get("default_permissions") or {}).items()},
            events=[str(e) for e in manifest.get("default_events") or []],
            description=str(manifest.get("description") or ""),
            created_at=state.now(),
        )
        state.apps[app.id] = app
        code = ManifestCode(code=secrets.token_hex(20), app_id=app.id, pem=private,
                            client_secret=secrets.token_hex(20), created_at=state.now())  # fmt: skip
        state.manifest_codes[code.code] = code
    return app, code


def _redirect_to(url: str, code: str, state: str | None) -> str:
    parts = urlsplit(url)
    extra = {"code": code, **({"state": state} if state else {})}
    query = "&".join(q for q in (parts.query, urlencode(extra)) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def web_routes(emu: Emulator) -> list[BaseRoute]:
    async def new_app(request: Request) -> Response:
        started = time.perf_counter()
        response, logged = await _new_app(emu, request)
        took = round((time.perf_counter() - started) * 1000, 2)
        emu.requests.record(request.method, request.url.path, dict(request.query_params), logged,
                            response.status_code, duration_ms=took, counted=False)  # fmt: skip
        emu.changed()
        return response

    return [
        Route("/settings/apps/new", new_app, methods=["POST"]),
        Route("/organizations/{org}/settings/apps/new", new_app, methods=["POST"]),
    ]


async def _new_app(emu: Emulator, request: Request) -> tuple[Response, dict[str, Any]]:
    raw = await request.body()
    if len(raw) > MAX_FORM_BYTES:
        return _page(413, "Request too large", ["the form is over 1 MiB"]), {}
    fields = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    state = fields.get("state") or request.query_params.get("state")
    try:
        manifest: Any = json.loads(fields.get("manifest", ""))
    except ValueError:
        manifest = None
    logged = {"manifest": manifest, "state": state, "fields": sorted(fields)}
    org = request.path_params.get("org")
    if org is not None:
        user = emu.state.user(org)
        if not LOGIN.match(org) or (user is not None and user.type != "Organization"):
            return _page(404, "Not Found", [f"no organisation {org}"]), logged
    found = problems(manifest)
    if found:
        return _page(422, "The manifest is not valid", found), logged
    try:
        app, code = create_from_manifest(emu, manifest, org or SIGNED_IN_USER)
    except ValueError as exc:
        return _page(422, "The App could not be created", [str(exc)]), logged
    logged["app_id"] = app.id
    return RedirectResponse(_redirect_to(manifest["redirect_url"], code.code, state), status_code=302), logged


async def convert(req: ApiRequest) -> Reply:
    """``POST /app-manifests/{code}/conversions``: the App's credentials, once, within the hour."""
    state = req.state
    with state.lock:
        cutoff = state.now() - CODE_TTL_SECONDS
        for stale in [c for c, p in state.manifest_codes.items() if p.created_at <= cutoff]:
            del state.manifest_codes[stale]
        pending = state.manifest_codes.pop(req.param("code"), None)
    app = state.apps.get(pending.app_id) if pending is not None else None
    if pending is None or app is None:
        raise not_found(_DOCS)
    out = shapes.integration(req.base, state, app)
    out.update(client_id=app.client_id, client_secret=pending.client_secret,
               webhook_secret=app.webhook_secret, pem=pending.pem)  # fmt: skip
    return Reply(out, status=201)


ROUTES: list[RouteSpec] = [("POST", "/app-manifests/{code}/conversions", convert)]
