"""`GET /` in setup mode (no APP_ID or private key yet): register the GitHub App from its manifest.

One plain HTML form (no script): the manifest, a one-use ``state`` and an optional organisation
name are posted to ``/setup/start``, which answers 307, so the browser posts the same form on to
GitHub's ``/settings/apps/new`` (or ``/organizations/ORG/settings/apps/new``; an organisation name
has to go into that path, which a form without script cannot do by itself). GitHub shows its
confirmation page, then sends the browser to ``/setup/callback?code=…&state=…``; there the state is
checked and used up, the code exchanged, and the credentials written to `.env` in ``env_dir``
(``baton.envfile``: never over an existing file). Nothing secret is ever put on a page or in the log
(but the setup link, below).

The page answers only with the setup token `baton serve` printed when it started (``?token=``),
as Jupyter's first page does: a Baton deployed at a public address before it is configured would
otherwise let the first stranger to find it register an App of *their own* here, whose key they
could take back and which the operator might then install on the organisation. The token lives in
this process only, and the states the form hands out are what the later steps check.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from baton import envfile
from baton.github_web import LOGIN, new_app_url, origin, web_base
from baton.logs import timestamp
from baton.settings import Settings
from bot import manifest
from bot.html_page import esc, page
from evidence.keys import SigningKey

START_PATH = "/setup/start"
MIN_TOKEN_CHARS = 16
#: A manifest is a few KB; the form is refused well before anything large.
MAX_FORM_BYTES = 64 * 1024
_HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_LOOPBACK = ("localhost", "127.", "[::1]", "0.0.0.0")  # noqa: S104 - a prefix we warn about, not a bind

log = logging.getLogger("baton.setup")


class SetupPage:
    def __init__(
        self, settings: Settings, *, env_dir: Path, manifest_path: Path, webhook_path: str, token: str
    ) -> None:
        if len(token) < MIN_TOKEN_CHARS:
            raise ValueError(f"a setup token has at least {MIN_TOKEN_CHARS} characters; use new_token()")
        self.token = token
        self.settings = settings
        self.env_dir = env_dir
        self.manifest_path = manifest_path
        self.webhook_path = webhook_path
        self.web = web_base(settings.github_api_url)
        self.states = manifest.PendingStates()

    def routes(self) -> list[Route]:
        return [
            Route("/", self.home, methods=["GET"]),
            Route(START_PATH, self.start, methods=["POST"]),
            Route(manifest.CALLBACK_PATH, self.callback, methods=["GET"]),
        ]

    # -- the form ---------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        given = request.query_params.get("token", "")
        if not secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode()):
            if given:
                log.warning("setup: the page was asked for with a wrong token")
            return _problem(
                "This Baton is not set up yet",
                "Its setup page opens only from the link `baton serve` printed when it started (the "
                "line saying SETUP MODE in its log; on fly.io, `fly logs`): the link's token keeps "
                "strangers from registering an App of their own here.",
                status=403,
            )
        there = envfile.existing(self.env_dir)
        if there:
            return _already_written(there)
        try:
            template = manifest.load(self.manifest_path)
        except manifest.SetupError as exc:
            return _problem("The App manifest cannot be used", exc.message, status=500)
        base = self._base(request)
        if base is None:
            return _problem("Unknown address", "The request's Host header is not a host name.", status=400)
        wanted = manifest.build(template, base, self.webhook_path)
        state = self.states.new()
        return page(
            "Set up Baton",
            _form(wanted, state, self.web, self.env_dir, base),
            form_action=f"'self' {origin(self.web)}",
        )

    async def start(self, request: Request) -> Response:
        """Check the form and send the browser on to GitHub with it (307 keeps the method and body)."""
        length = request.headers.get("content-length", "")
        if not length.isdigit() or int(length) > MAX_FORM_BYTES:
            return _problem("Refused", "The form is missing or too large.", status=413)
        fields = form_fields(await request.body())
        state = fields.get("state", "")
        if not self.states.pending(state):
            return _refused("This form was not made by this Baton, is more than an hour old, or was used.")
        try:
            parsed = json.loads(fields.get("manifest", ""))
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return _problem("Refused", "The form carries no manifest.", status=400)
        org = fields.get("org", "").strip() or None
        if org is not None and not LOGIN.fullmatch(org):
            return _problem("Not an organisation name", f"{org[:60]!r} is not a GitHub account name.", 400)
        target = new_app_url(self.web, org) + "?" + urlencode({"state": state})
        return Response(status_code=307, headers={"Location": target, "Cache-Control": "no-store"})

    # -- back from GitHub -------------------------------------------------------------------

    async def callback(self, request: Request) -> Response:
        state, code = request.query_params.get("state"), request.query_params.get("code")
        if not self.states.pending(state) or not manifest.valid_code(code):
            log.warning("setup: a callback was refused (unknown, expired or used state, or no code)")
            return _refused(
                "This link does not come from a registration started on this Baton, is more than an "
                "hour old, or was used already."
            )
        there = envfile.existing(self.env_dir)
        if there:  # the state stays good: move the file away and reload this page
            return _already_written(there, status=409)
        expiry = self.states.consume(state or "")
        if expiry is None:
            return _refused("This link was used already.")
        try:
            app = await manifest.convert(self.settings.github_api_url, code or "")
        except manifest.SetupError as exc:
            log.warning("setup: the code exchange failed", extra={"error": exc.code})
            if exc.code != "code-unknown":  # the code may still be good: so is this link, for a retry
                self.states.give_back(state or "", expiry)
            return _problem("GitHub did not give the App's credentials", exc.message, status=502)
        creds = envfile.Credentials(
            app_id=app.app_id,
            app_pem=app.pem,
            webhook_secret=app.webhook_secret,
            signing_key=SigningKey.generate(),
            audit_secret=secrets.token_hex(32),
            slug=app.slug,
        )
        comment = (
            f"Written by Baton's setup page at {timestamp(time.time())} for the GitHub App "
            f"{app.slug or app.name} (id {app.app_id}).\nKeep it private: it names the App's keys. "
            "`baton serve` and `baton worker` read it from their working directory."
        )
        try:
            written = envfile.write(self.env_dir, creds, comment=comment)
        except (OSError, ValueError) as exc:
            log.error(
                "setup: could not write .env", extra={"app_id": app.app_id, "error": type(exc).__name__}
            )
            why = "a file was created there meanwhile" if isinstance(exc, FileExistsError) else str(exc)
            return _problem(
                "The credentials could not be written",
                f"Nothing was written to {self.env_dir} ({why}). The App {app.name} (id {app.app_id}) "
                f"exists on GitHub without its key here: delete it at {app.html_url} and start again.",
                status=500,
            )
        log.info(
            "setup: App registered", extra={"app_id": app.app_id, "slug": app.slug, "env": str(written.env)}
        )
        return page(
            "Baton is registered", _done(app, written, creds.signing_key.keyid, _shadowed(self.settings))
        )

    def _base(self, request: Request) -> str | None:
        """BATON_PUBLIC_URL, else the address this page was reached at."""
        if self.settings.public_url is not None:
            return self.settings.public_url
        host = request.headers.get("host", "")
        if not _HOST.fullmatch(host):
            return None
        return f"{request.url.scheme}://{host}"


def new_token() -> str:
    """A fresh setup token (192 random bits), for one `baton serve` process."""
    return secrets.token_urlsafe(24)


def _form(wanted: Mapping[str, Any], state: str, web: str, env_dir: Path, base: str) -> str:
    hook = wanted.get("hook_attributes") or {}
    permissions = ", ".join(f"{k}: {v}" for k, v in sorted((wanted.get("default_permissions") or {}).items()))
    rows = [
        ("name", wanted.get("name")),
        ("homepage", wanted.get("url")),
        ("webhook URL", hook.get("url")),
        ("back to", wanted.get("redirect_url")),
        ("after installing", wanted.get("setup_url")),
        ("permissions", permissions),
        ("events", ", ".join(wanted.get("default_events") or [])),
    ]
    table = "".join(f"<tr><th>{esc(k)}</th><td><code>{esc(v)}</code></td></tr>" for k, v in rows)
    warning = ""
    host = urlsplit(base).netloc
    if web == "https://github.com" and (base.startswith("http://") or host.startswith(_LOOPBACK)):
        warning = (
            '<p class="refused">GitHub will not deliver webhooks to '
            f"<code>{esc(base)}</code>: set <code>BATON_PUBLIC_URL</code> to the public https address "
            "of this Baton and restart it before registering.</p>"
        )
    return (
        "<h1>Set up Baton</h1>"
        "<p>This Baton has no GitHub App yet (no <code>APP_ID</code> and <code>PRIVATE_KEY</code>). "
        f'Register one from its manifest: <a href="{esc(web)}">GitHub</a> asks you to confirm, then '
        f"sends you back here, and Baton writes the App's credentials to <code>{esc(env_dir.resolve())}"
        "/.env</code> (mode 0600; an existing file is never overwritten).</p>"
        f"{warning}"
        f'<form method="post" action="{esc(START_PATH)}">'
        f'<input type="hidden" name="manifest" value="{esc(json.dumps(wanted, sort_keys=True))}">'
        f'<input type="hidden" name="state" value="{esc(state)}">'
        "<label>Organisation to own the App (leave empty for your own account): "
        '<input type="text" name="org" maxlength="39" pattern="[A-Za-z0-9][A-Za-z0-9\\-]{0,38}" '
        'autocomplete="off" spellcheck="false"></label>'
        '<button type="submit">Register the GitHub App</button></form>'
        "<h2>What GitHub will be asked for</h2>"
        f"<table>{table}</table>"
    )


def _shadowed(config: Settings) -> list[str]:
    """Settings this process already has from its environment: they win over `.env` at the restart."""
    names = [("APP_ID", config.app_id), ("PRIVATE_KEY / PRIVATE_KEY_PATH", config.private_key),
             ("WEBHOOK_SECRET", config.webhook_secrets), ("BATON_SIGNING_KEY / BATON_SIGNING_KEY_PATH",
             config.signing_key), ("BATON_AUDIT_SECRET", config.audit_secret)]  # fmt: skip
    return [name for name, value in names if value]


def _done(app: manifest.Conversion, written: envfile.Written, keyid: str, shadowed: list[str]) -> str:
    install = f"{app.html_url}/installations/new"
    env_dir = written.env.parent
    names = " ".join(envfile.NAMES)
    fly = (
        "set -a; . ./.env; set +a\n"
        'fly secrets set APP_ID="$APP_ID" WEBHOOK_SECRET="$WEBHOOK_SECRET" '
        'BATON_AUDIT_SECRET="$BATON_AUDIT_SECRET" PRIVATE_KEY="$(cat "$PRIVATE_KEY_PATH")" '
        'BATON_SIGNING_KEY="$(cat "$BATON_SIGNING_KEY_PATH")"'
    )
    warning = ""
    if shadowed:
        warning = (
            '<p class="refused">This environment already sets '
            + ", ".join(f"<code>{esc(n)}</code>" for n in shadowed)
            + ", which wins over <code>.env</code>: unset it before the restart, or Baton will not use "
            "what was just written.</p>"
        )
    return (
        "<h1>Baton is registered</h1>"
        f"<p>GitHub made the App <strong>{esc(app.name)}</strong> (id <code>{esc(app.app_id)}</code>"
        + (f", owned by <code>{esc(app.owner)}</code>" if app.owner else "")
        + ").</p>"
        f"<p>Written, each new and readable by this user only: <code>{esc(written.env)}</code> "
        f"(<code>{esc(names)}</code>), the App's private key <code>{esc(written.app_key)}</code> and the "
        f"receipt signing key <code>{esc(written.signing_key)}</code> (key id <code>{esc(keyid)}</code>; "
        f"its public half is <code>{esc(written.signing_pub)}</code>).</p>"
        f"{warning}<h2>Next</h2><ol>"
        f'<li>Install the App on the accounts and repositories Baton should serve: <a href="{esc(install)}">'
        f"{esc(install)}</a>.</li>"
        f"<li>Restart <code>baton serve</code> from <code>{esc(env_dir)}</code> (it reads <code>.env</code> "
        "there when it starts), and start <code>baton worker</code> the same way (or "
        "<code>baton serve --worker</code>). This page then shows the App's status.</li>"
        "<li>On fly.io the machine's disk does not outlive a deploy: keep these values as secrets instead. "
        f"From <code>{esc(env_dir)}</code> (the values are read from the files, never shown):"
        f"<pre>{esc(fly)}</pre></li></ol>"
    )


def _already_written(there: list[Path], status: int = 200) -> Response:
    listed = ", ".join(f"<code>{esc(p)}</code>" for p in there)
    return page(
        "Baton: credentials already written",
        "<h1>Credentials are already written</h1>"
        f"<p>{listed} exists, and Baton never overwrites it. If it holds this App's credentials, restart "
        "<code>baton serve</code> to load them; otherwise move it away and reload this page.</p>",
        status=status,
    )


def _refused(why: str) -> Response:
    return page(
        "Baton: refused",
        f'<h1 class="refused">Refused</h1><p>{esc(why)} Nothing was written.</p>'
        '<p><a href="/">Start again</a>.</p>',
        status=400,
    )


def _problem(title: str, message: str, status: int) -> Response:
    return page(
        f"Baton: {title}", f'<h1 class="refused">{esc(title)}</h1><p>{esc(message)}</p>', status=status
    )


def form_fields(body: bytes) -> Mapping[str, str]:
    """A urlencoded form as a mapping (the last value of a repeated field wins)."""
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
