"""Where the App's credentials wait between calls: the JWT in this process, tokens sealed in Redis.

githubkit keeps both the App's JWT and installation tokens in its cache strategy.
The JWT can mint a token with every permission the App has, so it never leaves
this process: it is cheap to sign, and kept here in memory for githubkit's few
minutes. Installation tokens are shared by every worker through Redis, sealed
with AES-256-GCM under a key derived (HKDF-SHA256) from the App's private key,
which Redis does not hold; each entry is bound to its Redis key name, so a
wider token moved under a narrower entry does not open. An entry that does not
open (another private key, tampering, garbage) is a cache miss: a new token is
minted and sealed in its place.

Entries live under a per-key namespace (an HKDF-derived id, not the key), so
workers holding an old and a new private key during a rotation keep their own
tokens rather than overwriting each other's.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from datetime import timedelta
from typing import NoReturn

import redis
from cryptography.exceptions import InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from githubkit.cache import BaseCache, BaseCacheStrategy
from githubkit.exception import CacheUnsupportedError

#: HKDF ``info`` strings: fixed, so every worker with the same private key derives the same keys.
SEAL_INFO = b"baton/github/installation-token-cache/aes-256-gcm/v1"
NAMESPACE_INFO = b"baton/github/installation-token-cache/namespace/v1"
_VERSION = b"v1."
_NONCE_BYTES = 12

#: githubkit's installation-token cache keys (``AppAuth.INSTALLATION_CACHE_KEY``) look like
#: ``githubkit:auth:app:{issuer}:installation:{id}:...``; nothing else goes to Redis.
_SHARED_PREFIX = "githubkit:auth:app:"
_SHARED_MARK = ":installation:"


def _key_material(private_key: str) -> bytes:
    """The private key in one canonical form (PKCS#8 DER), whichever PEM form it came in.

    A PEM that does not load cannot sign a JWT either, so no token is ever cached with it;
    its text still gives a key, so that nothing here fails first."""
    try:
        key = serialization.load_pem_private_key(
            private_key.encode(), password=None, unsafe_skip_rsa_key_validation=True
        )
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return private_key.strip().encode()
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _derive(material: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(material)


class SealedTokenCache(BaseCache):
    """githubkit's sync cache: installation tokens sealed in Redis, anything else in memory."""

    def __init__(self, client: redis.Redis, prefix: str, private_key: str) -> None:
        material = _key_material(private_key)
        self._aead = AESGCM(_derive(material, SEAL_INFO, 32))
        self.prefix = f"{prefix}:{_derive(material, NAMESPACE_INFO, 8).hex()}"
        self._redis = client
        self._memory: dict[str, tuple[str, float]] = {}  # key -> (value, monotonic expiry)

    @staticmethod
    def shared(key: str) -> bool:
        """Is this an installation token (shared through Redis)? Anything else stays here."""
        return key.startswith(_SHARED_PREFIX) and _SHARED_MARK in key

    def redis_key(self, key: str) -> str:
        return f"{self.prefix}:{key}"

    def get(self, key: str) -> str | None:
        if not self.shared(key):
            value, expires = self._memory.get(key, ("", 0.0))
            return value if time.monotonic() < expires else None
        name = self.redis_key(key)
        sealed = self._redis.get(name)
        return self.open(name, sealed) if isinstance(sealed, bytes | str) else None

    def set(self, key: str, value: str, ex: timedelta) -> None:
        if not self.shared(key):
            self._memory[key] = (value, time.monotonic() + ex.total_seconds())
            return
        # githubkit keeps a token until a minute before it expires; one minted with less than
        # that gets a zero or negative expiry, which Redis refuses: it is used, not cached.
        if ex.total_seconds() < 1:
            return
        name = self.redis_key(key)
        self._redis.set(name, self.seal(name, value), ex=ex)

    def seal(self, name: str, token: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, token.encode(), name.encode())
        return _VERSION + base64.urlsafe_b64encode(nonce + sealed)

    def open(self, name: str, stored: bytes | str) -> str | None:
        """The token, or None (a cache miss) if ``stored`` was not sealed here for ``name``."""
        data = stored.encode() if isinstance(stored, str) else stored
        if not data.startswith(_VERSION):
            return None
        try:
            raw = base64.urlsafe_b64decode(data[len(_VERSION) :])
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], name.encode())
            return plain.decode()
        except (binascii.Error, ValueError, InvalidTag):  # UnicodeDecodeError is a ValueError
            return None


class SealedTokenStrategy(BaseCacheStrategy):
    """One SealedTokenCache per App client (its JWT memory lives as long as the client).

    Baton keeps no HTTP cache: hishel would store responses, the token exchange's
    included, in plain text, so asking for one fails loudly."""

    def __init__(self, cache: SealedTokenCache) -> None:
        self.cache = cache

    def get_cache_storage(self) -> SealedTokenCache:
        return self.cache

    async def get_async_cache_storage(self) -> NoReturn:
        raise CacheUnsupportedError("Baton's GitHub client is synchronous")

    def get_hishel_storage(self) -> NoReturn:
        raise CacheUnsupportedError("Baton keeps no HTTP cache (responses would hold tokens in plain text)")

    async def get_async_hishel_storage(self) -> NoReturn:
        raise CacheUnsupportedError("Baton keeps no HTTP cache (responses would hold tokens in plain text)")
