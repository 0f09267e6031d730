"""in-toto Statement v1: what a receipt says, about which commits or files.

``parse`` is strict because a verifier acts on the subjects: a statement that does not say clearly
which commit it covers must not pass for one that does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evidence.encoding import canonical_json
from evidence.errors import EvidenceError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
TRIFECTA_DECISION = "https://baton.dev/attestations/trifecta-decision/v1"
AGENT_RUN = "https://baton.dev/attestations/agent-run/v1"

_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class Subject:
    """An artifact the statement is about, e.g. ``Subject("owner/repo", {"gitCommit": sha})``."""

    name: str
    digest: Mapping[str, str]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "digest": dict(self.digest)}


def statement(subjects: Sequence[Subject], predicate_type: str, predicate: Mapping[str, object]) -> bytes:
    """The canonical JSON payload to sign; checked with ``parse``'s rules so Baton never signs junk."""
    body = {
        "_type": STATEMENT_TYPE,
        "subject": [subject.to_json() for subject in subjects],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    _check(body)
    return canonical_json(body)


def parse(payload: bytes) -> dict[str, object]:
    """The statement as a dict, or EvidenceError("bad-statement") naming the first thing wrong."""
    try:
        value = json.loads(
            payload.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant
        )
    except UnicodeDecodeError as exc:
        raise EvidenceError("bad-statement", "the payload is not UTF-8") from exc
    except ValueError as exc:
        raise EvidenceError("bad-statement", f"the payload is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise EvidenceError("bad-statement", "the payload is not a JSON object")
    _check(value)
    return value


def commits(stmt: Mapping[str, object]) -> list[str]:
    """The subjects' gitCommit digests: the commits this statement vouches for."""
    subjects = stmt.get("subject")
    if not isinstance(subjects, list):
        return []
    found: list[str] = []
    for subject in subjects:
        digest = subject.get("digest") if isinstance(subject, dict) else None
        if isinstance(digest, dict) and isinstance(digest.get("gitCommit"), str):
            found.append(digest["gitCommit"])
    return found


def _check(value: Mapping[str, object]) -> None:
    if value.get("_type") != STATEMENT_TYPE:
        raise EvidenceError("bad-statement", f"_type is {value.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    subjects = value.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise EvidenceError("bad-statement", "subject must be a non-empty list")
    for i, subject in enumerate(subjects):
        _check_subject(i, subject)
    predicate_type = value.get("predicateType")
    if not isinstance(predicate_type, str) or not predicate_type:
        raise EvidenceError("bad-statement", "predicateType is missing or not a string")
    if not isinstance(value.get("predicate"), dict):
        raise EvidenceError("bad-statement", "predicate is missing or not an object")


def _check_subject(i: int, subject: object) -> None:
    if not isinstance(subject, dict):
        raise EvidenceError("bad-statement", f"subject[{i}] is not an object")
    if not isinstance(subject.get("name"), str):
        raise EvidenceError("bad-statement", f"subject[{i}].name is missing or not a string")
    digest = subject.get("digest")
    if not isinstance(digest, dict) or not digest:
        raise EvidenceError("bad-statement", f"subject[{i}].digest must be a non-empty object")
    for alg, value in digest.items():
        if not alg or not isinstance(value, str) or not _HEX.fullmatch(value):
            raise EvidenceError("bad-statement", f"subject[{i}].digest.{alg} must be lowercase hex")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """Reject duplicate keys: two parsers could otherwise read two different statements."""
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")
