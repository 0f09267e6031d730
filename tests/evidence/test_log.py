"""The Redis transparency log: signed appends, proofs from stored nodes, races, rewrites and restarts."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from baton.redis_server import free_port, server_binary
from evidence import checkpoint, merkle
from evidence.errors import EvidenceError
from evidence.keys import SigningKey, keyring
from evidence.log import MAX_ENTRIES, Appended, Log, installations

INSTALLATION = 4242
SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 50]


def entry(i: int, tag: str = "") -> bytes:
    return b'{"receipt":%d,"tag":"%s"}' % (i, tag.encode())


def fill(log: Log, key: SigningKey, n: int) -> list[Appended]:
    return [log.append(entry(i), key, now=lambda: 1_790_000_000.0) for i in range(n)]


def check_appended(done: Appended, key: SigningKey, entry_bytes: bytes) -> checkpoint.Checkpoint:
    head = checkpoint.verify(done.checkpoint, keyring([key.public]))
    assert head.size == done.index + 1
    assert done.leaf_hash == merkle.leaf_hash(entry_bytes)
    merkle.verify_inclusion(done.leaf_hash, done.index, head.size, done.proof, head.root)
    return head


def test_appends_are_indexed_signed_and_proved(rdb: redis.Redis) -> None:
    key = SigningKey.generate()
    log = Log(rdb, INSTALLATION)
    assert log.size() == 0
    assert log.checkpoint() is None
    assert log.root(0) == merkle.EMPTY_ROOT
    leaves: list[bytes] = []
    for i in range(20):
        done = log.append(entry(i), key, now=lambda: 1_790_000_000.25)
        assert done.index == i
        leaves.append(done.leaf_hash)
        head = check_appended(done, key, entry(i))
        assert head.origin == checkpoint.origin_for(INSTALLATION)
        assert head.timestamp == "2026-09-21T14:13:20.250Z"
        assert head.root == merkle.root(leaves)
        assert log.checkpoint() == done.checkpoint
    assert log.size() == 20
    assert log.entries(0, 20) == [entry(i) for i in range(20)]
    assert log.entries(5, 7) == [entry(5), entry(6)]
    assert log.entries(3, 3) == []
    assert installations(rdb) == [INSTALLATION]
    assert rdb.ttl(log.entries_key) == -1  # no TTLs: the log is permanent


def test_ecdsa_keys_sign_checkpoints_too(rdb: redis.Redis) -> None:
    key = SigningKey.generate("ecdsa-p256-sha256")
    for done in fill(Log(rdb, 1), key, 5):
        check_appended(done, key, entry(done.index))


def test_reads_from_redis_match_the_reference(rdb: redis.Redis) -> None:
    key = SigningKey.generate()
    log = Log(rdb, INSTALLATION)
    fill(log, key, max(SIZES))
    leaves = [merkle.leaf_hash(entry(i)) for i in range(max(SIZES))]
    for level in range(6):  # the stored nodes are exactly the complete aligned subtrees
        width = 1 << level
        stored = rdb.lrange(log.level_key(level), 0, -1)
        assert stored == [
            merkle.root(leaves[j : j + width]) for j in range(0, len(leaves) - width + 1, width)
        ]
    assert log.subtree(3, 10) == merkle.root(leaves[3:10])  # not a stored node: combined from several
    assert log.subtree(8, 16) == merkle.root(leaves[8:16])
    for n in range(max(SIZES) + 1):
        assert log.root(n) == merkle.root(leaves[:n]), n
    for n in SIZES:
        new_root = merkle.root(leaves[:n])
        for m in range(n):
            proof = log.inclusion(m, n)
            assert proof == merkle.inclusion_proof(m, n, lambda s, e: merkle.root(leaves[s:e]))
            merkle.verify_inclusion(leaves[m], m, n, proof, new_root)
        for m in range(1, n + 1):
            proof = log.consistency(m, n)
            merkle.verify_consistency(m, n, merkle.root(leaves[:m]), new_root, proof)


def test_bad_ranges_are_refused_clearly(rdb: redis.Redis) -> None:
    log = Log(rdb, INSTALLATION)
    fill(log, SigningKey.generate(), 5)
    with pytest.raises(ValueError, match="start <= end"):
        log.entries(4, 2)
    with pytest.raises(ValueError, match=f"at most {MAX_ENTRIES}"):
        log.entries(0, MAX_ENTRIES + 1)
    with pytest.raises(ValueError, match="only 5 entries"):
        log.entries(0, 6)
    with pytest.raises(ValueError, match="not all in the log"):
        log.root(6)
    with pytest.raises(ValueError, match="not all in the log"):
        log.inclusion(2, 6)
    with pytest.raises(ValueError, match="not in a tree of size 5"):
        log.inclusion(5, 5)
    with pytest.raises(ValueError, match="0 < old size <= new size"):
        log.consistency(0, 5)
    with pytest.raises(ValueError, match="start < end"):
        log.subtree(3, 3)
    with pytest.raises(TypeError, match="bytes"):
        log.append("text", SigningKey.generate())  # type: ignore[arg-type]
    rdb.delete(log.level_key(2))  # 5 entries need the node of level 2; someone removed it
    with pytest.raises(RuntimeError, match=r"damaged: 5 entries but no stored node at level\(s\) \[2\]"):
        log.append(entry(5), SigningKey.generate())
    with pytest.raises(ValueError, match="decode_responses=False"):
        Log(redis.Redis(decode_responses=True), 1)


def test_concurrent_appenders_neither_lose_nor_repeat_entries(redis_url: str) -> None:
    key = SigningKey.generate()
    per_thread, threads = 25, 4
    results: dict[int, list[Appended]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(t: int) -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            log = Log(client, INSTALLATION)
            start.wait()
            results[t] = [log.append(entry(i, f"t{t}"), key) for i in range(per_thread)]
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            client.close()

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not errors, errors
    client = redis.Redis.from_url(redis_url)
    log = Log(client, INSTALLATION)
    total = per_thread * threads
    assert log.size() == total
    stored = log.entries(0, total)
    assert sorted(stored) == sorted(entry(i, f"t{t}") for t in range(threads) for i in range(per_thread))
    indexes = sorted(done.index for dones in results.values() for done in dones)
    assert indexes == list(range(total))
    for t, dones in results.items():  # each thread's entries landed in its own order, where it was told
        assert [stored[d.index] for d in dones] == [entry(i, f"t{t}") for i in range(per_thread)]
    leaves = [merkle.leaf_hash(e) for e in stored]
    final = checkpoint.verify(log.checkpoint() or {}, keyring([key.public]))
    assert (final.size, final.root) == (total, merkle.root(leaves))
    for dones in results.values():
        for done in dones:
            head = check_appended(done, key, stored[done.index])
            merkle.verify_consistency(
                head.size, total, head.root, final.root, log.consistency(head.size, total)
            )
    client.close()


def test_a_consistently_rewritten_log_fails_against_an_earlier_checkpoint(rdb: redis.Redis) -> None:
    key = SigningKey.generate()
    log = Log(rdb, INSTALLATION)
    fill(log, key, 16)
    saved = checkpoint.verify(log.checkpoint() or {}, keyring([key.public]))
    fill_more = [log.append(entry(i), key) for i in range(16, 21)]
    assert fill_more[-1].index == 20
    # The attacker swaps entry 5 and rebuilds every stored node above it, so the log is a
    # perfectly well-formed tree again -- just not the one the saved checkpoint committed to.
    forged = [entry(i) for i in range(21)]
    forged[5] = b'{"receipt":5,"tag":"forged"}'
    rdb.lset(log.entries_key, 5, forged[5])
    leaves = [merkle.leaf_hash(e) for e in forged]
    level = 0
    while (1 << level) <= len(leaves):
        width = 1 << level
        nodes = [merkle.root(leaves[j : j + width]) for j in range(0, len(leaves) - width + 1, width)]
        rdb.delete(log.level_key(level))
        rdb.rpush(log.level_key(level), *nodes)
        level += 1
    assert log.root(21) == merkle.root(leaves)  # internally consistent
    for m in range(1, 22):
        merkle.verify_consistency(m, 21, merkle.root(leaves[:m]), log.root(21), log.consistency(m, 21))
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_consistency(16, 21, saved.root, log.root(21), log.consistency(16, 21))
    assert failed.value.code == "inconsistent"
    assert log.root(16) != saved.root
    for index, leaf in ((5, leaves[5]), (4, leaves[4])):  # the forged entry, and its neighbour whose
        with pytest.raises(EvidenceError) as failed:  # proof now carries the forged hash
            merkle.verify_inclusion(leaf, index, 16, log.inclusion(index, 16), saved.root)
        assert failed.value.code == "not-included"


class AofServer:
    """A redis-server of our own with an fsync-always AOF, to kill and restart on the same directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> redis.Redis:
        port = free_port()
        self.proc = subprocess.Popen(
            [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
             "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)
        return client

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[AofServer]:
    server = AofServer(tmp_path / "aof")
    server.data_dir.mkdir()
    yield server
    server.kill()


def test_the_log_survives_sigkill_with_an_aof(aof_server: AofServer) -> None:
    key = SigningKey.generate()
    client = aof_server.start()
    log = Log(client, INSTALLATION)
    dones = fill(log, key, 11)
    before = (log.checkpoint(), log.entries(0, 11), [log.inclusion(i, 11) for i in range(11)], log.root(11))
    client.close()
    aof_server.kill()

    client = aof_server.start()
    log = Log(client, INSTALLATION)
    after = (log.checkpoint(), log.entries(0, 11), [log.inclusion(i, 11) for i in range(11)], log.root(11))
    assert after == before
    head = checkpoint.verify(log.checkpoint() or {}, keyring([key.public]))
    for done in dones:  # the proofs handed out before the crash still check out
        merkle.verify_inclusion(
            done.leaf_hash, done.index, head.size, log.inclusion(done.index, 11), head.root
        )
    more = log.append(entry(11), key)  # and the log carries on from where it was
    assert more.index == 11
    new = check_appended(more, key, entry(11))
    merkle.verify_consistency(11, 12, head.root, new.root, log.consistency(11, 12))
    assert installations(client) == [INSTALLATION]
    client.close()
