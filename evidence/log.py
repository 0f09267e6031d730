"""A per-installation append-only RFC 9162 Merkle log in Redis.

Redis holds the entries and, per level k, the hashes of the complete aligned subtrees of 2**k leaves
(level 0 = leaf hashes). Nodes are only ever appended, in the same transaction as their entry, so
any tree size up to the current one can be answered -- root, inclusion, consistency -- from O(log n)
stored hashes in one round trip, while appends carry on. An append reads the O(log n) hashes the
new root needs, signs the checkpoint in Python (the key never goes to Redis) and commits entry,
nodes and checkpoint under a WATCH on the entries list, so concurrent appenders serialise.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from evidence import checkpoint, merkle
from evidence.encoding import canonical_json, rfc3339
from evidence.errors import EvidenceError
from evidence.keys import SigningKey

MAX_ENTRIES = 1000
MAX_TRIES = 100
MAX_NODES = 256  # stored nodes one subtree() may combine; ranges that proofs use need <= 2*64
INSTALLATIONS = "baton:log:installations"


class LogBusy(EvidenceError):
    """Every append attempt lost its race to another appender; the caller may retry later."""


@dataclass(frozen=True)
class Appended:
    """Where an entry landed, and the signed tree head that proves it."""

    index: int
    leaf_hash: bytes
    checkpoint: dict[str, object]  # signed, for tree size index + 1
    proof: list[bytes]  # inclusion proof of the entry in that checkpoint's tree


def installations(client: redis.Redis) -> list[int]:
    """Installations that have a log, in ascending order."""
    return sorted(int(member) for member in client.smembers(INSTALLATIONS))


def _aligned_level(start: int, end: int) -> int | None:
    """k when [start, end) is a stored node (2**k leaves, start a multiple of 2**k), else None."""
    width = end - start
    if width > 0 and width & (width - 1) == 0 and start % width == 0:
        return width.bit_length() - 1
    return None


def _needed(build: Callable[[merkle.Subtree], list[bytes]]) -> list[tuple[int, int]]:
    """The ranges a proof builder asks for, in the order its proof lists them, so they can all be
    read in one round trip (each placeholder it gets back is the range's number)."""
    ranges: list[tuple[int, int]] = []

    def note(start: int, end: int) -> bytes:
        ranges.append((start, end))
        return (len(ranges) - 1).to_bytes(8, "big")

    return [ranges[int.from_bytes(token, "big")] for token in build(note)]


def _fold(hashes: list[bytes]) -> bytes:
    """MTH from the perfect subtrees' hashes, left to right (RFC 9162 splits off the largest first)."""
    current = hashes[-1]
    for h in reversed(hashes[:-1]):
        current = merkle.node_hash(h, current)
    return current


class Log:
    """One installation's log. The client must return bytes (redis-py's default, decode_responses=False)."""

    def __init__(self, client: redis.Redis, installation: int) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError(
                "evidence.log.Log needs a Redis client with decode_responses=False: entries are bytes"
            )
        self.client = client
        self.installation = installation
        prefix = f"baton:log:{installation}"
        self.entries_key = f"{prefix}:entries"
        self.checkpoint_key = f"{prefix}:checkpoint"
        self._level_prefix = f"{prefix}:level:"
        self._size_hint = 0

    def level_key(self, level: int) -> str:
        return f"{self._level_prefix}{level}"

    # -- appending -----------------------------------------------------------------------------

    def append(self, entry: bytes, key: SigningKey, *, now: Callable[[], float] = time.time) -> Appended:
        """Add ``entry`` and a new signed checkpoint in one transaction; retries when appends race."""
        if not isinstance(entry, bytes):
            raise TypeError(f"a log entry is bytes (canonical_json(envelope)), not {type(entry).__name__}")
        leaf = merkle.leaf_hash(entry)
        for attempt in range(MAX_TRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.entries_key)  # type: ignore[no-untyped-call]
                    size, tips = self._tips()
                    done = self._commit(pipe, entry=entry, leaf=leaf, size=size, tips=tips, key=key, now=now)
                except redis.WatchError:
                    # Another append committed first: back off a little, jittered, and try again.
                    time.sleep(random.uniform(0, 0.0002 * min(attempt + 1, 20)))  # noqa: S311 - jitter
                    continue
            self._size_hint = done.index + 1
            return done
        raise LogBusy(
            "log-busy",
            f"log of installation {self.installation}: {MAX_TRIES} append attempts all lost a race with "
            "other appenders; retry later or reduce the number of concurrent appenders",
        )

    def _tips(self) -> tuple[int, dict[int, bytes]]:
        """The size and the last node of each level whose bit is set in it: for a log of n entries,
        level k's last node is the perfect subtree for bit k of n. Reads the nodes the size hint
        needs, with the size, in one pipelined round trip; a second when the hint was off (a new Log
        object, or another appender). No MULTI: the caller WATCHes the entries, so if an append
        lands between these reads, its EXEC refuses what was computed from them."""
        size = self._size_hint
        for _ in range(2):
            bits = [k for k in range(size.bit_length()) if size >> k & 1]
            with self.client.pipeline(transaction=False) as read:
                read.llen(self.entries_key)
                for k in bits:
                    read.lindex(self.level_key(k), -1)
                actual, *last = read.execute()
            if int(actual) == size:
                tips = {k: h for k, h in zip(bits, last, strict=True) if isinstance(h, bytes)}
                missing = [k for k in bits if k not in tips]
                if missing:
                    raise RuntimeError(
                        f"log of installation {self.installation} is damaged: {size} entries but no stored "
                        f"node at level(s) {missing}; it was edited outside Baton"
                    )
                return size, tips
            size = self._size_hint = int(actual)
        raise redis.WatchError("the log grew while its size was read")  # an append is landing: retry

    def _commit(
        self,
        pipe: redis.client.Pipeline,
        *,
        entry: bytes,
        leaf: bytes,
        size: int,
        tips: dict[int, bytes],
        key: SigningKey,
        now: Callable[[], float],
    ) -> Appended:
        known: dict[tuple[int, int], bytes] = {}
        for start, end in merkle.perfect_subtrees(size):
            known[(start, end)] = tips[(end - start).bit_length() - 1]
        # The new leaf completes one subtree per trailing set bit of size (a binary carry).
        new_nodes: list[tuple[int, bytes]] = [(0, leaf)]
        current, start, level = leaf, size, 0
        known[(size, size + 1)] = leaf
        while size >> level & 1:
            width = 1 << level
            current = merkle.node_hash(tips[level], current)
            start -= width
            level += 1
            new_nodes.append((level, current))
            known[(start, start + 2 * width)] = current
        new_size = size + 1
        root = _fold([known[r] for r in merkle.perfect_subtrees(new_size)])
        proof = merkle.inclusion_proof(size, new_size, lambda s, e: known[(s, e)])
        head = checkpoint.Checkpoint(
            origin=checkpoint.origin_for(self.installation),
            size=new_size,
            root=root,
            timestamp=rfc3339(now()),
        )
        signed = checkpoint.sign(head, key)
        pipe.multi()
        pipe.rpush(self.entries_key, entry)
        for lvl, node in new_nodes:
            pipe.rpush(self.level_key(lvl), node)
        pipe.set(self.checkpoint_key, canonical_json(signed))
        pipe.sadd(INSTALLATIONS, self.installation)
        pipe.execute()
        return Appended(index=size, leaf_hash=leaf, checkpoint=signed, proof=proof)

    # -- reading -------------------------------------------------------------------------------

    def size(self) -> int:
        return int(self.client.llen(self.entries_key))

    def checkpoint(self) -> dict[str, object] | None:
        """The latest signed checkpoint (verify it with checkpoint.verify before trusting it)."""
        raw = self.client.get(self.checkpoint_key)
        if raw is None:
            return None
        doc: dict[str, object] = json.loads(raw)
        return doc

    def entries(self, start: int, end: int) -> list[bytes]:
        """Entries [start, end), at most MAX_ENTRIES per call."""
        if not 0 <= start <= end or end - start > MAX_ENTRIES:
            raise ValueError(
                f"entries({start}, {end}): need 0 <= start <= end and at most {MAX_ENTRIES} entries per call"
            )
        if start == end:
            return []
        with self.client.pipeline(transaction=False) as read:  # append-only: the range cannot shrink
            read.llen(self.entries_key)
            read.lrange(self.entries_key, start, end - 1)
            size, found = read.execute()
        if end > size:
            raise ValueError(f"entries({start}, {end}): the log has only {size} entries")
        return list(found)

    def subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) from stored nodes, in one round trip."""
        return self._subtrees([(start, end)])[0]

    def root(self, size: int) -> bytes:
        """The root of the tree of the first ``size`` entries (EMPTY_ROOT for 0)."""
        if size == 0:
            return merkle.EMPTY_ROOT
        parts = merkle.perfect_subtrees(size)
        return _fold(self._subtrees(parts))

    def inclusion(self, index: int, size: int) -> list[bytes]:
        """RFC 9162 inclusion proof of entry ``index`` in the tree of ``size`` entries."""
        return self._subtrees(_needed(lambda subtree: merkle.inclusion_proof(index, size, subtree)))

    def consistency(self, old: int, new: int) -> list[bytes]:
        """RFC 9162 consistency proof from the tree of ``old`` entries to the one of ``new``."""
        return self._subtrees(_needed(lambda subtree: merkle.consistency_proof(old, new, subtree)))

    def _subtrees(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """MTH of each range, reading every stored node they need in one pipelined round trip."""
        nodes: dict[tuple[int, int], bytes | None] = {}
        for start, end in ranges:
            if not 0 <= start < end:
                raise ValueError(f"subtree({start}, {end}): need 0 <= start < end")
            self._plan(start, end, nodes, start, end)
        order = sorted(nodes)
        if order:
            with self.client.pipeline(transaction=False) as read:  # nodes are append-only: no snapshot needed
                for level, index in order:
                    read.lindex(self.level_key(level), index)
                for (level, index), value in zip(order, read.execute(), strict=True):
                    nodes[(level, index)] = value
        return [self._combine(start, end, nodes) for start, end in ranges]

    def _plan(
        self, start: int, end: int, nodes: dict[tuple[int, int], bytes | None], first: int, last: int
    ) -> None:
        level = _aligned_level(start, end)
        if level is not None:
            nodes[(level, start >> level)] = None
            if len(nodes) > MAX_NODES:
                raise ValueError(
                    f"subtree({first}, {last}) is not made of stored nodes (more than {MAX_NODES} needed); "
                    "proofs only ask for ranges that are"
                )
            return
        split = start + (1 << ((end - start - 1).bit_length() - 1))
        self._plan(start, split, nodes, first, last)
        self._plan(split, end, nodes, first, last)

    def _combine(self, start: int, end: int, nodes: dict[tuple[int, int], bytes | None]) -> bytes:
        level = _aligned_level(start, end)
        if level is not None:
            value = nodes[(level, start >> level)]
            if value is None:
                raise ValueError(
                    f"entries [{start}, {end}) are not all in the log of installation {self.installation} "
                    f"(it has {self.size()})"
                )
            return value
        split = start + (1 << ((end - start - 1).bit_length() - 1))
        return merkle.node_hash(self._combine(start, split, nodes), self._combine(split, end, nodes))
