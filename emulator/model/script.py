"""The model stand-in's script: what the fake model answers, turn by turn (pure; no I/O but ``load_script``).

A script is JSON: a list of steps, or an object ``{"steps": [...], "workspace": "/abs/dir",
"stream": "full" | "minimal"}``. Each step is an object with exactly one of these keys:

answers (each one is one assistant turn), provider-neutral: each is rendered for the client that asks
(:mod:`emulator.model.clients` picks by the tools the request offers):
  ``{"text": "Done."}``                                   final text (for mini-swe-agent the command
                                                          ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``)
  ``{"tool": {"name": "Bash", "input": {...}}}``          any tool call, as given, in every dialect
  ``{"write": {"path": "a.txt", "content": "..."}}``      Claude ``Write``, Codex ``apply_patch`` Add File,
                                                          Gemini CLI/Qwen ``write_file``, OpenCode ``write``,
                                                          mini-swe-agent a quoted heredoc, Aider its format
  ``{"edit": {"path": "a.txt", "old": "x", "new": "y"}}`` Claude ``Edit``, Codex Update File, Gemini CLI
                                                          ``replace``, Qwen/OpenCode ``edit``, mini-swe-agent
                                                          ``python3 -c``, Aider its format
  ``{"read": "a.txt"}``                                   Claude ``Read``, Codex / mini-swe-agent ``cat``,
                                                          Gemini CLI / Qwen ``read_file``, OpenCode ``read``
  ``{"bash": "ls -la"}``                                  Claude ``Bash``, Codex ``exec_command``, Gemini
                                                          CLI/Qwen ``run_shell_command``, others ``bash``
faults (answered before the turn's answer; each consumes ``times`` requests, default 1, or ``"always"``):
  ``{"error": {"status": 529, "message"?, "body"?, "headers"?, "in_stream"?, "times"?}}``
  ``{"stall": {"seconds"?, "then"?: "drop" | "answer", "after_headers"?, "times"?}}``
  ``{"drop": {"after_headers"?, "times"?}}``

The server is stateless about the conversation: it counts the assistant turns already in the
request (turn ``t``) and serves turn ``t``'s faults, in order, then its answer. Faults after the
last answer form a final turn with no answer; past the script's end the server answers 400, as it
does for a step the asking client offers no tool for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
MAX_STEPS = 10_000
MAX_TIMES = 10_000
#: The heredoc delimiter Codex was seen to accept for ``apply_patch`` (AGENT-CLIS.md).
HEREDOC = "EOF"
STREAM_MODES = ("full", "minimal")


class ScriptError(ValueError):
    """A script that cannot be served; the message names the step."""


@dataclass(frozen=True)
class Text:
    index: int
    text: str


@dataclass(frozen=True)
class Tool:
    index: int
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Write:
    index: int
    path: str
    content: str


@dataclass(frozen=True)
class Edit:
    index: int
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Read:
    index: int
    path: str


@dataclass(frozen=True)
class Bash:
    index: int
    command: str


@dataclass(frozen=True)
class Error:
    index: int
    status: int
    times: int | None  # None: always
    message: str | None = None
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    in_stream: bool = False


@dataclass(frozen=True)
class Stall:
    index: int
    times: int | None
    seconds: float | None = None  # None: as long as the server's max stall
    then: Literal["drop", "answer"] = "drop"
    after_headers: bool = False


@dataclass(frozen=True)
class Drop:
    index: int
    times: int | None
    after_headers: bool = False


Answer: TypeAlias = Text | Tool | Write | Edit | Read | Bash
Fault: TypeAlias = Error | Stall | Drop
Step: TypeAlias = Answer | Fault


@dataclass(frozen=True)
class Turn:
    faults: tuple[Fault, ...]
    answer: Answer | None


@dataclass(frozen=True)
class Script:
    steps: tuple[Step, ...]
    workspace: str | None = None
    stream: str = "full"
    turns: tuple[Turn, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", group_turns(self.steps))

    def answer(self, turn: int) -> Answer | None:
        """Turn ``turn``'s answer, whatever faults come first (None past the end)."""
        return self.turns[turn].answer if turn < len(self.turns) else None


def group_turns(steps: tuple[Step, ...]) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    faults: list[Fault] = []
    for step in steps:
        if isinstance(step, Error | Stall | Drop):
            faults.append(step)
        else:
            turns.append(Turn(tuple(faults), step))
            faults = []
    if faults:
        turns.append(Turn(tuple(faults), None))
    return tuple(turns)


def pick(script: Script, turn: int, hit: int) -> Step | None:
    """The step for the ``hit``-th request (0-based) that arrived at assistant turn ``turn``.

    None when the script has nothing for it (past its end, or after a final turn's faults).
    """
    turns = script.turns
    if turn >= len(turns):
        return None
    remaining = hit
    for fault in turns[turn].faults:
        if fault.times is None or remaining < fault.times:
            return fault
        remaining -= fault.times
    return turns[turn].answer


def load_script(path: Path) -> Script:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    if len(raw) > MAX_SCRIPT_BYTES:
        raise ScriptError(f"{path}: larger than {MAX_SCRIPT_BYTES} bytes")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ScriptError(f"{path}: not JSON ({exc})") from exc
    try:
        return parse_script(data)
    except ScriptError as exc:
        raise ScriptError(f"{path}: {exc}") from exc


