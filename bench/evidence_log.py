"""Transparency-log appends/s, proof sizes at 1k/100k/1M entries, and audit-chain appends/s.

Run from the repository root:  .venv/bin/python bench/evidence_log.py [--seconds S] [--big N]

Starts its own redis-server (baton.redis_server.EmbeddedRedis, as `baton serve` does when REDIS_URL is
unset: AOF on, fsync every second) and talks to it over loopback with redis-py, one thread.

* Log.append: one installation, Ed25519 checkpoints, ~1 KB entries; then again on top of the
  1M-entry log, to show an append costs O(log n).
* Proof sizes: filling 1M entries through Log.append would take many minutes, so the bench
  BULK-LOADS the tree: it computes the leaf hashes and every complete aligned subtree's hash in
  Python and RPUSHes them (pipelined) to the level lists, with the entries, exactly as appends
  would have stored them. It then reads proofs with Log.inclusion/Log.consistency and checks them
  against roots computed independently with merkle.root.
* AuditChain.append with batches of 1, 10 and 100 events, AuditChain.seal of a backlog, and
  record() as a caller's pipeline uses it; plus the round-trip and CPU costs that explain them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from baton.redis_server import EmbeddedRedis
from evidence import audit, merkle
from evidence.audit import AuditChain, derive_key
from evidence.encoding import canonical_json
from evidence.keys import SigningKey
from evidence.log import Log

ENTRY = canonical_json(
    {"payload": "x" * 900, "payloadType": "application/vnd.in-toto+json", "signatures": []}
)
CHUNK = 10_000


def per_second(fn: Callable[[], int], seconds: float) -> tuple[float, float]:
    """(units per second, calls per second); ``fn`` returns the units one call did."""
    fn()  # warm up
    units = calls = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        units += fn()
        calls += 1
    return units / elapsed, calls / elapsed


def round_trip_us(client: redis.Redis, n: int = 2000) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        client.ping()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e6


def bulk_load(client: redis.Redis, log: Log, n: int) -> list[bytes]:
    """Store n entries and their tree nodes as n appends would have; returns the leaf hashes."""
    leaves = [merkle.leaf_hash(b"bulk entry %d" % i) for i in range(n)]
    level, nodes = 0, leaves
    while nodes:
        for i in range(0, len(nodes), CHUNK):
            client.rpush(log.level_key(level), *nodes[i : i + CHUNK])
        nodes = [merkle.node_hash(nodes[j], nodes[j + 1]) for j in range(0, len(nodes) - 1, 2)]
        level += 1
    with client.pipeline(transaction=False) as pipe:
        for i in range(0, n, CHUNK):
            pipe.rpush(log.entries_key, *(b"bulk entry %d" % j for j in range(i, min(i + CHUNK, n))))
        pipe.execute()
    return leaves


def bench_log(client: redis.Redis, seconds: float, big: int) -> dict[str, float]:
    key = SigningKey.generate()
    print("\n## Log.append (Ed25519 checkpoint, ~1 KB entry)")
    log = Log(client, 1)
    rate, _ = per_second(lambda: (log.append(ENTRY, key), 1)[1], seconds)
    sign = per_second(lambda: (key.sign(b"baton/installation/1\n123\n" + b"A" * 44 + b"\n"), 1)[1], 1.0)[0]
    figures = {"log_append_per_s": round(rate)}
    print(f"appends/s on a fresh log (grew to {log.size():,}): {rate:,.0f}  ({1e6 / rate:,.0f} µs each)")
    print(
        f"  of which the checkpoint signature: {1e6 / sign:,.0f} µs; a PING round trip: "
        f"{round_trip_us(client):,.0f} µs; an append makes 3 (WATCH, read, MULTI/EXEC)"
    )

    print("\n## Proof sizes (tree bulk-loaded, not appended: see the docstring; 32-byte SHA-256 hashes)")
    print(
        "| entries | inclusion (index n/2) | worst inclusion | consistency n/2+1 -> n | consistency n-1 -> n "
        "| inclusion read |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (1_000, 100_000, big):
        installation = 10 + n
        log = Log(client, installation)
        t = time.perf_counter()
        leaves = bulk_load(client, log, n)
        load_s = time.perf_counter() - t
        full = merkle.root(leaves)
        assert log.root(n) == full
        index = n // 2
        inclusion = log.inclusion(index, n)
        merkle.verify_inclusion(leaves[index], index, n, inclusion, full)
        worst = max(len(log.inclusion(i, n)) for i in (0, n - 1, n // 3, (1 << (n.bit_length() - 1)) - 1))
        old = n // 2 + 1
        consistency = log.consistency(old, n)
        merkle.verify_consistency(old, n, merkle.root(leaves[:old]), full, consistency)
        tail = log.consistency(n - 1, n)
        merkle.verify_consistency(n - 1, n, merkle.root(leaves[: n - 1]), full, tail)
        reads = 200
        t = time.perf_counter()
        for i in range(reads):
            log.inclusion((i * 7919) % n, n)
        read_us = (time.perf_counter() - t) / reads * 1e6
        print(
            f"| {n:,} | {len(inclusion)} hashes = {32 * len(inclusion)} B | {32 * worst} B "
            f"| {len(consistency)} hashes = {32 * len(consistency)} B | {32 * len(tail)} B "
            f"| {read_us:,.0f} µs |  (bulk load {load_s:.1f} s)"
        )
    print("(as hex in JSON a proof is ~2.1x these bytes: 64 hex digits + quotes and comma per hash)")
    log = Log(client, 10 + big)
    rate, _ = per_second(lambda: (log.append(ENTRY, key), 1)[1], seconds)
    print(f"\nappends/s on top of the {big:,}-entry log: {rate:,.0f}  ({1e6 / rate:,.0f} µs each)")
    return {**figures, "log_append_on_big_per_s": round(rate), "big": big}


def bench_audit(client: redis.Redis, seconds: float) -> dict[str, float]:
    print("\n## Audit chain")
    key = derive_key(b"bench master secret, 32 bytes or more", 7)
    chain = AuditChain(client, 7, key)
    event = {"event": "task-moved", "task": "octo-org/octo-repo#1347", "from": "queued", "to": "claimed",
             "actor": "worker-3", "at": "2026-11-30T19:36:28.123Z"}  # fmt: skip
    figures: dict[str, float] = {}
    print("| batch | events/s | AuditChain.append calls/s | µs per call |")
    print("|---:|---:|---:|---:|")
    for batch in (1, 10, 100):
        events = [event] * batch
        rate, calls = per_second(lambda events=events: chain.append(events), seconds)  # type: ignore[misc]
        print(f"| {batch} | {rate:,.0f} | {calls:,.0f} | {1e6 / calls:,.0f} |")
        figures[f"audit_append_batch_{batch}_per_s"] = round(rate)
    print(f"(chain now {chain.length():,} entries)")

    backlog = 50_000
    with client.pipeline(transaction=False) as pipe:
        for _ in range(backlog):
            audit.record(pipe, 7, event)
        pipe.execute()
    t = time.perf_counter()
    while chain.seal(1000):
        pass
    seal_s = time.perf_counter() - t
    print(f"seal(1000) of a {backlog:,}-event backlog: {backlog / seal_s:,.0f} events/s")
    figures["audit_seal_per_s"] = round(backlog / seal_s)

    def recorded() -> int:
        with client.pipeline(transaction=True) as pipe:
            pipe.hset("bench:task", "state", "claimed")
            audit.record(pipe, 7, event)
            pipe.execute()
        return 1

    rate, _ = per_second(recorded, seconds)
    print(f"record() inside a caller's MULTI (HSET + the 2 audit writes): {rate:,.0f} transactions/s")
    client.delete(chain.pending_key)

    n = 20_000
    pending = canonical_json(event)
    t = time.perf_counter()
    prev = bytes(32)
    for seq in range(n):  # what seal() does per event, without Redis
        canonical = audit._pending_event(pending)
        tag = audit._mac(key, prev, seq, canonical)
        audit._sealed(seq, prev, canonical, tag)
        prev = tag
    cpu_us = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for _ in range(n):
        canonical_json(event)
    record_us = (time.perf_counter() - t) / n * 1e6
    print(
        f"CPU/event without Redis: seal {cpu_us:.1f} µs (parse, canonical JSON, HMAC); "
        f"record {record_us:.1f} µs; "
        f"PING round trip {round_trip_us(client):,.0f} µs; append = 4 round trips "
        "(record MULTI, WATCH, read, MULTI/EXEC)"
    )
    t = time.perf_counter()
    assert chain.verify() is None
    print(f"verify of {chain.length():,} entries: {time.perf_counter() - t:.2f} s")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput measurement")
    parser.add_argument("--big", type=int, default=1_000_000, help="entries in the largest tree")
    args = parser.parse_args()
    print(
        f"# bench/evidence_log.py  ({platform.python_implementation()} {platform.python_version()}, "
        f"redis-py {redis.__version__}, {platform.machine()})"
    )
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(data_dir=Path(tmp), durable=True) as server:
        client = redis.Redis.from_url(server.url)
        info = client.info("server")
        print(
            f"server: {info.get('redis_version')} (valkey {info.get('valkey_version', '-')}), AOF on, "
            "appendfsync everysec, loopback"
        )
        figures = bench_log(client, args.seconds, args.big)
        figures.update(bench_audit(client, args.seconds))
        client.close()
    print(json.dumps({"seconds": args.seconds, **figures}))


if __name__ == "__main__":
    main()
