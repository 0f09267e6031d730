"""One agent run, the whole path: gate → box → inspection → one commit. No GitHub here.

`baton run` calls this on a local repository; the worker will call it on its
mirror. The order is the promise: the gate decides before any process exists,
with the probe's answer about the network cut-off as a fact; the agent sees
only a plain copy of the base commit (no `.git`, no credentials) in a box that
matches the decision; its model calls go through the run's model gateway, which
holds the key the box never sees; everything it leaves behind is inspected as
hostile input before anything is committed, on a new branch, never the
checked-out one.

The run record says what happened and what was in force: the decision's digest,
the box report, the egress log (model calls included), the model journal and its
totals, the adapter and its version, exit status, durations, the diff stat, each
violation, and the agent's own result fields.

A ``stop`` event (set by whoever saw ``/baton cancel``) ends the run: before the
box starts nothing is started, while the agent runs the box is stopped; either
way nothing is inspected or committed. The gateway stops the box the same way
when a call reaches the spend cap (or is refused for it); the run then ends
``over-budget``.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from baton.tasks import Outcome
from worker.policy import ALWAYS_PROTECTED, MODEL_PROVIDERS, Agent, Decision, Policy, TaskFacts, decide
from worker.runner import adapters, box, gateway, inspect, inspect_git, prompt, proxy

#: What `baton run` exits with, and what the worker records, per outcome.
EXIT: dict[Outcome, int] = {
    Outcome.DONE: 0, Outcome.NO_CHANGES: 0, Outcome.DENIED: 3, Outcome.VIOLATIONS: 4, Outcome.FAILED: 5,
    Outcome.TIMED_OUT: 5, Outcome.AGENT_MISSING: 5, Outcome.OVER_BUDGET: 5, Outcome.CANCELLED: 6,
    Outcome.CONFLICT: 5, Outcome.OVER_LIMIT: 5, Outcome.REVIEW_BLOCKED: 4,
}  # fmt: skip
#: Why a run whose model requests the gateway refused commits nothing.
ASKED_FORBIDDEN = (
    "the agent asked its model API for what the policy forbids (the model gateway refused it); "
    "nothing was committed"
)
#: Inside the box: where the prompt file sits (the private HOME).
PROMPT_IN_BOX = "/home/agent/.baton/prompt.md"
#: The most of an agent's own result file (``AdapterSpec.result_file``) that is read.
RESULT_FILE_BYTES = 4 * 1024 * 1024
COMMIT_AUTHOR = ("Baton", "baton@users.noreply.github.com")


@dataclass(frozen=True)
class Issue:
    """The issue as untrusted text: it only ever reaches the agent, inside the prompt's data blocks.
    With ``instruction`` or ``notes`` the run is a follow-up on the pull request made for it."""

    title: str
    body: str
    comments: Sequence[str] = ()
    instruction: str | None = None
    notes: Sequence[prompt.Note] = ()


@dataclass(frozen=True)
class CommitSpec:
    """How the worker wants the run's commit made (``baton run`` leaves it to the defaults)."""

    #: The local branch to create in the request's repo (it must not exist), e.g. ``baton/task-<id>``.
    branch: str
    #: The full message; the caller adds trailers such as ``Co-authored-by``.
    message: str
    author: tuple[str, str]
    committer: tuple[str, str] | None = None
    #: The commit's parents in order, e.g. (the PR branch's tip, base); empty means (base,).
    parents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", tuple(self.parents))


@dataclass(frozen=True)
class RunRequest:
    agent: str
    repo: Path  # a git repository (its git dir is never visible to the agent)
    base: str  # the commit the agent starts from
    issue: Issue
    policy: Policy  # the effective policy
    repo_private: bool
    offline: bool = False
    run_id: str = field(default_factory=lambda: secrets.token_hex(6))
    #: Values of the env names the policy passes to this agent (the operator's environment). A model
    #: key among them never reaches the box (see ``model_keys``).
    env_values: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The model keys the worker holds (``ANTHROPIC_API_KEY``…), for the gateway: never the box's.
    model_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: Where agent CLIs are looked up on the host (their install dirs are bound read-only).
    search_path: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))
    #: Egress host -> (ip, port) used instead of DNS (tests and drills: a listener on loopback).
    egress_routes: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: Provider -> API root instead of the vendor's (an operator's own LLM gateway; the stand-in).
    model_upstreams: Mapping[str, str] = field(default_factory=dict)
    #: What model calls cost (``BATON_MODEL_PRICES``).
    prices: gateway.PriceTable = gateway.BUILTIN
    #: The day budgets a run's model spend also counts in (the worker's, in Redis); None: the run's own
    #: cap only (``baton run``).
    ledger: gateway.Ledger | None = None
    #: None: one commit on ``baton/run-<id>`` by COMMIT_AUTHOR with the base as its only parent.
    commit: CommitSpec | None = None
    #: At most this long, whatever the agent's own timeout (the agent minutes left in today's budget).
    max_seconds: float | None = None
    #: Called once the agent is found and its version known, just before its box starts (the
    #: worker says "running" on the issue then, with the version this run found).
    on_start: Callable[[RunRecord], object] | None = None


