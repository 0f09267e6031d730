"""Offline receipt verification end to end: signature, statement, commit, log inclusion, consistency,
and the `python -m evidence.cli` commands' exit codes and output."""

from __future__ import annotations

import base64
import copy
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evidence import checkpoint, dsse, merkle, statement
from evidence.encoding import canonical_json
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, SigningKey, keyring
from evidence.verify import BUNDLE_MEDIA_TYPE, bundle, verify_consistency_docs, verify_receipt

ROOT = Path(__file__).resolve().parents[2]
INSTALLATION = 4242
COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"


def passing_predicate(commit: str = COMMIT) -> dict[str, object]:
    return {
        "result": "PASSED",
        "configuration": [{"name": ".github/workflows/ci.yml", "digest": {"gitCommit": commit}}],
        "url": "https://github.com/octo/repo/runs/1",
        "passedTests": ["tests/test_a.py::test_one", "tests/test_a.py::test_two"],
    }


def make_envelope(key: SigningKey, commit: str = COMMIT, name: str = "octo/repo") -> dict[str, object]:
    payload = statement.statement(
        [statement.Subject(name, {"gitCommit": commit})], statement.TEST_RESULT, passing_predicate(commit)
    )
    return dsse.sign(payload, key)


class MemoryLog:
    """A transparency log in a list: what evidence.log keeps in Redis, for building proofs in tests."""

    def __init__(self, key: SigningKey, installation: int = INSTALLATION) -> None:
        self.key = key
        self.installation = installation
        self.leaves: list[bytes] = []

    def append(self, envelope: dict[str, object]) -> int:
        self.leaves.append(merkle.leaf_hash(canonical_json(envelope)))
        return len(self.leaves) - 1

    def subtree(self, start: int, end: int) -> bytes:
        return merkle.root(self.leaves[start:end])

    def checkpoint(self, size: int | None = None, key: SigningKey | None = None) -> dict[str, object]:
        size = len(self.leaves) if size is None else size
        head = checkpoint.Checkpoint(
            checkpoint.origin_for(self.installation),
            size,
            merkle.root(self.leaves[:size]),
            "2026-11-30T19:36:28.123Z",
        )
        return checkpoint.sign(head, key or self.key)

    def entry(self, index: int, size: int | None = None) -> dict[str, object]:
        size = len(self.leaves) if size is None else size
        return {
            "installation": self.installation,
            "logIndex": index,
            "leafHash": self.leaves[index].hex(),
            "inclusionProof": [h.hex() for h in merkle.inclusion_proof(index, size, self.subtree)],
            "checkpoint": self.checkpoint(size),
        }

    def consistency(self, old: int, new: int) -> list[str]:
        return [h.hex() for h in merkle.consistency_proof(old, new, self.subtree)]


def filled_log(key: SigningKey, count: int = 8) -> tuple[MemoryLog, list[dict[str, object]]]:
    log = MemoryLog(key)
    envelopes = [make_envelope(key, commit=f"{i:040x}") for i in range(count)]
    for envelope in envelopes:
        log.append(envelope)
    return log, envelopes


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture(scope="module")
def keys(key: SigningKey) -> dict[str, PublicKey]:
    return keyring([key.public])


def rejected(code: str, *args: Any, **kwargs: Any) -> EvidenceError:
    with pytest.raises(EvidenceError) as caught:
        verify_receipt(*args, **kwargs)
    assert caught.value.code == code, caught.value.message
    return caught.value


# --- receipts ---------------------------------------------------------------------------------------


