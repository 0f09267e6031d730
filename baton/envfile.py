"""The `.env` file: written once by the setup page, read by `baton serve` and `baton worker` at start.

As with Probot, the file lives in the working directory. What the manifest flow brings back (the
App's id, private key and webhook secret) and what Baton makes for itself (a receipt signing key and
the audit chain's secret) are written together, each file created new with mode 0600: nothing is
ever overwritten, so an existing `.env` (or key file) stops the write before anything is written.

The private keys go to PEM files beside `.env`, named there by ``PRIVATE_KEY_PATH`` and
``BATON_SIGNING_KEY_PATH``, rather than inline: every value in the file is then one token without
spaces or line breaks, which every reader of `.env` files takes the same way (``set -a; . ./.env``,
``docker --env-file``, systemd's ``EnvironmentFile=``, python-dotenv, this module), whereas an
inline PEM needs quoting those readers disagree on. The signing key files are the ones
``baton keys generate`` writes.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from baton.errors import ConfigError
from evidence.cli import PRIVATE_NAME as SIGNING_KEY_NAME
from evidence.cli import PUBLIC_NAME as SIGNING_PUB_NAME
from evidence.keys import SigningKey

ENV_NAME = ".env"
#: The GitHub App's private key, as the manifest flow returned it.
APP_KEY_NAME = "baton-app-key.pem"
#: What the file sets, in order. (Names only: this list is safe to print.)
NAMES = ("APP_ID", "BATON_APP_SLUG", "PRIVATE_KEY_PATH", "WEBHOOK_SECRET", "BATON_SIGNING_KEY_PATH",
         "BATON_AUDIT_SECRET")  # fmt: skip

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+=,-]*")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"', "$": "$", "`": "`"}


@dataclass(frozen=True)
class Credentials:
    """What one registration leaves behind: GitHub's half and Baton's."""

    app_id: int
    app_pem: str = field(repr=False)
    webhook_secret: str = field(repr=False)
    signing_key: SigningKey = field(repr=False)
    audit_secret: str = field(repr=False)
    #: The App's slug (how people call it: `@slug`); "" when GitHub did not say.
    slug: str = ""


@dataclass(frozen=True)
class Written:
    env: Path
    app_key: Path
    signing_key: Path
    signing_pub: Path


def paths(directory: Path) -> Written:
    """Where a registration's files go in ``directory`` (absolute, so `.env` works from anywhere)."""
    base = directory.resolve()
    return Written(base / ENV_NAME, base / APP_KEY_NAME, base / SIGNING_KEY_NAME, base / SIGNING_PUB_NAME)


def existing(directory: Path) -> list[Path]:
    """The files a registration would write that are already there (a symlink counts)."""
    where = paths(directory)
    found = (where.env, where.app_key, where.signing_key, where.signing_pub)
    return [p for p in found if p.exists() or p.is_symlink()]


def write(directory: Path, creds: Credentials, *, comment: str = "") -> Written:
    """Create the key files, then `.env`, each new and 0600 (the public key 0644).

    Raises FileExistsError (nothing of ours left behind) if any of them exists, and
    ValueError for a value that cannot be written as one line.
    """
    where = paths(directory)
    for secret in (creds.webhook_secret, creds.audit_secret):
        if not secret or not _PLAIN.fullmatch(secret) or "," in secret:
            # A comma would split WEBHOOK_SECRET into two (it lists secrets while rotating).
            raise ValueError("a secret holds characters that do not belong in one .env token")
    lines = [f"# {line}" for line in comment.splitlines()]
    values = {
        "APP_ID": str(creds.app_id),
        "BATON_APP_SLUG": creds.slug,
        "PRIVATE_KEY_PATH": str(where.app_key),
        "WEBHOOK_SECRET": creds.webhook_secret,
        "BATON_SIGNING_KEY_PATH": str(where.signing_key),
        "BATON_AUDIT_SECRET": creds.audit_secret,
    }
    lines += [f"{name}={quote(values[name])}" for name in NAMES if values[name]]
    made: list[Path] = []
    try:
        for path, data, mode in (
            (where.app_key, creds.app_pem.encode("ascii"), 0o600),
            (where.signing_key, creds.signing_key.private_pem(), 0o600),
            (where.signing_pub, creds.signing_key.public.pem().encode("ascii"), 0o644),
            (where.env, ("\n".join(lines) + "\n").encode("utf-8"), 0o600),  # last: it names the others
        ):
            _create(path, data, mode)
            made.append(path)
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return where


def _create(path: Path, data: bytes, mode: int) -> None:
    """A new file with ``mode`` from its first byte (no window where a key is readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)  # whatever the umask took away
        handle.write(data)


def quote(value: str) -> str:
    """``value`` as a `.env` value: bare when it is one plain token, else double-quoted."""
    if "\n" in value or "\r" in value:
        raise ValueError("a .env value must be one line")
    if _PLAIN.fullmatch(value):
        return value
    escaped = "".join("\\" + ch if ch in '\\"$`' else ch for ch in value)
    return f'"{escaped}"'


def read(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (``export`` allowed; ``#`` comments; values bare, '…' or "…" on one line).

    Raises ConfigError naming the file and line for anything else.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError("bad-env-file", f"{path}: cannot read it ({why})") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        name = name.strip()
        if not sep or not _NAME.fullmatch(name):
            raise ConfigError("bad-env-file", f"{path}:{number}: expected NAME=value")
        try:
            found[name] = _value(value.strip())
        except ValueError as exc:
            raise ConfigError("bad-env-file", f"{path}:{number}: {name}: {exc}") from None
    return found


def _value(text: str) -> str:
    if not text or text[0] not in "'\"":
        return text
    quote_char, body = text[0], text[1:]
    if quote_char == "'":
        if not body.endswith("'"):
            raise ValueError("unclosed ' (values are one line)")
        return body[:-1]
    out: list[str] = []
    chars = iter(body)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
        elif ch == '"':
            if next(chars, None) is not None:
                raise ValueError('text after the closing "')
            return "".join(out)
        else:
            out.append(ch)
    raise ValueError('unclosed " (values are one line)')


def load_into(environ: MutableMapping[str, str], path: Path) -> list[str]:
    """Set what ``path`` holds in ``environ`` where it is not set already (the environment wins,
    as with dotenv). No file: nothing. Returns the names set."""
    if not path.is_file():
        return []
    loaded = []
    for name, value in read(path).items():
        if not environ.get(name, "").strip():
            environ[name] = value
            loaded.append(name)
    return loaded
