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
import re
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
    OPENCODE_JSONL = "opencode-jsonl"  # run --format json events [observed, 1.18.33]
    AIDER_TEXT = "aider-text"  # Aider's console output: no structure, but fixed phrases [observed 0.86.2]
    MINI_TRAJECTORY = "mini-trajectory"  # mini-swe-agent's -o trajectory file [observed 2.4.6]
    GEMINI_JSON = "gemini-json"  # --output-format json: {session_id, response, stats} [observed 0.61.0]
    QWEN_JSON = "qwen-json"  # --output-format json: one array of events, the last "result" [observed 0.15.10]
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


#: OpenCode's words for a call its permission rules refused, or that the user (in `run`, itself) rejected.
_OPENCODE_REFUSALS = ("a rule which prevents you from using", "rejected permission to use")
#: OpenCode's file tools that name one file in ``filePath``.
_OPENCODE_EDITS = frozenset({"write", "edit", "multiedit"})


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
    """JSONL events [observed, 1.18.33]: ``step_finish`` parts carry tokens and cost, ``text`` parts the
    reply, ``tool_use`` parts a call and its ``state``; a call to a tool not offered comes back as the
    tool ``invalid`` naming the one asked for; ``error`` events (on stdout, rc 1) say why it stopped."""
    seen = False
    for event in _lines(text, reading):
        if not isinstance(event, Mapping):
            continue
        seen = True
        part_value = event.get("part")
        part: Mapping[str, Any] = part_value if isinstance(part_value, Mapping) else {}
        kind = event.get("type")
        if kind == "error":
            reading.reported_error = True
            error = event.get("error")
            name = error.get("name") if isinstance(error, Mapping) else None
            data = error.get("data") if isinstance(error, Mapping) else None
            reading.subtype = _name(name) or "error"
            reading.summary = (
                _summary(data.get("message") if isinstance(data, Mapping) else None) or reading.summary
            )
        elif kind == "text":
            reading.summary = _summary(part.get("text")) or reading.summary
        elif kind == "tool_use":
            _opencode_tool(part, reading)
        elif kind == "step_finish":
            reading.num_turns = (reading.num_turns or 0) + 1
            tokens = part.get("tokens")
            if isinstance(tokens, Mapping):
                reading.input_tokens = _add(reading.input_tokens, tokens.get("input"))
                cache = tokens.get("cache")
                if isinstance(cache, Mapping):
                    reading.input_tokens = _add(reading.input_tokens, cache.get("read"))
                    reading.input_tokens = _add(reading.input_tokens, cache.get("write"))
                reading.output_tokens = _add(reading.output_tokens, tokens.get("output"))
            cost = _money(part.get("cost"))
            if cost is not None:
                reading.cost_usd = min((reading.cost_usd or 0.0) + cost, 1e9)
    if not seen:
        reading.notes.append("no JSON events in the output")


def _opencode_tool(part: Mapping[str, Any], reading: _Reading) -> None:
    state_value = part.get("state")
    state: Mapping[str, Any] = state_value if isinstance(state_value, Mapping) else {}
    given = state.get("input")
    args: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    tool, status = _name(part.get("tool")) or "?", state.get("status")
    error = state.get("error")
    if tool == "invalid":  # asked for a tool it was not offered (a denied one among them)
        reading.denials.append(_name(args.get("tool")) or "?")
    elif status == "error" and isinstance(error, str) and any(words in error for words in _OPENCODE_REFUSALS):
        reading.denials.append(tool)
    ok = status == "completed"
    found = state.get("metadata")
    metadata: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    resolved = metadata.get("filepath")  # absolute; the input's filePath is as the model wrote it
    path = resolved if isinstance(resolved, str) else args.get("filePath")
    if tool in _OPENCODE_EDITS and isinstance(path, str):
        kind = "add" if tool == "write" and metadata.get("exists") is False else "update"
        reading.changes.append(ReportedChange(path[:4096], kind, ok))
    elif tool == "apply_patch":
        files = metadata.get("files")
        for item in files[:MAX_ITEMS] if isinstance(files, list) else ():
            if isinstance(item, Mapping) and isinstance(item.get("filePath"), str):
                reading.changes.append(
                    ReportedChange(item["filePath"][:4096], _name(item.get("type")) or "?", ok)
                )


