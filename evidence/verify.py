"""Offline verification of Baton receipts and of the log's history, with only public keys.

A receipt is trusted when (1) a trusted key signed its DSSE envelope, (2) the payload is an in-toto
Statement about the commit you care about, and (3) the envelope is in the installation's
transparency log under a checkpoint signed by the same keys, so it cannot be quietly withdrawn or
swapped. (3) is what a bundle's ``logEntry`` proves; ``verify_consistency_docs`` then shows two
checkpoints belong to one append-only history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evidence import checkpoint, dsse, merkle, statement
from evidence.checkpoint import Checkpoint
from evidence.encoding import canonical_json, hexdecode
from evidence.errors import EvidenceError
from evidence.keys import PublicKey

BUNDLE_MEDIA_TYPE = "application/vnd.baton.receipt.v1+json"
NO_LOG = (
    "no transparency-log entry given: use the bundle from the check run's details URL, or pass --proof "
    "with the log's inclusion proof; --no-log checks the signature only"
)


@dataclass(frozen=True)
class Verified:
    """What a valid receipt says; ``checked_log`` is False when only the signature was checked."""

    keyid: str
    predicate_type: str
    subjects: list[dict[str, object]]
    statement: dict[str, object]
    log_index: int | None
    tree_size: int | None
    installation: int | None
    checked_log: bool


def bundle(envelope: Mapping[str, object], log_entry: Mapping[str, object]) -> dict[str, object]:
    """The receipt bundle served at a check run's details URL: the envelope and its log proof."""
    return {"mediaType": BUNDLE_MEDIA_TYPE, "dsseEnvelope": dict(envelope), "logEntry": dict(log_entry)}


def entry_bytes(envelope: Mapping[str, object]) -> bytes:
    """What the log stores for a receipt (its leaf is ``merkle.leaf_hash`` of these bytes)."""
    return canonical_json(envelope)


#: What a saved error page most likely means: `curl -s` saves the 403 Baton answers a receipt link
#: without its key (or a proxy's page) as if it were the receipt.
DOWNLOAD_HINT = (
    "this is not a DSSE envelope: if you downloaded it, the link's key may be missing (HTTP 403); "
    "download the check run's Details link whole, ?key= included, with `curl -fsS` so an error "
    "is not saved as the receipt"
)


def error_body(document: Mapping[str, object]) -> str | None:
    """What an HTTP error body says (``{"error": ...}`` or ``{"message": ...}``), else None."""
    said = document.get("error", document.get("message"))
    return str(said)[:200] if isinstance(said, str | int) and "payload" not in document else None


def split(document: Mapping[str, object]) -> tuple[Mapping[str, object], Mapping[str, object] | None]:
    """(envelope, logEntry or None) from a bare envelope or a receipt bundle."""
    if not isinstance(document, Mapping):
        raise EvidenceError("malformed-envelope", "the receipt is not a JSON object")
    if "dsseEnvelope" not in document:
        if "payload" not in document:
            said = error_body(document)
            raise EvidenceError(
                "malformed-envelope",
                "the receipt has neither dsseEnvelope (a bundle) nor payload (an envelope)"
                + ("" if said is None else f"; it is an error body ({said!r}): {DOWNLOAD_HINT}"),
            )
        return document, None
    if document.get("mediaType", BUNDLE_MEDIA_TYPE) != BUNDLE_MEDIA_TYPE:
        raise EvidenceError(
            "malformed-envelope",
            f"bundle mediaType is {document.get('mediaType')!r}, expected {BUNDLE_MEDIA_TYPE}",
        )
    envelope = document["dsseEnvelope"]
    if not isinstance(envelope, Mapping):
        raise EvidenceError("malformed-envelope", "the bundle's dsseEnvelope is not an object")
    entry = document.get("logEntry")
    if entry is not None and not isinstance(entry, Mapping):
        raise EvidenceError("bad-proof", "the bundle's logEntry is not an object")
    return envelope, entry


