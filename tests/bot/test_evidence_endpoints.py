"""The evidence as `baton serve` publishes it: keys, checkpoint, entries, proofs and receipts, checked
the way an outside verifier would (published keys only), over a real Redis log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from baton.settings import Settings
from bot import evidence as endpoints
from bot.app import create_app
from evidence import checkpoint, dsse, links, merkle, statement
from evidence.encoding import canonical_json
from evidence.errors import EvidenceError
from evidence.keys import SigningKey, keyring, read_keys
from evidence.log import Log
from evidence.verify import BUNDLE_MEDIA_TYPE, verify_receipt
from tests.conftest import EvidenceKeys
from worker.receipts import Signer

INSTALLATION = 4242
BASE = f"/.well-known/baton/log/{INSTALLATION}"
SIZE = 7
RETIRED = 3  # the first entries were signed before the key was rotated
AUDIT_SECRET = b"x" * 32
OPERATOR = "0123456789abcdef0123456789abcdef"


def link(index: int) -> str:
    """A receipt's path as its check run's details link gives it: with its key."""
    return f"{BASE}/receipts/{index}?{links.KEY_PARAM}={links.receipt_key(AUDIT_SECRET, INSTALLATION, index)}"


def commit(i: int) -> str:
    return f"{i:040x}"


def envelope(key: SigningKey, i: int) -> dict[str, object]:
    subject = statement.Subject("octo/repo", {"gitCommit": commit(i)})
    payload = statement.statement([subject], statement.TEST_RESULT, {"result": "PASSED", "run": i})
    return dsse.sign(payload, key)


@dataclass
class Published:
    client: TestClient
    key: SigningKey
    old: SigningKey
    envelopes: list[dict[str, object]]
    roots: dict[int, bytes]  # tree size -> root, from the checkpoints the appends signed
    log: Log

    def append(self, i: int) -> None:
        signer = self.old if i < RETIRED else self.key
        self.envelopes.append(envelope(signer, i))
        done = self.log.append(canonical_json(self.envelopes[-1]), signer)
        cp = checkpoint.verify(done.checkpoint, keyring([self.key.public, self.old.public]))
        self.roots[cp.size] = cp.root

    def get(self, path: str, status: int = 200) -> Any:
        r = self.client.get(path)
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/json"
        return r.json()


@pytest.fixture
def published(evidence_keys: EvidenceKeys, redis_url: str, rdb: redis.Redis) -> Iterator[Published]:
    old = SigningKey.generate("ecdsa-p256")
    settings = Settings(signing_key=evidence_keys.key, retired_keys=(old.public,), audit_secret=AUDIT_SECRET,
                        metrics_token=OPERATOR)  # fmt: skip
    with TestClient(create_app(settings, redis_url)) as client:
        pub = Published(client, evidence_keys.key, old, [], {}, Log(rdb, INSTALLATION))
        for i in range(SIZE):
            pub.append(i)
        yield pub


def test_the_keys_document_lists_the_current_key_then_the_retired_ones(published: Published) -> None:
    r = published.client.get("/.well-known/baton/keys")
    assert r.status_code == 200
    assert "max-age" in r.headers["cache-control"]
    assert "PRIVATE" not in r.text
    assert [k["keyid"] for k in r.json()["keys"]] == [published.key.keyid, published.old.keyid]
    assert set(read_keys(r.text, "keys")) == {published.key.keyid, published.old.keyid}


def test_every_receipt_verifies_with_the_published_keys_only(published: Published) -> None:
    keys = read_keys(published.client.get("/.well-known/baton/keys").text, "keys")
    for i in range(SIZE):
        r = published.client.get(link(i))
        assert r.status_code == 200
        assert r.headers["cache-control"] == "no-store"
        receipt = r.json()
        assert receipt["mediaType"] == BUNDLE_MEDIA_TYPE
        assert receipt["dsseEnvelope"] == published.envelopes[i]
        assert receipt["logEntry"]["checkpoint"] == published.log.checkpoint()  # the current one
        verified = verify_receipt(receipt, keys, commit=commit(i))
        assert (verified.log_index, verified.tree_size, verified.installation) == (i, SIZE, INSTALLATION)
        assert verified.keyid == (published.old if i < RETIRED else published.key).keyid
        with pytest.raises(EvidenceError) as caught:
            verify_receipt(receipt, keyring([SigningKey.generate().public]))
        assert caught.value.code == "unknown-key"
        with pytest.raises(EvidenceError) as caught:
            verify_receipt(receipt, keys, commit=commit(i + 1))
        assert caught.value.code == "subject-mismatch"

    # After another append, an old entry's receipt is proved against the new tree head.
    published.append(SIZE)
    receipt = published.get(link(1))
    assert verify_receipt(receipt, keys, commit=commit(1)).tree_size == SIZE + 1


def test_a_receipt_is_served_to_its_link_or_the_operator_only(published: Published) -> None:
    """A receipt names a repository, its commits and its policy, and the repository may be private:
    its content goes to the link its check run gives (with the key) or the operator's token."""
    key = links.receipt_key(AUDIT_SECRET, INSTALLATION, 2)
    for path in (f"{BASE}/receipts/2", f"{BASE}/receipts/2?k=", f"{BASE}/receipts/2?k={key[:-1]}0",
                 f"{BASE}/receipts/3?k={key}"):  # fmt: skip
        refused = published.get(path, 403)
        assert "the link its check run gives" in refused["error"], path
        assert "octo/repo" not in str(refused)
    assert published.get(link(2))["dsseEnvelope"] == published.envelopes[2]
    operator = published.client.get(f"{BASE}/receipts/2", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert operator.status_code == 200
    assert operator.json()["dsseEnvelope"] == published.envelopes[2]
    wrong = published.client.get(f"{BASE}/receipts/2", headers={"Authorization": "Bearer " + "f" * 32})
    assert wrong.status_code == 403


def test_the_link_a_check_run_gives_opens_its_receipt() -> None:
    signer = Signer(SigningKey.generate(), AUDIT_SECRET, "https://baton.example.com")
    url = signer.details_url(INSTALLATION, 5)
    assert url == f"https://baton.example.com{link(5)}"
    assert links.key_matches(AUDIT_SECRET, INSTALLATION, 5, url.rsplit("=", 1)[1])
    assert not links.key_matches(b"y" * 32, INSTALLATION, 5, url.rsplit("=", 1)[1])  # another Baton's
    assert not links.key_matches(None, INSTALLATION, 5, url.rsplit("=", 1)[1])


def test_the_checkpoint_is_the_latest_signed_tree_head(published: Published) -> None:
    doc = published.get(f"{BASE}/checkpoint")
    cp = checkpoint.verify(doc, keyring([published.key.public]))
    assert (cp.origin, cp.size, cp.root) == (checkpoint.origin_for(INSTALLATION), SIZE, published.roots[SIZE])
    assert published.client.get(f"{BASE}/checkpoint").headers["cache-control"] == "no-store"


def test_entries_are_the_logged_envelopes_with_their_leaf_hashes(published: Published) -> None:
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    page = published.client.get(f"{BASE}/entries?start=2&end=5", headers=operator).json()
    assert (page["start"], page["end"]) == (2, 5)
    assert [e["index"] for e in page["entries"]] == [2, 3, 4]
    for e in page["entries"]:
        assert e["entry"] == published.envelopes[e["index"]]
        assert e["leafHash"] == merkle.leaf_hash(canonical_json(e["entry"])).hex()
    # To anyone else, the log's shape only: the leaf hashes that prove it, not what the receipts say.
    public = published.get(f"{BASE}/entries?start=2&end=5")
    assert public["entries"] == [{"index": e["index"], "leafHash": e["leafHash"]} for e in page["entries"]]
    everything = published.get(f"{BASE}/entries?start=0")
    assert everything["end"] == SIZE
    leaves = [bytes.fromhex(e["leafHash"]) for e in everything["entries"]]
    assert merkle.root(leaves) == published.roots[SIZE]
    assert published.get(f"{BASE}/entries")["end"] == SIZE  # start defaults to 0
    assert published.get(f"{BASE}/entries?start={SIZE}") == {"start": SIZE, "end": SIZE, "entries": []}


def test_inclusion_and_consistency_proofs_verify(published: Published) -> None:
    leaves = [merkle.leaf_hash(canonical_json(e)) for e in published.envelopes]
    for size in range(1, SIZE + 1):
        for index in range(size):
            doc = published.get(f"{BASE}/proof/inclusion?index={index}&size={size}")
            assert (doc["index"], doc["size"]) == (index, size)
            proof = [bytes.fromhex(h) for h in doc["proof"]]
            merkle.verify_inclusion(leaves[index], index, size, proof, published.roots[size])
        for old in range(1, size + 1):
            doc = published.get(f"{BASE}/proof/consistency?from={old}&to={size}")
            assert (doc["from"], doc["to"]) == (old, size)
            proof = [bytes.fromhex(h) for h in doc["proof"]]
            merkle.verify_consistency(old, size, published.roots[old], published.roots[size], proof)
    # Sizes default to the current tree; from the empty tree there is nothing to prove.
    assert published.get(f"{BASE}/proof/inclusion?index=3")["size"] == SIZE
    assert published.get(f"{BASE}/proof/consistency?from=2")["to"] == SIZE
    assert published.get(f"{BASE}/proof/consistency?from=0&to=5")["proof"] == []
    doc = published.get(f"{BASE}/proof/inclusion?index=2&size={SIZE}")
    proof = [bytes.fromhex(h) for h in doc["proof"]]
    with pytest.raises(EvidenceError):  # and it proves that leaf only
        merkle.verify_inclusion(leaves[3], 2, SIZE, proof, published.roots[SIZE])


BAD = [
    ("entries?start=-1", "start"),
    ("entries?start=abc", "start"),
    ("entries?start=%C2%B2", "start"),  # a superscript two: a digit to str.isdigit, not to us
    (f"entries?start={SIZE + 1}", "start"),
    ("entries?start=3&end=2", "end"),
    (f"entries?end={SIZE + 1}", "end"),
    ("entries?start=0&end=1e3", "end"),
    ("proof/inclusion", "index"),
    ("proof/inclusion?index=", "index"),
    (f"proof/inclusion?index={SIZE}", "index"),
    ("proof/inclusion?index=1.5", "index"),
    (f"proof/inclusion?index=1&size={SIZE + 1}", "size"),
    ("proof/inclusion?index=1&size=1", "index"),
    ("proof/inclusion?index=0&size=-3", "size"),
    ("proof/consistency", "from"),
    ("proof/consistency?from=5&to=3", "from"),
    (f"proof/consistency?from=1&to={SIZE + 1}", "to"),
    ("proof/consistency?from=1&to=x", "to"),
    (f"receipts/{SIZE}", "index"),
    ("receipts/-1", "index"),
    ("receipts/one", "index"),
    ("receipts/" + "9" * 40, "index"),
]


def test_every_bad_parameter_is_a_400_naming_it(
    published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path, name in BAD:
        error = published.get(f"{BASE}/{path}", 400)["error"]
        assert error.startswith(name + " ") or f" {name} " in error, (path, error)
    monkeypatch.setattr(endpoints, "MAX_ENTRIES", 3)
    assert "at most 3 entries" in published.get(f"{BASE}/entries?start=0&end=4", 400)["error"]
    assert len(published.get(f"{BASE}/entries?start=0")["entries"]) == 3  # the default end is capped too
    for route in ("checkpoint", "entries", "proof/inclusion?index=0", "receipts/0"):
        error = published.get(f"/.well-known/baton/log/x{INSTALLATION}/{route}", 400)["error"]
        assert error.startswith("installation must be a non-negative integer")


def test_an_unknown_installation_is_a_404(published: Published) -> None:
    for route in (
        "checkpoint",
        "entries",
        "proof/inclusion?index=0",
        "proof/consistency?from=1",
        "receipts/0",
    ):
        assert published.get(f"/.well-known/baton/log/99/{route}", 404) == {
            "error": "no log for installation 99"
        }


def test_without_a_key_or_redis_nothing_is_published(redis_url: str) -> None:
    with TestClient(create_app(Settings(), redis_url)) as client:  # setup mode
        r = client.get("/.well-known/baton/keys")
        assert r.status_code == 404
        assert "no signing key" in r.json()["error"]
    with TestClient(create_app(Settings(), None)) as client:
        r = client.get(f"{BASE}/checkpoint")
        assert r.status_code == 503
        assert "unavailable" in r.json()["error"]
