"""in-toto Statements (checked by in-toto-attestation's own parser), signed checkpoints, encodings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from evidence import checkpoint, merkle, statement
from evidence.encoding import canonical_json, rfc3339
from evidence.errors import EvidenceError
from evidence.keys import SigningKey, keyring

COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"
PREDICATE: dict[str, object] = {
    "result": "PASSED",
    "configuration": [{"name": ".github/workflows/ci.yml", "digest": {"gitCommit": COMMIT}}],
    "url": "https://github.com/octo/repo/runs/7",
    "passedTests": ["tests/test_a.py::test_one"],
    "warnedTests": [],
    "failedTests": [],
}


def make(predicate_type: str = statement.TEST_RESULT, predicate: dict[str, object] | None = None) -> bytes:
    subjects = [
        statement.Subject("octo/repo", {"gitCommit": COMMIT}),
        statement.Subject("dist/app.tar.gz", {"sha256": "ab" * 32}),
    ]
    return statement.statement(subjects, predicate_type, PREDICATE if predicate is None else predicate)


def test_a_statement_is_canonical_json_and_parses_back() -> None:
    payload = make()
    value = json.loads(payload)
    assert payload == canonical_json(value)
    assert list(value) == ["_type", "predicate", "predicateType", "subject"]
    assert statement.parse(payload) == value
    assert statement.commits(value) == [COMMIT]


def test_in_toto_attestation_accepts_our_statement_and_test_result_predicate() -> None:
    pb = json_format.Parse(make().decode(), statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    assert (pb.type, pb.predicate_type) == (statement.STATEMENT_TYPE, statement.TEST_RESULT)
    assert dict(pb.subject[0].digest) == {"gitCommit": COMMIT}
    predicate = json_format.Parse(json.dumps(PREDICATE), test_result_pb2.TestResult())  # unknown fields fail
    assert predicate.result in {"PASSED", "WARNED", "FAILED"}
    assert len(predicate.configuration) == 1
    for descriptor in predicate.configuration:
        ResourceDescriptor.copy_from_pb(descriptor).validate()
    with pytest.raises(json_format.ParseError):
        json_format.Parse(json.dumps({**PREDICATE, "passed": 1}), test_result_pb2.TestResult())


def test_custom_predicates_pass_the_statement_validator() -> None:
    decision: dict[str, object] = {"decision": "allow", "decidedAt": rfc3339(1_764_531_388.123)}
    pb = json_format.Parse(make(statement.TRIFECTA_DECISION, decision).decode(), statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()


def mutated(**changes: Any) -> bytes:
    value = json.loads(make())
    value.update(changes)
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (mutated(_type="https://in-toto.io/Statement/v0.1"), "_type"),
        (mutated(subject=[]), "subject"),
        (mutated(subject=[{"name": "x"}]), "subject[0].digest"),
        (mutated(subject=[{"name": "x", "digest": {"gitCommit": COMMIT.upper()}}]), "gitCommit"),
        (mutated(subject=[{"name": 3, "digest": {"sha256": "ab"}}]), "subject[0].name"),
        (mutated(predicateType=""), "predicateType"),
        (mutated(predicate=[1]), "predicate"),
        (b"[1]", "object"),
        (b"\xff", "UTF-8"),
        (b'{"a": NaN}', "JSON"),
        (b'{"_type": "a", "_type": "b"}', "duplicate"),
    ],
)
def test_parse_rejects_bad_statements(payload: bytes, words: str) -> None:
    with pytest.raises(EvidenceError) as caught:
        statement.parse(payload)
    assert caught.value.code == "bad-statement"
    assert words in caught.value.message


def test_statement_refuses_to_build_a_bad_statement() -> None:
    with pytest.raises(EvidenceError, match="subject"):
        statement.statement([], statement.AGENT_RUN, {})
    with pytest.raises(EvidenceError, match="lowercase hex"):
        statement.statement([statement.Subject("x", {"sha256": "XYZ"})], statement.AGENT_RUN, {})


# --- checkpoints --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.generate()


def head(size: int = 5) -> checkpoint.Checkpoint:
    root = merkle.root([merkle.leaf_hash(bytes([i])) for i in range(size)])
    return checkpoint.Checkpoint(checkpoint.origin_for(4242), size, root, "2026-11-30T19:36:28.123Z")


def test_a_checkpoint_round_trips_and_signs_its_text_body(key: SigningKey) -> None:
    cp = head()
    assert checkpoint.origin_for(4242) == "baton/installation/4242"
    body = cp.body().decode()
    assert body.split("\n")[:2] == ["baton/installation/4242", "5"]
    assert body.endswith("\n2026-11-30T19:36:28.123Z\n")
    doc = checkpoint.sign(cp, key)
    assert set(doc) == {"origin", "treeSize", "rootHash", "timestamp", "keyid", "signature"}
    assert (doc["rootHash"], doc["keyid"]) == (cp.root.hex(), key.keyid)
    assert checkpoint.verify(json.loads(json.dumps(doc)), keyring([key.public])) == cp
    empty = checkpoint.sign(head(0), key)
    assert checkpoint.verify(empty, keyring([key.public])).root == merkle.EMPTY_ROOT


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("treeSize", 6),
        ("treeSize", "5"),
        ("treeSize", True),
        ("rootHash", "00" * 32),
        ("rootHash", "AB" * 32),
        ("rootHash", "ab" * 31),
        ("origin", "baton/installation/4243"),
        ("origin", "a\nb"),
        ("timestamp", "2026-11-30T19:36:29.123Z"),
        ("keyid", "ff" * 32),
        ("keyid", None),
        ("signature", "!!"),
    ],
)
def test_any_change_to_a_checkpoint_is_a_bad_checkpoint(key: SigningKey, field: str, value: object) -> None:
    doc = {**checkpoint.sign(head(), key), field: value}
    with pytest.raises(EvidenceError) as caught:
        checkpoint.verify(doc, keyring([key.public]))
    assert caught.value.code == "bad-checkpoint"


def test_an_empty_tree_must_have_the_empty_root(key: SigningKey) -> None:
    with pytest.raises(EvidenceError, match="empty tree"):
        checkpoint.sign(checkpoint.Checkpoint("o", 0, b"\x00" * 32, "t"), key)


def test_rfc3339_is_utc_milliseconds_with_z() -> None:
    assert rfc3339(1_764_531_388.1234) == "2025-11-30T19:36:28.123Z"
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_canonical_json_is_sorted_compact_utf8_and_refuses_nan() -> None:
    assert canonical_json({"b": 1, "a": ["é", 2]}) == '{"a":["é",2],"b":1}'.encode()
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": float("nan")})
