"""Check runs: create, update (annotations append), get, annotations, list for a ref, rerequest.

Only an App acting through an installation token with ``checks: write`` may
create or update runs, and only its own; limits are in :mod:`checks_validation`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from emulator import check_suites
from emulator.core import ApiRequest, Emulator, Reply, RouteSpec, emit, paginate
from emulator.errors import DOCS, ApiError, invalid_request, not_accessible, not_found
from emulator.rest import checks_validation, shapes_items
from emulator.state import App, CheckRun, Delivery, Repo
from emulator.types import JSONObject

_RERUN_DOCS = "https://docs.github.com/rest/checks/runs#rerequest-a-check-run"


def _timestamp(value: Any, key: str, docs: str) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise invalid_request(f"For 'properties/{key}', \"{value}\" is not a valid date-time.", docs) from exc


def render_run(emu: Emulator, base: str, repo: Repo, run: CheckRun) -> JSONObject:
    """A check run as the REST API answers it (its suite as ``{"id"}``), with its open pull requests."""
    prs = check_suites.pull_requests_for(emu, base, repo, run.head_sha)
    return shapes_items.check_run(base, emu.state, repo, run, prs)


def webhook_run(emu: Emulator, base: str, repo: Repo, run: CheckRun) -> JSONObject:
    """A check run as ``check_run`` webhooks carry it: with the whole ``check_suite``."""
    out = render_run(emu, base, repo, run)
    out["check_suite"] = check_suites.for_run(emu, base, repo, run)
    return out


def _apply(run: CheckRun, body: dict[str, Any], docs: str, now: float) -> None:
    """Write the validated fields of a create/update body onto ``run``."""
    if isinstance(body.get("name"), str):
        run.name = body["name"]
    for key in ("details_url", "external_id"):
        if key in body:
            setattr(run, key, body[key])
    if "started_at" in body:
        run.started_at = _timestamp(body["started_at"], "started_at", docs)
    if body.get("status") is not None:
        run.status = body["status"]
    if body.get("conclusion") is not None:
        run.conclusion = body["conclusion"]
        run.status = "completed"
        run.completed_at = _timestamp(body.get("completed_at"), "completed_at", docs) or now
    if run.started_at is None:
        # GitHub stamps every run with a start time at creation, even a queued one.
        run.started_at = now
    output = body.get("output")
    if isinstance(output, dict):
        run.output_title = output.get("title")
        run.output_summary = output.get("summary")
        if "text" in output:
            run.output_text = output.get("text")
        run.annotations.extend(output.get("annotations") or [])
    if body.get("actions") is not None:
        run.actions = list(body["actions"])


def _emit_run(req: ApiRequest, repo: Repo, run: CheckRun, action: str) -> None:
    req.emit(repo, "check_run", {"action": action, "check_run": webhook_run(req.emu, req.base, repo, run)})


async def create_run(req: ApiRequest) -> Reply:
    repo = req.repo("checks", "write")
    app = req.caller.app
    if req.caller.kind != "installation" or app is None:
        raise not_accessible()
    body = req.json_object()
    checks_validation.validate(body, creating=True)
    head_sha = str(body["head_sha"])
    if not req.emu.git(repo).has_commit(head_sha):
        raise ApiError(
            422, f"No commit found for SHA: {head_sha}", documentation_url=checks_validation.CREATE_DOCS
        )
    state = req.state
    suite = check_suites.suite_for(req.emu, repo, app.id, head_sha)
    run = CheckRun(
        id=state.new_id(),
        repo=repo.full_name,
        app_id=app.id,
        check_suite_id=suite.id,
        head_sha=head_sha,
        name=str(body["name"]),
    )
    _apply(run, body, checks_validation.CREATE_DOCS, state.now())
    state.check_runs[run.id] = run
    _emit_run(req, repo, run, "created")
    if run.status == "completed":
        _emit_run(req, repo, run, "completed")
    return Reply(render_run(req.emu, req.base, repo, run), status=201)


def _run(req: ApiRequest, repo: Repo) -> CheckRun:
    found = req.state.check_runs.get(req.int_param("check_run_id"))
    if found is None or found.repo != repo.full_name:
        raise not_found()
    return found


def _require_owner(req: ApiRequest, run: CheckRun, documentation_url: str = DOCS) -> None:
    """Only the App that created a check run may change it or ask for it again (GitHub's 403)."""
    app = req.caller.app
    if req.caller.kind != "installation" or app is None or app.id != run.app_id:
        who = app.id if app is not None else "null"
        raise ApiError(
            403,
            f"Invalid app_id `{who}` - check run can only be modified by the GitHub App that created it.",
            documentation_url=documentation_url,
        )


async def update_run(req: ApiRequest) -> Reply:
    repo = req.repo("checks", "write")
    run = _run(req, repo)
    _require_owner(req, run)
    body = req.json_object()
    checks_validation.validate(body, creating=False)
    was_completed = run.status == "completed"
    _apply(run, body, checks_validation.UPDATE_DOCS, req.state.now())
    suite = req.state.check_suites.get(run.check_suite_id)
    if suite is not None:
        suite.updated_at = req.state.now()
    if run.status == "completed" and not was_completed:
        _emit_run(req, repo, run, "completed")
    return Reply(render_run(req.emu, req.base, repo, run))


async def get_run(req: ApiRequest) -> Reply:
    repo = req.repo("checks", "read")
    return Reply(render_run(req.emu, req.base, repo, _run(req, repo)))


async def list_annotations(req: ApiRequest) -> Reply:
    repo = req.repo("checks", "read")
    run = _run(req, repo)
    page, headers = paginate(req, run.annotations)
    out = []
    for item in page:
        entry = {
            "path": item["path"],
            "start_line": item["start_line"],
            "end_line": item["end_line"],
            "start_column": item.get("start_column"),
            "end_column": item.get("end_column"),
            "annotation_level": item["annotation_level"],
            "title": item.get("title"),
            "message": item["message"],
            "raw_details": item.get("raw_details"),
            "blob_href": f"{req.base}/{repo.full_name}/blob/{run.head_sha}/{item['path']}",
        }
        out.append(entry)
    return Reply(out, headers=headers)


async def list_for_ref(req: ApiRequest) -> Reply:
    """Runs on the commit ``ref`` names; ``filter=latest`` (default) keeps the newest per name."""
    repo = req.repo("checks", "read")
    ref = req.param("ref")
    sha = req.emu.git(repo).resolve(ref)
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ref}")
    runs = sorted(
        (r for r in req.state.check_runs.values() if r.repo == repo.full_name and r.head_sha == sha),
        key=lambda r: -r.id,
    )
    if (name := req.query("check_name")) is not None:
        runs = [r for r in runs if r.name == name]
    if (status := req.query("status")) is not None:
        runs = [r for r in runs if r.status == status]
    if (app_id := req.query("app_id")) is not None:
        runs = [r for r in runs if str(r.app_id) == app_id]
    if (req.query("filter") or "latest") == "latest":
        seen: set[tuple[int, str]] = set()
        latest = []
        for run in runs:
            if (run.app_id, run.name) not in seen:
                seen.add((run.app_id, run.name))
                latest.append(run)
        runs = latest
    page, headers = paginate(req, runs)
    return Reply(
        {"total_count": len(runs), "check_runs": [render_run(req.emu, req.base, repo, r) for r in page]},
        headers=headers,
    )


