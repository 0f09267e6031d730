"""What a run says on GitHub: the status for each outcome, the pull request's body, its check runs.

Pure functions of the run record (``worker.runs.record.Record``), so the
same run always reads the same. The record is partly agent-written (its output tail,
its own summary, file paths it made up): those reach Markdown only through ``inert``
and ``fenced``, and the output tail is redacted first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from baton.tasks import BRANCH_PREFIX, Outcome
from worker.lifecycle import OUTCOME_STATE, State
from worker.messages import fenced, inert
from worker.runner.gateway.journal import VIOLATION_PREFIX
from worker.runner.gateway.spend import usd
from worker.runs.record import Record
from worker.status import Status

#: Check runs a finished run leaves on its commit.
TRIFECTA_CHECK = "baton/trifecta"
AGENT_CHECK = "baton/agent"
#: The trailer that ties a commit to the task that made it: how a retried task finds its own push.
TASK_TRAILER = "Baton-Task"
#: What a status says of a run that ended before its box started.
NEVER_STARTED = "No agent was started and no box was made; nothing was run or pushed."
#: How the reason of a run that needed no change begins (its work was on the base already).
NO_CHANGES_NEEDED = "no changes needed"
#: What a follow-up that pushed nothing suggests (`/baton retry` repeats the issue's run, not it).
ASK_AGAIN = "Once the cause is fixed, comment `/baton <what to change>` on the pull request to ask again."
#: Last lines of the agent's output shown on the issue.
TAIL_LINES = 15

#: Tokens of the kinds an agent's output could echo; shown as [redacted] whatever the run was given.
_TOKEN_SHAPES = re.compile(
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{16,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{16,}"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret (8+ characters) and anything token-shaped replaced."""
    for secret in sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return _TOKEN_SHAPES.sub("[redacted]", text)


def branch_for(number: int) -> str:
    return f"{BRANCH_PREFIX}{number}"


def commit_message(
    *, title: str, number: int, task_id: str, agent: str, co_author: str | None, follow_up: int | None = None
) -> str:
    """Subject from the issue (one line, cut), then the trailers a retry and a reviewer read. A
    follow-up says which pull request asked for it (what was asked stays out: it is untrusted text,
    and a commit message is where GitHub reads "Fixes #n")."""
    subject = " ".join(title.split())[:72] or f"Issue #{number}"
    said = f"Baton ran agent {agent} for #{number}"
    said += f", following up on pull request #{follow_up}." if follow_up is not None else "."
    lines = [subject, "", said, ""]
    lines.append(f"{TASK_TRAILER}: {task_id}")
    if co_author:
        lines.append(f"Co-authored-by: {co_author}")
    return "\n".join(lines) + "\n"


def trailer(message: str, name: str = TASK_TRAILER) -> str | None:
    """The value of the last ``name:`` trailer line in a commit message, if any."""
    found = [line.split(":", 1)[1].strip() for line in message.splitlines() if line.startswith(f"{name}:")]
    return found[-1] if found else None


# -- the record in words ------------------------------------------------------------------------


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def egress_summary(egress: Sequence[Mapping[str, Any]]) -> str:
    if not egress:
        return "no network connections"
    parts = []
    for e in egress:
        reasons = e.get("reasons") if isinstance(e.get("reasons"), Mapping) else None
        why = f" ({', '.join(sorted(map(str, reasons)))})" if reasons and not e.get("allowed") else ""
        verdict = "allowed" if e.get("allowed") else f"refused{why}"
        parts.append(f"{e.get('host')}:{e.get('port')} {verdict} x{e.get('connections', 0)}")
    return "; ".join(parts)


#: What a box's own summary may hold to be shown as plain words (else it is quoted inert): no
#: brackets, mention, issue reference, emphasis or HTML, and (below) nothing GitHub would autolink.
_PLAIN = re.compile(r"[A-Za-z0-9 ;:,.()/+%=-]{1,300}")


