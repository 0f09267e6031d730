"""Baton's built-in script agent: a deterministic stand-in for an agent CLI (no model, no LLM).

It runs inside the box with the system python3, with the workspace as its
working directory, and must therefore import nothing but the standard library::

    python3 script_agent.py RECIPE_PATH      # or: python3 -I - RECIPE_PATH < script_agent.py
    python3 script_agent.py --version

RECIPE_PATH is either a JSON recipe, or any text (such as Baton's prompt file)
holding one in a fenced block; the last such block is used (the newest request: a
follow-up on a pull request comes after the issue in the prompt)::

    ```baton-recipe
    {"steps": [{"op": "write", "path": "hello.txt", "content": "hi\\n"}]}
    ```

So an issue whose body holds a recipe makes this agent do exactly what the
issue says: the most obedient agent there is, which is what the box and the
inspection of its output are tested against.

Recipe: ``{"version": 1, "steps": [STEP, ...]}`` (``version`` optional). Each
step is an object with ``op`` and the fields below; any step may add
``"ignore_errors": true``. Paths are relative to the working directory unless
absolute; nothing here checks where a path leads (the box decides what is
reachable, not the agent).

=========  =====================================================================
op         fields
=========  =====================================================================
write      path, content (text) or content_b64; mode (e.g. "0644"). Makes
           missing parent directories; follows an existing symlink at path.
append     path, content or content_b64
delete     path: a file, a symlink (not its target) or a directory tree
mkdir      path (with parents; an existing directory is fine)
symlink    path, target (stored verbatim: may be absolute or dangling)
chmod      path, mode (octal string like "0755", or an integer)
print      text; stream "stdout" (default) or "stderr"; repeat (default 1)
sleep      seconds (0 to 3600)
exit       code (0 to 255): stop here
env        print the whole environment as one JSON object line (canary tests)
read       path: copy the file's bytes to stdout
spawn      argv (list); wait (default true); detach (new session, not waited
           for: the child outlives this agent, as a double fork does); check
           (a non-zero exit of a waited-for child fails the step)
http       url; data (text, makes it a POST) or data_file (a file's bytes); method;
           headers (an object);
           timeout (1 to 60 s); via_proxy (true: through HTTP_PROXY even where
           NO_PROXY says not, as some CLIs do). ``${NAME}`` in url, data and
           header values is that environment variable (the model gateway's URL
           and key, say). Prints "http STATUS" (and, with "show": true, the
           answer's first 2,000 bytes) or "http error: REASON"; never fails.
=========  =====================================================================

On stdout, after everything the steps printed, the last line is the result:
``{"exit": CODE, "script_agent": VERSION, "steps_run": N}`` (``"error"`` too
when a step failed). Exit codes: 0 done, the ``exit`` step's code, 2 a failed
step, 3 no readable recipe.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

VERSION = "1.2"  # 1.2: the last recipe block, not the first
MAX_RECIPE_BYTES = 1 << 20
MAX_STEPS = 10_000
MAX_SLEEP_S = 3600
MAX_REPEAT = 1_000_000
FENCE = re.compile(r"^```baton-recipe[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

EXIT_STEP_FAILED = 2
EXIT_NO_RECIPE = 3


class StepError(Exception):
    """A step could not be done; the message says why."""


class Stop(Exception):
    """The ``exit`` step: stop with this code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def load_recipe(path: str) -> dict[str, Any]:
    """The recipe in ``path`` (JSON, or the last fenced ``baton-recipe`` block in text)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise StepError(f"cannot read {path}: {exc.strerror}") from exc
    if len(raw) > MAX_RECIPE_BYTES:
        raise StepError(f"{path} is over {MAX_RECIPE_BYTES} bytes")
    text = raw.decode("utf-8", errors="replace")
    candidates = [text]
    blocks = FENCE.findall(text)
    if blocks:
        candidates.insert(0, blocks[-1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    raise StepError(f"no recipe in {path}: neither a JSON object nor a ```baton-recipe block")


def steps_of(recipe: dict[str, Any]) -> list[dict[str, Any]]:
    version = recipe.get("version", 1)
    if version != 1:
        raise StepError(f"recipe version {version!r} is not supported (this agent reads 1)")
    steps = recipe.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise StepError("recipe 'steps' must be a list of objects")
    if len(steps) > MAX_STEPS:
        raise StepError(f"recipe has over {MAX_STEPS} steps")
    return steps


def _text(step: dict[str, Any], key: str) -> str:
    value = step.get(key)
    if not isinstance(value, str):
        raise StepError(f"'{key}' must be a string")
    return value


def _int(step: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = step.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StepError(f"'{key}' must be an integer from {low} to {high}")
    return value


def _content(step: dict[str, Any]) -> bytes:
    if "content_b64" in step:
        try:
            return base64.b64decode(_text(step, "content_b64"), validate=True)
        except ValueError as exc:
            raise StepError("'content_b64' is not base64") from exc
    return _text(step, "content").encode("utf-8")


def _mode(step: dict[str, Any]) -> int:
    value = step.get("mode")
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3,4}", value):
        return int(value, 8)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
        return value
    raise StepError("'mode' must be an octal string like \"0755\" or an integer")


def _write(step: dict[str, Any], flags: str) -> None:
    path = _text(step, "path")
    data = _content(step)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, flags) as handle:
        handle.write(data)
    if "mode" in step:
        os.chmod(path, _mode(step))


def _delete(step: dict[str, Any]) -> None:
    path = _text(step, "path")
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _print(step: dict[str, Any]) -> None:
    stream = step.get("stream", "stdout")
    if stream not in ("stdout", "stderr"):
        raise StepError("'stream' must be stdout or stderr")
    out = sys.stdout if stream == "stdout" else sys.stderr
    text = _text(step, "text")
    for _ in range(_int(step, "repeat", 1, 0, MAX_REPEAT)):
        out.write(text)
    out.flush()


def _read(step: dict[str, Any]) -> None:
    with open(_text(step, "path"), "rb") as handle:
        sys.stdout.flush()
        shutil.copyfileobj(handle, sys.stdout.buffer)
    sys.stdout.buffer.flush()


def _spawn(step: dict[str, Any]) -> None:
    argv = step.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise StepError("'argv' must be a non-empty list of strings")
    detach = step.get("detach", False) is True
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=detach)  # noqa: S603
    if detach or step.get("wait", True) is not True:
        return
    code = child.wait()
    if code != 0 and step.get("check", False) is True:
        raise StepError(f"{argv[0]} exited {code}")


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(text: str) -> str:
    return _VARIABLE.sub(lambda m: os.environ.get(m.group(1), ""), text)


def _http(step: dict[str, Any]) -> None:
    url = _expand(_text(step, "url"))
    data = step.get("data")
    body = _expand(data).encode("utf-8") if isinstance(data, str) else None
    if isinstance(step.get("data_file"), str):
        with open(step["data_file"], "rb") as fh:
            body = fh.read(MAX_RECIPE_BYTES)
    method = step.get("method")
    headers = step.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise StepError("headers must be an object of strings")
    timeout = _int(step, "timeout", 10, 1, 60)
    # The recipe's URL, whatever it is: this agent runs in the box, which decides what it reaches.
    request = urllib.request.Request(url, data=body, method=method if isinstance(method, str) else None,  # noqa: S310
                                     headers={str(k): _expand(v) for k, v in headers.items()})  # fmt: skip
    handlers = []
    if step.get("via_proxy") is True and os.environ.get("HTTP_PROXY"):
        handlers.append(urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]}))
        for name in ("NO_PROXY", "no_proxy"):  # urllib consults it even for an explicit proxy
            os.environ.pop(name, None)
    show = step.get("show") is True
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as answer:
            print(f"http {answer.status}", flush=True)
            if show:
                print(answer.read(2000).decode("utf-8", "replace"), flush=True)
    except urllib.error.HTTPError as exc:
        print(f"http {exc.code}", flush=True)
        if show:
            print(exc.read(2000).decode("utf-8", "replace"), flush=True)
    except (OSError, ValueError) as exc:
        print(f"http error: {type(exc).__name__}: {exc}", flush=True)


def _exit(step: dict[str, Any]) -> None:
    raise Stop(_int(step, "code", 0, 0, 255))


def _env(step: dict[str, Any]) -> None:
    print(json.dumps(dict(os.environ), sort_keys=True), flush=True)


OPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "write": lambda step: _write(step, "wb"),
    "append": lambda step: _write(step, "ab"),
    "delete": _delete,
    "mkdir": lambda step: os.makedirs(_text(step, "path"), exist_ok=True),
    "symlink": lambda step: os.symlink(_text(step, "target"), _text(step, "path")),
    "chmod": lambda step: os.chmod(_text(step, "path"), _mode(step)),
    "print": _print,
    "sleep": lambda step: time.sleep(_int(step, "seconds", 0, 0, MAX_SLEEP_S)),
    "exit": _exit,
    "env": _env,
    "read": _read,
    "spawn": _spawn,
    "http": _http,
}


def run_step(step: dict[str, Any]) -> None:
    op = step.get("op")
    action = OPS.get(op) if isinstance(op, str) else None
    if action is None:
        raise StepError(f"unknown op {op!r}")
    action(step)


def _result(steps_run: int, code: int, error: str | None = None) -> int:
    result: dict[str, Any] = {"script_agent": VERSION, "steps_run": steps_run, "exit": code}
    if error is not None:
        result["error"] = error
    sys.stdout.write("\n" + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return code


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(f"script-agent {VERSION} (python {sys.version.split()[0]})")
        return 0
    if len(argv) != 1:
        print("usage: script_agent.py RECIPE_PATH | --version", file=sys.stderr)
        return EXIT_NO_RECIPE
    try:
        steps = steps_of(load_recipe(argv[0]))
    except StepError as exc:
        print(f"script-agent: {exc}", file=sys.stderr)
        return _result(0, EXIT_NO_RECIPE, str(exc))
    done = 0
    for number, step in enumerate(steps, start=1):
        try:
            run_step(step)
        except Stop as stop:
            return _result(done + 1, stop.code)
        except (StepError, OSError, subprocess.SubprocessError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            message = f"step {number} ({step.get('op')!r}): {detail}"
            print(f"script-agent: {message}", file=sys.stderr, flush=True)
            if step.get("ignore_errors") is not True:
                return _result(done, EXIT_STEP_FAILED, message)
        done += 1
    return _result(done, 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
