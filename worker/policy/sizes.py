"""Sizes in a policy (``limits.max_agent_memory``, ``limits.max_workspace_bytes``): one parser.

A size is written ``512MiB`` or ``4GiB`` (binary units only: KiB, MiB, GiB, TiB), or as a
whole number of bytes. Decimal units (``4GB``) are refused, with the binary spelling to write
instead: a memory limit that is 7% off what the admin meant (GB vs GiB) is a limit nobody
checked, and accepting both would leave every reader of the file guessing which was meant.
Each size has a floor (below it an agent CLI cannot even start, so the run would only fail
strangely) and a ceiling (past it the number is a typo, not a limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

_UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB}
#: What the schema accepts as a string; the floor and ceiling are checked on the number.
PATTERN = r"[1-9][0-9]{0,15}(KiB|MiB|GiB|TiB)?"
_SIZE = re.compile(PATTERN)
#: Something that looks like a size in another spelling: a number, then a unit we can name.
_NEAR = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]{1,3})\s*")
_DECIMAL = {"k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}


@dataclass(frozen=True)
class Bounds:
    """What one size limit may be, its default, and why the floor is where it is."""

    floor: int
    ceiling: int
    default: int
    floor_why: str


#: The size limits, by their key under ``limits:``.
SIZE_LIMITS: dict[str, Bounds] = {
    "max_agent_memory": Bounds(64 * MiB, 1 * TiB, 4 * GiB, "an agent CLI cannot start in less"),
    "max_workspace_bytes": Bounds(
        16 * MiB, 64 * TiB, 10 * GiB, "the repository, HOME and /tmp need at least that"
    ),
}


def parse_size(value: object) -> int:
    """``4GiB`` -> 4294967296; a whole number of bytes as itself. ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{value} is not a positive number of bytes")
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)  # YAML reads 4294967296.0 as a float; the schema calls it a whole number
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match is not None:
            unit = match.group(1)
            return int(value[: -len(unit)] if unit else value) * (_UNITS[unit] if unit else 1)
    raise ValueError(f"{value!r} is not a size like 512MiB or 4GiB")


def format_size(size: int) -> str:
    """The shortest exact spelling, so 4096MiB and 4GiB both print (and hash) as 4GiB."""
    if size <= 0:
        return str(size)
    for unit, scale in reversed(_UNITS.items()):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _spelling(value: object) -> str:
    """``value`` as the person wrote it, for a message (YAML's words for true and null)."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _suggest(value: object) -> str:
    """What to write instead, when what was meant can be told (``4GB``, ``4G``, ``1.5GiB``); else ""."""
    if isinstance(value, float):
        return f"a number of bytes is whole, e.g. {max(1, int(value))}, or use a unit like 512MiB"
    near = _NEAR.fullmatch(value) if isinstance(value, str) else None
    if near is None or near.group(2)[0].lower() not in _DECIMAL:
        return ""
    number, unit = near.group(1), near.group(2)
    binary = f"{unit[0].upper()}iB"
    if float(number) <= 0:
        return "a size must be more than 0"
    if not number.isdigit():  # 1.5GiB: the unit below, if that makes it whole
        smaller = next((name for name, scale in _UNITS.items() if scale * KiB == _UNITS[binary]), None)
        below = float(number) * KiB
        if smaller is None or not below.is_integer():
            return "a size is a whole number of its unit (KiB, MiB, GiB, TiB)"
        return f"a size is a whole number of its unit: write {int(below)}{smaller}"
    if unit.lower() == f"{unit[0].lower()}b":
        exact = int(number) * _DECIMAL[unit[0].lower()]
        return (
            f"decimal units ({unit}) are not accepted, so that no one has to guess which is meant: "
            f"write {number}{binary} ({int(number) * _UNITS[binary]} bytes) or the bytes themselves ({exact})"
        )
    return f"write {number}{binary} (the units are KiB, MiB, GiB and TiB, spelt so)"


def problem(where: str, value: object, bounds: Bounds) -> str | None:
    """What is wrong with ``value`` for the size limit at ``where`` (e.g. ``limits.max_agent_memory``),
    in words that say what to write; None when it is a size within its bounds."""
    try:
        size = parse_size(value)
    except ValueError:
        hint = _suggest(value) or (
            "write it like 512MiB or 4GiB (binary units KiB, MiB, GiB, TiB) or as a whole number of bytes"
        )
        return f"{where}: {_spelling(value)} is not a size; {hint}"
    if size < bounds.floor:
        return (
            f"{where}: {format_size(size)} is below the floor of {format_size(bounds.floor)} "
            f"({bounds.floor_why}); write at least {format_size(bounds.floor)}"
        )
    if size > bounds.ceiling:
        top = format_size(bounds.ceiling)
        return f"{where}: {format_size(size)} is above the most Baton accepts; write at most {top}"
    return None