@dataclass
class RunRecord:
    run_id: str
    agent: str
    outcome: Outcome
    decision_sha256: str
    decision: dict[str, Any]
    probe: dict[str, Any]
    adapter: str | None = None
    adapter_version: str | None = None
    prompt_version: str | None = None
    box: dict[str, Any] | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    durations: dict[str, float] = field(default_factory=dict)
    egress: list[dict[str, Any]] = field(default_factory=list)
    #: The limit the box passed (memory or disk), what was measured and what held it.
    over_limit: dict[str, Any] | None = None
    diff: dict[str, Any] | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    agent_result: dict[str, Any] | None = None
    #: The model gateway's account: totals per model, the journal and its digest, violations.
    model: dict[str, Any] | None = None
    output_tail: str = ""
    branch: str | None = None
    commit: str | None = None
    reason: str = ""
    #: What the run's model calls cost, as the gateway metered them (None: the agent had no model).
    cost_usd: float | None = None
    #: When the run began (ISO 8601, UTC, wall clock), for budget accounting.
    started_at: str = ""

    @property
    def exit_status(self) -> int:
        return EXIT[self.outcome]

    def to_data(self) -> dict[str, Any]:
        return dict(vars(self))


def granted(policy: Policy, decision: Decision) -> tuple[list[str], list[str], list[str]]:
    """The agent's tools, egress hosts and env names, less what the decision removed (``--offline``)."""
    agent = policy.agents[decision.agent]
    removed = {(c.kind, c.name) for c in decision.removed}
    tools = [t for t in agent.tools if ("tool", t) not in removed]
    egress = [h for h in agent.egress if ("egress", h) not in removed]
    env = [e for e in agent.env if ("env", e) not in removed]
    return tools, egress, env


def run(request: RunRequest, *, stop: threading.Event | None = None) -> RunRecord:
    """Gate, box, inspection, commit. Raises UnknownAgent if the policy has no such agent.

    ``stop``, set from another thread, cancels the run (outcome ``cancelled``): the box is
    stopped (see ``box.run``) and nothing is inspected or committed."""
    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    found = box.probe()
    facts = TaskFacts(agent=request.agent, repo_private=request.repo_private, offline=request.offline,
                      network_cutoff=found.network_cutoff, seccomp=found.seccomp)  # fmt: skip
    decision = decide(request.policy, facts)
    digest = hashlib.sha256(decision.to_json()).hexdigest()
    record = RunRecord(request.run_id, request.agent, Outcome.DENIED, digest, decision.to_data(),
                       found.to_data(), started_at=started_at)  # fmt: skip
    if not decision.allowed:
        record.reason = "the trifecta gate denied this run; no process was started"
        return record
    if stop is not None and stop.is_set():
        record.outcome, record.reason = (
            Outcome.CANCELLED,
            "cancelled before the agent started; nothing was run",
        )
        return _done(record, started)
    agent = request.policy.agents[request.agent]
    spec = adapters.SPECS[agent.adapter]
    record.adapter = agent.adapter
    try:
        executable = adapters.locate(spec, agent, request.search_path)
    except adapters.AgentMissing as exc:
        record.outcome, record.reason = Outcome.AGENT_MISSING, exc.message
        return _done(record, started)
    record.adapter_version = adapters.version(spec, executable)
    if request.on_start is not None:
        request.on_start(record)
    with tempfile.TemporaryDirectory(prefix=f"baton-run-{request.run_id}-") as tmp:
        scratch = Path(tmp)
        result, over_budget = _run_boxed(request, decision=decision, network_cutoff=found.network_cutoff,
                                         executable=executable, scratch=scratch, record=record,
                                         stop=stop)  # fmt: skip
        # What the agent asked its model API for comes first: an injected agent is the finding,
        # however its run ended.
        record.violations = list((record.model or {}).get("violations") or [])
        if record.violations and (over_budget is not None or result.cancelled or result.timed_out):
            record.outcome, record.reason = Outcome.VIOLATIONS, ASKED_FORBIDDEN
            return _done(record, started)
        if over_budget is not None:
            record.outcome = Outcome.OVER_BUDGET
            record.reason = f"the model gateway refused a call: {over_budget}; nothing was committed"
            return _done(record, started)
        if result.cancelled:
            record.outcome, record.reason = Outcome.CANCELLED, _cancelled(result)
            return _done(record, started)
        if result.over_limit is not None:
            record.outcome = Outcome.OVER_LIMIT
            record.reason = f"the agent was stopped: {result.over_limit.describe()}; nothing was committed"
            return _done(record, started)
        if result.timed_out:
            limit, why = _timeout(request)
            record.outcome, record.reason = Outcome.TIMED_OUT, f"the agent ran past its {limit:g}s {why}"
            return _done(record, started)
        workspace = scratch / "workspace"
        tree = inspect.snapshot(request.repo, workspace, request.base)
        seen = inspect.inspect(request.repo, request.base, tree, workspace,
                               protected=(*request.policy.protected_paths, *ALWAYS_PROTECTED),
                               max_diff_lines=request.policy.limits.max_diff_lines)  # fmt: skip
    _judge(request, record, result, seen, tree)
    return _done(record, started)


