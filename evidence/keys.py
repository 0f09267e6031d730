"""Signing keys and the public keys that verify them: Ed25519 by default, ECDSA P-256 as an option.

A keyid is the SHA-256 of the key's DER SubjectPublicKeyInfo, so anyone holding the public key
derives the same id without trusting a label in the envelope.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from evidence.errors import EvidenceError

ED25519 = "ed25519"
ECDSA_P256 = "ecdsa-p256-sha256"
ALGORITHMS = (ED25519, ECDSA_P256)
#: Short names the CLI accepts (``--algorithm ecdsa-p256``).
ALIASES = {"ed25519": ED25519, "ecdsa-p256": ECDSA_P256, ECDSA_P256: ECDSA_P256}

PublicCrypto = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateCrypto = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey

_ECDSA = ec.ECDSA(hashes.SHA256())
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)
_HOW = "use `baton keys generate` to make an Ed25519 or ECDSA P-256 key"


def _algorithm_of(key: object, source: str) -> str:
    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return ED25519
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        if isinstance(key.curve, ec.SECP256R1):
            return ECDSA_P256
        raise EvidenceError(
            "bad-key", f"{source}: ECDSA curve {key.curve.name} is not supported (only P-256); {_HOW}"
        )
    raise EvidenceError("bad-key", f"{source}: {type(key).__name__} is not supported; {_HOW}")


class PublicKey:
    """A verifying key; ``verify`` answers yes or no and never raises on a bad signature."""

    __slots__ = ("_crypto", "algorithm", "keyid")

    def __init__(self, crypto: PublicCrypto, algorithm: str, keyid: str) -> None:
        self._crypto = crypto
        self.algorithm = algorithm
        self.keyid = keyid

    @classmethod
    def from_crypto(cls, key: object) -> PublicKey:
        algorithm = _algorithm_of(key, "public key")
        if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey):
            raise EvidenceError("bad-key", f"public key: expected a public key, got {type(key).__name__}")
        der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(key, algorithm, hashlib.sha256(der).hexdigest())

    @classmethod
    def from_pem(cls, data: bytes | str, source: str) -> PublicKey:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            key = serialization.load_pem_public_key(raw)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise EvidenceError("bad-key", f"{source}: not a PEM public key ({exc})") from exc
        _algorithm_of(key, source)
        return cls.from_crypto(key)

    @classmethod
    def from_json(cls, data: Mapping[str, object], source: str) -> PublicKey:
        """One entry of a keys document; its keyid and algorithm must match the key itself."""
        pem = data.get("publicKey")
        if not isinstance(pem, str):
            raise EvidenceError("bad-key", f"{source}: key entry has no publicKey PEM string")
        key = cls.from_pem(pem, source)
        if data.get("keyid") not in (None, key.keyid):
            raise EvidenceError(
                "bad-key",
                f"{source}: keyid {data.get('keyid')!r} does not match its publicKey (keyid {key.keyid})",
            )
        if data.get("algorithm") not in (None, key.algorithm):
            raise EvidenceError(
                "bad-key",
                f"{source}: algorithm {data.get('algorithm')!r} does not match its publicKey "
                f"({key.algorithm})",
            )
        return key

    @property
    def crypto(self) -> PublicCrypto:
        return self._crypto

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            if isinstance(self._crypto, ed25519.Ed25519PublicKey):
                self._crypto.verify(signature, data)
            else:
                self._crypto.verify(signature, data, _ECDSA)
        except (InvalidSignature, ValueError):
            return False
        return True

    def pem(self) -> str:
        return self._crypto.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")

    def to_json(self) -> dict[str, str]:
        return {"keyid": self.keyid, "algorithm": self.algorithm, "publicKey": self.pem()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.keyid == self.keyid

    def __hash__(self) -> int:
        return hash(self.keyid)

    def __repr__(self) -> str:
        return f"PublicKey({self.algorithm}, keyid={self.keyid})"


class SigningKey:
    """A private key that signs envelopes and checkpoints (ECDSA signatures are DER, as DSSE tools expect)."""

    __slots__ = ("_crypto", "algorithm", "keyid", "public")

    def __init__(self, crypto: PrivateCrypto) -> None:
        self._crypto = crypto
        self.public = PublicKey.from_crypto(crypto.public_key())
        self.algorithm = self.public.algorithm
        self.keyid = self.public.keyid

    @classmethod
    def generate(cls, algorithm: str = ED25519) -> SigningKey:
        name = ALIASES.get(algorithm)
        if name == ED25519:
            return cls(ed25519.Ed25519PrivateKey.generate())
        if name == ECDSA_P256:
            return cls(ec.generate_private_key(ec.SECP256R1()))
        raise EvidenceError("bad-key", f"unknown algorithm {algorithm!r}: choose one of {', '.join(ALIASES)}")

    @classmethod
    def from_pem(cls, data: bytes | str, source: str) -> SigningKey:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            key = serialization.load_pem_private_key(raw, password=None)
        except TypeError as exc:  # encrypted, and we gave no password
            raise EvidenceError(
                "bad-key",
                f"{source}: the private key is encrypted; Baton needs an unencrypted PKCS#8 key ({_HOW})",
            ) from exc
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise EvidenceError("bad-key", f"{source}: not a PEM private key ({exc}); {_HOW}") from exc
        _algorithm_of(key, source)
        if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
            raise EvidenceError("bad-key", f"{source}: {type(key).__name__} is not supported; {_HOW}")
        return cls(key)

    def sign(self, data: bytes) -> bytes:
        if isinstance(self._crypto, ed25519.Ed25519PrivateKey):
            return self._crypto.sign(data)
        return self._crypto.sign(data, _ECDSA)

    def private_pem(self) -> bytes:
        return self._crypto.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def __repr__(self) -> str:
        return f"SigningKey({self.algorithm}, keyid={self.keyid})"


def keyring(keys: Iterable[PublicKey]) -> dict[str, PublicKey]:
    """Index keys by keyid, which is how envelopes and checkpoints name their signer."""
    return {key.keyid: key for key in keys}


def keys_document(keys: Sequence[PublicKey]) -> dict[str, object]:
    """What Baton serves at /.well-known/baton/keys (old keys stay listed so old receipts verify)."""
    return {"keys": [key.to_json() for key in keys]}


def read_keys(text: str, source: str) -> dict[str, PublicKey]:
    """Trusted keys from a keys document, one or more PEM public keys, or a PEM private key's public half."""
    if text.lstrip().startswith("{"):
        return keyring(_keys_from_json(text, source))
    found: list[PublicKey] = []
    for block in _PEM_BLOCK.finditer(text):
        label = block.group(1)
        if label == "PUBLIC KEY":
            found.append(PublicKey.from_pem(block.group(0), source))
        elif label.endswith("PRIVATE KEY"):
            found.append(SigningKey.from_pem(block.group(0), source).public)
        else:
            raise EvidenceError(
                "bad-key", f"{source}: a PEM {label} block is not a key Baton can use; {_HOW}"
            )
    if not found:
        raise EvidenceError("bad-key", f"{source}: no PEM public key and no keys document found")
    return keyring(found)


def _keys_from_json(text: str, source: str) -> list[PublicKey]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise EvidenceError("bad-key", f"{source}: not valid JSON ({exc})") from exc
    if isinstance(doc, dict) and "publicKey" in doc:
        entries: object = [doc]
    elif isinstance(doc, dict):
        entries = doc.get("keys")
    else:
        entries = None
    if not isinstance(entries, list) or not entries:
        raise EvidenceError(
            "bad-key", f'{source}: a keys document is {{"keys": [{{"keyid", "algorithm", "publicKey"}}]}}'
        )
    keys: list[PublicKey] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise EvidenceError("bad-key", f"{source}: keys[{i}] is not an object")
        keys.append(PublicKey.from_json(entry, f"{source}: keys[{i}]"))
    return keys
