"""One review: the policy's reviewer agent, read-only, on a result tree and its change. No GitHub here.

Before Baton pushes an agent's commit (``worker.runs.review``) and, with ``review.merge_gate``, for
every pull request (``worker.gates.reviewer``), another agent judges the change. It is an agent like
any other and is held like one, only tighter:

1. **the gate first**: the trifecta gate decides on the reviewer as it will run (its tools cut to
   ``read_repo``, no egress host, no env name but its model key, its CLI's own tools still counted),
   with the task's facts; a reviewer the gate would deny is not started, and the review fails;
2. **a read-only box**: the workspace is the result tree, bound read-only (``BoxSpec.workspace_readonly``),
   a fresh HOME, the egress proxy allowing no host, the model gateway its one way out; its adapter's
   invocation is given ``read_repo`` at most;
3. **its model through a gateway of its own**, under the run's spend cap (what the run's agent spent
   already counts: ``SpendCap.spent_before_usd``) and the same day budgets (the same ledger);
4. **a fixed prompt** (``worker.runner.review_prompt``) with the material in data blocks;
5. **a strict verdict** (``worker.runner.verdict``): every way of not judging (a timeout, a crash, its own
   model requests refused, a reply that is not the one JSON object) fails closed.

The :class:`ReviewRecord` says what ran and what held it, like a run record: the reviewer's adapter
and version, the prompt's version and digest, the decision's digest, the box report, its egress and
model account, the reply by digest, the result and the findings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.policy import Agent, Decision, Policy, Review, TaskFacts, decide
from worker.policy.catalogue import MODEL_PROVIDERS, is_model_key
from worker.runner import adapters, box, gateway, inspect_git, proxy, review_prompt, verdict
from worker.runner.results import ResultFormat
from worker.runner.run import PROMPT_IN_BOX, read_own_file
from worker.runner.verdict import Judgement, Ran, Result

#: The one tool a reviewer may be given (if its policy entry lists it): it reads the result tree.
REVIEW_TOOLS = ("read_repo",)
#: The change shown to the reviewer: ``git diff`` with this many lines of context.
DIFF_CONTEXT = 3
#: Between the timeout's SIGTERM and SIGKILL: a reviewer has nothing to save.
GRACE_S = 5.0


@dataclass(frozen=True)
class ReviewRequest:
    #: The effective policy: its ``review`` names the reviewer, what blocks, the timeout.
    policy: Policy
    #: A git repository holding ``base`` and ``head`` (never visible to the reviewer).
    repo: Path
    base: str
    head: str
    #: What the reviewer judges, but the diff, which is read here from ``base`` to ``head``.
    material: review_prompt.Material
    repo_private: bool
    run_id: str
    model_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    model_upstreams: Mapping[str, str] = field(default_factory=dict)
    prices: gateway.PriceTable = gateway.BUILTIN
    ledger: gateway.Ledger | None = None
    #: What the run's agent spent on its model already (the run's cap counts both).
    spent_before_usd: float = 0.0
    search_path: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))


@dataclass
class ReviewRecord:
    agent: str
    result: Result
    #: Baton's words for the result (a sentence without its full stop) and, quoted inert where shown,
    #: the reviewer's words that go with them (why its reply did not parse).
    detail: str
    quoted: str | None = None
    blocks_on: tuple[str, ...] = ()
    base: str = ""
    commit: str = ""
    adapter: str | None = None
    adapter_version: str | None = None
    prompt_version: str = review_prompt.REVIEW_PROMPT_VERSION
    prompt_sha256: str = field(default_factory=review_prompt.template_digest)
    decision_sha256: str = ""
    decision: dict[str, Any] = field(default_factory=dict)
    box: dict[str, Any] | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    durations: dict[str, float] = field(default_factory=dict)
    egress: list[dict[str, Any]] = field(default_factory=list)
    model: dict[str, Any] | None = None
    cost_usd: float | None = None
    #: The reply the verdict was read from (at most ``verdict.MAX_REPLY_CHARS``), and its digest (all of it).
    reply: str | None = None
    reply_sha256: str | None = None
    #: Every finding of a verdict that parsed, and the categories that blocked.
    findings: list[dict[str, Any]] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    output_tail: str = ""
    #: How much of the diff the reviewer saw: its size, and what was cut past the prompt's cap.
    diff_chars: int = 0

    @property
    def passed(self) -> bool:
        return self.result is Result.PASSED

    def to_data(self) -> dict[str, Any]:
        data = dict(vars(self))
        data["result"] = str(self.result)
        data["blocks_on"] = list(self.blocks_on)
        return data


def as_reviewer(agent: Agent, review: Review) -> Agent:
    """The reviewer as it runs: ``read_repo`` at most, no egress host, no env name but its model key,
    the review's timeout; its adapter (and the CLI's own tools, which the gate counts) unchanged."""
    return Agent(
        adapter=agent.adapter,
        tools=tuple(t for t in agent.tools if t in REVIEW_TOOLS),
        model_endpoints=agent.model_endpoints,
        egress=(),
        env=tuple(e for e in agent.env if is_model_key(e, agent.model_endpoints)),
        timeout=review.timeout,
        command=agent.command,
    )


def reviewer_policy(policy: Policy) -> Policy:
    """The policy the gate decides the reviewer on: the same, with the reviewer cut to what it runs with."""
    review = policy.review
    if review is None or review.agent not in policy.agents:
        raise ValueError("the policy has no review, or no agent of that name")
    cut = as_reviewer(policy.agents[review.agent], review)
    return dataclasses.replace(policy, agents={**policy.agents, review.agent: cut})


def run(request: ReviewRequest, *, stop: threading.Event | None = None) -> ReviewRecord:
    """Gate, read-only box, verdict. Never raises for what the reviewer did: every end is a record."""
    started = time.monotonic()
    review = request.policy.review
    if review is None:
        raise ValueError("the policy names no review")
    record = ReviewRecord(review.agent, Result.DENIED, "", blocks_on=review.blocks_on, base=request.base,
                          commit=request.head)  # fmt: skip
    if review.agent not in request.policy.agents:
        record.result = Result.MISSING
        record.detail = f"the reviewer {review.agent} is not an agent of this repository's policy"
        return _done(record, started)
    policy = reviewer_policy(request.policy)
    found = box.probe()
    facts = TaskFacts(agent=review.agent, repo_private=request.repo_private,
                      network_cutoff=found.network_cutoff, seccomp=found.seccomp)  # fmt: skip
    decision = decide(policy, facts)
    record.decision_sha256 = hashlib.sha256(decision.to_json()).hexdigest()
    record.decision = decision.to_data()
    if not decision.allowed:
        record.detail = f"the trifecta gate denied the reviewer {review.agent}: {_legs(decision)}"
        return _done(record, started)
    if stop is not None and stop.is_set():
        record.result, record.detail = Result.CANCELLED, "the review was cancelled before it started"
        return _done(record, started)
    agent = policy.agents[review.agent]
    spec = adapters.SPECS[agent.adapter]
    record.adapter = agent.adapter
    try:
        executable = adapters.locate(spec, agent, request.search_path)
    except adapters.AgentMissing as exc:
        record.result, record.detail = Result.MISSING, f"the reviewer could not start: {exc.message}"
        return _done(record, started)
    record.adapter_version = adapters.version(spec, executable)
    with tempfile.TemporaryDirectory(prefix=f"baton-review-{request.run_id}-") as tmp:
        try:
            ran = _boxed(request, agent, executable, Path(tmp), record=record,
                         network_cutoff=found.network_cutoff, stop=stop)  # fmt: skip
        except box.BoxError as exc:
            record.result, record.detail = Result.MISSING, f"the reviewer's box could not start ({exc.code})"
            return _done(record, started)
    judged = verdict.judge(ran, review.blocks_on)
    _judged(record, judged)
    return _done(record, started)


def _legs(decision: Decision) -> str:
    """Which legs met, and what put each there (names only: the explanation has the rest)."""
    parts = [f"{str(axis).replace('_', ' ')} ({', '.join(c.name for c in found)})"
             for axis, found in decision.legs.items() if found]  # fmt: skip
    return "it would hold " + "; ".join(parts)


def _judged(record: ReviewRecord, judged: Judgement) -> None:
    record.result, record.detail, record.quoted = judged.result, judged.detail, judged.quoted
    if judged.verdict is not None:
        record.findings = [f.to_data() for f in judged.verdict.findings]
    record.blocking = [f.category for f in judged.findings]


def _done(record: ReviewRecord, started: float) -> ReviewRecord:
    record.durations["review_s"] = round(time.monotonic() - started, 3)
    return record


def _boxed(
    request: ReviewRequest, agent: Agent, executable: str, scratch: Path, *, record: ReviewRecord,
    network_cutoff: bool, stop: threading.Event | None,
) -> Ran:  # fmt: skip
    """The result tree, read-only, the prompt, the reviewer in its box with its own gateway."""
    spec = adapters.SPECS[agent.adapter]
    review = request.policy.review
    if review is None:
        raise ValueError("the policy names no review")
    workspace, home = scratch / "workspace", scratch / "home"
    diff = _export(request, workspace)
    record.diff_chars = len(diff)
    (home / ".baton").mkdir(parents=True)
    text = review_prompt.render(dataclasses.replace(request.material, diff=diff))
    (home / ".baton" / "prompt.md").write_text(text)
    capped = threading.Event()
    upstreams = gateway.upstreams_for(agent, environ=request.model_keys, base_urls=request.model_upstreams)
    cap = gateway.SpendCap(
        request.policy.limits.max_model_spend_per_run, request.ledger, request.spent_before_usd
    )
    config = gateway.Config(
        gateway.placeholder(), upstreams, False, request.prices, cap, lambda _: capped.set()
    )
    gateway_socket, proxy_socket = scratch / "model.sock", scratch / "proxy.sock"
    with gateway.ModelGateway(gateway_socket, config, tcp=not network_cutoff) as model_gateway:
        has_model = bool(upstreams)
        in_box = gateway.IN_BOX_URL if network_cutoff else f"http://127.0.0.1:{model_gateway.tcp_port}"
        invocation = adapters.build_invocation(
            spec, agent, granted_tools=agent.tools, model_base_url=in_box if has_model else None,
            model_key=config.placeholder if has_model else None, env_values={}, prompt_path=PROMPT_IN_BOX,
            workspace=box.WORKSPACE, search_path=request.search_path, prompt_text=text,
        )  # fmt: skip
        for relative, content in invocation.home_files.items():
            (home / relative).parent.mkdir(parents=True, exist_ok=True)
            (home / relative).write_text(content, encoding="utf-8")
        to_gateway = ((("127.0.0.1", gateway.IN_BOX_PORT), gateway_socket)) if has_model else None
        with proxy.EgressProxy(proxy_socket, allow=[], routes={}, model_hosts=MODEL_PROVIDERS,
                               gateway=to_gateway) as egress_proxy:  # fmt: skip
            result = box.run(
                box.BoxSpec(
                    argv=invocation.argv, workspace=workspace, home=home, env=invocation.env,
                    stdin=invocation.stdin,
                    ro_binds=adapters.install_dirs(executable, search_path=request.search_path),
                    network="proxy" if network_cutoff else "host",
                    proxy_socket=proxy_socket if network_cutoff else None,
                    gateway_socket=gateway_socket if network_cutoff and has_model else None,
                    timeout_s=float(review.timeout),
                    grace_s=GRACE_S,
                    memory_bytes=request.policy.limits.max_agent_memory,
                    max_disk_bytes=request.policy.limits.max_workspace_bytes,
                    workspace_readonly=True,
                ),
                stop=box.Either(stop, capped),
            )  # fmt: skip
    record.egress = sorted([*egress_proxy.log.to_data(), *model_gateway.journal.egress()],
                           key=lambda e: (e["host"], e["port"], e["allowed"]))  # fmt: skip
    record.model = model_gateway.record() if has_model else None
    record.cost_usd = record.model["totals"]["cost_usd"] if record.model else None
    record.box = result.report.to_data()
    record.exit_code, record.signal, record.timed_out = result.exit_code, result.signal, result.timed_out
    record.output_tail = result.excerpt()
    told = result.stdout if spec.result_file is None else read_own_file(home, spec.result_file)
    said = spec.parse_result(told, result.exit_code)
    whole = told.decode("utf-8", "replace") if isinstance(told, bytes) else told
    # A CLI's own account gives its final reply; a plain program's reply is all it printed.
    reply = (
        said.summary if spec.result_format is not ResultFormat.TEXT and said.summary is not None else whole
    )
    record.reply = reply[: verdict.MAX_REPLY_CHARS]
    record.reply_sha256 = hashlib.sha256(reply.encode()).hexdigest()
    refused = tuple(str(v.get("code")) for v in (record.model or {}).get("violations") or [])
    over = result.over_limit.describe() if result.over_limit is not None else None
    return Ran(exit_code=result.exit_code, signal=result.signal, timed_out=result.timed_out,
               cancelled=result.cancelled, over_limit=over, is_error=said.is_error, refused=refused,
               over_budget=model_gateway.over_budget, reply=reply,
               timeout_s=float(review.timeout))  # fmt: skip


def _export(request: ReviewRequest, workspace: Path) -> str:
    """The head's tree into ``workspace`` (read-only in the box) and the change from base to head."""
    workspace.mkdir(parents=True)
    archive, _ = inspect_git.tree_tar(request.repo, request.head)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(workspace, filter="tar")  # our own tar, but no path may leave the workspace
    with inspect_git.session(request.repo) as git:
        out = git.run("diff", f"-U{DIFF_CONTEXT}", "--no-color", "--no-ext-diff", "--no-textconv",
                      "--src-prefix=a/", "--dst-prefix=b/", request.base, request.head)  # fmt: skip
    return out.decode("utf-8", "replace")
