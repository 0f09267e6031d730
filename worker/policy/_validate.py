"""A small interpreter for the subset of JSON Schema that SCHEMA uses.

Why not the ``jsonschema`` library: it is not a runtime dependency, and its
messages say "'x' is not of type 'array'" without the fix. This walks the same
dict (so the published schema and the checks cannot drift) and words each
finding for the person editing baton.yml. A test runs both over the same
fixtures and random documents and requires the same verdict.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

Path = tuple[str | int, ...]

#: Keywords this interpreter understands; annotations are ignored on purpose.
SUPPORTED = frozenset(
    {
        "type", "properties", "additionalProperties", "propertyNames", "required", "enum", "const",
        "pattern", "minLength", "maxLength", "minimum", "maximum", "items", "uniqueItems",
        "minItems", "maxItems", "maxProperties", "if", "then", "else",
    }
)  # fmt: skip
ANNOTATIONS = frozenset({"$schema", "title", "description"})

_ARTICLE = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "a whole number",
            "number": "a number", "boolean": "true or false"}  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """``at_key``: the problem is the mapping key itself (point at the key, not its value)."""

    path: Path
    message: str
    at_key: bool = False


def show_path(path: Path) -> str:
    """``("agents", "claude-code", "tools", 2)`` -> ``agents.claude-code.tools[2]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__  # e.g. a YAML date; never valid, always worth naming


def _same(a: object, b: object) -> bool:
    """JSON equality: true is not 1, but 1.0 is 1 (as jsonschema compares)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _hint(value: object, expected: str) -> str:
    if value is None and expected == "array":
        return "; write [] for an empty list"
    if value is None and expected == "object":
        return "; write {} for an empty mapping"
    if isinstance(value, str) and expected == "array":
        return f"; write it as a list: [{value}]"
    if json_type(value) in ("integer", "number", "boolean", "date", "datetime") and expected == "string":
        return "; quote it"
    return ""


def validate(schema: Any, value: object, path: Path = ()) -> Iterator[Finding]:
    """Yield every finding for ``value`` against ``schema``; none means valid."""
    if schema is False:
        yield Finding(path, f"{show_path(path)}: is not allowed here; remove it", at_key=True)
        return
    where = show_path(path)
    expected = schema.get("type")
    allowed = [expected] if isinstance(expected, str) else list(expected or ())
    actual = json_type(value)
    if allowed and actual not in allowed and not ("number" in allowed and actual == "integer"):
        said = " or ".join(_ARTICLE[t] for t in allowed)
        hint = _hint(value, allowed[0]) if len(allowed) == 1 else ""
        yield Finding(path, f"{where}: expected {said}, got {actual}{hint}")
        return
    if "const" in schema and not _same(value, schema["const"]):
        yield Finding(
            path, f"{where}: must be {json.dumps(schema['const'])}, got {json.dumps(value, default=str)}"
        )
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        options = ", ".join(str(o) for o in schema["enum"])
        yield Finding(path, f"{where}: {value!r} is not one of: {options}")
    if isinstance(value, str):
        yield from _string(schema, value, path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            yield Finding(path, f"{where}: must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            yield Finding(path, f"{where}: must be at most {schema['maximum']}, got {value}")
    elif isinstance(value, list):
        yield from _array(schema, value, path)
    elif isinstance(value, dict):
        yield from _object(schema, value, path)
    if "if" in schema:
        branch = "then" if not any(validate(schema["if"], value, path)) else "else"
        if branch in schema:
            yield from validate(schema[branch], value, path)


def _string(schema: Any, value: str, path: Path) -> Iterator[Finding]:
    where = show_path(path)
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield Finding(path, f"{where}: must not be empty")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        yield Finding(path, f"{where}: is longer than {schema['maxLength']} characters")
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        yield Finding(path, f"{where}: {value!r} is not a {schema.get('title', 'valid value')}")


def _array(schema: Any, value: list[object], path: Path) -> Iterator[Finding]:
    where = show_path(path)
    if "minItems" in schema and len(value) < schema["minItems"]:
        yield Finding(path, f"{where}: needs at least {schema['minItems']} item(s)")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        yield Finding(path, f"{where}: has more than {schema['maxItems']} items")
    if "items" in schema:
        for index, item in enumerate(value):
            yield from validate(schema["items"], item, (*path, index))
    if schema.get("uniqueItems"):
        seen: set[str] = set()
        for index, item in enumerate(value):
            key = json_type(item) + json.dumps(item, sort_keys=True, default=str)
            if key in seen:
                yield Finding(
                    (*path, index), f"{show_path((*path, index))}: duplicate {item!r}; list it once"
                )
            seen.add(key)


def _object(schema: Any, value: dict[str, object], path: Path) -> Iterator[Finding]:
    where = show_path(path)
    properties: dict[str, Any] = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in value:
            yield Finding(path, f"{where}: missing required key {key!r}")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        yield Finding(path, f"{where}: has more than {schema['maxProperties']} entries")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        child = (*path, key)
        if "propertyNames" in schema:
            for finding in validate(schema["propertyNames"], key, child):
                yield Finding(child, finding.message, at_key=True)
        if key in properties:
            sub = properties[key]
            if sub is False:
                yield Finding(child, f"{show_path(child)}: is not allowed here; remove it", at_key=True)
            else:
                yield from validate(sub, item, child)
        elif extra is False:
            yield Finding(child, f"{show_path(child)}: unknown key{_suggest(key, properties)}", at_key=True)
        elif extra is not True:
            yield from validate(extra, item, child)


def _suggest(key: str, properties: dict[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(properties), n=1)
    allowed = ", ".join(properties)
    return f"; did you mean {close[0]!r}?" if close else f" (allowed: {allowed})"
