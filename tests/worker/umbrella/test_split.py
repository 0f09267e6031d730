"""`/baton split` on an umbrella issue, judged from the emulator's state: sub-issues made, linked and
labelled, each run on its own as the person who split, and the umbrella's table following them."""

from __future__ import annotations

from typing import Any

import orjson

from emulator import world
from tests.worker.conftest import Stage
from worker.github import api
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
