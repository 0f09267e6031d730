"""Keys and DSSE envelopes: the spec's PAE vector, both algorithms, tampering, and interop with
securesystemslib (the reference DSSE implementation used by in-toto and sigstore tooling)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

from evidence import dsse
from evidence.encoding import b64decode, b64encode
from evidence.errors import EvidenceError
from evidence.keys import ALGORITHMS, PublicKey, SigningKey, keyring, keys_document, read_keys

PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1","hello":"world"}'


@pytest.fixture(scope="module", params=["ed25519", "ecdsa-p256"])
def key(request: pytest.FixtureRequest) -> SigningKey:
    return SigningKey.generate(request.param)


def reject(code: str, envelope: object, keys: dict[str, PublicKey]) -> EvidenceError:
    with pytest.raises(EvidenceError) as caught:
        dsse.verify(envelope, keys)  # type: ignore[arg-type]
    assert caught.value.code == code, caught.value.message
    return caught.value


def test_pae_matches_the_spec_vector() -> None:
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert dsse.pae("t", "é".encode()) == "DSSEv1 1 t 2 é".encode()  # lengths count bytes


def test_sign_and_verify(key: SigningKey) -> None:
    assert key.algorithm in ALGORITHMS
    envelope = dsse.sign(PAYLOAD, key)
    assert envelope["payloadType"] == dsse.PAYLOAD_TYPE
    assert envelope["signatures"] == [{"keyid": key.keyid, "sig": envelope["signatures"][0]["sig"]}]  # type: ignore[index]
    assert dsse.verify(envelope, keyring([key.public])) == PAYLOAD
    assert dsse.verify_signer(envelope, keyring([key.public])) == (PAYLOAD, key.keyid)


def test_ecdsa_signatures_are_der() -> None:
    key = SigningKey.generate("ecdsa-p256-sha256")
    signature = key.sign(b"data")
    r, s = decode_dss_signature(signature)
    assert encode_dss_signature(r, s) == signature
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")  # the IEEE P1363 form some tools emit: refused
    assert not key.public.verify(raw, b"data")
    assert key.public.verify(signature, b"data")


def test_keyid_is_the_sha256_of_the_spki_and_stable(key: SigningKey) -> None:
    der = key.public.crypto.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key.keyid == hashlib.sha256(der).hexdigest()
    assert len(key.keyid) == 64
    assert PublicKey.from_pem(key.public.pem(), "pem").keyid == key.keyid
    assert SigningKey.from_pem(key.private_pem(), "private").keyid == key.keyid
    assert PublicKey.from_json(key.public.to_json(), "json") == key.public
    assert SigningKey.generate(key.algorithm).keyid != key.keyid


def test_traditional_ec_pem_is_accepted_and_other_keys_are_refused() -> None:
    p256 = ec.generate_private_key(ec.SECP256R1())
    traditional = p256.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert traditional.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    assert SigningKey.from_pem(traditional, "ec.pem").algorithm == "ecdsa-p256-sha256"
    p384 = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    rsa_pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    encrypted = p256.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    for pem, words in [
        (p384, "P-256"),
        (rsa_pem, "RSAPrivateKey"),
        (encrypted, "encrypted"),
        (b"junk", "PEM"),
    ]:
        with pytest.raises(EvidenceError) as caught:
            SigningKey.from_pem(pem, "the.pem")
        assert caught.value.code == "bad-key"
        assert caught.value.message.startswith("the.pem: ")
        assert words in caught.value.message
    with pytest.raises(EvidenceError, match="choose one of ed25519"):
        SigningKey.generate("rsa")


def test_read_keys_takes_documents_pems_and_private_keys() -> None:
    a, b = SigningKey.generate(), SigningKey.generate("ecdsa-p256")
    document = json.dumps(keys_document([a.public, b.public]))
    assert set(read_keys(document, "doc")) == {a.keyid, b.keyid}
    assert set(read_keys(a.public.pem() + "\n" + b.public.pem(), "pems")) == {a.keyid, b.keyid}
    assert set(read_keys(a.private_pem().decode(), "private")) == {a.keyid}
    lying = json.dumps({"keys": [{**a.public.to_json(), "keyid": b.keyid}]})
    for text in [
        lying,
        "{",
        "no keys here",
        '{"keys": []}',
        "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----",
    ]:
        with pytest.raises(EvidenceError) as caught:
            read_keys(text, "k.txt")
        assert caught.value.code == "bad-key"
        assert "k.txt" in caught.value.message


def flip(text: str, at: int = 0) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[at] ^= 0x01
    return b64encode(bytes(raw))


def test_a_flipped_byte_anywhere_is_rejected(key: SigningKey) -> None:
    keys = keyring([key.public])
    envelope = dsse.sign(PAYLOAD, key)
    for at in (0, len(PAYLOAD) // 2, len(PAYLOAD) - 1):
        changed = copy.deepcopy(envelope)
        changed["payload"] = flip(str(envelope["payload"]), at)
        assert key.keyid in reject("bad-signature", changed, keys).message
    for at in (0, 10, -1):
        changed = copy.deepcopy(envelope)
        signature = changed["signatures"][0]  # type: ignore[index]
        signature["sig"] = flip(signature["sig"], at)
        reject("bad-signature", changed, keys)
    changed = copy.deepcopy(envelope)
    changed["payloadType"] = "application/vnd.in-toto+jsoN"
    reject("bad-signature", changed, keys)
    changed = copy.deepcopy(envelope)
    keyid = key.keyid[:-1] + ("0" if key.keyid[-1] != "0" else "1")
    changed["signatures"][0]["keyid"] = keyid  # type: ignore[index]
    error = reject("unknown-key", changed, keys)
    assert keyid in error.message
    assert key.keyid in error.message  # the trusted keyids are listed too


def test_malformed_envelopes_are_named(key: SigningKey) -> None:
    keys = keyring([key.public])
    good = dsse.sign(PAYLOAD, key)
    sig = good["signatures"][0]  # type: ignore[index]
    cases: list[tuple[object, str]] = [
        ([], "object"),
        ({**good, "payload": None}, "payload"),
        ({k: v for k, v in good.items() if k != "payload"}, "payload"),
        ({**good, "payloadType": 3}, "payloadType"),
        ({**good, "signatures": []}, "signatures"),
        ({**good, "signatures": "sig"}, "signatures"),
        ({**good, "signatures": [{"sig": sig["sig"]}]}, "signatures[0].keyid"),
        ({**good, "signatures": [{"keyid": "", "sig": sig["sig"]}]}, "signatures[0].keyid"),
        ({**good, "signatures": [{"keyid": key.keyid, "sig": "%%%"}]}, "signatures[0].sig"),
        ({**good, "payload": str(good["payload"]) + "!"}, "payload"),
    ]
    for envelope, field in cases:
        assert field in reject("malformed-envelope", envelope, keys).message


def test_url_safe_and_unpadded_base64_are_accepted(key: SigningKey) -> None:
    payload = b"\xfb\xff" * 7  # encodes with + and / in the standard alphabet
    envelope = dsse.sign(payload, key)
    url = copy.deepcopy(envelope)
    url["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    signature = url["signatures"][0]  # type: ignore[index]
    signature["sig"] = base64.urlsafe_b64encode(base64.b64decode(signature["sig"])).decode().rstrip("=")
    assert "-" in str(url["payload"]) or "_" in str(url["payload"])
    assert dsse.verify(url, keyring([key.public])) == payload


def test_base64_decoding_is_strict() -> None:
    assert b64decode("aGk=", "x") == b"hi"
    assert b64decode("aGk", "x") == b"hi"
    assert b64decode("-_8", "x") == b64decode("+/8=", "x") == b"\xfb\xff"
    for bad in ["aGk==", "aGk=a", "a", "aGl=", " aGk=", "aGk=\n", "a=Gk", 5]:
        with pytest.raises(EvidenceError) as caught:
            b64decode(bad, "field")
        assert (caught.value.code, caught.value.message[:8]) == ("malformed-envelope", "field is")


def test_a_signature_by_an_untrusted_key_is_skipped(key: SigningKey) -> None:
    other = SigningKey.generate()
    mine, theirs = dsse.sign(PAYLOAD, key), dsse.sign(PAYLOAD, other)
    both = {**mine, "signatures": [*theirs["signatures"], *mine["signatures"]]}  # type: ignore[misc]
    assert dsse.verify_signer(both, keyring([key.public])) == (PAYLOAD, key.keyid)


# --- securesystemslib interop -------------------------------------------------------------------------


def test_securesystemslib_verifies_our_envelopes(key: SigningKey) -> None:
    envelope = dsse.sign(PAYLOAD, key)
    theirs = SSlibKey.from_crypto(key.public.crypto, keyid=key.keyid)
    verified = Envelope.from_dict(copy.deepcopy(envelope)).verify([theirs], 1)
    assert set(verified) == {key.keyid}
    tampered = copy.deepcopy(envelope)
    tampered["payload"] = flip(str(envelope["payload"]))
    with pytest.raises(VerificationError):
        Envelope.from_dict(tampered).verify([theirs], 1)


def test_we_verify_securesystemslib_envelopes(key: SigningKey) -> None:
    private = serialization.load_pem_private_key(key.private_pem(), None)
    signer = CryptoSigner(private, SSlibKey.from_crypto(key.public.crypto, keyid=key.keyid))
    envelope = Envelope(PAYLOAD, dsse.PAYLOAD_TYPE, {})
    envelope.sign(signer)
    assert dsse.verify(envelope.to_dict(), keyring([key.public])) == PAYLOAD


def test_cryptography_agrees_our_ecdsa_is_sha256() -> None:
    key = SigningKey.generate("ecdsa-p256")
    data = dsse.pae(dsse.PAYLOAD_TYPE, PAYLOAD)
    crypto = key.public.crypto
    assert isinstance(crypto, ec.EllipticCurvePublicKey)
    crypto.verify(key.sign(data), data, ec.ECDSA(hashes.SHA256()))
