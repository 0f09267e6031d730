"""The routing table: which webhook becomes which task. One place, pure.

``route(event, payload)`` reads only the payload fields it needs (GitHub adds
fields over time and its own published examples fail strict models), never
an untrusted text field except the first line of a comment, which is parsed
against a fixed grammar (`/baton run <agent> [--offline]`, `cancel`,
`retry`; on a pull request any other `/baton <instruction>`; `@<app-slug>
<instruction>` anywhere). Whether the commenter may use it is the worker's
decision, made against GitHub at run time; so is whether a pull request is
Baton's (its head branch and its author, read fresh).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from baton import codes
from baton.calls import COMMAND_PREFIX, mentioned
from baton.errors import BatonError
from baton.tasks import (
    AGENT_NAME_PATTERN,
    BRANCH_PREFIX,
    CheckRef,
    Command,
    Kind,
    Repository,
    Sender,
    Task,
    Untrusted,
)

AGENT_LABEL_PREFIX = "agent:"
#: What `/baton run` or `/baton retry` on a pull request is answered with.
PULL_USAGE = (
    "on a pull request, write what to change (`/baton <what to change>`) or `/baton cancel`; "
    "`/baton run`, `/baton retry` and `/baton split` belong on the issue"
)
#: An agent name Baton will act on (and ever quote back): the policy's own pattern. Anything else
#: in a label or a `/baton run` is not a request to Baton, so it is ignored, not answered.
AGENT_NAME = re.compile(AGENT_NAME_PATTERN)


class PayloadError(BatonError):
    """The (verified) payload lacks a field its event always has; the message names the field."""

    def __init__(self, message: str) -> None:
        super().__init__(codes.BAD_PAYLOAD, message)


@dataclass(frozen=True, slots=True)
class Routed:
    kind: Kind
    repository: Repository | None
    number: int | None = None
    head_sha: str | None = None
    agent: str | None = None
    command: Command | None = None
    check: CheckRef | None = None
    untrusted: Untrusted = field(default_factory=Untrusted)
    review_id: int | None = None


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


@dataclass(frozen=True, slots=True)
class Me:
    """Who this App is: its id (to recognise its own comments) and its slug (how people call it by
    name, ``BATON_APP_SLUG``; None: a mention is not a request)."""

    app_id: int | None = None
    slug: str | None = None


Payload = Mapping[str, Any]
Rule = Callable[[Payload, Me], "Routed | Ignored"]


# -- reading fields tolerantly ------------------------------------------------


def _obj(payload: Payload, key: str) -> Payload:
    value = payload.get(key)
    if not isinstance(value, Mapping):
        raise PayloadError(f"payload has no object {key!r}")
    return value


def _int(obj: Payload, key: str, where: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PayloadError(f"payload field {where}.{key} is missing or not a number")
    return value


def _str(obj: Payload, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise PayloadError(f"payload field {where}.{key} is missing or not text")
    return value


def _text(obj: Payload | None, key: str) -> str | None:
    """Optional free text: None when absent or not a string."""
    if obj is None:
        return None
    value = obj.get(key)
    return value if isinstance(value, str) else None


def repository(payload: Payload) -> Repository | None:
    repo = payload.get("repository")
    if not isinstance(repo, Mapping):
        return None
    branch = repo.get("default_branch")
    return Repository(
        id=_int(repo, "id", "repository"),
        full_name=_str(repo, "full_name", "repository"),
        private=repo.get("private") is True,
        default_branch=branch if isinstance(branch, str) else "",
    )


def sender(payload: Payload) -> Sender:
    who = _obj(payload, "sender")
    return Sender(login=_str(who, "login", "sender"), type=_str(who, "type", "sender"))


def installation_id(payload: Payload) -> int | None:
    inst = payload.get("installation")
    if not isinstance(inst, Mapping):
        return None
    return _int(inst, "id", "installation")


# -- the rules ------------------------------------------------------------------


def _issue_untrusted(issue: Payload) -> Untrusted:
    return Untrusted(title=_text(issue, "title"), body=_text(issue, "body"))


def _agent_label(payload: Payload) -> str | None:
    label = payload.get("label")
    name = _text(label, "name") if isinstance(label, Mapping) else None
    if name is None or not name.startswith(AGENT_LABEL_PREFIX):
        return None
    agent = name[len(AGENT_LABEL_PREFIX) :].strip()
    return agent if AGENT_NAME.fullmatch(agent) else None


def _issues_labeled(payload: Payload, _me: Me) -> Routed | Ignored:
    agent = _agent_label(payload)
    if agent is None:
        return Ignored("label is not agent:<name> with a valid agent name")
    issue = _obj(payload, "issue")
    return Routed(
        Kind.AGENT_RUN,
        repository(payload),
        number=_int(issue, "number", "issue"),
        agent=agent,
        untrusted=_issue_untrusted(issue),
    )


def _issues_unlabeled(payload: Payload, _me: Me) -> Routed | Ignored:
    agent = _agent_label(payload)
    if agent is None:
        return Ignored("label is not agent:<name>")
    issue = _obj(payload, "issue")
    return Routed(Kind.CANCEL, repository(payload), number=_int(issue, "number", "issue"), agent=agent)


def _issues_closed(payload: Payload, _me: Me) -> Routed | Ignored:
    issue = _obj(payload, "issue")
    return Routed(Kind.CANCEL, repository(payload), number=_int(issue, "number", "issue"))


def parse_command(body: str) -> Command | None:
    """The `/baton …` command on the comment's first line; None if there is none, or if it names no
    valid agent (then it is not a request to Baton at all)."""
    first = body.split("\n", 1)[0].rstrip("\r")
    if not first.startswith(COMMAND_PREFIX):
        return None
    words = first[len(COMMAND_PREFIX) :].split()
    usage = "usage: /baton run <agent> [--offline] | /baton cancel | /baton retry | /baton split [<agent>]"
    if not words:
        return Command("invalid", error=usage)
    name, rest = words[0], words[1:]
    if name in ("cancel", "retry"):
        return Command(name) if not rest else Command("invalid", error=f"/baton {name} takes no arguments")
    if name == "split":
        if len(rest) > 1:
            return Command("invalid", error="usage: /baton split [<agent>]")
        if rest and not AGENT_NAME.fullmatch(rest[0]):
            return None  # not an agent name: not a request Baton answers
        return Command("split", agent=rest[0] if rest else None)
    if name == "run":
        flags = [w for w in rest if w.startswith("--")]
        args = [w for w in rest if not w.startswith("--")]
        unknown = [f for f in flags if f != "--offline"]
        if len(args) != 1 or unknown:
            return Command("invalid", error=usage)
        if not AGENT_NAME.fullmatch(args[0]):
            return None  # not an agent name: not a request Baton answers
        return Command("run", agent=args[0], offline="--offline" in flags)
    return Command("invalid", error=usage)


def _comment_created(payload: Payload, me: Me) -> Routed | Ignored:
    comment = _obj(payload, "comment")
    via = comment.get("performed_via_github_app")
    if me.app_id is not None and isinstance(via, Mapping) and via.get("id") == me.app_id:
        return Ignored("comment written by this app")
    body = _text(comment, "body") or ""
    issue = _obj(payload, "issue")
    number = _int(issue, "number", "issue")
    on_pull = isinstance(issue.get("pull_request"), Mapping)
    command = parse_command(body)
    called = mentioned(body, me.slug)
    if command is not None and command.name == "invalid" and on_pull:  # not a verb: what to change
        called = body[len(COMMAND_PREFIX) :].strip() or None
        command = None
    elif command is not None and command.name in ("run", "retry", "split") and on_pull:
        # A run is an issue's: on a pull request it would make a branch and a pull request for a pull.
        command = Command("invalid", error=PULL_USAGE)
    if command is None and called is None:
        return Ignored("comment is not a /baton command")
    untrusted = Untrusted(title=_text(issue, "title"), body=_text(issue, "body"), comment_body=body,
                          instruction=called if command is None else None)  # fmt: skip
    if command is None and on_pull:
        return Routed(Kind.ITERATE, repository(payload), number=number, command=Command("iterate"),
                      untrusted=untrusted)  # fmt: skip
    if command is None:  # called by name on an issue: the policy's default agent, with the instruction
        command = Command("run")
    return Routed(Kind.COMMAND, repository(payload), number=number, command=command, untrusted=untrusted)


def _review_submitted(payload: Payload, me: Me) -> Routed | Ignored:
    """A review of a pull request on one of Baton's branches: whether its body or line comments carry an
    instruction, and whether the pull request is really Baton's, the worker reads from GitHub."""
    review = _obj(payload, "review")
    pr = _obj(payload, "pull_request")
    head = _obj(pr, "head")
    if not _str(head, "ref", "pull_request.head").startswith(BRANCH_PREFIX):
        return Ignored("a review of a pull request Baton did not open")
    author = review.get("user")
    if me.slug and isinstance(author, Mapping) and _text(author, "login") == f"{me.slug}[bot]":
        return Ignored("review written by this app")
    return Routed(
        Kind.ITERATE,
        repository(payload),
        number=_int(pr, "number", "pull_request"),
        head_sha=_str(head, "sha", "pull_request.head"),
        command=Command("iterate"),
        untrusted=Untrusted(
            title=_text(pr, "title"), body=_text(pr, "body"), instruction=_text(review, "body")
        ),
        review_id=_int(review, "id", "review"),
    )