def _timeout(request: RunRequest) -> tuple[float, str]:
    """How long the agent may run, and what set that: its own timeout or the day's budget."""
    own = float(request.policy.agents[request.agent].timeout)
    if request.max_seconds is not None and request.max_seconds < own:
        return max(1.0, float(int(request.max_seconds))), "limit (the agent minutes left in today's budget)"
    return own, "timeout"


def _run_boxed(
    request: RunRequest,
    *,
    decision: Decision,
    network_cutoff: bool,
    executable: str,
    scratch: Path,
    record: RunRecord,
    stop: threading.Event | None,
) -> tuple[box.BoxResult, str | None]:
    """Fill a fresh workspace from the base commit, write the prompt, run the agent in its box with
    its model gateway. Returns the box's result and, if the spend cap stopped it, why."""
    agent = request.policy.agents[request.agent]
    spec = adapters.SPECS[agent.adapter]
    tools, egress, env_names = granted(request.policy, decision)
    workspace, home = scratch / "workspace", scratch / "home"
    _export(request.repo, request.base, workspace)
    (home / ".baton").mkdir(parents=True)
    issue = request.issue
    text = prompt.render(title=issue.title, body=issue.body, comments=issue.comments,
                         instruction=issue.instruction, notes=issue.notes)  # fmt: skip
    (home / ".baton" / "prompt.md").write_text(text)
    record.prompt_version = prompt.PROMPT_VERSION
    capped = threading.Event()
    config = _gateway_config(request, agent, tools, on_over_budget=lambda _: capped.set())
    gateway_socket, proxy_socket = scratch / "model.sock", scratch / "proxy.sock"
    with gateway.ModelGateway(gateway_socket, config, tcp=not network_cutoff) as model_gateway:
        has_model = bool(config.upstreams)
        in_box = gateway.IN_BOX_URL if network_cutoff else f"http://127.0.0.1:{model_gateway.tcp_port}"
        invocation = adapters.build_invocation(
            spec,
            agent,
            granted_tools=tools,
            model_base_url=in_box if has_model else None,
            model_key=config.placeholder if has_model else None,
            env_values={k: v for k, v in request.env_values.items() if k in env_names},
            prompt_path=PROMPT_IN_BOX,
            workspace=box.WORKSPACE,
            search_path=request.search_path,
            prompt_text=text,
        )
        _write_home_files(home, invocation.home_files)
        to_gateway = ((("127.0.0.1", gateway.IN_BOX_PORT), gateway_socket)) if has_model else None
        with proxy.EgressProxy(proxy_socket, allow=egress, routes=dict(request.egress_routes),
                               model_hosts=MODEL_PROVIDERS, gateway=to_gateway) as egress_proxy:  # fmt: skip
            result = box.run(
                box.BoxSpec(
                    argv=invocation.argv,
                    workspace=workspace,
                    home=home,
                    env=invocation.env,
                    stdin=invocation.stdin,
                    ro_binds=adapters.install_dirs(executable, search_path=request.search_path),
                    # Without a cut-off the gate already counted the shell as unrestricted egress.
                    network="proxy" if network_cutoff else "host",
                    proxy_socket=proxy_socket if network_cutoff else None,
                    gateway_socket=gateway_socket if network_cutoff and has_model else None,
                    timeout_s=_timeout(request)[0],
                    memory_bytes=request.policy.limits.max_agent_memory,
                    max_disk_bytes=request.policy.limits.max_workspace_bytes,
                ),
                stop=box.Either(stop, capped),
            )
    # Read once both have stopped: a call cut off as the box ended is journaled by then.
    record.egress = sorted([*egress_proxy.log.to_data(), *model_gateway.journal.egress()],
                           key=lambda e: (e["host"], e["port"], e["allowed"]))  # fmt: skip
    record.model = model_gateway.record() if has_model else None
    record.cost_usd = record.model["totals"]["cost_usd"] if record.model else None
    record.box = result.report.to_data()
    record.exit_code, record.signal, record.timed_out = result.exit_code, result.signal, result.timed_out
    record.over_limit = None if result.over_limit is None else result.over_limit.to_data()
    record.durations["agent_s"] = round(result.duration_s, 3)
    record.durations["supervisor_s"] = float(result.measured.get("spent_s", 0.0))
    record.output_tail = result.excerpt()
    told = result.stdout if spec.result_file is None else read_own_file(home, spec.result_file)
    said = spec.parse_result(told, result.exit_code)
    record.agent_result = said.to_data()
    return result, model_gateway.over_budget


