"""Read untrusted YAML into plain data, remembering where every value came from.

``yaml.compose`` (SafeLoader) keeps node marks, so every later error can name a
line and column. A policy file comes from a repository anyone with write access
can edit, so the reader refuses what a config file never needs: anchors and
aliases (billion-laughs), explicit tags, duplicate keys (which YAML silently
resolves to the last one), non-string keys, deep nesting and oversized files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from worker.policy._validate import Path, show_path

MAX_BYTES = 64 * 1024
MAX_DEPTH = 32

_STR = "tag:yaml.org,2002:str"
_PLAIN_TAGS = frozenset(
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "timestamp", "seq", "map")
)


@dataclass
class Located:
    """Plain data plus 1-based (line, col) of each value and of each mapping key."""

    value: object
    marks: dict[Path, tuple[int, int]] = field(default_factory=dict)
    key_marks: dict[Path, tuple[int, int]] = field(default_factory=dict)


class YamlProblem(Exception):
    def __init__(self, line: int, col: int, message: str) -> None:
        super().__init__(message)
        self.line, self.col, self.message = line, col, message


def _at(node: Node | yaml.Event | yaml.Mark) -> tuple[int, int]:
    mark = node if isinstance(node, yaml.Mark) else node.start_mark
    return (1, 1) if mark is None else (mark.line + 1, mark.column + 1)


_CORE = "tag:yaml.org,2002:"


def _shown(tag: str) -> str:
    """A tag as a file would spell it: ``!!int`` for the core schema's, the rest as written."""
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


class _Loader(yaml.SafeLoader):
    """SafeLoader that stops at the first anchor, alias, explicit tag or over-deep node.

    A tag is refused where it is written (the event still holds it; the node no longer says whether
    its tag was written or resolved), whatever it names: ``!!int`` and ``!!map`` as much as
    ``!!python/object``, so no tag can make a value anything its plain YAML would not be."""

    depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise YamlProblem(*_at(event), "anchors and aliases (&, *) are not allowed; write the value out")
        tag = getattr(event, "tag", None)
        if isinstance(tag, str):
            raise YamlProblem(
                *_at(event),
                f"explicit tag {_shown(tag)} is not allowed; remove it and write the plain value "
                "(a policy file needs no tags; quote a value to make it a string)",
            )
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlProblem(*_at(event), f"nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def read(data: str | bytes) -> Located:
    """Parse one YAML document; raise YamlProblem with a 1-based position."""
    raw = data if isinstance(data, bytes) else _utf8(data)
    if len(raw) > MAX_BYTES:
        raise YamlProblem(1, 1, f"file is {len(raw)} bytes; a policy file may be at most {MAX_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlProblem(1, 1, f"not UTF-8 (byte {exc.start}); save the file as UTF-8") from exc
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = _at(mark) if mark is not None else (1, 1)
        detail = f"YAML syntax: {exc.problem or exc.context}"
        if "expected ',' or" in detail:
            detail += '; quote values that contain [ ] { } , or : (e.g. "dependabot[bot]")'
        raise YamlProblem(line, col, detail) from exc
    except yaml.reader.ReaderError as exc:
        line, col = _line_col(text, exc.position)
        raise YamlProblem(
            line, col, f"character {exc.character!r} is not allowed in YAML; remove it"
        ) from exc
    except yaml.YAMLError as exc:
        raise YamlProblem(1, 1, f"YAML syntax: {exc}") from exc
    if root is None:
        raise YamlProblem(1, 1, "file is empty; start with `version: 1`")
    out = Located(None)
    out.value = _convert(root, (), out, yaml.SafeLoader(""))
    return out


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (text read with errors="surrogateescape")
        line, col = _line_col(text, exc.start)
        raise YamlProblem(
            line, col, "not valid Unicode text (a lone surrogate); save the file as UTF-8"
        ) from None


def _line_col(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1


#: What a YAML escape such as "\ud800" can produce and no UTF-8 text can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_A_CHARACTER = "a \\uD800-\\uDFFF escape, which is not a character (no UTF-8 can hold it); remove it"


def _compose(text: str) -> Node | None:
    loader = _Loader(text)  # the reader checks for unprintable characters here
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _convert(node: Node, path: Path, out: Located, ctor: yaml.SafeLoader) -> object:
    out.marks[path] = _at(node)
    if node.tag not in _PLAIN_TAGS:
        raise YamlProblem(*_at(node), f"{show_path(path)}: explicit tag {node.tag} is not allowed; remove it")
    if isinstance(node, ScalarNode):
        try:
            value = ctor.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            # e.g. a 5,000-digit integer or the date 2001-13-45: a value error, not a crash.
            detail = str(exc).split(";")[0][:120]
            raise YamlProblem(
                *_at(node), f"{show_path(path)}: cannot read value ({detail}); quote it"
            ) from exc
        if isinstance(value, str) and _SURROGATE.search(value):
            raise YamlProblem(*_at(node), f"{show_path(path)}: the value holds {_NOT_A_CHARACTER}")
        return value
    if isinstance(node, SequenceNode):
        return [_convert(item, (*path, i), out, ctor) for i, item in enumerate(node.value)]
    if isinstance(node, MappingNode):
        result: dict[str, object] = {}
        for key_node, value_node in node.value:
            if not (isinstance(key_node, ScalarNode) and key_node.tag == _STR):
                raise YamlProblem(
                    *_at(key_node),
                    f"{show_path(path)}: key {key_node.value!r} is not a string; quote it",
                )
            key = str(key_node.value)
            if _SURROGATE.search(key):  # checked before the key is ever quoted in a message
                raise YamlProblem(*_at(key_node), f"{show_path(path)}: a key holds {_NOT_A_CHARACTER}")
            child = (*path, key)
            if key in result:
                line, _ = out.key_marks[child]
                raise YamlProblem(
                    *_at(key_node), f"{show_path(child)}: duplicate key (first set on line {line})"
                )
            out.key_marks[child] = _at(key_node)
            result[key] = _convert(value_node, child, out, ctor)
        return result
    raise YamlProblem(*_at(node), f"{show_path(path)}: unsupported YAML node")
