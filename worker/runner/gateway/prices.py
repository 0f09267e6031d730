"""What a model call costs: a price per million tokens per model, set by the operator or built in.

The spend caps (``limits.max_model_spend_per_run``, ``max_model_spend_per_day``)
are counted in US dollars from these prices and the metered tokens. The built-in
table holds the vendors' list prices as last checked (``CHECKED``); an operator
with other prices (a contract, a gateway of their own) sets ``BATON_MODEL_PRICES``
to a JSON file of the same shape::

    {"default": {"input": 15, "output": 75, "cache_read": 1.5, "cache_write": 18.75},
     "models": [{"provider": "anthropic", "model": "claude-sonnet-*",
                 "input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}]}

``model`` is a shell-style pattern matched against the model the request names
(case-sensitive); the first matching entry wins. A model no entry matches is
priced at its provider's ``*`` entry, or at ``default``: both are set high on
purpose (the dearest list price), since a cap must never be met late because a
model was unknown.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from baton.errors import ConfigError
from worker.runner.gateway.meter import Usage

CHECKED = "2026-12-01"
MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: Usage) -> float:
        total = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        )
        return total / MILLION


@dataclass(frozen=True)
class Entry:
    provider: str
    model: str  # a pattern
    price: Price


@dataclass(frozen=True)
class PriceTable:
    entries: tuple[Entry, ...]
    default: Price
    source: str = "built-in"

    def price(self, provider: str, model: str) -> tuple[Price, str]:
        """The price for ``model`` of ``provider``, and what set it (the entry's pattern or ``default``)."""
        for entry in self.entries:
            if entry.provider == provider and fnmatch.fnmatchcase(model, entry.model):
                return entry.price, f"{entry.provider}/{entry.model}"
        return self.default, "default"


#: The vendors' list prices per million tokens (input, output, cache read, cache write), as checked on
#: ``CHECKED`` from the vendors' pricing pages (OpenAI's through secondary copies: see docs/operators.md).
#: Each provider ends with ``*``, its dearest price, for the models this table does not name; long-
#: context surcharges (Gemini above 200k tokens) are not modelled.
BUILTIN = PriceTable(
    entries=(
        Entry("anthropic", "claude-opus-4-0*", Price(15, 75, 1.5, 18.75)),
        Entry("anthropic", "claude-opus-4-1*", Price(15, 75, 1.5, 18.75)),
        Entry("anthropic", "claude-opus-4-2025*", Price(15, 75, 1.5, 18.75)),
        Entry("anthropic", "claude-opus-*", Price(5, 25, 0.5, 6.25)),
        Entry("anthropic", "claude-fable-*", Price(10, 50, 1, 12.5)),
        Entry("anthropic", "claude-mythos-*", Price(10, 50, 1, 12.5)),
        Entry("anthropic", "claude-sonnet-5*", Price(2, 10, 0.2, 2.5)),
        Entry("anthropic", "claude-sonnet-*", Price(3, 15, 0.3, 3.75)),
        Entry("anthropic", "claude-haiku-4*", Price(1, 5, 0.1, 1.25)),
        Entry("anthropic", "*", Price(15, 75, 1.5, 18.75)),
        Entry("openai", "gpt-5.6-sol*", Price(5, 30, 0.5, 6.25)),
        Entry("openai", "gpt-5.6-terra*", Price(2.5, 15, 0.25, 3.125)),
        Entry("openai", "gpt-5.6-luna*", Price(1, 6, 0.1, 1.25)),
        Entry("openai", "gpt-5.[45]-pro*", Price(30, 180, 30, 0)),
        Entry("openai", "gpt-5.5*", Price(5, 30, 0.5, 0)),
        Entry("openai", "gpt-5.4-mini*", Price(0.75, 4.5, 0.075, 0)),
        Entry("openai", "gpt-5.4-nano*", Price(0.2, 1.25, 0.02, 0)),
        Entry("openai", "gpt-5.4*", Price(2.5, 15, 0.25, 0)),
        Entry("openai", "gpt-5*-mini*", Price(0.25, 2, 0.025, 0)),
        Entry("openai", "gpt-5*-nano*", Price(0.05, 0.4, 0.005, 0)),
        Entry("openai", "gpt-5*", Price(1.25, 10, 0.125, 0)),
        Entry("openai", "o3*", Price(2, 8, 0.5, 0)),
        Entry("openai", "o4-mini*", Price(1.1, 4.4, 0.275, 0)),
        Entry("openai", "*", Price(30, 180, 30, 6.25)),
        Entry("gemini", "gemini-3.5-flash*", Price(1.5, 9, 0.15, 0)),
        Entry("gemini", "gemini-3*-pro*", Price(2, 12, 0.2, 0)),
        Entry("gemini", "gemini-3*-flash-lite*", Price(0.25, 1.5, 0.025, 0)),
        Entry("gemini", "gemini-3*-flash*", Price(0.5, 3, 0.05, 0)),
        Entry("gemini", "gemini-2.5-pro*", Price(1.25, 10, 0.125, 0)),
        Entry("gemini", "gemini-2.5-flash-lite*", Price(0.1, 0.4, 0.01, 0)),
        Entry("gemini", "gemini-2.5-flash*", Price(0.3, 2.5, 0.03, 0)),
        Entry("gemini", "*", Price(4, 18, 0.4, 0)),
    ),
    # The dearest price above, for a provider the table has no entry for (the OpenAI-compatible ones).
    default=Price(30, 180, 30, 18.75),
)


def load(path: str | Path) -> PriceTable:
    """``BATON_MODEL_PRICES``: the operator's table; ConfigError naming the file and the field."""
    source = f"BATON_MODEL_PRICES={path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("bad-setting", f"{source}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError("bad-setting", f"{source}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or set(data) - {"default", "models"} or "default" not in data:
        raise ConfigError("bad-setting", f"{source}: expected an object with `default` and optional `models`")
    default = _price(data["default"], f"{source}: default")
    entries = []
    for index, item in enumerate(data.get("models") or []):
        where = f"{source}: models[{index}]"
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("provider"), str)
            or not isinstance(item.get("model"), str)
        ):
            raise ConfigError("bad-setting", f"{where}: needs `provider` and `model` (a pattern) as strings")
        rest = {k: v for k, v in item.items() if k not in ("provider", "model")}
        entries.append(Entry(item["provider"], item["model"], _price(rest, where)))
    return PriceTable(tuple(entries), default, source=str(path))


def _price(value: object, where: str) -> Price:
    keys = ("input", "output", "cache_read", "cache_write")
    if not isinstance(value, dict) or set(value) != set(keys):
        raise ConfigError(
            "bad-setting", f"{where}: give exactly {', '.join(keys)} (US dollars per million tokens)"
        )
    numbers = [value[k] for k in keys]
    if not all(isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n <= 1e6 for n in numbers):
        raise ConfigError("bad-setting", f"{where}: each price must be a number from 0 to 1000000")
    return Price(*(float(n) for n in numbers))
