"""Publishing survives a GitHub outage, and no check run is left `in_progress`."""

from __future__ import annotations

import time

from baton import records
from emulator import world
from tests.worker.conftest import Stage
from worker import lifecycle, outbox
from worker.handlers import CHECK_RUN_OPENING, CHECK_RUN_SENT_AT
from worker.outbox import publish_now
from worker.publish import publisher
from worker.rqworker import sweep


def _act(stage: Stage) -> outbox.Perform:
    assert stage.ctx.github is not None
    return publisher(stage.ctx.github, stage.rdb, stage.ctx.app_id)


def _pending(stage: Stage, task_id: str) -> float | None:
    score = stage.rdb.zscore(records.OUTBOX_KEY, task_id)
    return None if score is None else float(score)


def test_a_status_comment_that_github_refuses_is_kept_and_posted_later(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}/issues/*/comments", method="POST", kind="status", status=500,
                          count=20)  # fmt: skip
    number = stage.issue()
    result = stage.label(number, "researcher", sender="maria")
    task_id = result["task_id"]
    assert result["state"] == "denied"  # the decision stands; only the telling is late
    assert stage.baton_comments(number) == []
    assert "github-call-failed" in (lifecycle.field(stage.rdb, task_id, "publish_error") or "")
    assert lifecycle.field(stage.rdb, task_id, "published") is None
    due = _pending(stage, task_id)
    assert due is not None
    assert due > time.time()  # backed off, not hammering

    stage.admin.clear_faults()
    assert outbox.attempt(stage.rdb, task_id, _act(stage), now=due + 0.1) is not None
    [comment] = stage.baton_comments(number)
    assert "capability gate denied" in comment["body"]
    assert _pending(stage, task_id) is None
    assert (lifecycle.field(stage.rdb, task_id, "published") or "").startswith("status comment")


def test_retry_after_is_respected(stage: Stage) -> None:
    comments = f"/repos/{world.REPO}/issues/*/comments"
    stage.admin.add_fault(comments, method="POST", kind="secondary_rate_limit",
                          status=403, retry_after=120, count=20)  # fmt: skip
    before = time.time()
    result = stage.label(stage.issue(), "researcher", sender="maria")
    due = _pending(stage, result["task_id"])
    assert due is not None
    assert due >= before + 119


