"""`baton keys generate`, `baton verify` and `baton log verify`: the evidence commands.

They need only the standard library and `cryptography`, so they also run without Baton's server
dependencies: ``python -m evidence.cli verify RECEIPT.json --key baton.pub.pem``. Exit codes: 0 valid,
1 invalid (``invalid: <code>: <message>`` on stderr), 2 a usage problem (a file that cannot be read
or parsed, named in the message).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from evidence import checkpoint
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, SigningKey, read_keys
from evidence.verify import DOWNLOAD_HINT, Verified, split, verify_consistency_docs, verify_receipt

PRIVATE_NAME = "baton-signing-key.pem"
PUBLIC_NAME = "baton-signing-key.pub.pem"
FETCH_TIMEOUT = 10.0
MAX_PROOF_BYTES = 1 << 20


class Usage(Exception):
    """A file or flag problem the user fixes by changing the command line (exit 2)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_keys(subparsers)
    verify = subparsers.add_parser(
        "verify",
        help="verify a receipt offline",
        description="Verify a Baton receipt (the bundle from a check run's details URL, or a bare DSSE "
        "envelope) with the signer's public key: signature, in-toto statement, commit and log inclusion. "
        "Exit 0 valid, 1 invalid (`invalid: CODE: why` on stderr), 2 a file that cannot be read or parsed.",
    )
    verify.add_argument("receipt", metavar="RECEIPT.json", help="a receipt bundle or a DSSE envelope")
    _key_flag(verify)
    verify.add_argument("--commit", metavar="SHA", help="require the receipt to be about this commit")
    verify.add_argument(
        "--proof", metavar="FILE", help="a log entry (inclusion proof) to use instead of the bundle's"
    )
    verify.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a signed checkpoint you trust; the proof must be for exactly this tree",
    )
    verify.add_argument("--no-log", action="store_true", help="check the signature and statement only")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.set_defaults(handler=verify_command)
    log = subparsers.add_parser("log", help="check the transparency log's history")
    actions = log.add_subparsers(dest="log_action", metavar="ACTION", required=True)
    consistency = actions.add_parser(
        "verify",
        help="check that a newer checkpoint extends an older one",
        description="Check that the log of checkpoint --to is the log of checkpoint --from with entries "
        "appended, nothing changed or removed (RFC 9162 consistency). Exit 0 consistent, 1 not, 2 usage.",
    )
    consistency.add_argument(
        "--from",
        dest="old",
        required=True,
        metavar="CHECKPOINT.json",
        help="the older checkpoint you kept (e.g. a receipt's logEntry.checkpoint)",
    )
    consistency.add_argument(
        "--to",
        dest="new",
        required=True,
        metavar="CHECKPOINT.json",
        help="the newer checkpoint (e.g. what the log's /checkpoint serves now)",
    )
    _key_flag(consistency)
    source = consistency.add_mutually_exclusive_group()
    source.add_argument("--proof", metavar="FILE", help="the JSON served by the log's proof/consistency")
    source.add_argument(
        "--log-url", metavar="URL", help="the log's base URL, e.g. https://HOST/.well-known/baton/log/42"
    )
    consistency.add_argument("--json", action="store_true", help="print the result as JSON")
    consistency.set_defaults(handler=log_verify_command)


def _register_keys(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = subparsers.add_parser("keys", help="make the key Baton signs receipts with")
    actions = keys.add_subparsers(dest="keys_action", metavar="ACTION", required=True)
    generate = actions.add_parser(
        "generate",
        help="generate a signing key",
        description=f"Write DIR/{PRIVATE_NAME} (mode 0600) and DIR/{PUBLIC_NAME}; without --out, "
        "print the private key to stdout.",
    )
    generate.add_argument(
        "--algorithm",
        choices=("ed25519", "ecdsa-p256"),
        default="ed25519",
        help="the key's algorithm (default: ed25519)",
    )
    generate.add_argument("--out", metavar="DIR", type=Path, help="directory to write the key pair to")
    generate.set_defaults(handler=keys_generate_command)


def _key_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key",
        action="append",
        required=True,
        metavar="PUB",
        help="a PEM public key or a keys document (/.well-known/baton/keys); repeatable",
    )


