"""Provider-neutral script steps rendered for the CLI that asks (pure): a tool call it offers, or reply text.

Within one wire format the CLIs name their tools differently, so the rendering is picked from the
tools the request offers, never from a guess about the client [observed, 2026-12-02]:

- Gemini CLI 0.61.0: ``write_file{file_path,content}``, ``replace{file_path,instruction,old_string,
  new_string}``, ``read_file{file_path}``, ``run_shell_command{command}``.
- Qwen Code 0.15.10: ``write_file``, ``edit{file_path,old_string,new_string}`` (not ``replace``),
  ``read_file{file_path}``, ``run_shell_command{command}``.
- OpenCode 1.18.33: ``write{filePath,content}``, ``edit{filePath,oldString,newString}``,
  ``read{filePath}``, ``bash{command}``.
- mini-swe-agent 2.4.6: only ``bash{command}``; file steps become shell commands and a ``text`` step
  the command ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (its way to end a run), but only when
  that marker is in the request's text.
- Aider 0.86.2: no tools; ``write``/``edit`` become its edit format in the reply text: "whole"
  (a file listing) for a model name it does not know, such as ``openai/<name>``, or SEARCH/REPLACE
  blocks when its prompt asks for them (``--edit-format diff``, or a model it knows as a diff model).

The argument names are read from the offered schema (``properties``/``required``), so a CLI that
renames ``file_path`` still gets the key it asks for; a required argument the stand-in cannot fill
is an error naming it, as is a step no offered tool can carry.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emulator.model.script import HEREDOC, Answer, Bash, Edit, Read, Text, Tool, Write
from emulator.model.wire import RenderError, workspace_path
from emulator.types import JSONObject

#: mini-swe-agent ends its run when a command prints this line (its system prompt says so).
MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
WRITE_TOOLS = ("write_file", "write")
EDIT_TOOLS = ("replace", "edit")
READ_TOOLS = ("read_file", "read")
SHELL_TOOLS = ("run_shell_command", "bash", "shell")
#: The file tools each file step prefers, in order, before falling back to a shell command.
NATIVE: dict[type[Write | Edit | Read], tuple[str, ...]] = {
    Write: WRITE_TOOLS,
    Edit: EDIT_TOOLS,
    Read: READ_TOOLS,
}
PATH_KEYS = ("file_path", "filePath", "absolute_path", "path")
OLD_KEYS = ("old_string", "oldString")
NEW_KEYS = ("new_string", "newString")
#: Required free-text arguments some CLIs ask of the model (OpenCode's ``bash.description`` in some
#: versions, Gemini CLI's ``replace.instruction``): filled with a sentence saying what the call does.
PROSE_KEYS = ("description", "instruction")
#: Aider's prompt phrases for its edit formats (aider/coders/*_prompts.py, 0.86.2).
AIDER_WHOLE = "*file listing*"
AIDER_DIFF = "*SEARCH/REPLACE block*"


@dataclass(frozen=True)
class Offer:
    """What a request offers and says: its tools (name to JSON schema) and its system and user text."""

    tools: Mapping[str, JSONObject] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class Call:
    name: str
    args: JSONObject


@dataclass(frozen=True)
class Say:
    text: str


def render(answer: Answer, offer: Offer, workspace: str | None) -> Call | Say:
    """The call or text that carries ``answer`` for the client that made this request."""
    if isinstance(answer, Tool):
        return Call(answer.name, answer.input)
    shell = _first(SHELL_TOOLS, offer.tools)
    if isinstance(answer, Text):
        if shell is not None and MINI_SUBMIT in offer.text:
            return Call(shell, _args(shell, offer, answer, {"command": f"echo {MINI_SUBMIT}"}))
        return Say(answer.text)
    if not offer.tools:
        return _aider(answer, offer)
    if isinstance(answer, Bash):
        if shell is None:
            raise _none_offered(answer, SHELL_TOOLS, offer)
        return Call(shell, _args(shell, offer, answer, {"command": answer.command}))
    native = _first(NATIVE[type(answer)], offer.tools)
    if native is None:
        if shell is None:
            raise _none_offered(answer, NATIVE[type(answer)] + SHELL_TOOLS, offer)
        command = shell_command(answer, workspace_path(answer.path, workspace) or answer.path)
        return Call(shell, _args(shell, offer, answer, {"command": command}))
    path = workspace_path(answer.path, workspace)
    if path is None:
        raise RenderError(
            f"step {answer.index}: {answer.path!r} is relative and there is no workspace "
            "(give the script or the stand-in a workspace)"
        )
    schema = offer.tools[native]
    values: dict[str, Any] = {_key(schema, PATH_KEYS): path}
    if isinstance(answer, Write):
        values["content"] = answer.content
    elif isinstance(answer, Edit):
        values[_key(schema, OLD_KEYS)] = answer.old
        values[_key(schema, NEW_KEYS)] = answer.new
    return Call(native, _args(native, offer, answer, values))


def shell_command(answer: Write | Edit | Read, path: str) -> str:
    """A shell command doing a file step: a quoted heredoc, a small ``python3 -c`` edit, ``cat``."""
    quoted = shlex.quote(path)
    if isinstance(answer, Read):
        return f"cat {quoted}"
    if isinstance(answer, Edit):
        program = (
            "import sys, pathlib; p = pathlib.Path(sys.argv[1]); t = p.read_text(); "
            "sys.exit(f'{p}: the old text is not there') if sys.argv[2] not in t else "
            "p.write_text(t.replace(sys.argv[2], sys.argv[3], 1))"
        )
        return " ".join(shlex.quote(a) for a in ("python3", "-c", program, path, answer.old, answer.new))
    parent = posixpath.dirname(path)
    mkdir = f"mkdir -p {shlex.quote(parent)} && " if parent not in ("", "/") else ""
    if answer.content.endswith("\n"):
        return f"{mkdir}cat > {quoted} <<'{HEREDOC}'\n{answer.content}{HEREDOC}"
    return f"{mkdir}printf %s {shlex.quote(answer.content)} > {quoted}"


def _aider(answer: Write | Edit | Read | Bash, offer: Offer) -> Say:
    """Aider's edit formats, in the reply text; its paths are relative to the repository, as written."""
    diff = AIDER_DIFF in offer.text
    if not diff and AIDER_WHOLE not in offer.text:
        raise RenderError(
            f"step {answer.index} ({_kind(answer)}): the request offers no tools and is not Aider's "
            "(no edit format in its prompt); only text steps can be answered"
        )
    if isinstance(answer, Read | Bash):
        raise RenderError(f"step {answer.index} ({_kind(answer)}): Aider has no tools; use write or edit")
    fence = _fence(answer)
    if diff:
        old, new = ("", answer.content) if isinstance(answer, Write) else (answer.old, answer.new)
        block = f"<<<<<<< SEARCH\n{_line_end(old)}=======\n{_line_end(new)}>>>>>>> REPLACE\n"
        return Say(f"{answer.path}\n{fence}\n{block}{fence}\n")
    if isinstance(answer, Write):
        content = answer.content
    else:
        current = _aider_file(offer.text, answer.path)
        if current is None or answer.old not in current:
            raise RenderError(
                f"step {answer.index} (edit): Aider's whole edit format needs the whole new file, and "
                f"{answer.path!r} with the old text is not in the request: add the file to Aider's chat "
                "(name it on its command line) or use a write step"
            )
        content = current.replace(answer.old, answer.new, 1)
    return Say(f"{answer.path}\n{fence}\n{_line_end(content)}{fence}\n")