def test_publishing_gives_up_after_its_bound_and_says_so(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}/issues/*/comments", method="POST", kind="status", status=500,
                          count=50)  # fmt: skip
    result = stage.label(stage.issue(), "researcher", sender="maria")
    task_id = result["task_id"]
    later = time.time() + outbox.GIVE_UP_S + 1
    assert outbox.attempt(stage.rdb, task_id, _act(stage), now=later) is None
    assert _pending(stage, task_id) is None
    assert (lifecycle.field(stage.rdb, task_id, "published") or "").startswith("gave up after 2 attempts")
    assert stage.rdb.hget(records.COUNTERS_KEY, "publish_gave_up") == b"1"


def _open_pull(stage: Stage) -> dict[str, object]:
    stage.admin.commit(world.REPO, "feature", {"src/widgets.py": "def spin():\n    return 43\n"}, base="main")
    opened = stage.admin.open_pull(world.REPO, head="feature", user="wes", title="Spin faster")
    return next(d for d in opened["deliveries"] if d["event"] == "pull_request")


def _gate_run(stage: Stage) -> dict[str, object]:
    [run] = [c for c in stage.admin.check_runs() if c["name"] == "baton/merge-gate"]
    return run


def test_a_check_run_whose_completion_keeps_failing_is_completed_once_github_recovers(stage: Stage) -> None:
    stage.admin.add_fault(f"/repos/{world.REPO}/check-runs/*", method="PATCH", kind="status", status=502,
                          count=20)  # fmt: skip
    result = stage.run(_open_pull(stage))
    assert result["state"] == "done"
    assert _gate_run(stage)["status"] == "in_progress"
    stage.admin.clear_faults()
    due = _pending(stage, result["task_id"])
    assert due is not None
    assert outbox.attempt(stage.rdb, result["task_id"], _act(stage), now=due + 0.1) is not None
    run = _gate_run(stage)
    assert (run["status"], run["conclusion"]) == (
        "completed",
        "success",
    )  # the built-in gates passed; no command gates here


def test_a_gate_task_whose_worker_died_after_creating_its_run_completes_it_as_failed(stage: Stage) -> None:
    """What a worker killed mid-gate leaves: a running task, its check run recorded, no lease renewal."""
    delivery = _open_pull(stage)
    task = stage.task(delivery)
    lifecycle.move(stage.rdb, task.id, lifecycle.State.RUNNING, "merge_gate started")
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    from worker.github import api
    from worker.github.limits import Output

    run_id = api.create_check_run(gh, world.REPO, name="baton/merge-gate", head_sha=task.head_sha or "",
                                  external_id=task.id, details_url=None, output=Output("t", "s"))  # fmt: skip
    lifecycle.annotate(stage.rdb, task.id, check_run_ids=str(run_id))
    stage.rdb.zadd(lifecycle.LEASES, {task.id: time.time() - 1})  # the lease ran out: nobody renews it

    ended, _ = sweep(stage.ctx, publish=True)
    assert ended == 1
    assert lifecycle.current(stage.rdb, task.id) == lifecycle.State.FAILED
    run = _gate_run(stage)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert "stopped before it finished" in run["output"]["summary"]
    assert sweep(stage.ctx, publish=True) == (0, 0)  # nothing left to do


def test_a_gate_task_that_died_sending_a_create_github_never_made_ends_with_nothing_to_complete(
    stage: Stage,
) -> None:
    """The create was marked as sent a minute ago and its answer never heard; GitHub has no such run
    (the request never arrived): the task still ends, nothing is invented, the outbox is left empty."""
    delivery = _open_pull(stage)
    task = stage.task(delivery)
    lifecycle.move(stage.rdb, task.id, lifecycle.State.RUNNING, "merge_gate started")
    sent = {CHECK_RUN_OPENING: task.head_sha or "", CHECK_RUN_SENT_AT: str(time.time() - 60)}
    lifecycle.annotate(stage.rdb, task.id, **sent)
    stage.rdb.zadd(lifecycle.LEASES, {task.id: time.time() - 1})

    assert sweep(stage.ctx, publish=True)[0] == 1
    assert lifecycle.current(stage.rdb, task.id) == lifecycle.State.FAILED
    assert "never made" in (lifecycle.field(stage.rdb, task.id, "published") or "")
    assert [c for c in stage.admin.check_runs() if c["name"] == "baton/merge-gate"] == []
    assert _pending(stage, task.id) is None


def test_a_gate_run_whose_create_may_still_land_is_looked_for_again_until_github_has_settled_it(
    stage: Stage,
) -> None:
    """A job process died just after sending the create: not finding the run yet proves nothing (GitHub
    may still be making it), so the outbox looks again until the request has surely ended."""
    delivery = _open_pull(stage)
    task = stage.task(delivery)
    lifecycle.move(stage.rdb, task.id, lifecycle.State.RUNNING, "merge_gate started")
    sent = {CHECK_RUN_OPENING: task.head_sha or "", CHECK_RUN_SENT_AT: str(time.time())}
    lifecycle.annotate(stage.rdb, task.id, **sent)
    stage.rdb.zadd(lifecycle.LEASES, {task.id: time.time() - 1})

    assert sweep(stage.ctx, publish=True)[0] == 1
    assert lifecycle.current(stage.rdb, task.id) == lifecycle.State.FAILED
    due = _pending(stage, task.id)
    assert due is not None  # kept: looked for again shortly
    assert lifecycle.field(stage.rdb, task.id, "publish_attempts") is None  # not counted as a failure
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "report")
    from worker.github import api
    from worker.github.limits import Output

    api.create_check_run(
        gh,
        world.REPO,
        name="baton/merge-gate",
        head_sha=task.head_sha or "",
        external_id=task.id,
        details_url=None,
        output=Output("t", "s"),
    )  # the create lands
    assert outbox.attempt(stage.rdb, task.id, _act(stage), now=due + 0.1) is not None
    run = _gate_run(stage)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")


def test_a_publication_claimed_by_a_worker_that_died_is_retried_after_the_claim_lapses(stage: Stage) -> None:
    result = stage.label(stage.issue(), "researcher", sender="maria")
    task_id = result["task_id"]
    stage.rdb.zadd(records.OUTBOX_KEY, {task_id: time.time()})
    assert outbox.claim(stage.rdb, task_id, time.time())  # a worker claimed it, then died
    assert publish_now(stage.ctx, task_id).startswith("not published yet")  # still claimed
    assert outbox.attempt(stage.rdb, task_id, _act(stage), now=time.time() + outbox.CLAIM_S + 1)
