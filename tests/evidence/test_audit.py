"""The HMAC audit chain: capture inside transactions, sealing races, tampering, read-only verify."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import threading
from collections.abc import Callable

import pytest
import redis

from evidence import audit
from evidence.audit import AuditChain, AuditError, Broken, derive_key, record

INSTALLATION = 4242
MASTER = b"master secret for the audit tests, 32+ bytes"


def chain(client: redis.Redis, installation: int = INSTALLATION, master: bytes = MASTER) -> AuditChain:
    return AuditChain(client, installation, derive_key(master, installation))


def events(n: int, tag: str = "e") -> list[dict[str, object]]:
    return [{"event": "task-moved", "id": f"{tag}{i}", "to": "claimed", "n": i} for i in range(n)]


def sealed(client: redis.Redis, installation: int = INSTALLATION) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in client.lrange(audit.chain_key(installation), 0, -1)]


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    return {k: client.dump(k) for k in sorted(client.keys("*"))}


def independent_check(lines: list[str], key: bytes) -> int:
    """Re-check an export from the definition alone (not evidence.audit's code); the bad line's number."""
    prev = bytes(32)
    for n, line in enumerate(lines):
        entry = json.loads(line)
        body = json.dumps({"seq": n, "event": entry["event"]}, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()  # fmt: skip
        tag = hmac.new(key, prev + body, hashlib.sha256).hexdigest()
        if entry["seq"] != n or entry["prev"] != prev.hex() or entry["mac"] != tag:
            return n
        prev = bytes.fromhex(tag)
    return -1


def test_derive_key_is_hkdf_sha256_with_a_per_installation_label() -> None:
    # RFC 5869 by hand: no salt means a salt of HashLen zeros; one block of output.
    prk = hmac.new(bytes(32), MASTER, hashlib.sha256).digest()
    okm = hmac.new(prk, b"baton/audit-chain/v1/installation/4242" + b"\x01", hashlib.sha256).digest()
    assert derive_key(MASTER, 4242) == okm
    assert len(okm) == 32
    assert derive_key(MASTER, 4243) != okm
    assert derive_key(MASTER + b"!", 4242) != okm


def test_a_chain_of_events_verifies_and_links(rdb: redis.Redis) -> None:
    log = chain(rdb)
    assert log.verify() is None  # empty
    assert log.head() is None
    assert log.append(events(1, "a")) == 1
    assert log.append(events(10, "b")) == 10
    assert log.append(events(39, "c")) == 39
    assert (log.length(), log.pending()) == (50, 0)
    assert log.verify() is None
    entries = sealed(rdb)
    assert [e["seq"] for e in entries] == list(range(50))
    assert entries[0]["prev"] == "00" * 32
    assert all(entries[i]["prev"] == entries[i - 1]["mac"] for i in range(1, 50))
    assert [e["event"] for e in entries] == events(1, "a") + events(10, "b") + events(39, "c")
    for raw in rdb.lrange(log.chain_key, 0, -1):  # stored as canonical JSON
        assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    assert log.head() == (49, bytes.fromhex(str(entries[-1]["mac"])))
    assert audit.installations(rdb) == [INSTALLATION]
    assert rdb.ttl(log.chain_key) == -1


def _edit(client: redis.Redis, key: str) -> None:
    entry = json.loads(client.lindex(key, 17) or b"")
    entry["event"]["to"] = "merged"
    client.lset(key, 17, json.dumps(entry))


def _delete(client: redis.Redis, key: str) -> None:
    client.lrem(key, 1, client.lindex(key, 17) or b"")


def _reorder(client: redis.Redis, key: str) -> None:
    a, b = client.lindex(key, 17) or b"", client.lindex(key, 18) or b""
    client.lset(key, 17, b)
    client.lset(key, 18, a)


def _relink(client: redis.Redis, key: str) -> None:
    """A well-MACed entry 17 (someone with the key) chained to the wrong predecessor."""
    entry = json.loads(client.lindex(key, 17) or b"")
    wrong_prev = bytes(32)
    tag = audit.mac(derive_key(MASTER, INSTALLATION), wrong_prev, 17, entry["event"])
    entry.update(prev=wrong_prev.hex(), mac=tag.hex())
    client.lset(key, 17, json.dumps(entry))


def _garble(client: redis.Redis, key: str) -> None:
    client.lset(key, 17, b'{"seq": 17, "prev": ')


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (_edit, Broken(17, 17, "entry 17: MAC does not match (edited or wrong key)")),
        (_delete, Broken(18, 17, "entry 17: seq 18 where 17 was expected")),
        (_reorder, Broken(18, 17, "entry 17: seq 18 where 17 was expected")),
        (_relink, Broken(17, 17, "entry 17: prev does not match entry 16's mac")),
        (_garble, Broken(17, 17, "entry 17: not valid JSON")),
    ],
    ids=["edit", "delete", "reorder", "relink", "garble"],
)
def test_tampering_names_the_first_broken_entry(
    rdb: redis.Redis, tamper: Callable[[redis.Redis, str], None], expected: Broken
) -> None:
    log = chain(rdb)
    log.append(events(40))
    tamper(rdb, log.chain_key)
    assert log.verify() == expected
    lines = [raw.decode() for raw in rdb.lrange(log.chain_key, 0, -1)]
    if tamper is not _garble:
        assert independent_check(lines, log.key) == 17


def test_the_wrong_key_fails_at_the_first_entry(rdb: redis.Redis) -> None:
    chain(rdb).append(events(5))
    assert chain(rdb, master=b"another master secret of 32 bytes!").verify() == Broken(
        0, 0, "entry 0: MAC does not match (edited or wrong key)"
    )
    other = AuditChain(rdb, INSTALLATION, derive_key(MASTER, INSTALLATION + 1))  # another installation's key
    assert other.verify() == Broken(0, 0, "entry 0: MAC does not match (edited or wrong key)")


def test_pending_events_are_not_in_the_chain_until_sealed(rdb: redis.Redis) -> None:
    log = chain(rdb)
    with rdb.pipeline(transaction=True) as pipe:
        for event in events(3):
            record(pipe, INSTALLATION, event)
        pipe.execute()
    assert (log.pending(), log.length()) == (3, 0)
    assert sealed(rdb) == []
    assert log.verify() is None
    assert log.seal(limit=2) == 2
    assert (log.pending(), log.length()) == (1, 2)
    assert log.seal() == 1
    assert log.seal() == 0
    assert [e["event"] for e in sealed(rdb)] == events(3)
    assert log.verify() is None


def test_record_commits_with_the_callers_transaction_or_not_at_all(rdb: redis.Redis, redis_url: str) -> None:
    with rdb.pipeline(transaction=True) as pipe:
        pipe.hset("task:1", "state", "claimed")
        record(pipe, INSTALLATION, {"event": "task-claimed", "task": 1})
        pipe.execute()
    assert rdb.hget("task:1", "state") == b"claimed"
    assert chain(rdb).pending() == 1

    other = redis.Redis.from_url(redis_url)
    with rdb.pipeline(transaction=True) as pipe:
        pipe.watch("task:1")  # type: ignore[no-untyped-call]
        other.hset("task:1", "state", "stolen")  # someone else moved the task first
        pipe.multi()
        pipe.hset("task:1", "state", "running")
        record(pipe, INSTALLATION, {"event": "task-running", "task": 1})
        with pytest.raises(redis.WatchError):
            pipe.execute()
    other.close()
    assert rdb.hget("task:1", "state") == b"stolen"
    assert chain(rdb).pending() == 1  # the aborted transition left no audit event behind


def test_record_refuses_events_without_a_name(rdb: redis.Redis) -> None:
    for bad in ({}, {"event": ""}, {"event": 3}, {"what": "x"}):
        with pytest.raises(ValueError, match='non-empty string "event"'):
            record(rdb, INSTALLATION, bad)
    with pytest.raises(ValueError, match='"event"'):
        chain(rdb).append([{"event": "ok"}, {"event": None}])
    assert rdb.keys("*") == []  # nothing half-recorded


def test_the_lua_snippet_records_like_record(rdb: redis.Redis) -> None:
    event = {"event": "delivery-accepted", "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
    rdb.eval(
        audit.RECORD_SCRIPT, 2, *audit.script_keys(INSTALLATION), *audit.script_args(INSTALLATION, event)
    )
    log = chain(rdb)
    assert log.pending() == 1
    assert audit.installations(rdb) == [INSTALLATION]
    assert log.seal() == 1
    assert sealed(rdb)[0]["event"] == event
    assert log.verify() is None


def test_a_malformed_pending_event_is_sealed_wrapped_not_dropped(rdb: redis.Redis) -> None:
    log = chain(rdb)
    rdb.rpush(log.pending_key, b"{not json", json.dumps({"event": "fine"}))
    assert log.seal() == 2
    first, second = (e["event"] for e in sealed(rdb))
    assert first == {"event": "malformed-pending-event", "raw": "{not json"}
    assert second == {"event": "fine"}
    assert log.verify() is None


def test_sealing_onto_an_unreadable_tip_refuses(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(2))
    rdb.rpush(log.chain_key, b"garbage")
    record(rdb, INSTALLATION, {"event": "later"})
    with pytest.raises(AuditError, match="last sealed entry is unreadable"):
        log.seal()
    assert log.pending() == 1  # still captured


def test_concurrent_sealers_and_recorders_make_one_chain(redis_url: str) -> None:
    recorders, sealers, per_recorder = 3, 4, 300
    errors: list[BaseException] = []
    recording_done = threading.Event()
    go = threading.Barrier(recorders + sealers)

    def recorder(r: int) -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            go.wait()
            for batch in range(0, per_recorder, 10):
                with client.pipeline(transaction=True) as pipe:
                    for event in events(per_recorder, f"r{r}-")[batch : batch + 10]:
                        record(pipe, INSTALLATION, event)
                    pipe.execute()
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    def sealer() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            log = chain(client)
            go.wait()
            while True:
                finished = recording_done.is_set()  # read before sealing: then one empty seal is final
                if log.seal(limit=25) == 0 and finished:
                    return
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=recorder, args=(r,)) for r in range(recorders)]
    seal_threads = [threading.Thread(target=sealer) for _ in range(sealers)]
    for t in threads + seal_threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    recording_done.set()
    for t in seal_threads:
        t.join(timeout=60)
    assert not errors, errors
    client = redis.Redis.from_url(redis_url)
    log = chain(client)
    total = recorders * per_recorder
    assert (log.length(), log.pending()) == (total, 0)
    entries = sealed(client)
    assert [e["seq"] for e in entries] == list(range(total))  # no fork, no duplicate seq
    ids = [e["event"]["id"] for e in entries]  # type: ignore[index]
    assert sorted(ids) == sorted(f"r{r}-{i}" for r in range(recorders) for i in range(per_recorder))
    for r in range(recorders):  # each recorder's events kept their order
        mine = [i for i in ids if str(i).startswith(f"r{r}-")]
        assert mine == [f"r{r}-{i}" for i in range(per_recorder)]
    assert log.verify() is None
    client.close()


def test_verify_writes_nothing(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(30))
    record(rdb, INSTALLATION, {"event": "not-sealed-yet"})
    before = snapshot(rdb)
    assert log.verify() is None
    assert snapshot(rdb) == before
    assert log.pending() == 1  # verify did not seal
    _edit(rdb, log.chain_key)
    before = snapshot(rdb)
    assert log.verify() is not None
    assert snapshot(rdb) == before


def test_export_is_jsonl_an_independent_check_accepts(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(1200))  # more than one page
    out = io.StringIO()
    assert log.export(out) == 1200
    lines = out.getvalue().splitlines()
    assert len(lines) == 1200
    assert lines[5].encode() == rdb.lindex(log.chain_key, 5)  # canonical JSON, as stored
    assert independent_check(lines, derive_key(MASTER, INSTALLATION)) == -1
    assert independent_check(lines, derive_key(MASTER, INSTALLATION + 1)) == 0
    prev = bytes(32)
    for position, line in enumerate(lines):  # the library's per-line check agrees
        result = audit.check_entry(log.key, line, position, prev)
        assert isinstance(result, audit.Checked)
        assert (result.seq, result.gap) == (position, None)
        prev = result.mac


def test_chains_are_per_installation(rdb: redis.Redis) -> None:
    chain(rdb, 1).append(events(3))
    chain(rdb, 2).append(events(2))
    assert (chain(rdb, 1).length(), chain(rdb, 2).length()) == (3, 2)
    assert audit.installations(rdb) == [1, 2]
    assert chain(rdb, 1).verify() is None
    assert chain(rdb, 2).verify() is None
    with pytest.raises(ValueError, match="32 bytes"):
        AuditChain(rdb, 1, b"short")


def test_a_cut_tail_or_a_rewritten_chain_is_caught_against_a_saved_head(rdb: redis.Redis) -> None:
    """The chain alone cannot show its tail was cut (every entry left still verifies). A head the
    operator saved where Baton cannot write can: the chain must still hold that entry, unchanged."""
    log = chain(rdb)
    log.append(events(5))
    head = log.head()
    assert head is not None
    seq, tag = head
    assert seq == 4
    assert log.check_anchor(seq, tag) is None
    log.append(events(3, "later"))
    assert log.check_anchor(seq, tag) is None  # grown since: fine

    rdb.ltrim(log.chain_key, 0, 2)  # the tail cut off, entries 3 on gone
    assert log.verify() is None  # what is left is intact...
    cut = log.check_anchor(seq, tag)
    assert cut is not None  # ...but the saved head says more was there
    assert "3 entries" in cut
    assert "entry 4" in cut
    assert "cut" in cut

    rdb.delete(log.chain_key)  # rewritten from the start by someone holding the key
    log.append(events(9, "forged"))
    assert log.verify() is None
    rewritten = log.check_anchor(seq, tag)
    assert rewritten is not None
    assert "entry 4" in rewritten
    assert "rewritten" in rewritten


# -- entries lost with a Redis primary: a named gap, never a silent fork ------------------------------


def _lose_tail(rdb: redis.Redis, log: AuditChain, keep: int) -> None:
    """What a failover does to the chain: the promoted replica never had the last entries."""
    rdb.ltrim(log.chain_key, 0, keep - 1)


def test_a_sealer_that_saw_a_lost_tail_names_the_gap_instead_of_reusing_its_numbers(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(20))
    seen = log.head()
    assert seen is not None
    assert seen[0] == 19
    _lose_tail(rdb, log, 12)
    audit.record(rdb, INSTALLATION, {"event": "after-the-failover"})

    assert log.seal(known=seen) == 1
    survey = log.survey()
    assert survey.broken is None
    assert survey.gaps == (audit.Gap(12, 19, 20),)
    assert [json.loads(e)["seq"] for e in rdb.lrange(log.chain_key, 11, -1)] == [11, 20, 21]
    assert json.loads(rdb.lindex(log.chain_key, 12) or b"")["event"] == {
        "event": "chain-gap", "lost": [12, 19], "lostHead": seen[1].hex()}  # fmt: skip
    assert log.head() == (21, bytes.fromhex(json.loads(rdb.lindex(log.chain_key, -1) or b"")["mac"]))
    # A head saved before the failover is reported as lost with the primary, not as a rewrite...
    assert (
        log.check_anchor(*seen) == "the saved head (entry 19) is among the entries 12 to 19 lost with a "
        "Redis primary (named by entry 20)"
    )
    # ...and a head saved before the gap or after it still holds.
    first = bytes.fromhex(json.loads(rdb.lindex(log.chain_key, 3) or b"")["mac"])
    assert log.check_anchor(3, first) is None
    head = log.head()
    assert head is not None
    assert log.check_anchor(*head) is None


def test_a_gap_is_named_even_with_nothing_pending_and_only_once(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(5))
    seen = log.head()
    assert seen is not None
    _lose_tail(rdb, log, 3)
    assert log.seal(known=seen) == 0  # no event sealed, but the gap is
    assert log.survey().gaps == (audit.Gap(3, 4, 5),)
    assert log.seal(known=seen) == 0  # the chain now reaches past what was seen: nothing more
    assert log.length() == 4


def test_skipped_numbers_that_no_gap_entry_names_are_a_break(rdb: redis.Redis) -> None:
    log = chain(rdb)
    log.append(events(5))
    seen = log.head()
    assert seen is not None
    _lose_tail(rdb, log, 3)
    log.seal(known=seen)
    gap = json.loads(rdb.lindex(log.chain_key, 3) or b"")
    gap["event"]["lost"] = [2, 4]  # claims more than it skipped: its MAC no longer matches either
    rdb.lset(log.chain_key, 3, audit.canonical_json(gap))
    broken = log.verify()
    assert broken is not None
    assert broken.reason == "entry 3: seq 5 where 3 was expected"
