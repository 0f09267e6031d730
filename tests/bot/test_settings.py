"""Settings from the environment: the metrics settings, and no password in a repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import settings
from bot.errors import ConfigError
from bot.redis_server import EmbeddedRedis

TOKEN = "0123456789abcdef0123456789abcdef"


def test_metrics_settings_are_read() -> None:
    loaded = settings.load({"BATON_METRICS_PORT": "9091", "BATON_METRICS_TOKEN": TOKEN})
    assert (loaded.metrics_port, loaded.metrics_token) == (9091, TOKEN)
    assert (settings.load({}).metrics_port, settings.load({}).metrics_token) == (None, None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BATON_METRICS_PORT": "metrics"}, "BATON_METRICS_PORT must be a whole number"),
        ({"BATON_METRICS_PORT": "0"}, "BATON_METRICS_PORT must be between 1 and 65535"),
        ({"BATON_METRICS_PORT": "70000"}, "BATON_METRICS_PORT must be between 1 and 65535"),
        ({"BATON_METRICS_PORT": "3000"}, "BATON_METRICS_PORT must differ from PORT (3000)"),
        ({"BATON_METRICS_PORT": "8080", "PORT": "8080"}, "BATON_METRICS_PORT must differ from PORT (8080)"),
        ({"BATON_METRICS_TOKEN": "short"}, "BATON_METRICS_TOKEN must be 16 to 512"),
        ({"BATON_METRICS_TOKEN": "has spaces in the middle of it"}, "BATON_METRICS_TOKEN must be 16 to 512"),
    ],
)
def test_bad_metrics_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings.load(env)
    assert message in caught.value.message
    assert TOKEN not in caught.value.message


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2-secret@redis.internal:6379/0",
        "rediss://default:hunter2-secret@redis.internal:6380/0",
        "unix:///run/redis.sock?db=0&password=hunter2-secret",
    ],
)
def test_settings_repr_hides_every_secret(url: str) -> None:
    loaded = settings.load(
        {
            "REDIS_URL": url,
            "WEBHOOK_SECRET": "webhook-secret-value",
            "PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\\nprivate-key-body\\n",
            "BATON_METRICS_TOKEN": TOKEN,
        }
    )
    assert loaded.redis_url == url  # the value itself is intact
    for text in (repr(loaded), str(loaded), f"{loaded}"):
        for secret in ("hunter2-secret", "webhook-secret-value", "private-key-body", TOKEN):
            assert secret not in text
        assert "***" in text
        assert "/run/redis.sock" in text or "redis.internal" in text  # still says which Redis


def test_a_running_embedded_server_does_not_show_its_password(tmp_path: Path) -> None:
    with EmbeddedRedis(data_dir=tmp_path, durable=False) as server:
        password = server.url.split(":")[2].split("@")[0]
        assert len(password) > 10
        assert password not in repr(server)
        assert "127.0.0.1" in repr(server)


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("1", True), ("false", False), ("no", False)])
def test_require_org_policy_is_a_yes_or_no(raw: str, expected: bool) -> None:
    assert settings.load({"BATON_REQUIRE_ORG_POLICY": raw}).require_org_policy is expected
    assert settings.load({}).require_org_policy is False


def test_a_require_org_policy_that_is_neither_stops_start_up() -> None:
    with pytest.raises(ConfigError, match="BATON_REQUIRE_ORG_POLICY must be true or false"):
        settings.load({"BATON_REQUIRE_ORG_POLICY": "maybe"})


def test_agent_run_settings_are_read() -> None:
    routes = "api.anthropic.com=127.0.0.1:8788, API.OpenAI.com=10.0.0.2:443"
    loaded = settings.load({"BATON_DATA_DIR": "/var/lib/baton", "BATON_AGENT_ROUTES": routes,
                            "BATON_AGENT_MODEL_URL": "http://api.anthropic.com"})  # fmt: skip
    assert loaded.data_dir == Path("/var/lib/baton")
    assert loaded.agent_routes == (
        ("api.anthropic.com", "127.0.0.1", 8788),
        ("api.openai.com", "10.0.0.2", 443),
    )
    assert loaded.agent_model_url == "http://api.anthropic.com"
    assert settings.load({}).data_dir == Path.home() / ".local" / "share" / "baton"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"BATON_DATA_DIR": "relative/dir"}, "BATON_DATA_DIR must be an absolute path"),
        (
            {"BATON_AGENT_ROUTES": "api.anthropic.com"},
            "BATON_AGENT_ROUTES: 'api.anthropic.com': expected HOST=IP:PORT",
        ),
        ({"BATON_AGENT_ROUTES": "h=1.2.3.4:99999"}, "expected HOST=IP:PORT"),
        ({"BATON_AGENT_MODEL_URL": "ftp://x"}, "BATON_AGENT_MODEL_URL must be an http(s) URL"),
        ({"BATON_AGENT_MODEL_URL": "https://user:pw@gateway"}, "without credentials"),
    ],
)
def test_bad_agent_run_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings.load(env)
    assert message in caught.value.message
