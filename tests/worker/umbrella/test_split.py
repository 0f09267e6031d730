"""`/baton split` on an umbrella issue, judged from the emulator's state: sub-issues made, linked and
labelled, each run on its own as the person who split, and the umbrella's table following them."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import orjson

from emulator import world
from tests.worker.conftest import Stage
from worker import lifecycle
from worker.github import api
from worker.runs import admit
from worker.umbrella import split as umbrella_split


def _item(n: int) -> str:
    """A task-list item whose indented recipe tells the script agent to write ``part<n>.txt``."""
    steps = {"steps": [{"op": "write", "path": f"part{n}.txt", "content": f"part {n}\n"}]}
    return (
        f"- [ ] part {n}: write `part{n}.txt`\n\n  ```baton-recipe\n  {orjson.dumps(steps).decode()}\n  ```"
    )


def _get(stage: Stage, path: str, **params: Any) -> Any:
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "pull-request")
    return api.request(gh, "GET", f"/repos/{world.REPO}{path}", params=params or None)


def _status(stage: Stage, number: int) -> str:
    [comment] = stage.baton_comments(number)
    return str(comment["body"])


def _umbrella(stage: Stage, items: list[str]) -> int:
    body = "Rework the widgets.\n\n" + "\n".join(items) + "\n"
    return int(
        stage.admin.create_issue(world.REPO, title="Widgets rework", user="maria", body=body)["number"]
    )


def test_a_five_item_umbrella_becomes_five_sub_issues_and_five_pull_requests(stage: Stage) -> None:
    items = [_item(n) for n in range(1, 6)]
    umbrella = _umbrella(stage, [*items, "- [x] already done"])
    done = stage.comment(umbrella, "/baton split script", user="maria")
    assert done["state"] == "done", done

    subs = _get(stage, f"/issues/{umbrella}/sub_issues")
    assert [s["title"] for s in subs] == [
        f"#{umbrella} item {n}: part {n}: write `part{n}.txt`" for n in range(1, 6)
    ]
    assert all(any(lab["name"] == "agent:script" for lab in s["labels"]) for s in subs)
    assert "```" in subs[0]["body"]  # the item's text, quoted
    table = _status(stage, umbrella)
    assert "Split into sub-issues" in table
    assert table.count("| #") == 5  # one row a sub-issue; the ticked item is not run

    # Each label Baton's bot put on a sub-issue was delivered, and runs for the person who split.
    labelled = [d for d in stage.admin.call("GET", "/state")["deliveries"]
                if d["event"] == "issues" and d.get("action") == "labeled"]  # fmt: skip
    assert len(labelled) == 5
    recorded = umbrella_split.load(stage.rdb, _get(stage, "")["id"], umbrella)
    assert recorded is not None
    assert (recorded.split_by, sorted(recorded.subs.values())) == ("maria", sorted(s["number"] for s in subs))

    for delivery in labelled:  # each run, as the workers would: admitted for maria, then its PR
        admitted = stage.run(delivery)
        assert admitted["state"] == "queued", admitted
        assert stage.run_agent(admitted["task_id"])["state"] == "pr_opened"
    pulls = _get(stage, "/pulls", state="open")
    assert sorted(p["head"]["ref"] for p in pulls) == sorted(f"baton/issue-{s['number']}" for s in subs)
    commit = _get(stage, f"/commits/{pulls[0]['head']['sha']}")
    assert "Co-authored-by: maria" in commit["commit"]["message"]  # the run was maria's, not the bot's
    table = _status(stage, umbrella)
    assert table.count("(open)") == 5  # each row names its pull request now

    # Split again: nothing new is made, nothing labelled twice.
    again = stage.comment(umbrella, "/baton split script", user="maria")
    assert again["state"] == "done"
    assert len(_get(stage, f"/issues/{umbrella}/sub_issues")) == 5


def _split_and_labels(stage: Stage, count: int) -> tuple[int, list[dict[str, Any]]]:
    umbrella = _umbrella(stage, [_item(n) for n in range(1, count + 1)])
    assert stage.comment(umbrella, "/baton split script", user="maria")["state"] == "done"
    labelled = [d for d in stage.admin.call("GET", "/state")["deliveries"]
                if d["event"] == "issues" and d.get("action") == "labeled"]  # fmt: skip
    return umbrella, labelled


def _run(stage: Stage, delivery: dict[str, Any]) -> dict[str, str]:
    admitted = stage.run(delivery)
    assert admitted["state"] == "queued", admitted
    return stage.run_agent(admitted["task_id"])


def test_a_sibling_claiming_done_whose_merge_gate_is_no_longer_success_is_rejected(stage: Stage) -> None:
    umbrella, (first, second) = _split_and_labels(stage, 2)
    assert _run(stage, first)["state"] == "pr_opened"
    [pull] = _get(stage, "/pulls", state="open")
    gated = [d for d in stage.admin.call("GET", "/state")["deliveries"]
             if d["event"] == "pull_request" and d.get("action") == "opened"]  # fmt: skip
    assert stage.run(gated[-1])["state"] == "done"  # baton/merge-gate: success on that head
    sub = int(pull["head"]["ref"].rsplit("-", 1)[1])
    pushed = stage.admin.push_to_pull(world.REPO, pull["number"], {"extra.txt": "by hand\n"}, sender="wes")
    stage.admin.close_issue(world.REPO, sub, sender="maria")  # it claims to be done; its new head is unjudged

    assert _run(stage, second)["state"] == "pr_opened"  # the rejected claim delivers nothing, stops nothing
    recorded = umbrella_split.load(stage.rdb, _get(stage, "")["id"], umbrella)
    assert recorded is not None
    note = (f"claim rejected: pull request #{pull['number']} is not merged and its merge gate is none on "
            f"{pushed['sha'][:12]}")  # fmt: skip
    assert recorded.notes[sub] == note
    assert note in _status(stage, umbrella)  # the umbrella's table names the signal that failed


def _steps_item(n: int, steps: list[dict[str, Any]]) -> str:
    return f"- [ ] part {n}\n\n  ```baton-recipe\n  {orjson.dumps({'steps': steps}).decode()}\n  ```"


def _labels(stage: Stage) -> list[dict[str, Any]]:
    return [d for d in stage.admin.call("GET", "/state")["deliveries"]
            if d["event"] == "issues" and d.get("action") == "labeled"]  # fmt: skip


def _working(stage: Stage, task_id: str) -> bool:
    return any(
        "Working on it" in c["body"] for c in stage.admin.comments() if f"task `{task_id}`" in c["body"]
    )


def _merged_mid_run(
    stage: Stage, delivery: dict[str, Any], pull: int
) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, Any]]:
    """``delivery``'s run, with pull request ``pull`` merged while its agent works in the box (on the
    base as it was): (its admission, {"done": its end}, the merge's answer)."""
    admitted = stage.run(delivery)
    ran: dict[str, dict[str, str]] = {}
    worker = threading.Thread(target=lambda: ran.update(done=stage.run_agent(admitted["task_id"])))
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _working(stage, admitted["task_id"]):
        time.sleep(0.05)
    merged = stage.admin.merge_pull(world.REPO, pull, sender="maria")  # the base moves mid-run
    worker.join(timeout=120)
    return admitted, ran, merged


def _git(stage: Stage, *args: str) -> str:
    bare = stage.server.directory / "repos" / f"{world.REPO}.git"
    return subprocess.run(["git", "-C", str(bare), *args], capture_output=True, text=True, check=True).stdout


def test_a_sibling_merged_mid_run_onto_the_same_file_makes_the_run_move_its_change_and_verify_again(
    stage: Stage,
) -> None:
    stage.admin.commit(world.REPO, "main", {"shared.txt": "one\ntwo\nthree\n"})
    top = [{"op": "write", "path": "shared.txt", "content": "zero\none\ntwo\nthree\n"}]
    bottom = [{"op": "sleep", "seconds": 2}, {"op": "append", "path": "shared.txt", "content": "four\n"}]
    umbrella = _umbrella(stage, [_steps_item(1, top), _steps_item(2, bottom)])
    assert stage.comment(umbrella, "/baton split script", user="maria")["state"] == "done"
    first, second = _labels(stage)
    assert _run(stage, first)["state"] == "pr_opened"
    [pull] = _get(stage, "/pulls", state="open")
    admitted, ran, merged = _merged_mid_run(stage, second, pull["number"])
    assert ran["done"]["state"] == "pr_opened", ran
    head = str(lifecycle.field(stage.rdb, admitted["task_id"], "head_sha"))
    base_now = _git(stage, "rev-parse", "main").strip()
    assert merged["sha"] == base_now
    assert _git(stage, "log", "-1", "--format=%P", head).split() == [base_now]  # moved onto the new base
    assert _git(stage, "show", f"{head}:shared.txt") == "zero\none\ntwo\nthree\nfour\n"
    record = orjson.loads(stage.rdb.get(admit.RECORD_PREFIX + admitted["task_id"]) or b"{}")
    assert (record["base"], record["commit"]) == (base_now, head)


def test_a_sub_issue_a_merged_sibling_already_delivered_is_handed_off_without_a_run(stage: Stage) -> None:
    umbrella = _umbrella(stage, [_item(1), _item(2)])
    assert stage.comment(umbrella, "/baton split script", user="maria")["state"] == "done"
    first, second = _labels(stage)
    assert _run(stage, first)["state"] == "pr_opened"
    [pull] = _get(stage, "/pulls", state="open")
    subs = sorted(s["number"] for s in _get(stage, f"/issues/{umbrella}/sub_issues"))
    assert stage.ctx.github is not None
    gh = stage.ctx.github.for_repository(stage.world.installation_id, world.REPO, "pull-request")
    api.request(
        gh,
        "PATCH",
        f"/repos/{world.REPO}/pulls/{pull['number']}",
        json={"body": f"{pull['body']}\n\nFixes #{subs[1]}"},
    )  # it delivers its sibling's part too
    stage.admin.merge_pull(world.REPO, pull["number"], sender="maria")
    assert _get(stage, f"/issues/{subs[1]}")["state"] == "closed"
    done = stage.run(second)
    if done["state"] == "queued":
        done = stage.run_agent(done["task_id"])
    assert done["state"] == "done", done
    said = _status(stage, subs[1])
    assert f"No changes needed: delivered by #{pull['number']}" in said
    assert "Box:" not in said  # no agent was started


def test_a_change_a_sibling_delivered_mid_run_is_not_pushed_again(stage: Stage) -> None:
    same = [{"op": "write", "path": "shared.txt", "content": "the same change\n"}]
    umbrella = _umbrella(
        stage, [_steps_item(1, same), _steps_item(2, [{"op": "sleep", "seconds": 2}, *same])]
    )
    assert stage.comment(umbrella, "/baton split script", user="maria")["state"] == "done"
    first, second = _labels(stage)
    assert _run(stage, first)["state"] == "pr_opened"
    [pull] = _get(stage, "/pulls", state="open")
    _, ran, _ = _merged_mid_run(stage, second, pull["number"])
    assert ran["done"]["state"] == "done", ran
    subs = sorted(s["number"] for s in _get(stage, f"/issues/{umbrella}/sub_issues"))
    assert f"No changes needed: delivered by #{pull['number']}" in _status(stage, subs[1])
    assert len(_get(stage, "/pulls", state="all")) == 1  # no branch pushed, no second pull request


def test_a_sibling_merged_mid_run_that_conflicts_with_the_run_is_reported_never_pushed(stage: Stage) -> None:
    stage.admin.commit(world.REPO, "main", {"shared.txt": "one\n"})
    ours = [{"op": "sleep", "seconds": 2}, {"op": "write", "path": "shared.txt", "content": "ours\n"}]
    theirs = [{"op": "write", "path": "shared.txt", "content": "theirs\n"}]
    umbrella = _umbrella(stage, [_steps_item(1, theirs), _steps_item(2, ours)])
    assert stage.comment(umbrella, "/baton split script", user="maria")["state"] == "done"
    first, second = _labels(stage)
    assert _run(stage, first)["state"] == "pr_opened"
    [pull] = _get(stage, "/pulls", state="open")
    _, ran, _ = _merged_mid_run(stage, second, pull["number"])
    assert ran["done"]["state"] == "failed", ran
    subs = sorted(s["number"] for s in _get(stage, f"/issues/{umbrella}/sub_issues"))
    assert "does not apply onto it cleanly" in _status(stage, subs[1])
    assert len(_get(stage, "/pulls", state="all")) == 1  # nothing pushed
