"""A tamper-evident audit chain per installation: HMAC-SHA256 over each event and its predecessor.

Capture and sealing are separate on purpose. ``record`` only RPUSHes the event to a pending list, so it
fits inside the caller's own MULTI (or ingest Lua script) and is committed atomically with the state
change it describes; it needs no key and no reads. ``AuditChain.seal`` later moves pending events onto
the chain, each entry MACed over the previous entry's MAC, so editing, deleting or reordering a sealed
entry breaks every MAC after it unless the editor holds the key.

What the chain cannot show on its own: that its tail was cut off. Save the head (``head()``, what
`baton audit head` prints) somewhere the editor cannot write, and ``check_anchor`` later proves the
chain still holds that entry unchanged, as a saved checkpoint does for the transparency log.

A chain can also lose its tail honestly: Redis replicates asynchronously, so entries sealed on a
primary that died before its replicas had them are gone from the replica promoted in its place.
Reusing their numbers for other events would fork the chain under anyone who saw them, so a sealer
that remembers a head the chain no longer reaches (``seal(known=...)``) first seals a ``chain-gap``
entry: its event names the lost numbers, its ``seq`` continues after them, its ``prev`` is the last
entry that survived, and its MAC covers all of it. ``verify`` accepts such a gap and names it
(``survey().gaps``); an entry that skips numbers without naming them is broken.

Redis keys (no TTLs):
    baton:audit:{installation}:pending   list of JSON events not yet sealed, oldest first
    baton:audit:{installation}:chain     list of sealed entries, canonical JSON
                                         {"event": {...}, "mac": hex, "prev": hex, "seq": n}
    baton:audit:installations            set of installation ids that have recorded anything
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

import redis
import redis.client
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from evidence.encoding import canonical_json
from evidence.errors import EvidenceError

MAC_SIZE = 32
GENESIS = bytes(MAC_SIZE)  # "prev" of entry 0
PAGE = 1000
MAX_TRIES = 100
#: The event of an entry that names entries lost with a Redis primary (see the module docstring).
GAP_EVENT = "chain-gap"
INSTALLATIONS = "baton:audit:installations"
KEY_INFO = b"baton/audit-chain/v1/installation/"

RECORD_SCRIPT = """
-- Record one audit event from inside another Lua script (e.g. ingest's "delivery accepted"), so it
-- commits atomically with what it describes. Same effect as evidence.audit.record().
--   KEYS[n]   = "baton:audit:" .. installation .. ":pending"   (pending_key(installation))
--   KEYS[n+1] = "baton:audit:installations"                    (INSTALLATIONS)
--   ARGV[m]   = the event as a JSON object with a non-empty string "event" field, e.g.
--               {"event":"delivery-accepted","delivery":"<X-GitHub-Delivery>","at":"<rfc3339>"}
--               (build it in Python with canonical_json; cjson.encode also works, since sealing
--               re-canonicalises the event, but it turns an empty table into {} and floats lossy)
--   ARGV[m+1] = the installation id, decimal
redis.call("RPUSH", KEYS[1], ARGV[1])
redis.call("SADD", KEYS[2], ARGV[2])
"""


class AuditError(EvidenceError):
    """Sealing could not proceed: the chain's last entry is unreadable, or sealers kept colliding."""


@dataclass(frozen=True)
class Broken:
    """The first entry whose link does not hold. ``seq`` is the seq the entry claims (its position
    when it has none); ``position`` is its index in the chain list."""

    seq: int
    position: int
    reason: str


@dataclass(frozen=True)
class Gap:
    """Entries ``first``..``last`` (by seq) were lost; entry ``named_by`` (the gap entry) says so."""

    first: int
    last: int
    named_by: int

    def describe(self) -> str:
        lost = f"entry {self.first}" if self.first == self.last else f"entries {self.first} to {self.last}"
        return f"{lost} lost with a Redis primary (named by entry {self.named_by})"


@dataclass(frozen=True)
class Survey:
    """What ``AuditChain.survey`` found: how many entries hold, the gaps they name, the first break."""

    entries: int
    gaps: tuple[Gap, ...]
    broken: Broken | None


def derive_key(master: bytes, installation: int) -> bytes:
    """The installation's chain key: HKDF-SHA256 with a label of its own, so it is independent of
    every other key derived from the same master secret, and of other installations' chain keys."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_INFO + str(installation).encode())
    return hkdf.derive(master)


def pending_key(installation: int) -> str:
    return f"baton:audit:{installation}:pending"


def chain_key(installation: int) -> str:
    return f"baton:audit:{installation}:chain"


def _check_event(event: Mapping[str, object]) -> None:
    name = event.get("event") if isinstance(event, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            'an audit event is a JSON object with a non-empty string "event" field, '
            'e.g. {"event": "task-claimed", ...}'
        )


def record(pipe: redis.Redis | redis.client.Pipeline, installation: int, event: Mapping[str, object]) -> None:
    """Capture ``event`` for sealing: two writes, no reads, so it can join the caller's MULTI."""
    _check_event(event)
    pipe.rpush(pending_key(installation), canonical_json(event))
    pipe.sadd(INSTALLATIONS, installation)


def script_keys(installation: int) -> list[str]:
    """KEYS for RECORD_SCRIPT, in order."""
    return [pending_key(installation), INSTALLATIONS]


def script_args(installation: int, event: Mapping[str, object]) -> list[bytes]:
    """ARGV for RECORD_SCRIPT, in order."""
    _check_event(event)
    return [canonical_json(event), str(installation).encode()]


def installations(client: redis.Redis) -> list[int]:
    """Installations that have recorded audit events, ascending."""
    return sorted(int(member) for member in client.smembers(INSTALLATIONS))


def mac(key: bytes, prev: bytes, seq: int, event: object) -> bytes:
    """HMAC-SHA256(key, prev_mac || canonical_json({"seq": seq, "event": event}))."""
    return _mac(key, prev, seq, canonical_json(event))


def _mac(key: bytes, prev: bytes, seq: int, event: bytes) -> bytes:
    # canonical_json({"seq": seq, "event": e}) spelled out ("event" sorts before "seq"), so a seal
    # serialises each event once.
    return hmac.new(key, b'%s{"event":%s,"seq":%d}' % (prev, event, seq), hashlib.sha256).digest()


def _sealed(seq: int, prev: bytes, event: bytes, tag: bytes) -> bytes:
    """canonical_json({"seq", "prev", "event", "mac"}) of an entry, from the event's canonical bytes."""
    return b'{"event":%s,"mac":"%s","prev":"%s","seq":%d}' % (
        event,
        tag.hex().encode(),
        prev.hex().encode(),
        seq,
    )


def _pending_event(raw: bytes) -> bytes:
    """A pending event's canonical bytes. A malformed one (say, from a buggy Lua caller) is kept,
    wrapped, not dropped: the chain records that something was captured."""
    try:
        return canonical_json(json.loads(raw))
    except ValueError:
        return canonical_json(
            {"event": "malformed-pending-event", "raw": raw.decode("utf-8", errors="replace")}
        )


class AuditChain:
    """One installation's chain. ``key`` is derive_key(master, installation)."""

    def __init__(self, client: redis.Redis, installation: int, key: bytes) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("evidence.audit.AuditChain needs a Redis client with decode_responses=False")
        if len(key) < MAC_SIZE:
            raise ValueError(
                "the audit chain key must be at least 32 bytes: use derive_key(master, installation)"
            )
        self.client = client
        self.installation = installation
        self.key = key
        self.pending_key = pending_key(installation)
        self.chain_key = chain_key(installation)

    def pending(self) -> int:
        return int(self.client.llen(self.pending_key))

    def length(self) -> int:
        return int(self.client.llen(self.chain_key))

    def head(self) -> tuple[int, bytes] | None:
        """(seq, mac) of the last sealed entry, to anchor elsewhere; None for an empty chain."""
        return self.tip_of(self.client.lindex(self.chain_key, -1))

    def tip_of(self, last: bytes | str | None) -> tuple[int, bytes] | None:
        """(seq, mac) of ``last``, the chain's last entry as read (None: the chain is empty)."""
        return None if last is None else self._tip(last)

    def check_anchor(self, seq: int, tag: bytes) -> str | None:
        """What is wrong with the chain against a head saved earlier (entry ``seq`` with MAC ``tag``),
        or None. Run it after ``verify``: an intact chain can still have lost its tail. A head that
        falls in a named gap is reported as lost with its primary, not as a rewrite."""
        gaps = self.survey().gaps
        for gap in gaps:
            if gap.first <= seq <= gap.last:
                return f"the saved head (entry {seq}) is among the {gap.describe()}"
        position = seq - sum(g.last - g.first + 1 for g in gaps if g.last < seq)
        length = self.length()
        if length <= position:
            return (
                f"the chain has {length} entries, but the saved head is entry {seq}: entries were cut off "
                "its tail"
            )
        raw = self.client.lindex(self.chain_key, position)
        try:
            found = bytes.fromhex(json.loads(raw or b"")["mac"])
        except (ValueError, KeyError, TypeError):
            found = b""
        if not hmac.compare_digest(found, tag):
            return (
                f"entry {seq}'s MAC is not the saved head's: the chain was rewritten from there or before "
                "(or the head was saved from another chain)"
            )
        return None

    def _tip(self, last: bytes | str) -> tuple[int, bytes]:
        try:
            entry = json.loads(last)
            seq, tag = entry["seq"], bytes.fromhex(entry["mac"])
        except (ValueError, KeyError, TypeError) as exc:
            raise AuditError(
                "audit-unreadable",
                f"audit chain of installation {self.installation}: the last sealed entry is unreadable "
                f"({exc}); run verify to find the damage. Events keep being captured as pending.",
            ) from exc
        if not isinstance(seq, int) or len(tag) != MAC_SIZE:
            raise AuditError(
                "audit-unreadable",
                f"audit chain of installation {self.installation}: the last entry has a bad seq or mac",
            )
        return seq, tag

    def append(self, events: Sequence[Mapping[str, object]]) -> int:
        """Record ``events`` (one transaction) and seal what is pending; returns how many were sealed
        (this caller's and any that others recorded before)."""
        for event in events:
            _check_event(event)
        if events:
            with self.client.pipeline(transaction=True) as pipe:  # what record() does, in one RPUSH
                pipe.rpush(self.pending_key, *(canonical_json(event) for event in events))
                pipe.sadd(INSTALLATIONS, self.installation)
                waiting = int(pipe.execute()[0])  # pending's length after our RPUSH
        else:
            waiting = self.pending()
        sealed = 0
        for _ in range(waiting // PAGE + 1):  # drains what was pending when we recorded, bounded
            done = self.seal(PAGE)
            sealed += done
            if done < PAGE:
                break
        return sealed

    def seal(self, limit: int = PAGE, *, known: tuple[int, bytes] | None = None) -> int:
        """Move up to ``limit`` pending events onto the chain; returns how many.

        ``known`` is the newest head the caller saw on this chain (``head()``). If the chain no
        longer reaches it (a Redis failover lost its tail), a gap entry naming the lost numbers is
        sealed first, even with nothing pending, so the numbers are never given to other events.

        Only the chain key is WATCHed: pending only grows at its tail except by a sealer, and every
        sealer that trims it also pushes to the chain, so a concurrent seal aborts this one while a
        concurrent record() does not (recorders must not starve the sealer)."""
        if limit < 1:
            raise ValueError(f"seal limit must be >= 1, not {limit}")
        for attempt in range(MAX_TRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.chain_key)  # type: ignore[no-untyped-call]
                    # One round trip. No MULTI needed: if the chain moves between these reads, it
                    # moved after the WATCH too, and EXEC below refuses what was computed from them.
                    with self.client.pipeline(transaction=False) as read:
                        read.lindex(self.chain_key, -1)
                        read.lrange(self.pending_key, 0, limit - 1)
                        last, raw_events = read.execute()
                    seq, prev = (-1, GENESIS) if last is None else self._tip(last)
                    sealed: list[bytes] = []
                    if known is not None and known[0] > seq:
                        lost = {"event": GAP_EVENT, "lost": [seq + 1, known[0]], "lostHead": known[1].hex()}
                        event = canonical_json(lost)
                        seq = known[0] + 1
                        tag = _mac(self.key, prev, seq, event)
                        sealed.append(_sealed(seq, prev, event, tag))
                        prev = tag
                    if not raw_events and not sealed:
                        return 0
                    gap = len(sealed)
                    for raw in raw_events:
                        seq += 1
                        event = _pending_event(raw)
                        tag = _mac(self.key, prev, seq, event)
                        sealed.append(_sealed(seq, prev, event, tag))
                        prev = tag
                    pipe.multi()
                    pipe.rpush(self.chain_key, *sealed)
                    pipe.ltrim(self.pending_key, len(sealed) - gap, -1)
                    pipe.execute()
                    return len(sealed) - gap
                except redis.WatchError:
                    time.sleep(random.uniform(0, 0.0002 * min(attempt + 1, 20)))  # noqa: S311 - jitter
        raise AuditError(
            "audit-busy",
            f"audit chain of installation {self.installation}: {MAX_TRIES} seal attempts all collided with "
            "other sealers; the events stay pending and the next seal takes them",
        )

    def verify(self) -> Broken | None:
        """The first entry whose seq, prev link or MAC does not hold, or None. Reads only."""
        return self.survey().broken

    def survey(self) -> Survey:
        """Walk the whole chain: how many entries hold, the gaps they name, and the first break."""
        prev, position, seq = GENESIS, 0, 0
        gaps: list[Gap] = []
        while True:
            page = self.client.lrange(self.chain_key, position, position + PAGE - 1)
            if not page:
                return Survey(position, tuple(gaps), None)
            for raw in page:
                found = check_entry(self.key, raw, position, prev, seq=seq)
                if isinstance(found, Broken):
                    return Survey(position, tuple(gaps), found)
                prev = found.mac
                if found.gap is not None:
                    gaps.append(found.gap)
                seq = found.seq + 1
                position += 1

    def export(self, out: IO[str]) -> int:
        """Write the sealed entries as JSONL (one canonical JSON entry a line); returns the count."""
        position = 0
        while True:
            page = self.client.lrange(self.chain_key, position, position + PAGE - 1)
            if not page:
                return position
            out.write("".join((raw.decode() if isinstance(raw, bytes) else raw) + "\n" for raw in page))
            position += len(page)


@dataclass(frozen=True)
class Checked:
    """An entry that holds: its MAC (the next entry's ``prev``), its seq, and the gap it names."""

    mac: bytes
    seq: int
    gap: Gap | None = None


def check_entry(
    key: bytes, raw: bytes | str, position: int, prev: bytes, *, seq: int | None = None
) -> Broken | Checked:
    """Check one sealed entry against the seq expected there (``seq``; its ``position`` in the
    chain when no gap came before) and its predecessor's MAC.

    An entry may skip seqs only if its event is a gap naming exactly the skipped ones. Public so
    an exported JSONL file can be checked line by line with the same rules."""
    expected_seq = position if seq is None else seq
    try:
        entry = json.loads(raw)
    except ValueError:
        return Broken(position, position, f"entry {position}: not valid JSON")
    if not isinstance(entry, dict) or set(entry) != {"seq", "prev", "event", "mac"}:
        return Broken(
            position, position, f"entry {position}: not an object with exactly seq, prev, event, mac"
        )
    seq = entry["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        return Broken(position, position, f"entry {position}: seq is not an integer")
    gap = None
    if seq != expected_seq:
        gap = _named_gap(entry["event"], expected_seq, seq)
        if gap is None:
            return Broken(seq, position, f"entry {position}: seq {seq} where {expected_seq} was expected")
    if entry["prev"] != prev.hex():
        previous = "the genesis value (64 zeros)" if position == 0 else f"entry {position - 1}'s mac"
        return Broken(seq, position, f"entry {position}: prev does not match {previous}")
    tag = entry["mac"]
    try:
        expected = mac(key, prev, seq, entry["event"])
    except ValueError:
        return Broken(seq, position, f"entry {position}: event cannot be canonicalised")
    if not isinstance(tag, str) or not hmac.compare_digest(tag.encode(), expected.hex().encode()):
        return Broken(seq, position, f"entry {position}: MAC does not match (edited or wrong key)")
    return Checked(expected, seq, gap)


def _named_gap(event: object, expected: int, seq: int) -> Gap | None:
    """The gap ``event`` names, if it is a gap entry naming exactly ``expected``..``seq - 1``."""
    if not isinstance(event, dict) or event.get("event") != GAP_EVENT:
        return None
    lost = event.get("lost")
    if lost != [expected, seq - 1] or seq <= expected:
        return None
    return Gap(expected, seq - 1, seq)
