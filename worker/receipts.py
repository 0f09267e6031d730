"""What the worker signs: one receipt per check run it completes, appended to the log first.

A receipt is an in-toto Statement v1 in a DSSE envelope (``evidence.dsse``), signed
with the operator's key, about the commit the check run is on (and the diff, where
there is one). It is appended to the installation's transparency log
(``evidence.log``) before the check run is written, so no claim reaches GitHub that
the log does not hold; the check run's text carries the envelope and its inclusion
proof, and its details URL serves the same bundle with a proof against the log's
newest checkpoint (``bot.evidence``). Anyone can check it offline: ``baton verify``.

The predicates (what is claimed) are built here, from data the worker already
re-verified: the merge gate's result (in-toto's test-result predicate), the trifecta
decision and the agent run (Baton's own versioned predicate types). Each is bounded
so the envelope always fits a check run's text.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

import orjson
import redis

from baton.errors import BatonError, ConfigError
from baton.redis_client import NO_REPLICAS, Replication
from evidence import dsse, links, statement
from evidence.encoding import b64decode, b64encode
from evidence.keys import SigningKey
from evidence.log import Log
from evidence.statement import Subject
from evidence.verify import bundle, entry_bytes
from worker.github.limits import MAX_OUTPUT_CHARS

if TYPE_CHECKING:
    from worker.runs.record import Record

#: Names and strings inside predicates are cut to this, lists to ``MAX_ITEMS``: the envelope must
#: fit a check run's text (65,535 characters) with room to spare, whatever a policy or PR holds.
MAX_NAME = 200
MAX_ITEMS = 50


@functools.cache
def baton_version() -> str:
    """Read once per process: every receipt names it, and the installed package does not change."""
    try:
        return metadata.version("baton")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


@dataclass(frozen=True)
class Signer:
    """The operator's signing key and audit secret (``BATON_SIGNING_KEY``, ``BATON_AUDIT_SECRET``),
    and where ``baton serve`` publishes receipts (``BATON_PUBLIC_URL``)."""

    key: SigningKey
    audit_secret: bytes
    public_url: str | None = None

    def details_url(self, installation: int, index: int) -> str | None:
        if self.public_url is None:
            return None
        return links.receipt_url(self.public_url, self.audit_secret, installation, index)


def need(signer: Signer | None) -> Signer:
    """The signer, or a refusal: Baton never completes a check run without a receipt."""
    if signer is None:
        raise ConfigError(
            "no-signing-key",
            "the worker has no BATON_SIGNING_KEY (or BATON_SIGNING_KEY_PATH) and BATON_AUDIT_SECRET, "
            "and Baton never publishes unsigned evidence: run `baton keys generate --out DIR`",
        )
    return signer


@dataclass(frozen=True)
class Receipt:
    """A signed, logged statement: the envelope, its log entry (index, proof, checkpoint)."""

    envelope: dict[str, object]
    log_entry: dict[str, object]
    details_url: str | None

    @property
    def index(self) -> int:
        return int(str(self.log_entry["logIndex"]))

    def bundle(self) -> dict[str, object]:
        return bundle(self.envelope, self.log_entry)

    def text(self) -> str:
        """The check run's ``output.text``: how to verify, then the bundle, whole (never cut)."""
        cp = self.log_entry["checkpoint"]
        size = cp["treeSize"] if isinstance(cp, Mapping) else "?"
        where = f"from [its details link]({self.details_url}) " if self.details_url else ""
        body = orjson.dumps(self.bundle(), option=orjson.OPT_INDENT_2).decode()
        text = (
            "### Signed receipt\n\n"
            f"This result is signed (DSSE, in-toto Statement v1) and is entry {self.index} of Baton's "
            f"transparency log for installation {self.log_entry['installation']} (tree size {size}). "
            f"To check it offline, save the bundle below {where}as `receipt.json`, get the keys from "
            "`/.well-known/baton/keys` and run `baton verify receipt.json --key keys.json`.\n\n"
            f"<details><summary>Receipt bundle</summary>\n\n```json\n{body}\n```\n\n</details>\n"
        )
        if len(text) > MAX_OUTPUT_CHARS:  # cannot happen with bounded predicates; never cut one
            raise BatonError(
                "evidence-too-large",
                f"the receipt is {len(text)} characters, more than a check run's text holds",
            )
        return text