async def rerequest_run(req: ApiRequest) -> Reply:
    """Asks GitHub to send ``check_run.rerequested`` to the App that made the run (only that App may ask)."""
    repo = req.repo("checks", "write")
    run = _run(req, repo)
    _require_owner(req, run, documentation_url=_RERUN_DOCS)
    rerequest(req.emu, req.base, repo, run, pending=req.pending, sender=None, acting=req.caller.app)
    return Reply({}, status=201)


def rerequest(
    emu: Emulator,
    base: str,
    repo: Repo,
    run: CheckRun,
    *,
    pending: list[Delivery],
    sender: str | None,
    acting: App | None,
) -> None:
    """Someone asked for the run again: ``check_run.rerequested`` to the App that made it.

    Only a completed run whose suite is completed may be asked for again (422
    otherwise): GitHub offers "Re-run" on finished checks, its description
    answers 422 for a run that is "not rerequestable", and the payload's
    ``check_run`` and ``check_suite`` are then both ``completed``, as the
    webhook schemas want. The words of the 422 are the emulator's.
    """
    status, _ = check_suites.summary(check_suites.runs_of(emu, emu.state.check_suites[run.check_suite_id]))
    if run.status != "completed" or status != "completed":
        waiting = "check run" if run.status != "completed" else "check suite"
        raise ApiError(
            422,
            f"This check run is not rerequestable: its {waiting} has not completed.",
            documentation_url=_RERUN_DOCS,
        )
    app = emu.state.apps[run.app_id]
    payload = {"action": "rerequested", "check_run": webhook_run(emu, base, repo, run)}
    emit(emu, base, repo, "check_run", payload, pending=pending, sender=sender, acting=acting, only_app=app)


def requested_action(
    emu: Emulator,
    base: str,
    repo: Repo,
    run: CheckRun,
    identifier: str,
    *,
    pending: list[Delivery],
    sender: str,
) -> None:
    """A person clicked one of the run's action buttons."""
    app = emu.state.apps[run.app_id]
    payload = {
        "action": "requested_action",
        "check_run": webhook_run(emu, base, repo, run),
        "requested_action": {"identifier": identifier},
    }
    emit(emu, base, repo, "check_run", payload, pending=pending, sender=sender, only_app=app)


ROUTES: list[RouteSpec] = [
    ("POST", "/repos/{owner}/{repo}/check-runs", create_run),
    ("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}", get_run),
    ("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}", update_run),
    ("GET", "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations", list_annotations),
    ("POST", "/repos/{owner}/{repo}/check-runs/{check_run_id}/rerequest", rerequest_run),
    ("GET", "/repos/{owner}/{repo}/commits/{ref:path}/check-runs", list_for_ref),
]
