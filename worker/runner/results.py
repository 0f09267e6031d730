"""Reading what an agent CLI said about its own run into one :class:`AgentResult`.

An agent's output is hostile input like everything else it leaves behind: it
may be huge, cut off, not JSON, or JSON of the wrong shape. Nothing here
raises; each reader returns what it could read and a ``parse_error`` note for
what it could not. And nothing here is evidence of what the agent did: Claude
Code says ``is_error: false`` after a denied write, and Codex exits 0 after a
failed file change. Judge a run by its diff; these fields are the agent's word.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: Only the last this-many bytes of stdout are read.
MAX_PARSE_BYTES = 16 << 20
#: A JSONL line longer than this is skipped unread.
MAX_LINE_BYTES = 4 << 20
MAX_SUMMARY_CHARS = 4000
MAX_ITEMS = 200
MAX_NAME_CHARS = 300
_MAX_COUNT = 10**15


class ResultFormat(StrEnum):
    CLAUDE_JSON = "claude-json"  # one JSON object: --output-format json [observed]
    CODEX_JSONL = "codex-jsonl"  # exec --json events [observed]
    GEMINI_JSON = "gemini-json"  # --output-format json: {session_id, response, stats} [observed 0.61.0]
    QWEN_JSON = "qwen-json"  # --output-format json: one array of events, the last "result" [observed 0.15.10]
    OPENCODE_JSONL = "opencode-jsonl"  # run --format json events [inferred shape]
    SCRIPT = "script"  # Baton's script agent: its last stdout line
    TEXT = "text"  # exit code and the output's tail


@dataclass(frozen=True)
class ReportedChange:
    """A file change as the agent reported it (Codex ``file_change`` items): a claim, not a fact."""

    path: str
    kind: str
    ok: bool


@dataclass(frozen=True)
class AgentResult:
    """What the agent said about its run. ``summary`` is agent-written text: never publish it unquoted."""

    format: str
    exit_code: int | None
    is_error: bool
    subtype: str | None = None
    num_turns: int | None = None
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    permission_denials: tuple[str, ...] = ()
    reported_changes: tuple[ReportedChange, ...] = ()
    summary: str | None = None
    parse_error: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "exit_code": self.exit_code,
            "is_error": self.is_error,
            "subtype": self.subtype,
            "num_turns": self.num_turns,
            "cost_usd": self.cost_usd,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "permission_denials": list(self.permission_denials),
            "reported_changes": [{"path": c.path, "kind": c.kind, "ok": c.ok} for c in self.reported_changes],
            "summary": self.summary,
            "parse_error": self.parse_error,
        }


@dataclass
class _Reading:
    """Fields gathered so far; ``notes`` become the parse error."""

    reported_error: bool = False
    subtype: str | None = None
    num_turns: int | None = None
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    denials: list[str] = field(default_factory=list)
    changes: list[ReportedChange] = field(default_factory=list)
    summary: str | None = None
    notes: list[str] = field(default_factory=list)


def parse(fmt: ResultFormat, stdout: bytes | str, exit_code: int | None) -> AgentResult:
    """Never raises: whatever could be read, plus a note on what could not."""
    reading = _Reading()
    try:
        text = _tail(stdout, reading)
        _READERS[fmt](text, reading)
    except Exception as exc:  # hostile input must not take the runner down with it
        reading.notes.append(f"unreadable output ({type(exc).__name__})")
    failed = exit_code is None or exit_code != 0 or reading.reported_error
    return AgentResult(
        format=str(fmt),
        exit_code=exit_code,
        is_error=failed,
        subtype=reading.subtype,
        num_turns=reading.num_turns,
        cost_usd=reading.cost_usd,
        input_tokens=reading.input_tokens,
        output_tokens=reading.output_tokens,
        permission_denials=tuple(reading.denials[:MAX_ITEMS]),
        reported_changes=tuple(reading.changes[:MAX_ITEMS]),
        summary=reading.summary,
        parse_error="; ".join(reading.notes) or None,
    )


def _tail(stdout: bytes | str, reading: _Reading) -> str:
    data = stdout.encode("utf-8", errors="replace") if isinstance(stdout, str) else bytes(stdout)
    if len(data) > MAX_PARSE_BYTES:
        reading.notes.append(f"output of {len(data)} bytes: only the last {MAX_PARSE_BYTES} were read")
        data = data[-MAX_PARSE_BYTES:]
        data = data[data.find(b"\n") + 1 :]  # the first line is cut: drop it
    return data.decode("utf-8", errors="replace")


def _loads(text: str) -> Any:
    """JSON without NaN/Infinity (a cost of NaN is a lie, not a number)."""
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _lines(text: str, reading: _Reading) -> Iterator[Any]:
    """Each JSON line; other lines are skipped, and the count of unreadable ones noted."""
    bad = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        if len(stripped) > MAX_LINE_BYTES:
            bad += 1
            continue
        try:
            yield _loads(stripped)
        except (ValueError, RecursionError):
            bad += 1
    if bad:
        reading.notes.append(f"{bad} JSON line(s) could not be read")


def _last_object(text: str, reading: _Reading, accept: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The whole output as one object, else its last JSON line that ``accept`` takes; {} if none."""
    try:
        whole = _loads(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return whole
    found: dict[str, Any] = {}
    for item in _lines(text, reading):
        if isinstance(item, dict) and accept(item):
            found = item
    if not found:
        reading.notes.append("no result object in the output")
    return found


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        return None
    return value


def _money(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0 <= number < 1e9 else None


def _name(value: object) -> str | None:
    return value[:MAX_NAME_CHARS] if isinstance(value, str) else None


def _summary(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) <= MAX_SUMMARY_CHARS:
        return value
    return value[:MAX_SUMMARY_CHARS] + f" [cut: {len(value) - MAX_SUMMARY_CHARS} more characters]"


def _add(total: int | None, value: object) -> int | None:
    number = _count(value)
    if number is None:
        return total
    return min((total or 0) + number, _MAX_COUNT)


def _claude(text: str, reading: _Reading) -> None:
    """``{"type":"result","subtype":"success","is_error":false,"num_turns":2,...}`` [observed, 2.1.197]."""
    result = _last_object(text, reading, lambda item: item.get("type") == "result")
    if not result:
        return
    is_error = result.get("is_error")
    reading.subtype = _name(result.get("subtype"))
    reading.reported_error = is_error is True or (reading.subtype or "").startswith("error")
    if not isinstance(is_error, bool):
        reading.notes.append("is_error is missing or not a boolean")
    reading.num_turns = _count(result.get("num_turns"))
    reading.cost_usd = _money(result.get("total_cost_usd"))
    usage = result.get("usage")
    if isinstance(usage, Mapping):
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            reading.input_tokens = _add(reading.input_tokens, usage.get(key))
        reading.output_tokens = _count(usage.get("output_tokens"))
    denials = result.get("permission_denials")
    if isinstance(denials, list):
        for denial in denials[:MAX_ITEMS]:
            tool = _name(denial.get("tool_name")) if isinstance(denial, Mapping) else None
            reading.denials.append(tool or "?")
    reading.summary = _summary(result.get("result"))


def _codex(text: str, reading: _Reading) -> None:
    """JSONL: ``item.completed`` (file_change, agent_message), ``turn.completed`` usage [observed]."""
    seen = False
    for event in _lines(text, reading):
        if not isinstance(event, Mapping):
            continue
        seen = True
        kind = event.get("type")
        item = event.get("item")
        if kind == "item.completed" and isinstance(item, Mapping):
            if item.get("type") == "file_change" and isinstance(item.get("changes"), list):
                ok = item.get("status") == "completed"
                for change in item["changes"][:MAX_ITEMS]:
                    if isinstance(change, Mapping) and isinstance(change.get("path"), str):
                        reading.changes.append(
                            ReportedChange(change["path"][:4096], _name(change.get("kind")) or "?", ok)
                        )
            elif item.get("type") == "agent_message":
                reading.summary = _summary(item.get("text")) or reading.summary
        elif kind == "turn.completed":
            reading.num_turns = (reading.num_turns or 0) + 1
            usage = event.get("usage")
            if isinstance(usage, Mapping):
                reading.input_tokens = _add(reading.input_tokens, usage.get("input_tokens"))
                reading.output_tokens = _add(reading.output_tokens, usage.get("output_tokens"))
        elif kind == "turn.failed":
            reading.reported_error = True
            reading.subtype = "turn.failed"
            error = event.get("error")
            message = error.get("message") if isinstance(error, Mapping) else None
            reading.summary = _summary(message) or reading.summary
        # "error" events also report retried stream errors that a later turn survives: not a failure.
    if not seen:
        reading.notes.append("no JSON events in the output")


def _gemini(text: str, reading: _Reading) -> None:
    """``{"session_id", "response", "stats": {"models": {M: {"api": {"totalRequests"}, "tokens":
    {"prompt", "candidates"}}}, "tools": {"totalFail", ...}}}`` on stdout [observed 0.61.0]. A failed
    model call leaves stdout empty (its ``{"error"}`` object goes to stderr) and a non-zero exit."""
    result = _last_object(text, reading, lambda item: "response" in item or "error" in item)
    if not result:
        return
    error = result.get("error")
    if error:
        reading.reported_error = True
        reading.subtype = "error"
        message = error.get("message") if isinstance(error, Mapping) else error
        reading.summary = _summary(message)
    reading.summary = _summary(result.get("response")) or reading.summary
    stats = result.get("stats")
    models = stats.get("models") if isinstance(stats, Mapping) else None
    if isinstance(models, Mapping):
        for model in list(models.values())[:MAX_ITEMS]:
            if not isinstance(model, Mapping):
                continue
            api, tokens = model.get("api"), model.get("tokens")
            if isinstance(api, Mapping):
                reading.num_turns = _add(reading.num_turns, api.get("totalRequests"))
            if isinstance(tokens, Mapping):
                reading.input_tokens = _add(reading.input_tokens, tokens.get("prompt"))
                reading.output_tokens = _add(reading.output_tokens, tokens.get("candidates"))


def _qwen(text: str, reading: _Reading) -> None:
    """``[{"type":"system",...}, {"type":"assistant",...}, {"type":"result","is_error":false,
    "num_turns":2,"result":"Done.","usage":{...},"permission_denials":[{"tool_name":...}]}]``
    [observed 0.15.10]. A failed model call is still ``is_error: false`` with exit 0: the result
    text starting ``[API Error:`` is the only sign, so it counts as an error here."""
    try:
        whole = _loads(text)
    except (ValueError, RecursionError):
        whole = None
    events = whole if isinstance(whole, list) else [whole] if isinstance(whole, dict) else None
    if events is None:
        events = list(_lines(text, reading))  # stream-json, or an array cut off: one event per line
    results = [e for e in events[-MAX_ITEMS:] if isinstance(e, dict) and e.get("type") == "result"]
    if not results:
        reading.notes.append("no result object in the output")
        return
    _claude(json.dumps(results[-1]), reading)
    if (reading.summary or "").startswith("[API Error"):
        reading.reported_error = True
        reading.subtype = "api_error"


def _opencode(text: str, reading: _Reading) -> None:
    """JSONL events; ``step_finish`` parts carry tokens and cost, ``text`` parts the reply [inferred]."""
    seen = False
    for event in _lines(text, reading):
        if not isinstance(event, Mapping):
            continue
        seen = True
        part_value = event.get("part")
        part: Mapping[str, Any] = part_value if isinstance(part_value, Mapping) else event
        kind = event.get("type")
        if kind == "error" or "error" in event:
            reading.reported_error = True
            reading.subtype = "error"
        elif kind == "text":
            reading.summary = _summary(part.get("text")) or reading.summary
        elif kind == "step_finish":
            reading.num_turns = (reading.num_turns or 0) + 1
            tokens = part.get("tokens")
            if isinstance(tokens, Mapping):
                reading.input_tokens = _add(reading.input_tokens, tokens.get("input"))
                reading.output_tokens = _add(reading.output_tokens, tokens.get("output"))
            cost = _money(part.get("cost"))
            if cost is not None:
                reading.cost_usd = (reading.cost_usd or 0.0) + cost
    if not seen:
        reading.notes.append("no JSON events in the output")


def _script(text: str, reading: _Reading) -> None:
    """The script agent's last line: ``{"script_agent": "1", "steps_run": N, "exit": C}``."""
    result = _last_object(text, reading, lambda item: "script_agent" in item)
    if not result:
        return
    reading.num_turns = _count(result.get("steps_run"))
    if result.get("error") is not None:
        reading.reported_error = True
        reading.subtype = "error"
        reading.summary = _summary(result.get("error"))


def _text(text: str, reading: _Reading) -> None:
    """No structure: the tail of the output is the summary."""
    tail = text[-MAX_SUMMARY_CHARS:].strip()
    reading.summary = tail or None


_READERS: Mapping[ResultFormat, Callable[[str, _Reading], None]] = {
    ResultFormat.CLAUDE_JSON: _claude,
    ResultFormat.CODEX_JSONL: _codex,
    ResultFormat.GEMINI_JSON: _gemini,
    ResultFormat.QWEN_JSON: _qwen,
    ResultFormat.OPENCODE_JSONL: _opencode,
    ResultFormat.SCRIPT: _script,
    ResultFormat.TEXT: _text,
}