def attest(
    signer: Signer | None,
    client: redis.Redis,
    installation: int,
    *,
    subjects: Sequence[Subject],
    predicate_type: str,
    predicate: Mapping[str, object],
    replication: Replication = NO_REPLICAS,
) -> Receipt:
    """Sign the statement and append it to the installation's log (one Redis transaction).

    The receipt is handed back only once BATON_REDIS_REPLICAS replicas hold its entry: a receipt
    whose entry died with a primary would be a claim the log can no longer prove, and the next
    entry written at its index on the new primary would fork the log under anyone holding it."""
    signer = need(signer)
    payload = statement.statement(subjects, predicate_type, predicate)
    envelope = dsse.sign(payload, signer.key)
    appended = Log(client, installation).append(entry_bytes(envelope), signer.key)
    replication.confirm(client, f"the log entry {appended.index} of installation {installation}")
    log_entry: dict[str, object] = {
        "installation": installation,
        "logIndex": appended.index,
        "leafHash": appended.leaf_hash.hex(),
        "inclusionProof": [h.hex() for h in appended.proof],
        "checkpoint": appended.checkpoint,
    }
    return Receipt(envelope, log_entry, signer.details_url(installation, appended.index))


def payload_of(envelope: Mapping[str, object]) -> dict[str, Any]:
    """The statement inside one of our own envelopes (read back for replay, not a verification)."""
    found: dict[str, Any] = orjson.loads(b64decode(envelope.get("payload"), "payload"))
    return found


# -- subjects -----------------------------------------------------------------------------------------


def commit_subject(full_name: str, sha: str) -> Subject:
    return Subject(full_name, {"gitCommit": sha})


def diff_subject(full_name: str, base: str, head: str, digest: str) -> Subject:
    return Subject(f"{full_name} diff {base[:12]}..{head[:12]}", {"sha256": digest})


# -- predicates --------------------------------------------------------------------------------------

_CAMEL = re.compile(r"_([a-z0-9])")


