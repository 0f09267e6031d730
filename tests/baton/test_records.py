"""``records.text``: the one decode of a Redis reply, whatever redis-py hands back."""

from __future__ import annotations

import redis

from baton import records


def test_text_reads_every_shape_of_reply() -> None:
    assert records.text(None) == ""
    assert records.text(b"queued") == "queued"
    assert records.text("queued") == "queued"
    assert records.text(3) == "3"  # a script's integer reply
    assert records.text(b"caf\xc3\xa9") == "café"
    assert records.text(b"bad \xff byte") == "bad \ufffd byte"  # never raises on stored bytes


def test_text_of_a_real_reply(rdb: redis.Redis) -> None:
    rdb.hset("test:record", mapping={"state": "running", "login": "émile"})
    raw = rdb.hgetall("test:record")
    decoded = {records.text(k): records.text(v) for k, v in raw.items()}
    assert decoded == {"state": "running", "login": "émile"}
    assert records.text(rdb.get("test:absent")) == ""