def verify_receipt(
    document: Mapping[str, object],
    keys: Mapping[str, PublicKey],
    *,
    commit: str | None = None,
    proof: Mapping[str, object] | None = None,
    checkpoint: Mapping[str, object] | None = None,
    require_log: bool = True,
) -> Verified:
    """Check a receipt (bare envelope or bundle) end to end; EvidenceError names the first failure.

    ``proof`` replaces the bundle's own entry: a logEntry, a bundle (its logEntry is used), or the
    log's ``proof/inclusion`` answer ``{"index", "size", "proof"}``, which carries no checkpoint and so
    needs ``checkpoint``: a checkpoint you already trust; the proof must be for exactly that tree.
    A log entry that is present is always checked; ``require_log=False`` only allows it to be absent.
    """
    envelope, entry = split(document)
    if proof is not None:
        entry = _entry_of(proof, entry, checkpoint)
    payload, keyid = dsse.verify_signer(envelope, keys)
    if envelope.get("payloadType") != dsse.PAYLOAD_TYPE:
        raise EvidenceError(
            "bad-statement", f"payloadType is {envelope.get('payloadType')!r}, expected {dsse.PAYLOAD_TYPE!r}"
        )
    stmt = statement.parse(payload)
    if commit is not None:
        _check_commit(stmt, commit)
    subjects = [dict(s) for s in stmt["subject"]] if isinstance(stmt["subject"], list) else []
    predicate_type = str(stmt["predicateType"])
    if entry is None:
        if require_log or checkpoint is not None:
            raise EvidenceError("not-included", NO_LOG)
        return Verified(keyid, predicate_type, subjects, stmt, None, None, None, checked_log=False)
    installation, index, tree = _check_inclusion(envelope, entry, keys, checkpoint)
    return Verified(keyid, predicate_type, subjects, stmt, index, tree.size, installation, checked_log=True)


def verify_consistency_docs(
    old: Mapping[str, object], new: Mapping[str, object], proof: Sequence[str], keys: Mapping[str, PublicKey]
) -> tuple[Checkpoint, Checkpoint]:
    """Both checkpoints are signed by trusted keys and ``new`` extends ``old`` (RFC 9162 §2.1.4.2)."""
    first = _verify_checkpoint(old, keys, "the old checkpoint")
    second = _verify_checkpoint(new, keys, "the new checkpoint")
    if first.origin != second.origin:
        raise EvidenceError(
            "bad-checkpoint", f"the checkpoints are from different logs: {first.origin} and {second.origin}"
        )
    if first.size > second.size:
        raise EvidenceError(
            "bad-proof",
            f"the old checkpoint (size {first.size}) is larger than the new one (size {second.size})",
        )
    hashes = _hashes(proof, "consistency proof")
    if first.size in (second.size, 0):
        if hashes:
            raise EvidenceError(
                "bad-proof", f"a consistency proof from size {first.size} to {second.size} must be empty"
            )
        if first.size == second.size and first.root != second.root:
            raise EvidenceError(
                "inconsistent",
                f"two checkpoints of {first.origin} have size {first.size} but different roots: "
                "the log was rewritten",
            )
        return first, second
    merkle.verify_consistency(first.size, second.size, first.root, second.root, hashes)
    return first, second


def _check_commit(stmt: Mapping[str, object], commit: str) -> None:
    found = statement.commits(stmt)
    if commit.strip().lower() not in found:
        named = ", ".join(found) if found else "none (no subject has a gitCommit digest)"
        raise EvidenceError(
            "subject-mismatch", f"the receipt is not about commit {commit}: its commits are {named}"
        )


def _entry_of(
    proof: Mapping[str, object], base: Mapping[str, object] | None, trusted: Mapping[str, object] | None
) -> Mapping[str, object]:
    """A logEntry from whichever proof document the user has."""
    if not isinstance(proof, Mapping):
        raise EvidenceError("bad-proof", "the proof is not a JSON object")
    if "dsseEnvelope" in proof or "logEntry" in proof:
        entry = proof.get("logEntry")
        if not isinstance(entry, Mapping):
            raise EvidenceError("bad-proof", "the proof bundle has no logEntry object")
        return entry
    if "logIndex" in proof or "index" not in proof:
        return proof
    # The log's proof/inclusion answer: the installation is the bundle's, else the trusted checkpoint's.
    installation = base.get("installation") if base is not None else _installation_of(trusted)
    entry = {"logIndex": proof.get("index"), "treeSize": proof.get("size")}
    entry["inclusionProof"] = proof.get("proof")
    return entry if installation is None else {**entry, "installation": installation}


def _installation_of(doc: Mapping[str, object] | None) -> int | None:
    origin = doc.get("origin") if isinstance(doc, Mapping) else None
    prefix = checkpoint.origin_for(0)[:-1]
    if isinstance(origin, str) and origin.startswith(prefix) and origin[len(prefix) :].isdigit():
        return int(origin[len(prefix) :])
    return None