def _aider_file(text: str, path: str) -> str | None:
    """A chat file's content as Aider shows it (``path`` on its own line, then a fenced block)."""
    marker = f"\n{path}\n```"
    start = text.rfind(marker)
    if start < 0:
        return None
    body_start = text.find("\n", start + len(marker))
    end = text.find("\n```", body_start)
    if body_start < 0 or end < 0:
        return None
    return text[body_start + 1 : end + 1]


def _fence(answer: Write | Edit) -> str:
    text = answer.content if isinstance(answer, Write) else answer.old + answer.new
    fence = "```"
    while fence in text:
        fence += "`"
    return fence


def _line_end(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _first(names: tuple[str, ...], tools: Mapping[str, JSONObject]) -> str | None:
    return next((name for name in names if name in tools), None)


def _properties(schema: JSONObject) -> tuple[set[str], list[str]]:
    properties = schema.get("properties")
    required = schema.get("required")
    names = set(properties) if isinstance(properties, dict) else set()
    needed = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    return names | set(needed), needed


def _key(schema: JSONObject, choices: tuple[str, ...]) -> str:
    """The first of ``choices`` the schema names (the first choice if the schema names none)."""
    names, _ = _properties(schema)
    return next((c for c in choices if c in names), choices[0])


def _args(tool: str, offer: Offer, answer: Answer, values: dict[str, Any]) -> JSONObject:
    """``values`` plus the prose the schema requires; a required argument left unfilled is an error."""
    _, required = _properties(offer.tools.get(tool, {}))
    for name in required:
        if name not in values and name in PROSE_KEYS:
            values[name] = f"Model stand-in: {_kind(answer)} step {answer.index}."
    missing = [name for name in required if name not in values]
    if missing:
        raise RenderError(
            f"step {answer.index} ({_kind(answer)}): the offered tool {tool!r} requires {missing}, "
            "which the stand-in cannot fill; use a tool step with the input spelled out"
        )
    return values


def _kind(answer: Answer) -> str:
    return type(answer).__name__.lower()


def _none_offered(answer: Answer, names: tuple[str, ...], offer: Offer) -> RenderError:
    offered = json.dumps(sorted(offer.tools))
    return RenderError(
        f"step {answer.index} ({_kind(answer)}): the request offers none of {list(names)}; "
        f"it offers {offered}"
    )
