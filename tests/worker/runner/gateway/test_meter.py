"""Metering: the usage each protocol reports, read from answers as they pass, cut anywhere.

The streams below are in each API's documented wire shape; every one is also fed to the meter
one byte at a time, because a provider's chunks can split an event (or a CRLF) anywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.errors import ConfigError
from worker.runner.gateway.meter import Meter, Usage
from worker.runner.gateway.prices import BUILTIN, Price, load
from worker.runner.gateway.providers import Protocol


def sse(*events: tuple[str | None, Any], crlf: bool = False) -> bytes:
    out = []
    for name, data in events:
        lines = ([f"event: {name}"] if name else []) + [
            f"data: {data if isinstance(data, str) else json.dumps(data)}"
        ]
        out.append("\n".join(lines) + "\n\n")
    text = "".join(out)
    return (text.replace("\n", "\r\n") if crlf else text).encode()


ANTHROPIC_STREAM = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "m",
                "usage": {
                    "input_tokens": 1200,
                    "cache_creation_input_tokens": 300,
                    "cache_read_input_tokens": 4000,
                    "output_tokens": 1,
                },
            },
        },
    ),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}),
    (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 87}},
    ),
    ("message_stop", {"type": "message_stop"}),
)
RESPONSES_STREAM = sse(
    ("response.created", {"type": "response.created", "response": {"usage": None}}),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hi"}),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {
                "usage": {
                    "input_tokens": 5000,
                    "input_tokens_details": {"cached_tokens": 4096},
                    "output_tokens": 120,
                    "output_tokens_details": {"reasoning_tokens": 100},
                    "total_tokens": 5120,
                }
            },
        },
    ),
)
CHAT_STREAM = sse(
    (None, {"choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None}),
    (
        None,
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 900,
                "completion_tokens": 30,
                "prompt_tokens_details": {"cached_tokens": 512},
            },
        },
    ),
    (None, "[DONE]"),
)
GEMINI_STREAM = sse(
    (
        None,
        {
            "candidates": [{"content": {"parts": [{"text": "h"}]}}],
            "usageMetadata": {"promptTokenCount": 700, "candidatesTokenCount": 1},
        },
    ),
    (
        None,
        {
            "candidates": [{"content": {"parts": [{"text": "i"}]}, "finishReason": "STOP"}],
            "usageMetadata": {
                "promptTokenCount": 700,
                "cachedContentTokenCount": 200,
                "candidatesTokenCount": 40,
                "thoughtsTokenCount": 60,
                "totalTokenCount": 800,
            },
        },
    ),
)

EXPECTED = {
    Protocol.ANTHROPIC: Usage(1200, 87, 4000, 300),
    Protocol.OPENAI_RESPONSES: Usage(904, 120, 4096, 0),
    Protocol.OPENAI_CHAT: Usage(388, 30, 512, 0),
    Protocol.GEMINI: Usage(500, 100, 200, 0),
}
STREAMS = {
    Protocol.ANTHROPIC: ANTHROPIC_STREAM,
    Protocol.OPENAI_RESPONSES: RESPONSES_STREAM,
    Protocol.OPENAI_CHAT: CHAT_STREAM,
    Protocol.GEMINI: GEMINI_STREAM,
}


def metered(protocol: Protocol, chunks: list[bytes], *, event_stream: bool = True) -> Usage:
    meter = Meter(protocol, event_stream=event_stream, request_bytes=4000)
    for chunk in chunks:
        meter.feed(chunk)
    return meter.finish()


@pytest.mark.parametrize("protocol", list(STREAMS))
@pytest.mark.parametrize("cut", ["whole", "bytes", "crlf-bytes"])
def test_a_streamed_answers_usage_is_read_however_it_is_cut(protocol: Protocol, cut: str) -> None:
    stream = STREAMS[protocol]
    if cut == "crlf-bytes":
        stream = stream.replace(b"\n", b"\r\n")
    chunks = [stream] if cut == "whole" else [stream[i : i + 1] for i in range(len(stream))]
    assert metered(protocol, chunks) == EXPECTED[protocol]


@pytest.mark.parametrize(
    ("protocol", "answer"),
    [
        (
            Protocol.ANTHROPIC,
            {
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "cache_read_input_tokens": 2,
                    "cache_creation_input_tokens": 3,
                }
            },
        ),
        (
            Protocol.OPENAI_RESPONSES,
            {"usage": {"input_tokens": 12, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 2}}},
        ),
        (Protocol.OPENAI_CHAT, {"usage": {"prompt_tokens": 12, "completion_tokens": 5}}),
        (Protocol.GEMINI, {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5}}),
    ],
)
def test_a_json_answers_usage_is_read_at_its_end(protocol: Protocol, answer: dict[str, Any]) -> None:
    raw = json.dumps(answer).encode()
    found = metered(protocol, [raw[:7], raw[7:]], event_stream=False)
    assert found.reported
    assert (found.input_tokens, found.output_tokens) in ((10, 5), (12, 5))


def test_geminis_json_array_stream_is_read_to_its_last_element() -> None:
    raw = json.dumps(
        [
            {"usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 1}},
            {"usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 9}},
        ]
    ).encode()
    assert metered(Protocol.GEMINI, [raw], event_stream=False) == Usage(7, 9, 0, 0)


def test_an_answer_cut_off_before_its_usage_is_estimated_not_counted_as_free() -> None:
    cut = ANTHROPIC_STREAM[: ANTHROPIC_STREAM.index(b"event: message_start")]  # nothing of the usage
    found = metered(Protocol.ANTHROPIC, [cut + b'event: content_block_delta\ndata: {"x": "' + b"y" * 4000])
    assert not found.reported
    assert found.input_tokens == 1000  # the request's 4000 bytes
    assert found.output_tokens > 0


def test_garbage_from_the_provider_never_raises() -> None:
    found = metered(Protocol.OPENAI_CHAT, [b"data: {not json\n\n", b"\xff\xfe\n\n", b"data: [DONE]\n\n"])
    assert found == Usage(1000, found.output_tokens, reported=False)


# -- prices ---------------------------------------------------------------------------------------


def test_the_built_in_prices_match_what_the_cli_reported() -> None:
    """Claude Code 2.1.197 reported costUSD 0.19079 for two calls of claude-opus-4-8 with 38,088 input and
    14 output tokens [observed through the gateway]; the table must agree."""
    price, matched = BUILTIN.price("anthropic", "claude-opus-4-8")
    assert matched == "anthropic/claude-opus-*"
    assert price.cost(Usage(38088, 14)) == pytest.approx(0.19079)


def test_an_unknown_model_is_priced_at_its_providers_dearest() -> None:
    assert BUILTIN.price("anthropic", "claude-brand-new")[1] == "anthropic/*"
    assert BUILTIN.price("anthropic", "claude-brand-new")[0] == Price(15, 75, 1.5, 18.75)
    assert BUILTIN.price("mistral", "mistral-large")[1] == "default"


def test_an_operators_price_table_is_read_and_checked(tmp_path: Any) -> None:
    good = tmp_path / "prices.json"
    good.write_text(
        json.dumps(
            {
                "default": {"input": 1, "output": 2, "cache_read": 0, "cache_write": 0},
                "models": [
                    {
                        "provider": "anthropic",
                        "model": "claude-*",
                        "input": 3,
                        "output": 4,
                        "cache_read": 0.5,
                        "cache_write": 5,
                    }
                ],
            }
        )
    )
    table = load(good)
    assert table.price("anthropic", "claude-x") == (Price(3, 4, 0.5, 5), "anthropic/claude-*")
    assert table.price("openai", "gpt") == (Price(1, 2, 0, 0), "default")
    for bad, said in (
        ("{", "not JSON"),
        ('{"models": []}', "expected an object with `default`"),
        ('{"default": {"input": 1}}', "give exactly input, output, cache_read, cache_write"),
        ('{"default": {"input": -1, "output": 1, "cache_read": 0, "cache_write": 0}}', "from 0 to 1000000"),
        (
            '{"default": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0}, "models": [{"x": 1}]}',
            "models[0]: needs `provider` and `model`",
        ),
    ):
        good.write_text(bad)
        with pytest.raises(ConfigError, match="BATON_MODEL_PRICES") as caught:
            load(good)
        assert said in caught.value.message


def test_openai_cache_writes_are_taken_out_of_the_input_and_priced_as_writes() -> None:
    """gpt-5.6 bills explicit cache writes apart (input_tokens_details.cache_write_tokens)."""
    details = {"cached_tokens": 4096, "cache_write_tokens": 200}
    answer = {"usage": {"input_tokens": 5000, "output_tokens": 10, "input_tokens_details": details}}
    found = metered(Protocol.OPENAI_RESPONSES, [json.dumps(answer).encode()], event_stream=False)
    assert found == Usage(704, 10, 4096, 200)
    price, matched = BUILTIN.price("openai", "gpt-5.6-sol")
    assert matched == "openai/gpt-5.6-sol*"
    assert price.cost(found) == pytest.approx((704 * 5 + 10 * 30 + 4096 * 0.5 + 200 * 6.25) / 1e6)


def test_each_providers_fallback_is_its_dearest_price_in_every_column() -> None:
    """A model the table does not name (a new one) is never priced below a named one: the cap fails closed."""
    for provider in ("anthropic", "openai", "gemini"):
        named = [e.price for e in BUILTIN.entries if e.provider == provider and e.model != "*"]
        fallback, matched = BUILTIN.price(provider, "a-model-from-next-year")
        assert matched == f"{provider}/*"
        for column in ("input", "output", "cache_read", "cache_write"):
            assert getattr(fallback, column) >= max(getattr(p, column) for p in named), (provider, column)