def _check_inclusion(
    envelope: Mapping[str, object],
    entry: Mapping[str, object],
    keys: Mapping[str, PublicKey],
    trusted_doc: Mapping[str, object] | None,
) -> tuple[int, int, Checkpoint]:
    installation = _int(entry, "installation")
    index = _int(entry, "logIndex")
    path = _hashes(entry.get("inclusionProof"), "logEntry.inclusionProof")
    tree = _proof_tree(entry, keys, trusted_doc, installation, index)
    if tree.origin != checkpoint.origin_for(installation):
        raise EvidenceError(
            "bad-proof",
            f"the log entry says installation {installation}, but its checkpoint is for {tree.origin}",
        )
    leaf = merkle.leaf_hash(entry_bytes(envelope))
    if "leafHash" in entry and hexdecode(entry["leafHash"], "logEntry.leafHash", "bad-proof") != leaf:
        raise EvidenceError(
            "not-included",
            f"logEntry.leafHash is not the hash of this envelope ({leaf.hex()}): "
            "the proof is for another receipt",
        )
    merkle.verify_inclusion(leaf, index, tree.size, path, tree.root)
    return installation, index, tree


def _proof_tree(
    entry: Mapping[str, object],
    keys: Mapping[str, PublicKey],
    trusted_doc: Mapping[str, object] | None,
    installation: int,
    index: int,
) -> Checkpoint:
    """The tree the inclusion proof is for, held to the caller's trusted checkpoint when given."""
    trusted = (
        None if trusted_doc is None else _verify_checkpoint(trusted_doc, keys, "the checkpoint you gave")
    )
    cp_doc = entry.get("checkpoint")
    if cp_doc is None:
        if trusted is None:
            raise EvidenceError(
                "bad-proof",
                "the inclusion proof carries no checkpoint: pass --checkpoint with a signed checkpoint of "
                f"its tree size (one you saved, or GET /.well-known/baton/log/{installation}/checkpoint "
                "and a proof for that size)",
            )
        size = entry.get("treeSize", trusted.size)
        if size != trusted.size:
            raise EvidenceError("bad-proof", _size_hint(size, trusted.size, installation, index))
        return trusted
    if not isinstance(cp_doc, Mapping):
        raise EvidenceError("bad-checkpoint", "logEntry.checkpoint is not an object")
    tree = _verify_checkpoint(cp_doc, keys, "logEntry.checkpoint")
    if trusted is None:
        return tree
    if trusted.origin != tree.origin:
        raise EvidenceError(
            "bad-checkpoint",
            f"the checkpoint you gave is for {trusted.origin}, the proof is for {tree.origin}",
        )
    if trusted.size != tree.size:
        raise EvidenceError("bad-proof", _size_hint(tree.size, trusted.size, installation, index))
    if trusted.root != tree.root:
        raise EvidenceError(
            "inconsistent",
            f"the checkpoint you gave and the proof's checkpoint both have size {tree.size} but different "
            "roots: the log shows different histories to different clients",
        )
    return trusted


def _size_hint(proof_size: object, trusted_size: int, installation: int, index: int) -> str:
    return (
        f"the inclusion proof is for tree size {proof_size}, the checkpoint you gave is size {trusted_size}: "
        f"fetch a proof for size {trusted_size} from GET /.well-known/baton/log/{installation}"
        f"/proof/inclusion?index={index}&size={trusted_size}"
    )


def _verify_checkpoint(doc: Mapping[str, object], keys: Mapping[str, PublicKey], what: str) -> Checkpoint:
    try:
        return checkpoint.verify(doc, keys)
    except EvidenceError as exc:
        raise EvidenceError(exc.code, f"{what}: {exc.message}") from exc


def _int(entry: Mapping[str, object], name: str) -> int:
    value = entry.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise EvidenceError("bad-proof", f"logEntry.{name} is missing or not a non-negative integer")
    return value


def _hashes(value: object, what: str) -> list[bytes]:
    if not isinstance(value, list | tuple):
        raise EvidenceError("bad-proof", f"{what} is missing or not a list of hex hashes")
    return [hexdecode(h, f"{what}[{i}]", "bad-proof", merkle.HASH_SIZE) for i, h in enumerate(value)]