def parse_script(data: Any) -> Script:
    """A script from decoded JSON (a list of steps, or an object with ``steps``)."""
    if isinstance(data, Script):
        return data
    workspace: str | None = None
    stream = "full"
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"steps", "workspace", "stream"})
        if unknown:
            raise ScriptError(f"unknown top-level key(s) {unknown}; expected steps, workspace, stream")
        workspace = data.get("workspace")
        if workspace is not None and (not isinstance(workspace, str) or not workspace.startswith("/")):
            raise ScriptError("workspace: must be an absolute path")
        stream = data.get("stream", "full")
        if stream not in STREAM_MODES:
            raise ScriptError(f"stream: must be one of {list(STREAM_MODES)}")
        data = data.get("steps")
    if not isinstance(data, list):
        raise ScriptError("steps: must be a list of steps")
    if len(data) > MAX_STEPS:
        raise ScriptError(f"steps: more than {MAX_STEPS}")
    return Script(tuple(_step(i, raw) for i, raw in enumerate(data)), workspace, stream)


def _step(index: int, raw: Any) -> Step:
    where = f"step {index}"
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ScriptError(f"{where}: must be an object with exactly one key (text, tool, write, ...)")
    ((kind, value),) = raw.items()
    parser = _PARSERS.get(kind)
    if parser is None:
        raise ScriptError(f"{where}: unknown step {kind!r}; expected one of {sorted(_PARSERS)}")
    return parser(index, value, f"{where} ({kind})")


def _fields(value: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScriptError(f"{where}: must be an object")
    missing = sorted(required - set(value))
    unknown = sorted(set(value) - required - optional)
    if missing or unknown:
        raise ScriptError(f"{where}: missing {missing}, unknown {unknown}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ScriptError(f"{where}: must be a string")
    return value


def _path(value: Any, where: str) -> str:
    path = _str(value, where)
    if not path or "\n" in path or "\x00" in path:
        raise ScriptError(f"{where}: must be a non-empty one-line path")
    return path


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ScriptError(f"{where}: must be true or false")
    return value


def _times(value: Any, where: str) -> int | None:
    if value == "always":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMES:
        raise ScriptError(f'{where}: times must be 1..{MAX_TIMES} or "always"')
    return value


def _text(index: int, value: Any, where: str) -> Text:
    return Text(index, _str(value, where))


def _tool(index: int, value: Any, where: str) -> Tool:
    fields = _fields(value, where, {"name"}, {"input"})
    tool_input = fields.get("input", {})
    if not isinstance(tool_input, dict):
        raise ScriptError(f"{where}: input must be an object")
    return Tool(index, _str(fields["name"], where), tool_input)


def _write(index: int, value: Any, where: str) -> Write:
    fields = _fields(value, where, {"path", "content"}, set())
    content = _str(fields["content"], where)
    if HEREDOC in content.split("\n"):
        raise ScriptError(f"{where}: content may not hold a line {HEREDOC!r} (the apply_patch heredoc end)")
    return Write(index, _path(fields["path"], where), content)


def _edit(index: int, value: Any, where: str) -> Edit:
    fields = _fields(value, where, {"path", "old", "new"}, set())
    old, new = _str(fields["old"], where), _str(fields["new"], where)
    if not old:
        raise ScriptError(f"{where}: old must not be empty")
    if HEREDOC in old.split("\n") + new.split("\n"):
        raise ScriptError(f"{where}: old/new may not hold a line {HEREDOC!r}")
    return Edit(index, _path(fields["path"], where), old, new)


def _read(index: int, value: Any, where: str) -> Read:
    return Read(index, _path(value, where))


def _bash(index: int, value: Any, where: str) -> Bash:
    return Bash(index, _str(value, where))


def _error(index: int, value: Any, where: str) -> Error:
    fields = _fields(value, where, {"status"}, {"message", "body", "headers", "in_stream", "times"})
    status = fields["status"]
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ScriptError(f"{where}: status must be 400..599")
    headers = fields.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "\n" not in k + v for k, v in headers.items()
    ):
        raise ScriptError(f"{where}: headers must map one-line strings to strings")
    message = fields.get("message")
    return Error(
        index,
        status,
        _times(fields.get("times", 1), where),
        message=None if message is None else _str(message, where),
        body=fields.get("body"),
        headers=tuple(headers.items()),
        in_stream=_bool(fields.get("in_stream", False), where),
    )


def _stall(index: int, value: Any, where: str) -> Stall:
    fields = _fields(value, where, set(), {"seconds", "then", "after_headers", "times"})
    seconds = fields.get("seconds")
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0
    ):
        raise ScriptError(f"{where}: seconds must be a number >= 0")
    then = fields.get("then", "drop")
    if then not in ("drop", "answer"):
        raise ScriptError(f'{where}: then must be "drop" or "answer"')
    return Stall(
        index,
        _times(fields.get("times", 1), where),
        seconds=None if seconds is None else float(seconds),
        then=then,
        after_headers=_bool(fields.get("after_headers", False), where),
    )


def _drop(index: int, value: Any, where: str) -> Drop:
    fields = _fields(value, where, set(), {"after_headers", "times"})
    return Drop(
        index, _times(fields.get("times", 1), where), _bool(fields.get("after_headers", False), where)
    )


_PARSERS: dict[str, Callable[[int, Any, str], Step]] = {
    "text": _text,
    "tool": _tool,
    "write": _write,
    "edit": _edit,
    "read": _read,
    "bash": _bash,
    "error": _error,
    "stall": _stall,
    "drop": _drop,
}
