"""The reviewer's verdict: its final reply read strictly as one JSON object, and what it means (pure).

The reviewer is an agent like any other, and what it says is hostile input: it read the issue and the
change, and either may have talked it round. So its reply must be exactly the object its prompt asks
for (``worker.runner.review_prompt``), or one ```` ```json ```` fence around it, and nothing else::

    {"injection_suspected": {"found": false, "reasons": [], "locations": []},
     "secret_leak":         {"found": true, "reasons": ["adds an AWS key"], "locations": ["app/cfg.py:3"]},
     "malicious_change":    {"found": false, "reasons": [], "locations": []}}

Anything else is :class:`Malformed`, which blocks like a finding: a key Baton does not know (at either
level), a category or field left out, the same key twice, a value of the wrong type (``found`` must be
``true`` or ``false``, not ``1``), a location that is not ``path:line`` inside the tree, a reply longer
than :data:`MAX_REPLY_CHARS` or nested too deep to read. What is within the shape is bounded, never
refused: reasons past :data:`MAX_REASONS` and locations past :data:`MAX_LOCATIONS` are counted and left
out, each reason cut at :data:`MAX_REASON_CHARS`.

:func:`judge` then decides the review from plain facts about its run (:class:`Ran`): the reviewer's
own model requests refused by the gateway, the spend cap, a cancel, a timeout, a stop at a box limit,
a crash (a non-zero exit, a signal, a CLI that says it failed), then the verdict. Only a verdict that
parses and finds nothing in a blocking category passes. Reasons and paths are the reviewer's words:
whoever shows them quotes them inert (``worker.messages``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from worker.policy import REVIEW_CATEGORIES

CATEGORIES = REVIEW_CATEGORIES
FIELDS = ("found", "reasons", "locations")
#: The most of a reply that is read at all (a CLI's whole output when it gave no summary).
MAX_REPLY_CHARS = 32_000
MAX_REASONS = 5
MAX_REASON_CHARS = 300
MAX_LOCATIONS = 10
MAX_PATH_CHARS = 300
MAX_LINE = 999_999_999
#: What ``worker.runner.results`` appends to a summary it cut: a reply past its limit.
_CUT = re.compile(r" \[cut: [0-9]+ more characters\]\Z")
_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*)\n```", re.DOTALL)
_LOCATION = re.compile(r"(?P<path>.+):(?P<line>[0-9]{1,9})(?:-(?P<end>[0-9]{1,9}))?")
#: Where the reviewer sees the tree (``worker.runner.box.WORKSPACE``), as a prefix it may write.
_ROOTS = ("/workspace/", "./")


@dataclass(frozen=True, slots=True)
class Location:
    """A place in the reviewed tree: a relative path and a line (``end`` for ``path:12-14``)."""

    path: str
    line: int
    end: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" + (f"-{self.end}" if self.end is not None else "")


@dataclass(frozen=True)
class Finding:
    category: str
    found: bool
    reasons: tuple[str, ...] = ()
    locations: tuple[Location, ...] = ()
    #: Past the bounds: counted, not kept.
    reasons_left_out: int = 0
    locations_left_out: int = 0

    def to_data(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "found": self.found,
            "reasons": list(self.reasons),
            "locations": [str(loc) for loc in self.locations],
            "reasons_left_out": self.reasons_left_out,
            "locations_left_out": self.locations_left_out,
        }


@dataclass(frozen=True)
class Verdict:
    """One finding per category, in CATEGORIES' order."""

    findings: tuple[Finding, ...]

    def blocking(self, blocks_on: Collection[str]) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.found and f.category in blocks_on)


@dataclass(frozen=True)
class Malformed:
    """Why the reply is not a verdict; may name a key the reply holds (quote it inert)."""

    why: str


class _Bad(ValueError):
    pass