def _pull_request(payload: Payload, _me: Me) -> Routed | Ignored:
    pr = _obj(payload, "pull_request")
    head = _obj(pr, "head")
    return Routed(
        Kind.MERGE_GATE,
        repository(payload),
        number=_int(pr, "number", "pull_request"),
        head_sha=_str(head, "sha", "pull_request.head"),
        untrusted=Untrusted(title=_text(pr, "title"), body=_text(pr, "body")),
    )


def _first_pr_number(obj: Payload) -> int | None:
    prs = obj.get("pull_requests")
    if isinstance(prs, list) and prs and isinstance(prs[0], Mapping):
        number = prs[0].get("number")
        return number if isinstance(number, int) else None
    return None


def _check_run(kind: Kind) -> Rule:
    def rule(payload: Payload, _me: Me) -> Routed | Ignored:
        run = _obj(payload, "check_run")
        requested = payload.get("requested_action")
        identifier = _text(requested, "identifier") if isinstance(requested, Mapping) else None
        if kind is Kind.CHECK_ACTION and identifier is None:
            raise PayloadError("payload field requested_action.identifier is missing")
        suite = run.get("check_suite")
        return Routed(
            kind,
            repository(payload),
            number=_first_pr_number(run),
            head_sha=_str(run, "head_sha", "check_run"),
            check=CheckRef(
                check_run_id=_int(run, "id", "check_run"),
                check_suite_id=suite.get("id") if isinstance(suite, Mapping) else None,
                name=_text(run, "name"),
                external_id=_text(run, "external_id"),
                requested_action=identifier,
            ),
        )

    return rule