def keys_generate_command(args: argparse.Namespace) -> int:
    key = SigningKey.generate(args.algorithm)
    if args.out is None:
        sys.stdout.write(key.private_pem().decode("ascii"))
        print(f"keyid {key.keyid} ({key.algorithm}); save the key with mode 0600 and set "
              "BATON_SIGNING_KEY_PATH=<that file>", file=sys.stderr)  # fmt: skip
        return 0
    out: Path = args.out
    private, public = out / PRIVATE_NAME, out / PUBLIC_NAME
    try:
        for path in (private, public):
            if path.exists() or path.is_symlink():
                raise Usage(f"refusing to overwrite {path}: move it away or choose another --out")
        out.mkdir(parents=True, exist_ok=True)
        _write_new(private, key.private_pem(), 0o600)
        _write_new(public, key.public.pem().encode("ascii"), 0o644)
    except Usage as exc:
        return _usage("keys generate", str(exc), json_output=False)
    except OSError as exc:
        return _usage("keys generate", f"cannot write the key pair to {out}: {exc}", json_output=False)
    print(f"keyid {key.keyid} ({key.algorithm})")
    print(f"wrote {private} (private, mode 0600) and {public}")
    print(f"configure Baton with: BATON_SIGNING_KEY_PATH={private.resolve()}")
    print(f"verify receipts with: baton verify RECEIPT.json --key {public.resolve()}")
    return 0


def verify_command(args: argparse.Namespace) -> int:
    try:
        if args.no_log and (args.proof or args.checkpoint):
            raise Usage("--no-log checks the signature only: drop --proof/--checkpoint, or drop --no-log")
        keys = _read_keyring(args.key)
        document = _read_json(args.receipt, receipt=True)
        proof = _read_json(args.proof) if args.proof else None
        trusted = _read_json(args.checkpoint) if args.checkpoint else None
    except Usage as exc:
        return _usage("verify", str(exc), json_output=args.json)
    try:
        if args.no_log:
            document = split(_mapping(document, args.receipt))[0]
        result = verify_receipt(
            _mapping(document, args.receipt),
            keys,
            commit=args.commit,
            proof=None if proof is None else _mapping(proof, args.proof),
            checkpoint=None if trusted is None else _mapping(trusted, args.checkpoint),
            require_log=not args.no_log,
        )
    except EvidenceError as exc:
        return _invalid(exc, json_output=args.json)
    if args.json:
        print(json.dumps(_result_json(result), sort_keys=True))
    else:
        print(_summary(result))
    return 0


def log_verify_command(args: argparse.Namespace) -> int:
    try:
        keys = _read_keyring(args.key)
        old, new = _read_json(args.old), _read_json(args.new)
        proof_doc = _read_json(args.proof) if args.proof else None
    except Usage as exc:
        return _usage("log verify", str(exc), json_output=args.json)
    try:
        first = _checkpoint(old, keys, args.old)
        second = _checkpoint(new, keys, args.new)
        if proof_doc is None and first.size not in (0, second.size):
            if not args.log_url:
                pair = f"checkpoints of size {first.size} and {second.size}"
                raise Usage(f"{pair} need a proof: give --proof or --log-url")
            proof_doc = _fetch_consistency(args.log_url, first.size, second.size)
        hashes = [] if proof_doc is None else _proof_hashes(proof_doc, first.size, second.size)
        first, second = verify_consistency_docs(
            _mapping(old, args.old), _mapping(new, args.new), hashes, keys
        )
    except Usage as exc:
        return _usage("log verify", str(exc), json_output=args.json)
    except EvidenceError as exc:
        return _invalid(exc, json_output=args.json)
    if args.json:
        sizes = {"from": first.to_json(), "to": second.to_json()}
        print(json.dumps({"valid": True, "origin": first.origin, **sizes}, sort_keys=True))
    else:
        print(f"consistent: {first.origin} at size {second.size} (root {second.root.hex()}) extends "
              f"size {first.size} (root {first.root.hex()})")  # fmt: skip
    return 0


def _checkpoint(doc: object, keys: Mapping[str, PublicKey], path: str) -> checkpoint.Checkpoint:
    try:
        return checkpoint.verify(_mapping(doc, path), keys)
    except EvidenceError as exc:
        raise EvidenceError(exc.code, f"{path}: {exc.message}") from exc


