"""An umbrella's sub-issues under real `baton worker` processes on two hosts' worth of workers: their
runs overlap, but one verifies and publishes at a time (the umbrella's lock)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from baton import queues, records
from emulator import world
from evidence import audit as chain
from tests.worker.conftest import Stage, Workers
from worker import lifecycle
from worker.lifecycle import State

EVERY_QUEUE = f"{queues.CONTROL.name},{queues.GATES.name},{queues.AGENTS.name}"


def _wait(predicate: Callable[[], Any], timeout: float, what: str, workers: Workers) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{workers.log()}")


def _item(n: int) -> str:
    steps = {"steps": [{"op": "sleep", "seconds": 2}, {"op": "write", "path": f"p{n}.txt", "content": "x\n"}]}
    return f"- [ ] part {n}\n\n  ```baton-recipe\n  {orjson.dumps(steps).decode()}\n  ```"


def _events(stage: Stage) -> list[dict[str, Any]]:
    """Every audit event of the installation in the order it was captured (sealed, then pending)."""
    installation = stage.world.installation_id
    raw = [*stage.rdb.lrange(chain.chain_key(installation), 0, -1),
           *stage.rdb.lrange(chain.pending_key(installation), 0, -1)]  # fmt: skip
    found = []
    for entry in raw:
        data = orjson.loads(entry)
        found.append(data.get("event", data) if isinstance(data.get("event"), dict) else data)
    return found


def test_two_workers_on_one_umbrella_never_verify_and_publish_at_once(stage: Stage, workers: Workers) -> None:
    for name in ("a", "b"):
        workers.start(name, queues=EVERY_QUEUE)
    body = "Two parts.\n\n" + "\n".join(_item(n) for n in (1, 2)) + "\n"
    umbrella = int(stage.admin.create_issue(world.REPO, title="Both", user="maria", body=body)["number"])
    split = stage.admin.comment(world.REPO, umbrella, "/baton split script", user="maria")["deliveries"][-1]
    _wait(lambda: lifecycle.current(stage.rdb, split["guid"]) is State.DONE, 60, "the split", workers)

    def runs() -> list[str]:
        found = [str(e["task"]) for e in _events(stage) if e.get("event") == "umbrella-published"]
        return found if len(found) == 2 else []

    published = _wait(runs, 120, "both sub-issues' pull requests", workers)
    order = [(e["event"], e["task"]) for e in _events(stage)
             if e.get("event") in ("umbrella-verify", "umbrella-published")]  # fmt: skip
    first, second = published
    assert order == [("umbrella-verify", first), ("umbrella-published", first),
                     ("umbrella-verify", second), ("umbrella-published", second)], order  # fmt: skip
    started = [e for e in _events(stage) if e.get("event") == "spawned"]
    assert len(started) == 2  # both agents ran; only their publication took turns
    assert all(lifecycle.current(stage.rdb, t) is State.PR_OPENED for t in published), [
        records.text(stage.rdb.hget(lifecycle.PREFIX + t, "detail") or b"") for t in published
    ]