def parse(reply: str | None) -> Verdict | Malformed:
    """The verdict in ``reply``, or why there is none. Never raises."""
    if reply is None or not reply.strip():
        return Malformed("the reviewer gave no reply")
    if _CUT.search(reply):
        return Malformed("the reply was cut: it is longer than its CLI's summary holds")
    if len(reply) > MAX_REPLY_CHARS:
        return Malformed(f"the reply is {len(reply):,} characters, more than {MAX_REPLY_CHARS:,}")
    text = reply.strip()
    fenced = _FENCE.fullmatch(text)
    if fenced is not None:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _Bad as exc:
        return Malformed(str(exc))
    except RecursionError:
        return Malformed("the reply is nested too deep to read")
    except ValueError as exc:
        return Malformed(f"the reply is not one JSON object ({_json_error(exc)})")
    try:
        return Verdict(tuple(_finding(c, data) for c in _checked_top(data)))
    except _Bad as exc:
        return Malformed(str(exc))


def _json_error(exc: ValueError) -> str:
    """The decoder's own words (a position, never the reply's text)."""
    return exc.msg if isinstance(exc, json.JSONDecodeError) else "unreadable"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Bad(f"the key {_name(key)} is given twice")
        seen[key] = value
    return seen


def _no_constant(name: str) -> Any:
    raise _Bad(f"{name} is not JSON")


def _name(key: object) -> str:
    text = str(key)
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _checked_top(data: object) -> tuple[str, ...]:
    if not isinstance(data, dict):
        raise _Bad(f"the reply is {_kind(data)}, not an object")
    _keys(data, CATEGORIES, "the verdict")
    return CATEGORIES


def _keys(data: Mapping[str, Any], wanted: Sequence[str], where: str) -> None:
    unknown = [k for k in data if k not in wanted]
    if unknown:
        raise _Bad(f"{where} has the unknown key {_name(unknown[0])}")
    missing = [k for k in wanted if k not in data]
    if missing:
        raise _Bad(f"{where} has no {missing[0]!r}")


def _kind(value: object) -> str:
    """What JSON calls ``value``'s type, with its article: "an object", "a boolean"."""
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), "null"
    )


def _finding(category: str, data: Mapping[str, Any]) -> Finding:
    entry = data[category]
    if not isinstance(entry, dict):
        raise _Bad(f"{category} is {_kind(entry)}, not an object")
    _keys(entry, FIELDS, category)
    found, reasons, locations = entry["found"], entry["reasons"], entry["locations"]
    if not isinstance(found, bool):
        raise _Bad(f"{category}.found is {_kind(found)}, not true or false")
    for name, items in (("reasons", reasons), ("locations", locations)):
        if not isinstance(items, list):
            raise _Bad(f"{category}.{name} is {_kind(items)}, not an array")
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise _Bad(f"{category}.{name}[{index}] is {_kind(item)}, not a string")
    places = tuple(_location(category, i, text) for i, text in enumerate(locations))
    return Finding(
        category=category,
        found=found,
        reasons=tuple(_cut(r) for r in reasons[:MAX_REASONS]),
        locations=places[:MAX_LOCATIONS],
        reasons_left_out=max(len(reasons) - MAX_REASONS, 0),
        locations_left_out=max(len(places) - MAX_LOCATIONS, 0),
    )


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_REASON_CHARS else flat[: MAX_REASON_CHARS - 1] + "…"


def _location(category: str, index: int, text: str) -> Location:
    where = f"{category}.locations[{index}]"
    match = _LOCATION.fullmatch(text.strip())
    if match is None:
        raise _Bad(f"{where} is not path:line")
    path = match["path"]
    for root in _ROOTS:
        if path.startswith(root):
            path = path[len(root) :]
            break
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH_CHARS
        or any(part in ("", ".", "..") for part in parts)
        or any(unicodedata.category(ch)[0] in "CZ" and ch != " " for ch in path)
    ):
        raise _Bad(f"{where} is not a path inside the tree")
    line, end = int(match["line"]), int(match["end"]) if match["end"] else None
    if line < 1 or (end is not None and end < line):
        raise _Bad(f"{where} names no line of a file")
    return Location(path, line, end)


# -- the review, judged ------------------------------------------------------------------------------