#: Aider's lines [observed 0.86.2]: one ``Tokens:`` line per model reply (counts like ``596`` or
#: ``1.2k``), a ``Cost:`` part when the model is priced, ``Applied edit to PATH`` per file written,
#: and a litellm exception's name at the start of a line for each failed call (retried or not).
_AIDER_TOKENS = re.compile(
    r"^Tokens: ([0-9.]+)(k?) sent(?:, [0-9.]+k? cache \w+)*, ([0-9.]+)(k?) received\."
    r"(?: Cost: \$([0-9.]+) message, \$([0-9.]+) session\.)?",
    re.MULTILINE,
)
_AIDER_ERROR = re.compile(r"^(?:litellm\.)?([A-Za-z]+Error): ", re.MULTILINE)
_AIDER_APPLIED = re.compile(r"^Applied edit to (.+)$", re.MULTILINE)


def _aider_count(number: str, thousands: str) -> int | None:
    try:
        value = float(number) * (1000 if thousands else 1)
    except ValueError:
        return None
    return _count(int(value)) if math.isfinite(value) else None


def _aider(text: str, reading: _Reading) -> None:
    """Aider exits 0 even when every model call failed [observed]: an error line with no reply after
    it is a failure. Its summary is the output's tail."""
    last_reply = -1
    for match in _AIDER_TOKENS.finditer(text):
        last_reply = match.start()
        reading.num_turns = (reading.num_turns or 0) + 1
        reading.input_tokens = _add(reading.input_tokens, _aider_count(match.group(1), match.group(2)))
        reading.output_tokens = _add(reading.output_tokens, _aider_count(match.group(3), match.group(4)))
        if match.group(6) is not None:
            reading.cost_usd = _money(_float(match.group(6)))
    errors = list(_AIDER_ERROR.finditer(text))
    if errors and errors[-1].start() > last_reply:
        reading.reported_error = True
        reading.subtype = _name(errors[-1].group(1))
    for match in list(_AIDER_APPLIED.finditer(text))[:MAX_ITEMS]:
        reading.changes.append(ReportedChange(match.group(1).strip()[:4096], "edit", True))
    _text(text, reading)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


#: What a cut-off trajectory still says near its start ("info" is written first, indented).
_MINI_STATUS = re.compile(r'"exit_status": "([A-Za-z]{1,100})"')


def _mini(text: str, reading: _Reading) -> None:
    """``{"info": {"exit_status": "Submitted", "model_stats": {"instance_cost", "api_calls"},
    "submission"}, "messages": [...]}`` [observed 2.4.6]; any exit_status but Submitted is a failure
    (``LimitsExceeded``, ``RepeatedFormatError``, a model error's exception name)."""
    try:
        whole = _loads(text)
    except (ValueError, RecursionError):
        whole = None
    if not isinstance(whole, Mapping):
        found = _MINI_STATUS.search(text[:65536])
        reading.notes.append("the trajectory is not one JSON object (cut off?)" if text.strip()
                             else "no trajectory was written")  # fmt: skip
        status = found.group(1) if found else None
        reading.subtype = status
        reading.reported_error = status != "Submitted"
        return
    info = whole.get("info")
    info = info if isinstance(info, Mapping) else {}
    status = info.get("exit_status")
    reading.subtype = _name(status)
    if status != "Submitted":
        reading.reported_error = True
        if not isinstance(status, str):
            reading.notes.append("info.exit_status is missing or not text")
    stats = info.get("model_stats")
    if isinstance(stats, Mapping):
        reading.num_turns = _count(stats.get("api_calls"))
        reading.cost_usd = _money(stats.get("instance_cost"))
    messages = whole.get("messages")
    last_said: object = None
    if isinstance(messages, list):
        for message in messages[-10_000:]:
            if not isinstance(message, Mapping):
                continue
            extra = message.get("extra")
            response = extra.get("response") if isinstance(extra, Mapping) else None
            usage = response.get("usage") if isinstance(response, Mapping) else None
            if isinstance(usage, Mapping):
                reading.input_tokens = _add(reading.input_tokens, usage.get("prompt_tokens"))
                reading.output_tokens = _add(reading.output_tokens, usage.get("completion_tokens"))
            role = message.get("role")
            said = role == "assistant" and isinstance(message.get("content"), str)
            if said or (role == "exit" and reading.reported_error):
                last_said = message.get("content")
    submission = info.get("submission")
    reading.summary = _summary(submission) if isinstance(submission, str) and submission.strip() else None
    reading.summary = reading.summary or _summary(last_said)


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
    ResultFormat.AIDER_TEXT: _aider,
    ResultFormat.MINI_TRAJECTORY: _mini,
    ResultFormat.SCRIPT: _script,
    ResultFormat.TEXT: _text,
}
