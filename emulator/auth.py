"""Who is calling, and may they: GitHub's rules for App JWTs and installation tokens.

JWT verification is written as numbered steps, each with the message GitHub
sends for that failure, so a client bug shows up as the same 401 it would get
from api.github.com.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from emulator.errors import ApiError, bad_credentials, not_accessible, not_found
from emulator.state import App, Installation, Repo, State, Token

#: GitHub tolerates this much clock drift on ``iat``.
CLOCK_SKEW_SECONDS = 60
#: An App JWT may live at most ten minutes.
MAX_JWT_LIFETIME_SECONDS = 600

_LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
_UNDECODABLE = "A JSON web token could not be decoded"


@dataclass(frozen=True)
class Caller:
    """The authenticated party behind one request."""

    kind: Literal["anonymous", "app", "installation"]
    app: App | None = None
    installation: Installation | None = None
    token: Token | None = None

    @property
    def rate_key(self) -> str:
        if self.installation is not None:
            return f"installation:{self.installation.id}"
        if self.app is not None:
            return f"app:{self.app.id}"
        return "anonymous"


def _jwt_error(message: str) -> ApiError:
    return ApiError(401, message)


def _looks_like_jwt(credential: str) -> bool:
    return credential.count(".") == 2 and not credential.startswith(("ghs_", "ghp_", "gho_", "ghu_"))


def authenticate(state: State, authorization: str | None) -> Caller:
    """Turn an ``Authorization`` header into a caller, or GitHub's 401."""
    if not authorization:
        return Caller(kind="anonymous")
    scheme, _, credential = authorization.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() not in {"bearer", "token"} or not credential:
        raise bad_credentials()
    if _looks_like_jwt(credential):
        return Caller(kind="app", app=verify_app_jwt(state, credential))
    token = state.tokens.get(credential)
    if token is None or token.expires_at <= state.now():
        raise bad_credentials()
    installation = state.installations.get(token.installation_id)
    if installation is None:  # uninstalled: its tokens die with it
        raise bad_credentials()
    if installation.suspended_at is not None:
        raise ApiError(403, "This installation has been suspended")
    return Caller(
        kind="installation",
        app=state.apps.get(installation.app_id),
        installation=installation,
        token=token,
    )


def _find_app(state: State, iss: Any) -> App | None:
    """GitHub accepts the App id (int or numeric string) or its client id as ``iss``."""
    if isinstance(iss, bool):
        return None
    if isinstance(iss, int):
        return state.apps.get(iss)
    if isinstance(iss, str):
        if iss.isdigit():
            return state.apps.get(int(iss))
        return next((a for a in state.apps.values() if a.client_id == iss), None)
    return None


def verify_app_jwt(state: State, credential: str) -> App:
    """Verify an App JWT the way GitHub does; each failed step has its own 401."""
    # Step 1: it must parse as a JWT at all, signed RS256.
    try:
        header = jwt.get_unverified_header(credential)
        claims: dict[str, Any] = jwt.decode(credential, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise _jwt_error(_UNDECODABLE) from exc
    if header.get("alg") != "RS256":
        raise _jwt_error(_UNDECODABLE)
    # Step 2: the issuer names a registered App.
    if "iss" not in claims:
        raise _jwt_error("'Issuer' claim ('iss') must be an Integer")
    app = _find_app(state, claims["iss"])
    if app is None:
        raise _jwt_error("Integration not found")
    # Step 3: the signature verifies with that App's public key.
    try:
        public_key = load_pem_public_key(app.public_key_pem.encode("ascii"))
        jwt.decode(
            credential,
            key=public_key,  # type: ignore[arg-type]
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_iss": False},
        )
    except (jwt.PyJWTError, ValueError) as exc:
        raise _jwt_error(_UNDECODABLE) from exc
    # Step 4: iat is an integer time, not in the future beyond the clock skew.
    now = state.now()
    iat = claims.get("iat")
    if not isinstance(iat, int | float) or isinstance(iat, bool) or iat > now + CLOCK_SKEW_SECONDS:
        raise _jwt_error("'Issued at' claim ('iat') must be an Integer representing a time in the past")
    # Step 5: exp is a future time, at most ten minutes out (from iat and from now).
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool) or exp <= now:
        raise _jwt_error(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time"
            " at which the assertion expires"
        )
    if exp - iat > MAX_JWT_LIFETIME_SECONDS or exp > now + MAX_JWT_LIFETIME_SECONDS:
        raise _jwt_error("'Expiration time' claim ('exp') is too far in the future")
    return app


def require_app(caller: Caller) -> App:
    """App-level endpoints (``/app/...``) take only a JWT."""
    if caller.kind == "app" and caller.app is not None:
        return caller.app
    raise ApiError(
        401,
        "A JSON web token could not be decoded",
        documentation_url="https://docs.github.com/rest",
    )


def new_token_string() -> str:
    alphabet = string.ascii_letters + string.digits
    return "ghs_" + "".join(secrets.choice(alphabet) for _ in range(36))


def level_at_least(granted: str | None, needed: str) -> bool:
    return _LEVELS.get(granted or "none", 0) >= _LEVELS[needed]


def narrow_permissions(installation: Installation, requested: dict[str, str] | None) -> dict[str, str]:
    """Permissions for a new token: a subset of the installation's, or GitHub's 422."""
    granted = dict(installation.permissions)
    granted.setdefault("metadata", "read")
    if not requested:
        return granted
    for name, level in requested.items():
        if level not in _LEVELS or not level_at_least(granted.get(name), level):
            raise ApiError(422, "The permissions requested are not granted to this installation.")
    narrowed = dict(requested)
    narrowed.setdefault("metadata", "read")
    return narrowed


def _token_reaches(caller: Caller, repo: Repo) -> bool:
    """Is ``repo`` inside both the installation and the (possibly narrowed) token?"""
    token, installation = caller.token, caller.installation
    if token is None or installation is None:
        return False
    same_owner = repo.owner.lower() == installation.account.lower()
    in_installation = (installation.repository_selection == "all" and same_owner) or (
        repo.full_name in installation.repositories
    )
    return in_installation and (token.repositories is None or repo.full_name in token.repositories)


def authorize_repo(caller: Caller, repo: Repo, permission: str, level: str) -> None:
    """May this caller do ``permission:level`` on ``repo``? Else GitHub's 401/403/404.

    Anyone may read a public repository. A private repository outside the
    caller's reach is answered 404, never 403: GitHub does not reveal that it
    exists. Inside the token's reach, a missing permission is a 403.
    """
    if not repo.private and level == "read":
        return
    if caller.kind == "installation" and _token_reaches(caller, repo):
        if level_at_least(caller.token.permissions.get(permission) if caller.token else None, level):
            return
        raise not_accessible()
    if repo.private:
        raise not_found()
    if caller.kind == "anonymous":
        raise ApiError(401, "Requires authentication")
    # A JWT speaks for the App itself, and a token outside its scope has no rights here.
    raise not_accessible()
