"""Replay: decide again from what was recorded, and say whether the bytes are the same.

The trifecta gate is a pure function of (policy, facts), so a recorded decision can be
checked by anyone holding the inputs: the policy is kept by digest when a decision is
made (``remember_policy``), the facts are inside the decision itself. A task has up to
two decisions: at admission (``worker.handlers``) and in the run, on the policy of the
base the agent started from (``worker.runs.execute``); the run's is also signed, on the
``baton/trifecta`` check run, and replay compares against the signed bytes as well.

A mismatch means the gate's code changed what it decides for the same inputs (or a
record was altered): exactly what a reviewer needs to know.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import redis

from baton import keys, records
from evidence import dsse
from evidence.keys import PublicKey
from evidence.log import Log
from evidence.verify import entry_bytes
from worker.policy import (
    Policy,
    PolicyError,
    TaskFacts,
    UnknownAgent,
    canonical_json,
    decide,
    org_policy,
    parse,
)
from worker.receipts import payload_of
from worker.runs import admit

POLICY_PREFIX = keys.POLICY_PREFIX  # + sha256 -> the policy's canonical JSON
DECISION_PREFIX = keys.DECISION_PREFIX  # + task id -> the admission decision (``worker.handlers``)
RECEIPTS_PREFIX = keys.RECEIPTS_PREFIX  # + task id -> hash {check name: "installation:index"}
TTL_S = 90 * 24 * 3600


def remember_policy(client: redis.Redis, policy: Policy) -> None:
    """Keep the policy a decision was made under, by digest (content-addressed: kept once)."""
    client.set(POLICY_PREFIX + policy.digest, policy.canonical, ex=TTL_S)


def remember_receipt(client: redis.Redis, task_id: str, check: str, installation: int, index: int) -> None:
    key = RECEIPTS_PREFIX + task_id
    with client.pipeline(transaction=True) as pipe:
        pipe.hset(key, check, f"{installation}:{index}")
        pipe.expire(key, TTL_S)
        pipe.execute()


def recorded_tasks(client: redis.Redis) -> list[str]:
    """Every task with a recorded admission decision, sorted (a SCAN: fine for an operator's check)."""
    found = client.scan_iter(f"{DECISION_PREFIX}*", count=1000)
    return sorted({records.text(k)[len(DECISION_PREFIX) :] for k in found})


@dataclass(frozen=True)
class Replayed:
    """One decision decided again: ``match`` when the bytes are identical."""

    where: str  # "admission" | "run"
    recorded_sha256: str
    replayed_sha256: str | None
    match: bool
    signed: bool | None  # None: not signed; else whether the signed bytes match too
    problem: str | None = None
    #: Whether a key checked the signature over the signed bytes; without one they are only compared.
    signature_checked: bool = False

    def to_data(self) -> dict[str, Any]:
        return asdict(self)


def replay(client: redis.Redis, task_id: str, keys: Mapping[str, PublicKey] | None = None) -> list[Replayed]:
    """Every recorded decision of ``task_id``, decided again. ``keys``: check the signed receipt's
    signature too (the log entry is read from Redis, so without keys it is only compared)."""
    found: list[Replayed] = []
    raw = client.get(DECISION_PREFIX + task_id)
    if raw:
        found.append(_again("admission", orjson.loads(raw)["decision"], client, None))
    raw = client.get(admit.RECORD_PREFIX + task_id)
    if raw and (orjson.loads(raw).get("decision") or {}).get("facts"):
        signed = _signed_decision(client, task_id, keys)
        again = _again("run", orjson.loads(raw)["decision"], client, signed)
        found.append(dataclasses.replace(again, signature_checked=keys is not None and signed is not None))
    return found


def _again(where: str, recorded: Mapping[str, Any], client: redis.Redis, signed: bytes | None) -> Replayed:
    recorded_bytes = canonical_json(recorded)
    recorded_sha = hashlib.sha256(recorded_bytes).hexdigest()

    def problem(text: str) -> Replayed:
        return Replayed(where, recorded_sha, None, False, None if signed is None else False, text)

    digest = str(recorded.get("policy_sha256") or "")
    policy_bytes = client.get(POLICY_PREFIX + digest)
    if policy_bytes is None:
        return problem(f"the policy sha256:{digest[:16]}… is no longer kept (kept {TTL_S // 86400} days)")
    try:
        policy = org_policy(parse(policy_bytes, f"policy sha256:{digest[:16]}"))
    except PolicyError as exc:
        return problem(f"the kept policy no longer parses: {exc}")
    if policy.digest != digest:
        return problem(f"the kept policy's digest is {policy.digest}, not {digest}")
    try:
        facts = TaskFacts(**recorded["facts"])
        again = decide(policy, facts).to_json()
    except (TypeError, KeyError, UnknownAgent) as exc:
        return problem(f"the recorded facts cannot be decided again: {exc}")
    match = again == recorded_bytes
    return Replayed(
        where,
        recorded_sha,
        hashlib.sha256(again).hexdigest(),
        match,
        None if signed is None else signed == again,
    )


def _signed_decision(client: redis.Redis, task_id: str, keys: Mapping[str, PublicKey] | None) -> bytes | None:
    """The decision bytes signed on the task's ``baton/trifecta`` check run, if it has one."""
    where = client.hget(RECEIPTS_PREFIX + task_id, "baton/trifecta")
    if where is None:
        return None
    text = records.text(where)
    installation, _, index = text.partition(":")
    entries = Log(client, int(installation)).entries(int(index), int(index) + 1)
    if not entries:
        return b""
    envelope: dict[str, object] = orjson.loads(entries[0])
    if entry_bytes(envelope) != entries[0]:
        return b""
    if keys is not None:
        dsse.verify(envelope, keys)  # raises EvidenceError naming what failed
    decision = payload_of(envelope).get("predicate", {}).get("decision")
    return canonical_json(decision) if decision is not None else b""
