"""Settings from the environment: metrics, agent runs, evidence keys, and no secret in a repr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from baton import settings
from baton.errors import ConfigError
from baton.redis_server import EmbeddedRedis
from evidence.keys import SigningKey, keys_document

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
    routes = "pypi.org=127.0.0.1:8788, Files.Example.com=10.0.0.2:443"
    upstreams = "anthropic=https://llm.example.com/anthropic/, openai=http://127.0.0.1:8788"
    loaded = settings.load({"BATON_DATA_DIR": "/var/lib/baton", "BATON_AGENT_ROUTES": routes,
                            "BATON_MODEL_UPSTREAMS": upstreams,
                            "BATON_MODEL_PRICES": "/etc/baton/prices.json"})  # fmt: skip
    assert loaded.data_dir == Path("/var/lib/baton")
    assert loaded.agent_routes == (("pypi.org", "127.0.0.1", 8788), ("files.example.com", "10.0.0.2", 443))
    assert loaded.model_upstreams == (
        ("anthropic", "https://llm.example.com/anthropic"),
        ("openai", "http://127.0.0.1:8788"),
    )
    assert loaded.model_prices_path == Path("/etc/baton/prices.json")
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
        ({"BATON_MODEL_UPSTREAMS": "anthropic=ftp://x"}, "BATON_MODEL_UPSTREAMS: 'anthropic=ftp://x'"),
        ({"BATON_MODEL_UPSTREAMS": "anthropic=https://user:pw@gateway"}, "no credentials"),
        ({"BATON_MODEL_UPSTREAMS": "https://gateway"}, "expected PROVIDER=URL"),
        ({"BATON_MODEL_UPSTREAMS": "openai=http://a,openai=http://b"}, "names a provider twice"),
        ({"BATON_MODEL_PRICES": "prices.json"}, "BATON_MODEL_PRICES must be an absolute path"),
        # Retired: a setting that no longer does anything must not be silently ignored.
        ({"BATON_AGENT_MODEL_URL": "http://api.anthropic.com"}, "BATON_AGENT_MODEL_URL is retired"),
    ],
)
def test_bad_agent_run_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings.load(env)
    assert message in caught.value.message


AUDIT = "a" * 32


def test_evidence_settings_are_read(tmp_path: Path) -> None:
    key, old = SigningKey.generate(), SigningKey.generate("ecdsa-p256")
    (tmp_path / "key.pem").write_bytes(key.private_pem())
    # Retired keys as a keys document that also lists the current key: published once, current first.
    retired = tmp_path / "keys.json"
    retired.write_text(json.dumps(keys_document([old.public, key.public])))
    loaded = settings.load({"BATON_SIGNING_KEY_PATH": str(tmp_path / "key.pem"), "BATON_AUDIT_SECRET": AUDIT,
                            "BATON_VERIFY_KEYS_PATH": str(retired),
                            "BATON_PUBLIC_URL": "https://baton.example.com/"})  # fmt: skip
    assert loaded.signing_key is not None
    assert loaded.signing_key.keyid == key.keyid
    assert loaded.retired_keys == (old.public, key.public)
    assert loaded.public_keys == (key.public, old.public)
    assert loaded.audit_secret == AUDIT.encode()
    assert loaded.public_url == "https://baton.example.com"
    assert loaded.missing_evidence() is None
    for text in (repr(loaded), str(loaded)):
        assert AUDIT not in text
        assert "PRIVATE KEY" not in text
        assert "public_url='https://baton.example.com'" in text


def test_a_signing_key_in_the_environment_may_use_literal_newlines() -> None:
    key = SigningKey.generate()
    flat = key.private_pem().decode().replace("\n", "\\n")
    loaded = settings.load({"BATON_SIGNING_KEY": flat})
    assert loaded.signing_key is not None
    assert loaded.signing_key.keyid == key.keyid
    # A private key's public half is enough to publish a retired key.
    assert loaded.public_keys == (key.public,)


def test_missing_evidence_names_what_is_missing_and_the_fix() -> None:
    nothing = settings.load({})
    assert (nothing.signing_key, nothing.audit_secret, nothing.retired_keys, nothing.public_keys) == (
        None, None, (), ())  # fmt: skip
    message = nothing.missing_evidence()
    assert message is not None
    assert message.startswith("Baton never publishes unsigned evidence: ")
    assert "baton keys generate --out DIR" in message
    assert "BATON_SIGNING_KEY_PATH=DIR/baton-signing-key.pem" in message
    assert "BATON_AUDIT_SECRET" in message
    key_only = settings.load({"BATON_SIGNING_KEY": SigningKey.generate().private_pem().decode()})
    assert "BATON_AUDIT_SECRET" in (key_only.missing_evidence() or "")
    assert "BATON_SIGNING_KEY" not in (key_only.missing_evidence() or "")
    secret_only = settings.load({"BATON_AUDIT_SECRET": AUDIT}).missing_evidence() or ""
    assert "BATON_SIGNING_KEY_PATH" in secret_only
    assert "BATON_AUDIT_SECRET" not in secret_only


def _bad_evidence_settings(tmp_path: Path) -> list[tuple[dict[str, str], str]]:
    pem = SigningKey.generate().private_pem().decode()
    files = {
        "garbage.pem": "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
        "public.pem": SigningKey.generate().public.pem(),
        "rsa.pem": rsa.generate_private_key(public_exponent=65537, key_size=1024)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode(),
        "empty.json": '{"keys": []}',
        "text.txt": "not a key at all",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return [
        ({"BATON_SIGNING_KEY": "not a pem"}, "BATON_SIGNING_KEY is not a PEM private key"),
        ({"BATON_SIGNING_KEY": files["garbage.pem"]}, "BATON_SIGNING_KEY: not a PEM private key"),
        ({"BATON_SIGNING_KEY_PATH": str(tmp_path / "garbage.pem")}, "BATON_SIGNING_KEY_PATH="),
        ({"BATON_SIGNING_KEY_PATH": str(tmp_path / "public.pem")}, "not a PEM private key"),
        ({"BATON_SIGNING_KEY_PATH": str(tmp_path / "rsa.pem")}, "RSAPrivateKey is not supported"),
        ({"BATON_SIGNING_KEY_PATH": str(tmp_path / "missing.pem")}, "cannot read it (No such file"),
        ({"BATON_SIGNING_KEY": pem, "BATON_SIGNING_KEY_PATH": "/k.pem"}, "BATON_SIGNING_KEY_PATH, not both"),
        ({"BATON_VERIFY_KEYS_PATH": str(tmp_path / "empty.json")}, "BATON_VERIFY_KEYS_PATH="),
        ({"BATON_VERIFY_KEYS_PATH": str(tmp_path / "text.txt")}, "no PEM public key and no keys document"),
        ({"BATON_VERIFY_KEYS_PATH": str(tmp_path / "missing.json")}, "BATON_VERIFY_KEYS_PATH="),
        ({"BATON_AUDIT_SECRET": "short-secret"}, "BATON_AUDIT_SECRET is 12 characters, it must be at least"),
        ({"BATON_PUBLIC_URL": "baton.example.com"}, "BATON_PUBLIC_URL must be the http(s) URL"),
        ({"BATON_PUBLIC_URL": "ftp://baton.example.com"}, "BATON_PUBLIC_URL must be"),
        ({"BATON_PUBLIC_URL": "https://baton.example.com/?x=1"}, "BATON_PUBLIC_URL must be"),
        ({"BATON_PUBLIC_URL": "https://baton.example.com:99999"}, "BATON_PUBLIC_URL must be"),
        ({"BATON_PUBLIC_URL": "https://user:hunter2-secret@baton.example.com"}, "without credentials"),
    ]  # fmt: skip


def test_bad_evidence_settings_name_the_variable_and_the_fix(tmp_path: Path) -> None:
    for env, message in _bad_evidence_settings(tmp_path):
        with pytest.raises(ConfigError) as caught:
            settings.load(env)
        assert caught.value.code == "bad-setting"
        assert message in caught.value.message, (env, caught.value.message)
        assert "\n" not in caught.value.message
        assert "hunter2-secret" not in caught.value.message
        assert "short-secret" not in caught.value.message
        if ("BATON_SIGNING_KEY" in env) != ("BATON_SIGNING_KEY_PATH" in env):
            assert "baton keys generate --out DIR" in caught.value.message