class Result(StrEnum):
    """How a review ended (written into run records and receipts: never change a value)."""

    PASSED = "passed"
    BLOCKED = "blocked"  # a finding in a blocking category
    MALFORMED = "malformed"  # the reply is not a verdict
    TIMED_OUT = "timed-out"
    CRASHED = "crashed"  # a non-zero exit, a signal, an error it reported, a box limit
    REFUSED = "refused"  # the model gateway refused the reviewer's own model requests
    DENIED = "denied"  # the trifecta gate would not run the reviewer
    MISSING = "missing"  # the reviewer's CLI is not installed, or its box could not start
    OVER_BUDGET = "over-budget"  # the run's model spend cap (the reviewer's calls count in it)
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Ran:
    """What the reviewer's box and model gateway reported, as plain facts."""

    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    cancelled: bool = False
    #: Baton's words for the box limit it passed, if it did.
    over_limit: str | None = None
    #: Its CLI said it failed (``AgentResult.is_error``).
    is_error: bool = False
    #: The codes of its model requests the gateway refused.
    refused: tuple[str, ...] = ()
    #: Baton's words for the spend cap it reached, if it did.
    over_budget: str | None = None
    reply: str | None = None
    timeout_s: float = 0.0


@dataclass(frozen=True)
class Judgement:
    result: Result
    #: Baton's own words, a sentence without its full stop ("timed out after 60s").
    detail: str
    #: The reviewer's words that go with ``detail`` (why its reply did not parse): quote inert.
    quoted: str | None = None
    #: The findings that blocked the push (BLOCKED only).
    findings: tuple[Finding, ...] = ()
    verdict: Verdict | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return self.result is Result.PASSED


def judge(ran: Ran, blocks_on: Collection[str]) -> Judgement:
    """The review's end, from its run's facts: only a verdict that parses and finds nothing that
    ``blocks_on`` names passes; every way of not judging fails closed."""
    if ran.refused:  # what it asked its model API for comes first, however it ended
        codes = ", ".join(dict.fromkeys(ran.refused))
        return Judgement(
            Result.REFUSED, f"the model gateway refused the reviewer's own model requests ({codes})"
        )
    if ran.over_budget is not None:  # the gateway stops the box at the cap: not a cancel
        return Judgement(
            Result.OVER_BUDGET, f"the model gateway refused a reviewer's call: {ran.over_budget}"
        )
    if ran.cancelled:
        return Judgement(Result.CANCELLED, "the review was cancelled")
    if ran.timed_out:
        return Judgement(Result.TIMED_OUT, f"the reviewer timed out after {ran.timeout_s:g}s")
    if ran.over_limit is not None:
        return Judgement(Result.CRASHED, f"the reviewer was stopped: {ran.over_limit}")
    if ran.signal is not None:
        return Judgement(Result.CRASHED, f"the reviewer crashed (killed by signal {ran.signal})")
    if ran.exit_code != 0:
        return Judgement(Result.CRASHED, f"the reviewer crashed (exit {ran.exit_code})")
    if ran.is_error:
        return Judgement(Result.CRASHED, "the reviewer crashed (its CLI reported an error, exit 0)")
    read = parse(ran.reply)
    if isinstance(read, Malformed):
        return Judgement(Result.MALFORMED, "the reviewer's verdict did not parse", quoted=read.why)
    blocking = read.blocking(blocks_on)
    if blocking:
        names = ", ".join(f.category for f in blocking)
        return Judgement(Result.BLOCKED, f"the reviewer found {names}", findings=blocking, verdict=read)
    return Judgement(Result.PASSED, "the reviewer found nothing it blocks on", verdict=read)


# -- where the findings point ------------------------------------------------------------------------

_FILE = re.compile(r"^\+\+\+ b/(.+)$")
_HUNK = re.compile(r"^@@ -[0-9]+(?:,[0-9]+)? \+([0-9]+)(?:,([0-9]+))? @@")


def changed_lines(patch: str) -> dict[str, frozenset[int]]:
    """The new file's lines each file of a ``git diff -U0`` adds or changes: what "inside the change" is."""
    found: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in patch.split("\n"):
        if line.startswith("+++ "):
            named = _FILE.match(line)
            current = found.setdefault(named.group(1), set()) if named else None
        elif (hunk := _HUNK.match(line)) is not None and current is not None:
            start, count = int(hunk.group(1)), int(hunk.group(2) or "1")
            current.update(range(start, start + count))
    return {path: frozenset(lines) for path, lines in found.items()}


def inside(location: Location, changed: Mapping[str, frozenset[int]]) -> bool:
    lines = changed.get(location.path, frozenset())
    last = location.end if location.end is not None else location.line
    return any(n in lines for n in range(location.line, min(last, location.line + 1000) + 1))