def _write_home_files(home: Path, files: Mapping[str, str]) -> None:
    """An adapter's settings files, in the fresh HOME before the agent exists (so never through a link)."""
    for relative, text in files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def read_own_file(home: Path, relative: str, limit: int = RESULT_FILE_BYTES) -> bytes:
    """A file the agent wrote in its HOME, read without following a link it may have planted there
    (each directory and the file opened ``O_NOFOLLOW``); at most ``limit`` bytes; empty if absent."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds: list[int] = []
    try:
        fds.append(os.open(home, flags | os.O_DIRECTORY))
        *parents, name = relative.split("/")
        for part in parents:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(name, flags | os.O_NONBLOCK, dir_fd=fds[-1]))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            return b""
        with os.fdopen(os.dup(fds[-1]), "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""
    finally:
        for fd in fds:
            os.close(fd)


def _gateway_config(
    request: RunRequest, agent: Agent, tools: Sequence[str], *, on_over_budget: Callable[[str], None]
) -> gateway.Config:
    """The run's gateway: the agent's providers with the worker's keys, its grant, its spend caps."""
    upstreams = gateway.upstreams_for(agent, environ=request.model_keys, base_urls=request.model_upstreams)
    cap = gateway.SpendCap(request.policy.limits.max_model_spend_per_run, request.ledger)
    return gateway.Config(
        gateway.placeholder(), upstreams, "model_server_tools" in tools, request.prices, cap, on_over_budget
    )


def _judge(
    request: RunRequest, record: RunRecord, result: box.BoxResult, seen: inspect.Inspection, tree: str
) -> None:
    """The verdict comes from the diff; the agent's exit code and own report only ever take away."""
    record.diff = seen.stat_data()
    record.changes = [c.to_data() for c in seen.changes]
    asked = bool(record.violations)  # the model gateway's, found first
    record.violations = [*record.violations, *(v.to_data() for v in seen.violations)]
    said_error = bool((record.agent_result or {}).get("is_error"))
    if asked:
        record.outcome, record.reason = Outcome.VIOLATIONS, ASKED_FORBIDDEN
    elif seen.violations:
        record.outcome, record.reason = (
            Outcome.VIOLATIONS,
            "the changes break the policy; nothing was committed",
        )
    elif result.exit_code != 0 or said_error:
        record.outcome, record.reason = Outcome.FAILED, "the agent reported failure; nothing was committed"
    elif seen.no_changes:
        record.outcome, record.reason = Outcome.NO_CHANGES, "the agent changed nothing"
    else:
        how = request.commit or CommitSpec(f"baton/run-{request.run_id}", _message(request), COMMIT_AUTHOR)
        record.branch = how.branch
        record.commit = inspect.commit(request.repo, request.base, tree, branch=how.branch,
                                       message=how.message, author=how.author, committer=how.committer,
                                       parents=how.parents)  # fmt: skip
        record.outcome, record.reason = Outcome.DONE, f"one commit on {record.branch}"


def _cancelled(result: box.BoxResult) -> str:
    if result.exit_code is None and result.signal is None:  # the box saw the stop before it started
        return "cancelled before the agent started; nothing was run"
    return "cancelled while the agent ran; nothing was committed"


def _done(record: RunRecord, started: float) -> RunRecord:
    record.durations["total_s"] = round(time.monotonic() - started, 3)
    return record


def _message(request: RunRequest) -> str:
    return f"Baton run {request.run_id}: {request.agent}\n\nAgent: {request.agent}\nBase: {request.base}\n"


def _export(repo: Path, base: str, workspace: Path) -> None:
    """A plain copy of ``base``: no `.git`, nothing but the tree, byte for byte (no hook, filter or
    attribute of the repository's own has a say)."""
    workspace.mkdir(parents=True)
    archive, _ = inspect_git.tree_tar(repo, base)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(workspace, filter="tar")  # our own tar, but no path may leave the workspace


def resolve_base(repo: Path, ref: str = "HEAD") -> str:
    """The commit ``ref`` names in ``repo``; ValueError (for the CLI) if there is none."""
    try:
        with inspect_git.session(repo) as git:
            return git.rev(ref, "commit")
    except (OSError, inspect_git.InspectError) as exc:
        raise ValueError(f"{repo}: {ref} is not a commit of a git repository ({exc})") from exc
