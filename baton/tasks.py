"""The task: what the web side hands the worker, and the only thing it hands it.

A task is plain JSON (RQ's JSON serializer carries it; no pickle ever crosses
Redis). Everything a later decision may use is a named, typed field taken from
the verified payload. Text that people outside the maintainers can write
(issue and PR titles and bodies, comment bodies) travels only in the
``untrusted`` section: routing and every decision after it read the fields
above it and never that section's content.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1

#: What an agent may be called: in `agent:<name>` labels, `/baton run <name>` and policy files
#: (the policy schema uses this pattern). Lower case, so a name is never a mention or a link.
AGENT_NAME_PATTERN = "[a-z0-9][a-z0-9._-]{0,49}"
#: The branch of the issue numbered n is BRANCH_PREFIX + n: where Baton pushes its runs, how its
#: pull requests are told apart from people's (with the App's bot as their author).
BRANCH_PREFIX = "baton/issue-"


class Outcome(StrEnum):
    """How an agent run ended: what ``baton run`` exits with (``worker.runner.run.EXIT``) and the
    task state it ends in (``worker.lifecycle.OUTCOME_STATE``). The values are written into run
    records and signed receipts: never change one."""

    DONE = "done"  # one commit made (the worker then opens or updates the pull request)
    NO_CHANGES = "no-changes"
    DENIED = "denied"  # the trifecta gate said no, or the agent left the policy
    VIOLATIONS = "violations"  # the changes, or the model requests, broke the policy
    FAILED = "failed"  # the agent reported failure
    TIMED_OUT = "timed-out"
    AGENT_MISSING = "agent-missing"
    OVER_BUDGET = "over-budget"
    CANCELLED = "cancelled"
    CONFLICT = "conflict"  # the branch has commits Baton did not make, or moved during the run
    OVER_LIMIT = "over-limit"  # the box passed its memory or disk limit and was stopped
    #: The policy's reviewer (``review:``) found what it blocks on, or could not judge: nothing pushed.
    REVIEW_BLOCKED = "review-blocked"


class Kind(StrEnum):
    AGENT_RUN = "agent_run"
    CANCEL = "cancel"
    COMMAND = "command"
    MERGE_GATE = "merge_gate"
    GATE_RERUN = "merge_gate_rerun"
    CHECK_ACTION = "check_action"
    INSTALLATION_SYNC = "installation_sync"
    #: An instruction on a pull request Baton opened: a `/baton <instruction>` or `@<app-slug>
    #: <instruction>` comment on it, or a submitted review (whose body or line comments carry one;
    #: the worker reads them). The issue's agent runs again on the pull request's head.
    ITERATE = "pr_iteration"


@dataclass(frozen=True, slots=True)
class Repository:
    id: int
    full_name: str
    private: bool
    #: From the signed payload ("" where it names none); the worker may read the policy there
    #: without asking GitHub for the repository again (``worker.config``).
    default_branch: str = ""


@dataclass(frozen=True, slots=True)
class Sender:
    login: str
    type: str  # "User", "Bot", "Organization"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot"


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed `/baton …` line. ``error`` is set when the line did not parse."""

    name: str  # "run", "cancel", "retry", "split", "iterate" or "invalid"
    #: For "run": the agent named; None when the person called Baton by name (`@<app-slug> ...`):
    #: then the policy's ``trigger.default_agent`` runs, with the instruction (``Untrusted``).
    #: For "split": the agent each sub-issue is labelled for; None: the umbrella's own.
    agent: str | None = None
    offline: bool = False
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CheckRef:
    """Which check run or suite a rerun or button click is about."""

    check_run_id: int | None = None
    check_suite_id: int | None = None
    name: str | None = None
    external_id: str | None = None
    requested_action: str | None = None


@dataclass(frozen=True, slots=True)
class Untrusted:
    """Text anyone may have written. Quoted to agents; never branched on."""

    title: str | None = None
    body: str | None = None
    comment_body: str | None = None
    #: What the person asked for after `/baton ` or `@<app-slug> ` (a comment's rest, from its first
    #: line on), or a submitted review's body; the agent sees it as quoted data, never as a rule.
    instruction: str | None = None


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    kind: Kind
    delivery_id: str
    event: str
    action: str | None
    installation_id: int | None
    repository: Repository | None
    number: int | None
    head_sha: str | None
    sender: Sender
    received_at: str  # RFC 3339, UTC, "Z"
    payload_sha256: str
    agent: str | None = None
    command: Command | None = None
    check: CheckRef | None = None
    untrusted: Untrusted = field(default_factory=Untrusted)
    schema: int = SCHEMA_VERSION
    #: ``Kind.ITERATE`` from a submitted review: its id (its line comments are read from GitHub).
    review_id: int | None = None
    #: An iteration's run (``Kind.ITERATE`` once admitted): the pull request it works on, while
    #: ``number`` is then the issue whose branch that pull request is (its lock, its branch). Set by
    #: the worker, never by routing: routing's ITERATE task names the pull request as ``number``.
    pull_request: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """Rebuild a task read back from the queue; a wrong schema is refused."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(
                f"task schema {data.get('schema')!r} is not {SCHEMA_VERSION}; "
                "drain the queue with the Baton version that wrote it"
            )
        d = dict(data)
        repo = d.pop("repository")
        command = d.pop("command")
        check = d.pop("check")
        return cls(
            **{k: v for k, v in d.items() if k not in ("kind", "sender", "untrusted")},
            kind=Kind(d["kind"]),
            repository=Repository(**repo) if repo else None,
            sender=Sender(**d["sender"]),
            command=Command(**command) if command else None,
            check=CheckRef(**check) if check else None,
            untrusted=Untrusted(**d["untrusted"]),
        )
