"""Receipts signed and verified per second on one core (target: >= 5,000 sign+verify/s with Ed25519).

Run from the repository root:  python bench/evidence_sign.py [--seconds S]

A realistic receipt: an in-toto test-result statement of about 2 KB (one commit subject, a
configuration list, 40 test names). Per receipt: build the statement, ``dsse.sign`` it, then
``dsse.verify`` the envelope and ``statement.parse`` the payload, as the worker signs and a client
verifies. Sign-only and verify-only rates are measured separately too, and "raw crypto" is the
ceiling set by OpenSSL: one bare sign and verify of the same bytes, no base64 or JSON. One process,
one thread; rates are per CPU-second of that thread (time.thread_time), i.e. per second of one core.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cryptography

from evidence import dsse, statement
from evidence.encoding import canonical_json
from evidence.keys import SigningKey, keyring

COMMIT = "3f786850e387550fdab836ed7e6dc881de23001b"


def predicate() -> dict[str, object]:
    return {
        "result": "PASSED",
        "configuration": [
            {"name": ".github/workflows/ci.yml", "digest": {"gitCommit": COMMIT}},
            {"name": ".github/baton.yml", "digest": {"sha256": "ab" * 32}},
        ],
        "url": "https://github.com/octo-org/octo-repo/runs/123456789",
        "passedTests": [f"tests/test_module_{i // 8}.py::test_case_number_{i}" for i in range(40)],
        "warnedTests": [],
        "failedTests": [],
    }


def subjects() -> list[statement.Subject]:
    return [statement.Subject("octo-org/octo-repo", {"gitCommit": COMMIT})]


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per CPU-second of this thread, over batches until ``seconds`` of CPU time have passed.

    CPU time, not wall time, so other processes sharing the machine do not count against us."""
    for _ in range(50):  # warm up
        fn()
    count, start = 0, time.thread_time()
    while (elapsed := time.thread_time() - start) < seconds:
        for _ in range(200):
            fn()
        count += 200
    return count / elapsed


def measure(
    algorithm: str, payload: bytes, pred: dict[str, object], seconds: float
) -> tuple[str, list[float], int]:
    key = SigningKey.generate(algorithm)
    keys = keyring([key.public])
    envelope = dsse.sign(payload, key)

    def sign() -> object:
        return dsse.sign(payload, key)

    def verify() -> object:
        return dsse.verify(envelope, keys)

    message = dsse.pae(dsse.PAYLOAD_TYPE, payload)

    def crypto_only() -> object:
        return key.public.verify(key.sign(message), message)

    def both() -> object:
        return dsse.verify(dsse.sign(payload, key), keys)

    def full() -> object:
        signed = dsse.sign(statement.statement(subjects(), statement.TEST_RESULT, pred), key)
        return statement.parse(dsse.verify(signed, keys))

    rates = [rate(fn, seconds) for fn in (crypto_only, sign, verify, both, full)]
    return key.algorithm, rates, len(canonical_json(envelope))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    args = parser.parse_args()
    pred = predicate()
    payload = statement.statement(subjects(), statement.TEST_RESULT, pred)
    versions = f"Python {platform.python_version()}, cryptography {cryptography.__version__}"
    print(f"{versions}, {platform.machine()}; statement {len(payload)} bytes, {args.seconds:g} s per figure")
    header = ("raw crypto/s", "sign/s", "verify/s", "sign+verify/s", "full receipt/s")
    print(f"{'algorithm':<18} " + " ".join(f"{h:>14}" for h in header) + f" {'envelope':>9}")
    figures = {}
    for algorithm in ("ed25519", "ecdsa-p256"):
        name, rates, size = measure(algorithm, payload, pred, args.seconds)
        print(f"{name:<18} " + " ".join(f"{r:>14,.0f}" for r in rates) + f" {size:>8,}B")
        keys = ("raw_crypto", "sign", "verify", "sign_verify", "full_receipt")
        figures[name] = {f"{k}_per_s": round(r) for k, r in zip(keys, rates, strict=True)}
    print(json.dumps({"seconds": args.seconds, "per_cpu_second": figures}))


if __name__ == "__main__":
    main()