def box_summary(box: Mapping[str, Any] | None) -> str:
    """The box in one short sentence: its own ``summary`` (the box writes it, the full list of
    protections stays in the run record and the receipt), or for a record made before the box
    wrote one, a count and the protections that were not in force (never claim one that was not)."""
    if not box:
        return "no box was started"
    said = box.get("summary")
    if isinstance(said, str) and said.strip():
        flat = " ".join(said.split())
        linkish = "://" in flat or "www." in flat.lower()
        return flat if _PLAIN.fullmatch(flat) and not linkish else inert(flat, 300)
    held = {k: bool(v.get("in_force")) for k, v in box.items() if isinstance(v, Mapping)}
    off = sorted(k.replace("_", " ") for k, on in held.items() if not on)
    count = f"{sum(held.values())} of {len(held)} protections in force"
    text = f"network {box.get('network', 'unknown')}; {count}"
    return text + (f"; not in force: {', '.join(off)}" if off else "")


#: Models listed one by one; the rest are summed into one line.
MODEL_LINES = 5


def _tokens(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else "?"


def model_lines(record: Record) -> list[str]:
    """What the run's model calls were and cost, as Baton's gateway metered them (names are the agent's)."""
    model = record.model
    if not isinstance(model, Mapping):
        return []
    totals = model.get("totals") or {}
    said = (record.agent_result or {}).get("cost_usd")
    claim = f" (the CLI said {usd(float(said))})" if isinstance(said, int | float) else ""
    refused = int(totals.get("refused") or 0)
    lines = [
        f"Model: {totals.get('calls', 0)} calls through Baton's model gateway, "
        f"{_tokens(totals.get('input_tokens'))} tokens in, {_tokens(totals.get('output_tokens'))} out, "
        f"{usd(float(totals.get('cost_usd') or 0.0))} metered{claim}"
        + (f"; {refused} refused" if refused else "")
    ]
    models = list(totals.get("models") or [])
    for entry in models[:MODEL_LINES]:
        estimated = int(entry.get("estimated_calls") or 0)
        lines.append(
            f"Model {inert(str(entry.get('provider')) + '/' + str(entry.get('model')), 120)}: "
            f"{entry.get('calls', 0)} calls, {_tokens(entry.get('input_tokens'))} in "
            f"(+{_tokens(entry.get('cache_read_tokens'))} cached), "
            f"{_tokens(entry.get('output_tokens'))} out, "
            f"{usd(float(entry.get('cost_usd') or 0.0))}"
            + (" at the default price" if entry.get("priced_as") == "default" else "")
            + (f"; {estimated} estimated from bytes" if estimated else "")
        )
    if len(models) > MODEL_LINES:
        lines.append(f"Model: {len(models) - MODEL_LINES} more models (in the run's receipt)")
    return lines


def started(record: Record) -> bool:
    """Did the run get as far as its box? Only then are there an adapter, a box and an agent time."""
    return bool(record.box)


def run_lines(record: Record) -> list[str]:
    """The run, one fact per line, for the status comment, the PR body and the agent check. A run
    that ended before its box started has only what it got to: the agent's adapter if it was
    found, the decision if the gate was asked (never "None" or an empty digest in their place)."""
    if not started(record):
        lines = [f"Adapter {inert(record.adapter)}"] if record.adapter else []
        if record.decision_sha256:
            lines.append(f"Decision `sha256:{record.decision_sha256[:16]}…`")
        return lines
    diff = record.diff or {}
    adapter = f"{record.adapter} {record.adapter_version or '(version unknown)'}"
    lines = [
        f"Agent {inert(record.agent)} through adapter {inert(adapter)}",
        f"Decision `sha256:{record.decision_sha256[:16]}…`",
        f"Box: {box_summary(record.box)}",
        f"Egress: {inert(egress_summary(record.egress), 400)}",
        *model_lines(record),
        f"Agent time {_minutes(record.durations.get('agent_s'))}, "
        f"total {_minutes(record.durations.get('total_s'))}",
    ]
    if diff:
        lines.append(
            f"Diff: {diff.get('files', 0)} files, +{diff.get('insertions', 0)} -{diff.get('deletions', 0)}"
        )
    if record.review:
        lines.append(reviewer_line(record.review))
    return lines


# -- the reviewer (``review:``) -------------------------------------------------------------------


def reviewer_line(review: Mapping[str, Any]) -> str:
    """Who reviewed and how it ended, one line: names quoted, the verdict by digest."""
    adapter = f"{review.get('adapter') or '?'} {review.get('adapter_version') or '(version unknown)'}"
    digest = review.get("reply_sha256")
    said = f", verdict `sha256:{str(digest)[:16]}…`" if digest else ""
    took = _minutes((review.get("durations") or {}).get("review_s"))
    return (f"Reviewer {inert(str(review.get('agent')))} through adapter {inert(adapter)}: "
            f"{inert(str(review.get('result')))}{said}, {took}")  # fmt: skip


def review_findings(review: Mapping[str, Any]) -> list[str]:
    """What blocked, in the reviewer's words (every one quoted inert): each blocking category with
    its reasons and the places it names; or its reply when it did not parse."""
    lines = []
    blocking = set(review.get("blocking") or ())
    for finding in review.get("findings") or ():
        if finding.get("category") not in blocking:
            continue
        reasons = [inert(str(r), 300) for r in finding.get("reasons") or ()]
        places = [inert(str(p), 200) for p in finding.get("locations") or ()]
        more = int(finding.get("reasons_left_out") or 0) + int(finding.get("locations_left_out") or 0)
        lines.append(f"{inert(str(finding.get('category')))}: " + ("; ".join(reasons) or "no reason given")
                     + (f" at {', '.join(places)}" if places else "")
                     + (f" ({more} more reasons or places in the run record)" if more else ""))  # fmt: skip
    if review.get("quoted"):
        lines.append(f"Its reply: {inert(str(review.get('reply') or ''), 300)}")
    return lines


def _sentence(text: str) -> str:
    """Baton's own reason as a sentence: capital first, full stop last."""
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "." if text else ""


def _tail(record: Record, secrets: Iterable[str]) -> str | None:
    tail = record.output_tail.strip()
    if not tail:
        return None
    return "\n".join(redact(tail, secrets).splitlines()[-TAIL_LINES:])


# -- statuses ------------------------------------------------------------------------------------


def queued(
    task_id: str, agent: str, *, offline: bool, context: Sequence[str], notices: Sequence[str] = ()
) -> Status:
    mode = " offline" if offline else ""
    return Status(
        State.QUEUED,
        task_id,
        agent,
        f"The capability gate allowed this{mode} run of {inert(agent)}. It is waiting for an agent worker.",
        details=context,
        next_steps=("Comment `/baton cancel` to stop it.",),
        notices=notices,
    )


def waiting(queued: Status, *, waiting: int, running: int, limit: str, why: str) -> Status:
    """A run waiting in its repository's line (``worker.runs.line``), from the status it will have
    once its turn comes (``queued``): what is ahead of it (``running``: the runs in progress that
    hold the line back; ``waiting``: those in the line before it), and the limit that holds it
    (``limit``, the baton.yml field; ``why``, the counts)."""
    agent = inert(queued.agent) if queued.agent else "the agent"
    runs = "run" if running == 1 else "runs"
    place = f"{waiting + running} ahead ({running} {runs} in progress, {waiting} waiting before it)"
    return dataclasses.replace(
        queued,
        summary=f"The capability gate allowed this run of {agent}. It is waiting for a free run slot "
        f"in this repository's line, oldest first, and starts by itself when its turn comes: "
        f"waiting: {place}.",
        headline="⏳ Waiting for a free run slot",
        details=(f"The limit is `{limit}`: {why}", *queued.details),
        next_steps=(
            "Comment `/baton cancel` (or remove the agent label, or close the issue) to take it out of "
            "the line.",
            f"To run more at once, ask an org admin to raise `{limit}` in the org's policy (`baton.yml` in "
            "its `.github` repository).",
        ),
    )


def running(task_id: str, agent: str, *, adapter: str, version: str | None, box: str, attempt: int) -> Status:
    again = " (second attempt: the worker running the first one was lost)" if attempt > 1 else ""
    return Status(
        State.RUNNING,
        task_id,
        agent,
        f"The agent is running in its box{again}. This comment changes when it ends.",
        details=(f"Adapter {inert(adapter)} {inert(version or 'version unknown')}", f"Box: {box}"),
        next_steps=("Comment `/baton cancel` to stop it; nothing is pushed then.",),
    )


def busy(task_id: str, agent: str | None, holder: str) -> Status:
    return Status(
        State.REFUSED,
        task_id,
        agent,
        f"A run is already in progress on this issue (task `{holder}`), so this request started nothing.",
        headline="⏳ A run is already in progress",
        next_steps=("Wait for it to finish, or comment `/baton cancel` to stop it and then ask again.",),
    )


def over_budget(task_id: str, agent: str, lines: Sequence[str]) -> Status:
    return Status(
        State.REFUSED,
        task_id,
        agent,
        "Baton started no agent: this run is over its budget.",
        details=lines,
        headline="💸 Over budget",
        next_steps=(
            "Wait for the budget to reset, or ask an org admin to raise `limits` in the org's policy "
            "(`baton.yml` in its `.github` repository).",
        ),
    )


def pr_opened(
    task_id: str, agent: str, record: Record, pr: Mapping[str, Any], *, updated: bool, unchanged: bool = False
) -> Status:
    """``unchanged``: the run's commit leaves the files as the pull request had them already."""
    verb = "updated" if updated else "opened"
    link = f"[#{pr['number']}]({pr['html_url']})"
    same = " but nothing changed: the agent left the same files as before, so the diff is the same"
    if record.follow_up:
        return Status(
            State.PR_OPENED,
            task_id,
            agent,
            f"Pull request {link} updated: commit {str(record.commit)[:12]} on `{pr['head']['ref']}` "
            f"follows up on {follow_up_origin(record.follow_up)}.",
            details=[*follow_up_lines(record), *run_lines(record)],
            headline="📬 Pull request updated",
            next_steps=(
                "Review the new commit; Baton's checks are on it.",
                "Comment `/baton <what to change>` on the pull request, or review it, to ask for more.",
            ),
        )
    return Status(
        State.PR_OPENED,
        task_id,
        agent,
        f"Pull request {link} {verb} from branch `{pr['head']['ref']}`{same if unchanged else ''}.",
        details=run_lines(record),
        headline=f"📬 Pull request {verb}",
        next_steps=(
            "Review it like any other pull request; Baton's checks are on it.",
            "Comment `/baton retry` to run the agent again under the current policy.",
            "Comment `/baton <what to change>` on the pull request, or review it, to ask for more.",
        ),
    )


def follow_up_origin(follow_up: Mapping[str, Any]) -> str:
    """Who asked, and where: "`maria`'s review of #7" (a login is quoted inert)."""
    what = "review" if follow_up.get("review_id") is not None else "comment"
    return f"{inert(str(follow_up.get('asked_by') or '?'))}'s {what} on #{follow_up.get('pull_request')}"


def follow_up_lines(record: Record) -> list[str]:
    """What a follow-up was asked and built on, for its status and the pull request's body (the
    instruction itself is untrusted text: only its size and its comments' places are said)."""
    follow = record.follow_up
    if not follow:
        return []
    comments = list(follow.get("comments") or ())
    lines = [f"Follow-up: {follow_up_origin(follow)}"
             + (f", with {len(comments)} line comment(s)" if comments else "")]  # fmt: skip
    if follow.get("left_out"):
        lines.append(f"Line comments not read: more than {follow.get('left_out')} in one review")
    for commit in record.built_on:
        lines.append(f"Built on {str(commit.get('sha'))[:12]} by {inert(str(commit.get('author')))} "
                     f"({inert(str(commit.get('permission')))})")  # fmt: skip
    return lines


def ended(task_id: str, agent: str, record: Record, secrets: Iterable[str] = ()) -> Status:
    """A run that opened no pull request: why, in Baton's words, and what the agent last said."""
    outcome = record.outcome
    state = OUTCOME_STATE[outcome]
    retry = "Comment `/baton retry` to run it again."
    if outcome is Outcome.NO_CHANGES:
        handed = record.reason.startswith(NO_CHANGES_NEEDED)  # a sibling delivered it (worker.umbrella)
        return Status(
            state,
            task_id,
            agent,
            f"{_sentence(record.reason)} Nothing was pushed."
            if handed
            else "The agent finished without changing any file; nothing was pushed.",
            details=run_lines(record),
            headline="✅ Done: no changes",
            next_steps=(retry,),
        )
    if outcome is Outcome.VIOLATIONS:
        listed = list(record.violations)
        found = [
            f"{inert(str(v.get('code')))} {inert(str(v.get('path') or '(whole diff)'), 200)}: "
            f"{inert(str(v.get('detail')), 300)}"
            for v in listed
        ]
        asked = any(str(v.get("code", "")).startswith(VIOLATION_PREFIX) for v in listed)
        return Status(
            state,
            task_id,
            agent,
            (
                "The agent asked its model API for what the policy forbids (another account's key, an "
                "endpoint that is not inference, or the provider acting for it), which is what an injected "
                "agent does. Baton's model gateway refused every such request, and nothing was committed or "
                "pushed:"
            )
            if asked
            else "The agent's changes break this repository's policy, so nothing was committed or pushed:",
            details=[*found, *run_lines(record)],
            headline="🛡️ Model requests refused" if asked else "🚧 Changes refused",
            next_steps=(retry,),
        )
    if outcome is Outcome.REVIEW_BLOCKED:
        review = record.review or {}
        quoted = review.get("quoted")
        why = str(review.get("detail") or "the reviewer did not pass the change")
        return Status(
            state,
            task_id,
            agent,
            f"{_sentence(why + (': ' + inert(str(quoted), 300) if quoted else ''))} The agent's commit was "
            "not pushed, and no pull request was opened or updated.",
            details=[*review_findings(review), *run_lines(record)],
            headline="🔎 Stopped by the reviewer",
            next_steps=(retry,),
        )
    if outcome is Outcome.OVER_BUDGET:
        return Status(
            state,
            task_id,
            agent,
            f"{_sentence(record.reason or 'the run reached its model spend cap')}",
            details=run_lines(record),
            headline="💸 Over budget: the model spend cap was reached",
            next_steps=(
                "Wait for the day's budget to reset (UTC midnight), or ask an org admin to raise the "
                "`limits` model spend caps in the org's policy (`baton.yml` in its `.github` repository).",
                retry,
            ),
        )
    if outcome is Outcome.CANCELLED:
        return Status(
            state,
            task_id,
            agent,
            f"The run was stopped: {record.reason}. "
            + ("Nothing was pushed." if started(record) else NEVER_STARTED),
            details=run_lines(record),
        )
    if outcome is Outcome.DENIED:
        return Status(
            state,
            task_id,
            agent,
            "The capability gate, asked again on the current "
            "policy when the run was about to start, denied it; no agent process was started.",
            next_steps=(retry,),
        )
    headline = {
        Outcome.CONFLICT: "⚠️ Not pushed: the branch has changes Baton did not make",
        Outcome.AGENT_MISSING: "❌ The agent is not installed",
        Outcome.OVER_LIMIT: "🛑 Stopped: the agent passed a limit of its box",
    }.get(outcome)
    tail = _tail(record, secrets)
    return Status(
        state,
        task_id,
        agent,
        f"{_sentence(record.reason or 'the run failed')} Nothing was pushed.",
        evidence=f"last lines of the agent's output:\n{tail}" if tail else None,
        details=run_lines(record) if record.box else (),
        headline=headline,
        next_steps=(retry,),
    )


# -- the pull request and its checks ----------------------------------------------------------------


def pr_body(*, number: int, task_id: str, record: Record, explanation: str) -> str:
    """The pull request's body: the issue it fixes and its latest run (a follow-up's says what asked)."""
    latest = (
        f"Its latest commit follows up on {follow_up_origin(record.follow_up)}, made the same way."
        if record.follow_up
        else ""
    )
    lines = [
        f"Fixes #{number}",
        "",
        f"Baton ran an agent for #{number} in an isolated box with no credentials; the worker made this "
        "commit from the changes it left, after inspecting them." + (f" {latest}" if latest else ""),
        "",
        *(f"- {line}" for line in [*follow_up_lines(record), *run_lines(record)]),
        "",
        "<details><summary>The capability decision</summary>",
        "",
        fenced(explanation),
        "",
        "</details>",
        "",
        f"Re-run: comment `/baton retry` on #{number}. Ask for more: comment `/baton <what to change>` "
        f"here, or review the change. Task `{task_id}`.",
    ]
    return "\n".join(lines)


def pr_title(title: str, number: int) -> str:
    flat = " ".join(title.split())
    return (flat[:240] or f"Issue #{number}") + f" (#{number})"


def agent_check(record: Record) -> tuple[str, str]:
    """Title and summary of the ``baton/agent`` check run."""
    diff = record.diff or {}
    title = f"{record.agent}: {diff.get('files', 0)} files changed"
    return title, "\n".join(f"- {line}" for line in run_lines(record))


def trifecta_check(explanation: str) -> tuple[str, str]:
    first = explanation.splitlines()[0] if explanation else "decision"
    return first[:200], fenced(explanation)
