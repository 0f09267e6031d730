"""The worker's settings for the model gateway, as `baton worker` reads them at start-up."""

from __future__ import annotations

import pytest

from baton import settings
from baton.errors import ConfigError
from worker import context


def test_upstreams_for_providers_the_gateway_serves_are_taken() -> None:
    config = settings.load({"BATON_MODEL_UPSTREAMS": "anthropic=http://127.0.0.1:9/a,gemini=https://relay"})
    assert dict(context.model_upstreams(config)) == {
        "anthropic": "http://127.0.0.1:9/a",
        "gemini": "https://relay",
    }


def test_an_upstream_for_a_provider_the_gateway_does_not_serve_stops_start_up() -> None:
    config = settings.load({"BATON_MODEL_UPSTREAMS": "anthropic=https://relay,claude=https://relay"})
    with pytest.raises(ConfigError) as caught:
        context.model_upstreams(config)
    assert caught.value.code == "bad-setting"
    assert caught.value.message.startswith("BATON_MODEL_UPSTREAMS: 'claude' is not a provider")
    assert "anthropic" in caught.value.message  # the names that would do