def _check_suite_rerequested(payload: Payload, _me: Me) -> Routed | Ignored:
    suite = _obj(payload, "check_suite")
    return Routed(
        Kind.GATE_RERUN,
        repository(payload),
        number=_first_pr_number(suite),
        head_sha=_str(suite, "head_sha", "check_suite"),
        check=CheckRef(check_suite_id=_int(suite, "id", "check_suite")),
    )


def _installation(payload: Payload, _me: Me) -> Routed | Ignored:
    if installation_id(payload) is None:
        raise PayloadError("payload has no object 'installation'")
    return Routed(Kind.INSTALLATION_SYNC, None)


_ANY = "*"

#: (event, action) -> rule. `*` matches every action of that event.
TABLE: dict[tuple[str, str], Rule] = {
    ("issues", "labeled"): _issues_labeled,
    ("issues", "unlabeled"): _issues_unlabeled,
    ("issues", "closed"): _issues_closed,
    ("issue_comment", "created"): _comment_created,
    ("pull_request_review", "submitted"): _review_submitted,
    ("pull_request", "opened"): _pull_request,
    ("pull_request", "synchronize"): _pull_request,
    ("pull_request", "reopened"): _pull_request,
    ("pull_request", "ready_for_review"): _pull_request,
    ("check_run", "rerequested"): _check_run(Kind.GATE_RERUN),
    ("check_run", "requested_action"): _check_run(Kind.CHECK_ACTION),
    ("check_suite", "rerequested"): _check_suite_rerequested,
    ("installation", _ANY): _installation,
    ("installation_repositories", _ANY): _installation,
}


def route(
    event: str, payload: Payload, *, app_id: int | None = None, app_slug: str | None = None
) -> Routed | Ignored:
    """Decide what a verified delivery becomes. Raises PayloadError for a malformed one."""
    action = payload.get("action")
    action = action if isinstance(action, str) else ""
    rule = TABLE.get((event, action)) or TABLE.get((event, _ANY))
    if rule is None:
        return Ignored(
            f"Baton does not handle {event}.{action}" if action else f"Baton does not handle {event}"
        )
    return rule(payload, Me(app_id, app_slug))


def task_for(
    event: str,
    delivery: str,
    payload: Payload,
    *,
    raw: bytes,
    received_at: str,
    app_id: int | None = None,
    app_slug: str | None = None,
) -> Task | Ignored:
    """The task a verified delivery becomes, or why it becomes none. Raises PayloadError."""
    routed = route(event, payload, app_id=app_id, app_slug=app_slug)
    if isinstance(routed, Ignored):
        return routed
    action = payload.get("action")
    return Task(
        id=delivery,
        kind=routed.kind,
        delivery_id=delivery,
        event=event,
        action=action if isinstance(action, str) else None,
        installation_id=installation_id(payload),
        repository=routed.repository,
        number=routed.number,
        head_sha=routed.head_sha,
        sender=sender(payload),
        received_at=received_at,
        payload_sha256=hashlib.sha256(raw).hexdigest(),
        agent=routed.agent,
        command=routed.command,
        check=routed.check,
        untrusted=routed.untrusted,
        review_id=routed.review_id,
    )
