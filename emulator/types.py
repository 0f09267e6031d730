"""Shared type aliases: the emulator speaks JSON, so most values are JSON."""

from __future__ import annotations

from typing import Any, TypeAlias

#: A JSON object as decoded by ``json.loads``; response shapes are built as these.
JSONObject: TypeAlias = dict[str, Any]
JSONArray: TypeAlias = list[Any]