def _proof_hashes(doc: object, old: int, new: int) -> list[str]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("proof"), list):
        raise EvidenceError("bad-proof", 'a consistency proof is {"from": n, "to": m, "proof": [hex, ...]}')
    if (doc.get("from"), doc.get("to")) != (old, new):
        raise EvidenceError(
            "bad-proof",
            f"the proof is from size {doc.get('from')} to {doc.get('to')}, "
            f"the checkpoints are sizes {old} and {new}",
        )
    hashes: list[str] = doc["proof"]
    return hashes


def _fetch_consistency(base: str, old: int, new: int) -> object:
    url = f"{base.rstrip('/')}/proof/consistency?{urllib.parse.urlencode({'from': old, 'to': new})}"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise Usage(f"--log-url must be an http(s) URL, not {base!r}")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 (scheme checked)
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as response:  # noqa: S310 (scheme checked)
            body: bytes = response.read(MAX_PROOF_BYTES)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace")
        raise Usage(f"GET {url} answered HTTP {exc.code}: {detail}") from exc
    except OSError as exc:
        raise Usage(f"cannot GET {url}: {exc}") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise Usage(f"GET {url} did not answer JSON ({exc})") from exc


def _read_keyring(paths: Sequence[str]) -> dict[str, PublicKey]:
    keys: dict[str, PublicKey] = {}
    for path in paths:
        try:
            keys.update(read_keys(Path(path).read_text(encoding="utf-8"), path))
        except (OSError, UnicodeDecodeError) as exc:
            raise Usage(f"cannot read key file {path}: {exc}") from exc
        except EvidenceError as exc:
            raise Usage(exc.message) from exc
    return keys


def _read_json(path: str, *, receipt: bool = False) -> object:
    """``path``'s JSON; for a ``receipt``, a page or an empty file (a failed download) says so."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Usage(f"cannot read {path}: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        looks_like_a_page = text.lstrip()[:1] == "<" or not text.strip()
        hint = f"; {DOWNLOAD_HINT}" if receipt and looks_like_a_page else ""
        raise Usage(f"{path} is not valid JSON ({exc}){hint}") from exc


def _mapping(value: object, path: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise EvidenceError("malformed-envelope", f"{path} does not hold a JSON object")
    return value


def _result_json(result: Verified) -> dict[str, object]:
    return {
        "valid": True,
        "keyid": result.keyid,
        "predicateType": result.predicate_type,
        "subjects": result.subjects,
        "logIndex": result.log_index,
        "treeSize": result.tree_size,
        "installation": result.installation,
        "checkedLog": result.checked_log,
    }


def _summary(result: Verified) -> str:
    subjects = ", ".join(_subject_text(s) for s in result.subjects)
    if result.checked_log:
        where = f"installation {result.installation}"
        log = f"log index {result.log_index} of tree size {result.tree_size} ({where})"
    else:
        log = "not checked against the log"
    return f"valid: {result.predicate_type} about {subjects}; signed by keyid {result.keyid}; {log}"


def _subject_text(subject: Mapping[str, object]) -> str:
    digest = subject.get("digest")
    digests = ", ".join(f"{alg}:{value}" for alg, value in digest.items()) if isinstance(digest, dict) else ""
    return f"{subject.get('name')} ({digests})"


def _invalid(exc: EvidenceError, *, json_output: bool) -> int:
    if json_output:
        print(json.dumps({"valid": False, "code": exc.code, "message": exc.message}, sort_keys=True))
    print(f"invalid: {exc.code}: {exc.message}", file=sys.stderr)
    return 1


def _usage(command: str, message: str, *, json_output: bool) -> int:
    if json_output:
        print(json.dumps({"valid": False, "code": "usage", "message": message}, sort_keys=True))
    print(f"baton {command}: {message}", file=sys.stderr)
    return 2


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (no window where a key is world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point (``python -m evidence.cli``), for machines without Baton's server side."""
    parser = argparse.ArgumentParser(
        prog="python -m evidence.cli", description="Generate Baton signing keys; verify receipts and the log."
    )
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