def camel(value: object) -> object:
    """snake_case keys to lowerCamelCase, all the way down (in-toto's field naming)."""
    if isinstance(value, Mapping):
        return {_CAMEL.sub(lambda m: m.group(1).upper(), str(k)): camel(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [camel(v) for v in value]
    return value


def _cut(text: object, limit: int = MAX_NAME) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _rfc3339(value: object) -> str | None:
    """An ISO 8601 UTC time as RFC 3339 with ``Z`` (in-toto's convention), or None."""
    if not value:
        return None
    text = str(value)
    return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gate_result(
    *,
    conclusion: str,
    title: str,
    policy_digest: str | None,
    gates: Sequence[tuple[str, str]] = (),
    passed: Sequence[str] = (),
    failed: Sequence[str] = (),
    warned: Sequence[str] = (),
    url: str | None = None,
) -> dict[str, object]:
    """The merge gate's claim in in-toto's test-result/v0.1 shape. ``configuration`` names what the
    result depends on: Baton's version, the policy (by digest), each gate command (by digest), and
    the check run's conclusion and title (an in-toto resource descriptor with its content)."""
    result = {"success": "PASSED", "failure": "FAILED"}.get(conclusion, "WARNED")
    verdict = orjson.dumps({"conclusion": conclusion, "title": _cut(title)}, option=orjson.OPT_SORT_KEYS)
    configuration: list[dict[str, object]] = [
        {"name": "baton", "uri": f"pkg:pypi/baton@{baton_version()}"},
        {
            "name": "verdict",
            "content": b64encode(verdict),
            "annotations": {"conclusion": conclusion, "title": _cut(title)},
        },
    ]
    if policy_digest:
        configuration.append({"name": "policy", "digest": {"sha256": policy_digest}})
    configuration += [
        {"name": f"gate:{_cut(name, 100)}", "digest": {"sha256": _sha(run.encode())}}
        for name, run in gates[:MAX_ITEMS]
    ]
    predicate: dict[str, object] = {"result": result, "configuration": configuration}
    for field, names in (("passedTests", passed), ("failedTests", failed), ("warnedTests", warned)):
        if names:
            predicate[field] = [_cut(n, 100) for n in names[:MAX_ITEMS]]
    if url:
        predicate["url"] = url
    return predicate


def trifecta(
    *,
    task_id: str,
    full_name: str,
    number: int,
    base: str,
    private: bool,
    issue_digest: str,
    decision: Mapping[str, Any],
    decision_json: bytes,
    follow_up: Sequence[Mapping[str, object]] = (),
) -> dict[str, object]:
    """The gate's decision with its inputs: each input by digest with its taint, the decision's
    own canonical data (its reasons' text is signed), and the digest that replay compares.
    ``follow_up``: what was asked on the pull request (``Conversation.inputs``), untrusted too."""
    return {
        "batonVersion": baton_version(),
        "task": task_id,
        "repository": full_name,
        "issue": number,
        "inputs": [
            {"name": f"issue #{number}", "digest": {"sha256": issue_digest}, "taint": ["untrustedInput"]},
            *(dict(i) for i in follow_up[:MAX_ITEMS]),
            {"name": full_name, "digest": {"gitCommit": base}, "taint": ["privateData"] if private else []},
            {"name": "policy", "digest": {"sha256": str(decision.get("policy_sha256", ""))}, "taint": []},
        ],
        "decision": dict(decision),
        "decisionDigest": _sha(decision_json),
    }


def agent_run(
    *, task_id: str, full_name: str, number: int, base: str, diff_digest: str, record: Record
) -> dict[str, object]:
    """What ran and what held it: adapter and version, the box report, the egress log (digest and a
    per-host summary), the model gateway's account (its journal's digest, the totals per model and
    every request it refused), exit status, durations and cost, and the decision it ran under."""
    egress = list(record.egress)
    summary = [
        {
            "host": _cut(e.get("host"), 100),
            "port": e.get("port"),
            "allowed": bool(e.get("allowed")),
            "connections": e.get("connections"),
            # Why a refused host was refused (e.g. sni-mismatch); the whole log is bound by its digest.
            **(
                {"reasons": sorted(map(str, e["reasons"]))[:MAX_ITEMS]}
                if not e.get("allowed") and isinstance(e.get("reasons"), Mapping) and e["reasons"]
                else {}
            ),
        }
        for e in egress[:MAX_ITEMS]
    ]
    return {
        "batonVersion": baton_version(),
        "task": task_id,
        "repository": full_name,
        "issue": number,
        "agent": _cut(record.agent),
        "adapter": record.adapter,
        "adapterVersion": _cut(record.adapter_version),
        "promptVersion": record.prompt_version,
        "baseCommit": base,
        "commit": record.commit,
        "diff": {"sha256": diff_digest, "stat": camel(record.diff or {})},
        "decisionDigest": record.decision_sha256,
        "policyDigest": record.decision.get("policy_sha256"),
        "box": camel(record.box or {}),
        "egress": {
            "logDigest": _sha(orjson.dumps(egress, option=orjson.OPT_SORT_KEYS)),
            "hosts": summary,
            "refusedConnections": sum(int(e.get("connections") or 0) for e in egress if not e.get("allowed")),
        },
        "exit": {
            "outcome": record.outcome,
            "code": record.exit_code,
            "signal": record.signal,
            "timedOut": bool(record.timed_out),
            **({"overLimit": camel(record.over_limit)} if record.over_limit else {}),
        },
        "durations": camel(record.durations),
        "costUsd": record.cost_usd,
        "model": model_summary(record.model),
        "startedAt": _rfc3339(record.started_at),
        **({"followUp": follow_up_summary(record)} if record.follow_up else {}),
        **({"review": review_summary(record.review)} if record.review else {}),
    }


def review_summary(review: Mapping[str, Any]) -> dict[str, object]:
    """The reviewer's verdict, bounded: who judged (adapter and version, the prompt and the decision
    by digest), the reply by digest, the result, each finding's category and places (its reasons are
    the reviewer's words: they are in the run record, bound here by the reply's digest), and what its
    box, its egress and its model calls were."""
    egress = list(review.get("egress") or [])
    findings = [
        {
            "category": _cut(f.get("category"), 40),
            "found": bool(f.get("found")),
            "locations": [_cut(loc, 200) for loc in list(f.get("locations") or [])[:MAX_ITEMS]],
        }
        for f in list(review.get("findings") or [])[:MAX_ITEMS]
    ]
    digest = review.get("reply_sha256")
    return {
        "agent": _cut(review.get("agent")),
        "adapter": review.get("adapter"),
        "adapterVersion": _cut(review.get("adapter_version")) if review.get("adapter_version") else None,
        "promptVersion": review.get("prompt_version"),
        "promptDigest": {"sha256": review.get("prompt_sha256")},
        "decisionDigest": review.get("decision_sha256"),
        "commit": review.get("commit"),
        "result": review.get("result"),
        "blocksOn": [_cut(c, 40) for c in list(review.get("blocks_on") or [])[:MAX_ITEMS]],
        "blocking": [_cut(c, 40) for c in list(review.get("blocking") or [])[:MAX_ITEMS]],
        "verdictDigest": {"sha256": digest} if digest else None,
        "findings": findings,
        "exit": {
            "code": review.get("exit_code"),
            "signal": review.get("signal"),
            "timedOut": bool(review.get("timed_out")),
        },
        "durations": camel(review.get("durations") or {}),
        "costUsd": review.get("cost_usd"),
        "box": camel(review.get("box") or {}),
        "egress": {
            "logDigest": _sha(orjson.dumps(egress, option=orjson.OPT_SORT_KEYS)),
            "refusedConnections": sum(int(e.get("connections") or 0) for e in egress if not e.get("allowed")),
        },
        "model": model_summary(review.get("model")),
    }


def follow_up_summary(record: Record) -> dict[str, object]:
    """A follow-up's pull request, what was asked there (by digest: it is untrusted text) and the
    commits it built on that Baton did not make, with their authors' permission at the time."""
    follow = record.follow_up or {}
    comments = list(follow.get("comments") or ())
    return {
        "pullRequest": follow.get("pull_request"),
        "askedBy": _cut(follow.get("asked_by")),
        "reviewId": follow.get("review_id"),
        "instructionSha256": _sha(str(follow["instruction"]).encode()) if follow.get("instruction") else None,
        "lineComments": [
            {
                "id": c.get("id"),
                "path": _cut(c.get("path"), 200),
                "line": c.get("line"),
                "sha256": _sha(str(c.get("body") or "").encode()),
            }
            for c in comments[:MAX_ITEMS]
        ],
        "builtOn": [
            {"commit": c.get("sha"), "author": _cut(c.get("author")), "permission": c.get("permission")}
            for c in list(record.built_on)[:MAX_ITEMS]
        ],
    }


def model_summary(model: object) -> dict[str, object] | None:
    """The gateway's account, bounded: the journal by digest, the totals, per model, what was refused."""
    if not isinstance(model, Mapping):
        return None
    totals = model.get("totals") or {}
    models = [
        {"provider": _cut(m.get("provider"), 40), "model": _cut(m.get("model"), 100), "calls": m.get("calls"),
         "inputTokens": m.get("input_tokens"), "outputTokens": m.get("output_tokens"),
         "cacheReadTokens": m.get("cache_read_tokens"), "cacheWriteTokens": m.get("cache_write_tokens"),
         "costUsd": m.get("cost_usd"), "pricedAs": _cut(m.get("priced_as"), 100)}
        for m in list(totals.get("models") or [])[:MAX_ITEMS]
    ]  # fmt: skip
    violations = [
        {
            "code": _cut(v.get("code"), 60),
            "request": _cut(v.get("path"), 120),
            "detail": _cut(v.get("detail")),
        }
        for v in list(model.get("violations") or [])[:MAX_ITEMS]
    ]
    return {
        "journalDigest": {"sha256": model.get("journal_sha256")},
        "calls": totals.get("calls"),
        "refused": totals.get("refused"),
        "failed": totals.get("failed"),
        "inputTokens": totals.get("input_tokens"),
        "outputTokens": totals.get("output_tokens"),
        "costUsd": totals.get("cost_usd"),
        "byModel": models,
        "refusedRequests": violations,
        "overBudget": _cut(model.get("over_budget")) if model.get("over_budget") else None,
    }