def test_a_bundle_verifies_with_its_inclusion_proof(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    log, envelopes = filled_log(key, 5)
    receipt = bundle(envelopes[3], log.entry(3))
    assert receipt["mediaType"] == BUNDLE_MEDIA_TYPE
    result = verify_receipt(json.loads(json.dumps(receipt)), keys, commit=f"{3:040x}")
    assert (result.keyid, result.predicate_type) == (key.keyid, statement.TEST_RESULT)
    assert result.subjects == [{"name": "octo/repo", "digest": {"gitCommit": f"{3:040x}"}}]
    assert (result.log_index, result.tree_size, result.installation, result.checked_log) == (
        3,
        5,
        INSTALLATION,
        True,
    )
    assert result.statement["predicate"] == passing_predicate(f"{3:040x}")


def test_a_bare_envelope_needs_an_inclusion_proof_unless_told_otherwise(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    envelope = make_envelope(key)
    error = rejected("not-included", envelope, keys)
    assert "--no-log" in error.message
    result = verify_receipt(envelope, keys, require_log=False)
    assert (result.checked_log, result.log_index, result.tree_size) == (False, None, None)
    log = MemoryLog(key)
    log.append(envelope)
    assert verify_receipt(envelope, keys, proof=log.entry(0)).checked_log


def test_a_different_commit_is_a_subject_mismatch_naming_the_commits(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    envelope = make_envelope(key)
    other = "0" * 40
    error = rejected("subject-mismatch", envelope, keys, commit=other, require_log=False)
    assert COMMIT in error.message
    assert other in error.message
    assert verify_receipt(envelope, keys, commit=COMMIT.upper(), require_log=False).keyid == key.keyid


def test_changing_the_subject_inside_the_signed_payload_breaks_the_signature(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    envelope = make_envelope(key)
    payload = base64.b64decode(str(envelope["payload"]))
    forged = payload.replace(COMMIT.encode(), b"0" * 40)
    assert forged != payload
    envelope["payload"] = base64.b64encode(forged).decode()
    error = rejected("bad-signature", envelope, keys, commit="0" * 40, require_log=False)
    assert key.keyid in error.message


def test_the_payload_type_must_be_in_toto(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    payload = statement.statement([statement.Subject("x", {"gitCommit": COMMIT})], statement.AGENT_RUN, {})
    envelope = dsse.sign(payload, key, payload_type="application/json")
    error = rejected("bad-statement", envelope, keys, require_log=False)
    assert "payloadType" in error.message


def test_a_signed_non_statement_is_a_bad_statement(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    envelope = dsse.sign(b'{"_type": "https://in-toto.io/Statement/v0.1"}', key)
    assert "_type" in rejected("bad-statement", envelope, keys, require_log=False).message


def test_an_unknown_key_is_named(key: SigningKey) -> None:
    other = SigningKey.generate()
    error = rejected("unknown-key", make_envelope(key), keyring([other.public]), require_log=False)
    assert key.keyid in error.message


def test_the_document_must_be_a_receipt(keys: dict[str, PublicKey]) -> None:
    rejected("malformed-envelope", {"hello": "world"}, keys)
    rejected("malformed-envelope", {"mediaType": "text/plain", "dsseEnvelope": {}}, keys)


# --- the log entry ----------------------------------------------------------------------------------


def test_a_proof_for_another_tree_size_than_the_trusted_checkpoint_is_rejected_with_a_fix(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, envelopes = filled_log(key, 6)
    receipt = bundle(envelopes[2], log.entry(2, size=4))
    assert verify_receipt(receipt, keys).tree_size == 4
    error = rejected("bad-proof", receipt, keys, checkpoint=log.checkpoint(6))
    assert "tree size 4" in error.message
    assert f"/.well-known/baton/log/{INSTALLATION}/proof/inclusion?index=2&size=6" in error.message
    assert verify_receipt(receipt, keys, checkpoint=log.checkpoint(4)).tree_size == 4
    fresh = log.entry(2, size=6)
    assert verify_receipt(receipt, keys, proof=fresh, checkpoint=log.checkpoint(6)).tree_size == 6


def test_a_proof_without_its_checkpoint_uses_the_trusted_one(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, envelopes = filled_log(key, 6)
    entry = log.entry(1, size=5)
    del entry["checkpoint"]
    rejected("bad-proof", envelopes[1], keys, proof=entry)
    assert verify_receipt(envelopes[1], keys, proof=entry, checkpoint=log.checkpoint(5)).tree_size == 5
    rejected("not-included", envelopes[1], keys, proof=entry, checkpoint=log.checkpoint(6))
    entry["treeSize"] = 5
    assert (
        "size 6"
        in rejected("bad-proof", envelopes[1], keys, proof=entry, checkpoint=log.checkpoint(6)).message
    )


def test_the_served_inclusion_answer_works_with_a_trusted_checkpoint(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    """What the size-mismatch message suggests: GET proof/inclusion?index=I&size=Y, pass it as --proof."""
    log, envelopes = filled_log(key, 6)
    stale = bundle(envelopes[2], log.entry(2, size=3))
    served = {"index": 2, "size": 6, "proof": log.entry(2, size=6)["inclusionProof"]}
    result = verify_receipt(stale, keys, proof=served, checkpoint=log.checkpoint(6))
    assert (result.log_index, result.tree_size, result.installation) == (2, 6, INSTALLATION)
    bare = verify_receipt(envelopes[2], keys, proof=served, checkpoint=log.checkpoint(6))
    assert bare.installation == INSTALLATION  # taken from the trusted checkpoint's origin
    assert "--checkpoint" in rejected("bad-proof", stale, keys, proof=served).message
    assert "size 5" in rejected("bad-proof", stale, keys, proof=served, checkpoint=log.checkpoint(5)).message
    rejected("not-included", envelopes[3], keys, proof=served, checkpoint=log.checkpoint(6))


def test_a_trusted_checkpoint_of_the_same_size_with_another_root_is_a_split_view(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, envelopes = filled_log(key, 4)
    fork = MemoryLog(key)
    for envelope in [*envelopes[:3], make_envelope(key, commit="f" * 40)]:
        fork.append(envelope)
    rejected("inconsistent", bundle(envelopes[0], log.entry(0)), keys, checkpoint=fork.checkpoint())


def test_a_wrong_index_is_not_included(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    log, envelopes = filled_log(key, 8)
    entry = log.entry(5)
    entry["logIndex"] = 4
    rejected("not-included", bundle(envelopes[5], entry), keys)
    entry["logIndex"] = 8
    rejected("bad-proof", bundle(envelopes[5], entry), keys)


def test_a_proof_for_another_receipt_is_not_included(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    log, envelopes = filled_log(key, 8)
    error = rejected("not-included", bundle(envelopes[5], log.entry(6)), keys)
    assert "leafHash" in error.message
    entry = log.entry(6)
    del entry["leafHash"]
    rejected("not-included", bundle(envelopes[5], entry), keys)


def test_a_checkpoint_signed_by_another_key_is_rejected(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    log, envelopes = filled_log(key, 3)
    entry = log.entry(1)
    entry["checkpoint"] = log.checkpoint(key=SigningKey.generate())
    error = rejected("bad-checkpoint", bundle(envelopes[1], entry), keys)
    assert "not a trusted key" in error.message
    forged = log.entry(1)
    forged["checkpoint"] = {**log.checkpoint(), "treeSize": 2}
    rejected("bad-checkpoint", bundle(envelopes[1], forged), keys)


def test_the_entry_installation_must_match_the_checkpoint_origin(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, envelopes = filled_log(key, 3)
    entry = log.entry(1)
    entry["installation"] = INSTALLATION + 1
    assert "installation" in rejected("bad-proof", bundle(envelopes[1], entry), keys).message


def test_a_proof_document_or_bundle_overrides_the_bundles_entry(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, envelopes = filled_log(key, 7)
    stale = bundle(envelopes[2], log.entry(2, size=3))
    assert verify_receipt(stale, keys, proof=log.entry(2)).tree_size == 7
    assert verify_receipt(stale, keys, proof=bundle(envelopes[2], log.entry(2, size=5))).tree_size == 5
    rejected("not-included", stale, keys, proof=log.entry(3))


# --- consistency ------------------------------------------------------------------------------------


def test_consistency_between_checkpoints_holds_for_every_pair(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, _ = filled_log(key, 9)
    for old in range(1, 10):
        for new in range(old, 10):
            first, second = verify_consistency_docs(
                log.checkpoint(old), log.checkpoint(new), log.consistency(old, new), keys
            )
            assert (first.size, second.size) == (old, new)
    empty = verify_consistency_docs(log.checkpoint(0), log.checkpoint(9), [], keys)
    assert empty[0].root == merkle.EMPTY_ROOT


def test_a_rewritten_entry_fails_consistency(key: SigningKey, keys: dict[str, PublicKey]) -> None:
    log, envelopes = filled_log(key, 6)
    rewritten = MemoryLog(key)
    for i, envelope in enumerate(envelopes):
        rewritten.append(make_envelope(key, commit="e" * 40) if i == 1 else envelope)
    with pytest.raises(EvidenceError) as caught:
        verify_consistency_docs(log.checkpoint(3), rewritten.checkpoint(6), rewritten.consistency(3, 6), keys)
    assert caught.value.code == "inconsistent"
    with pytest.raises(EvidenceError) as same:
        verify_consistency_docs(log.checkpoint(6), rewritten.checkpoint(6), [], keys)
    assert same.value.code == "inconsistent"


def test_consistency_rejects_wrong_order_other_origins_and_untrusted_keys(
    key: SigningKey, keys: dict[str, PublicKey]
) -> None:
    log, _ = filled_log(key, 4)
    cases: list[tuple[str, dict[str, object], dict[str, object], list[str]]] = [
        ("bad-proof", log.checkpoint(4), log.checkpoint(2), log.consistency(2, 4)),
        ("bad-proof", log.checkpoint(4), log.checkpoint(4), log.consistency(2, 4)),
        ("bad-proof", log.checkpoint(2), log.checkpoint(4), [*log.consistency(2, 4), "00" * 32]),
        ("bad-proof", log.checkpoint(2), log.checkpoint(4), ["not hex"]),
        (
            "bad-checkpoint",
            log.checkpoint(2),
            log.checkpoint(4, key=SigningKey.generate()),
            log.consistency(2, 4),
        ),
        ("bad-checkpoint", MemoryLog(key, installation=1).checkpoint(0), log.checkpoint(4), []),
    ]
    for code, old, new, proof in cases:
        with pytest.raises(EvidenceError) as caught:
            verify_consistency_docs(old, new, proof, keys)
        assert caught.value.code == code, caught.value.message


# --- the CLI ----------------------------------------------------------------------------------------


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evidence.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def files(tmp_path: Path, key: SigningKey) -> dict[str, Path]:
    log, envelopes = filled_log(key, 6)
    written = {
        "pub": key.public.pem(),
        "keys.json": json.dumps({"keys": [key.public.to_json()]}),
        "receipt.json": json.dumps(bundle(envelopes[4], log.entry(4))),
        "envelope.json": json.dumps(envelopes[4]),
        "stale.json": json.dumps(bundle(envelopes[4], log.entry(4, size=5))),
        "cp3.json": json.dumps(log.checkpoint(3)),
        "cp6.json": json.dumps(log.checkpoint(6)),
        "proof3-6.json": json.dumps({"from": 3, "to": 6, "proof": log.consistency(3, 6)}),
        "proof2-6.json": json.dumps({"from": 2, "to": 6, "proof": log.consistency(2, 6)}),
        "inclusion4-6.json": json.dumps({"index": 4, "size": 6, "proof": log.entry(4)["inclusionProof"]}),
        "bad.json": "{not json",
    }
    tampered = copy.deepcopy(envelopes[4])
    tampered["payloadType"] = "application/vnd.in-toto+jsonx"
    written["tampered.json"] = json.dumps(bundle(tampered, log.entry(4)))
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    return {name: tmp_path / name for name in written}


def test_cli_verify_exit_codes_and_output(files: dict[str, Path], key: SigningKey) -> None:
    ok = cli("verify", files["receipt.json"], "--key", files["pub"], "--commit", f"{4:040x}")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("\n") == 1
    assert statement.TEST_RESULT in ok.stdout
    assert key.keyid in ok.stdout
    assert "log index 4 of tree size 6" in ok.stdout

    as_json = cli("verify", files["receipt.json"], "--key", files["keys.json"], "--json")
    assert as_json.returncode == 0, as_json.stderr
    out = json.loads(as_json.stdout)
    assert out["valid"] is True
    assert (out["keyid"], out["logIndex"], out["treeSize"], out["installation"]) == (
        key.keyid,
        4,
        6,
        INSTALLATION,
    )

    bad = cli("verify", files["tampered.json"], "--key", files["pub"])
    assert bad.returncode == 1
    assert bad.stderr.startswith("invalid: bad-signature: ")
    mismatch = cli("verify", files["receipt.json"], "--key", files["pub"], "--commit", "a" * 40, "--json")
    assert mismatch.returncode == 1
    assert json.loads(mismatch.stdout) == {
        "valid": False,
        "code": "subject-mismatch",
        "message": json.loads(mismatch.stdout)["message"],
    }
    assert f"{4:040x}" in json.loads(mismatch.stdout)["message"]


def test_cli_verify_proof_options(files: dict[str, Path]) -> None:
    bare = cli("verify", files["envelope.json"], "--key", files["pub"])
    assert bare.returncode == 1
    assert "invalid: not-included" in bare.stderr
    signature_only = cli("verify", files["envelope.json"], "--key", files["pub"], "--no-log")
    assert signature_only.returncode == 0, signature_only.stderr
    assert "not checked against the log" in signature_only.stdout
    stale = cli("verify", files["stale.json"], "--key", files["pub"], "--checkpoint", files["cp6.json"])
    assert stale.returncode == 1
    assert "proof/inclusion?index=4&size=6" in stale.stderr
    fresh = cli(
        "verify", files["stale.json"], "--key", files["pub"], "--proof", files["receipt.json"],
        "--checkpoint", files["cp6.json"],
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    served = cli(
        "verify", files["stale.json"], "--key", files["pub"], "--proof", files["inclusion4-6.json"],
        "--checkpoint", files["cp6.json"],
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert "log index 4 of tree size 6" in served.stdout


def test_cli_usage_problems_exit_2_naming_the_file(files: dict[str, Path], tmp_path: Path) -> None:
    bad_json = cli("verify", files["bad.json"], "--key", files["pub"])
    assert bad_json.returncode == 2
    assert str(files["bad.json"]) in bad_json.stderr
    missing_key = cli("verify", files["receipt.json"], "--key", tmp_path / "nope.pem", "--json")
    assert missing_key.returncode == 2
    assert "nope.pem" in missing_key.stderr
    assert json.loads(missing_key.stdout)["code"] == "usage"
    not_a_key = cli("verify", files["receipt.json"], "--key", files["cp3.json"])
    assert not_a_key.returncode == 2
    assert "cp3.json" in not_a_key.stderr
    assert cli("verify", files["receipt.json"]).returncode == 2  # argparse: --key is required


def test_cli_keys_generate(tmp_path: Path, files: dict[str, Path]) -> None:
    out = tmp_path / "keys"
    made = cli("keys", "generate", "--algorithm", "ecdsa-p256", "--out", out)
    assert made.returncode == 0, made.stderr
    private = out / "baton-signing-key.pem"
    assert private.stat().st_mode & 0o777 == 0o600
    signer = SigningKey.from_pem(private.read_bytes(), str(private))
    public = PublicKey.from_pem((out / "baton-signing-key.pub.pem").read_text(), "pub")
    assert (signer.algorithm, public.keyid) == ("ecdsa-p256-sha256", signer.keyid)
    assert signer.keyid in made.stdout
    assert f"BATON_SIGNING_KEY_PATH={private.resolve()}" in made.stdout
    before = private.read_bytes()
    again = cli("keys", "generate", "--out", out)
    assert again.returncode == 2
    assert "refusing to overwrite" in again.stderr
    assert private.read_bytes() == before

    receipt = tmp_path / "mine.json"
    receipt.write_text(json.dumps(make_envelope(signer)))
    ok = cli("verify", receipt, "--key", out / "baton-signing-key.pub.pem", "--no-log")
    assert ok.returncode == 0, ok.stderr

    printed = cli("keys", "generate")
    assert printed.returncode == 0
    assert SigningKey.from_pem(printed.stdout, "stdout").algorithm == "ed25519"


def test_cli_consistency_with_a_proof_file(files: dict[str, Path], key: SigningKey) -> None:
    ok = cli("log", "verify", "--from", files["cp3.json"], "--to", files["cp6.json"], "--key", files["pub"],
             "--proof", files["proof3-6.json"], "--json")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert (out["valid"], out["from"]["treeSize"], out["to"]["treeSize"]) == (True, 3, 6)
    wrong_sizes = cli("log", "verify", "--from", files["cp3.json"], "--to", files["cp6.json"], "--key",
                      files["pub"], "--proof", files["proof2-6.json"])  # fmt: skip
    assert wrong_sizes.returncode == 1
    assert "invalid: bad-proof" in wrong_sizes.stderr
    no_proof = cli(
        "log", "verify", "--from", files["cp3.json"], "--to", files["cp6.json"], "--key", files["pub"]
    )
    assert no_proof.returncode == 2


@pytest.fixture
def log_server(key: SigningKey) -> Iterator[tuple[str, MemoryLog, MemoryLog]]:
    """A loopback HTTP server answering proof/consistency from an honest log and a rewritten one."""
    honest, envelopes = filled_log(key, 6)
    rewritten = MemoryLog(key)
    for i, envelope in enumerate(envelopes):
        rewritten.append(make_envelope(key, commit="d" * 40) if i == 0 else envelope)
    logs = {"honest": honest, "rewritten": rewritten}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            name = path.split("/")[1]
            params = dict(part.split("=") for part in query.split("&"))
            old, new = int(params["from"]), int(params["to"])
            body = json.dumps({"from": old, "to": new, "proof": logs[name].consistency(old, new)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", honest, rewritten
    finally:
        server.shutdown()
        server.server_close()


def test_cli_consistency_fetches_the_proof(
    tmp_path: Path, files: dict[str, Path], log_server: tuple[str, MemoryLog, MemoryLog]
) -> None:
    base, honest, rewritten = log_server
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(honest.checkpoint(2)))
    new.write_text(json.dumps(rewritten.checkpoint(6)))
    good = cli("log", "verify", "--from", old, "--to", files["cp6.json"], "--key", files["pub"],
               "--log-url", f"{base}/honest/log/{INSTALLATION}/")  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert "consistent" in good.stdout
    bad = cli("log", "verify", "--from", old, "--to", new, "--key", files["pub"],
              "--log-url", f"{base}/rewritten/log/{INSTALLATION}", "--json")  # fmt: skip
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["code"] == "inconsistent"
    down = cli("log", "verify", "--from", old, "--to", new, "--key", files["pub"], "--log-url", "ftp://x/")
    assert down.returncode == 2
