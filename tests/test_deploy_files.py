"""The deployment files, read as the platforms read them: fly.toml (tomllib), the Dockerfile and its
.dockerignore (as text: no Docker daemon needed). `scripts/docker-smoke` builds and runs the image."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from baton import settings
from baton.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SECRETS = (
    "REDIS_URL",
    "APP_ID",
    "PRIVATE_KEY",
    "WEBHOOK_SECRET",
    "BATON_SIGNING_KEY",
    "BATON_AUDIT_SECRET",
    "BATON_PUBLIC_URL",
)
_SECRET_WORD = re.compile(r"SECRET|TOKEN|PASSWORD|PRIVATE|_KEY\b|^KEY|REDIS_URL")


def fly() -> dict[str, Any]:
    return tomllib.loads((ROOT / "fly.toml").read_text())


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) per Dockerfile instruction, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def instructions(name: str) -> list[str]:
    return [rest for word, rest in dockerfile() if word == name]


def entrypoint() -> list[str]:
    (value,) = instructions("ENTRYPOINT")
    argv: list[str] = json.loads(value)
    return argv


# -- fly.toml -------------------------------------------------------------------------------------


def test_fly_runs_serve_and_worker_from_the_dockerfile() -> None:
    config = fly()
    assert config["build"]["dockerfile"] == "Dockerfile"
    assert (ROOT / config["build"]["dockerfile"]).is_file()
    # A process group's command replaces the image's CMD, not its ENTRYPOINT (`baton`).
    commands = {group: [*entrypoint(), *shlex.split(cmd)] for group, cmd in config["processes"].items()}
    assert commands == {"web": ["baton", "serve"], "worker": ["baton", "worker"]}
    parser = build_parser()
    for argv in commands.values():
        assert parser.parse_args(argv[1:]).handler is not None


def test_fly_http_service_is_the_web_group_checked_on_readyz() -> None:
    config = fly()
    http = config["http_service"]
    assert http["processes"] == ["web"]
    assert str(http["internal_port"]) == config["env"]["PORT"]
    assert [check["path"] for check in http["checks"]] == ["/readyz"]
    assert config["env"]["HOST"] == "0.0.0.0"  # reachable by Fly's proxy


def test_fly_keeps_metrics_off_the_public_port() -> None:
    config = fly()
    metrics_port = int(config["env"]["BATON_METRICS_PORT"])
    assert metrics_port != config["http_service"]["internal_port"]
    assert [(m["port"], m["path"]) for m in config["metrics"]] == [(metrics_port, "/metrics")]
    # Nothing public serves the metrics port.
    assert all(s.get("internal_port") != metrics_port for s in config.get("services", []))


def test_fly_env_is_valid_and_holds_no_secret() -> None:
    env = fly()["env"]
    settings.load(env)  # raises on a bad value or an unknown BATON_* name
    assert not [name for name in env if name in SECRETS or _SECRET_WORD.search(name)]


def test_fly_toml_says_how_to_set_the_secrets_and_scale() -> None:
    text = (ROOT / "fly.toml").read_text()
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert "fly secrets set" in comments
    for name in SECRETS:
        assert f"{name}=" in comments, name
    assert re.search(r"fly scale count [^`]*worker=", comments)
    assert 'baton doctor"' in comments


# -- Dockerfile ----------------------------------------------------------------------------------


def test_dockerfile_base_is_a_pinned_slim_python() -> None:
    args = dict(arg.split("=", 1) for arg in instructions("ARG") if "=" in arg)
    (base,) = instructions("FROM")
    assert base == "${BASE}"
    assert re.fullmatch(r"python:3\.1[12]-slim(-[a-z]+)?", args["BASE"].strip('"')), args["BASE"]


def test_dockerfile_runs_baton_as_a_non_root_user() -> None:
    words = [word for word, _ in dockerfile()]
    users = instructions("USER")
    assert users, "no USER: the container would run as root"
    assert users[-1] not in ("root", "0")
    assert not users[-1].startswith(("0:", "root:"))
    assert words.index("USER") < words.index("ENTRYPOINT")
    assert entrypoint() == ["baton"]
    assert json.loads(instructions("CMD")[-1]) == ["serve"]


def test_dockerfile_installs_what_the_box_needs() -> None:
    runs = " ".join(instructions("RUN"))
    installs = re.findall(r"apt-get install ([^;&]*)", runs)
    always = installs[0].split()
    for package in ("git", "bubblewrap"):
        assert package in always, package
    assert "nodejs" not in always
    assert "npm" not in always
    # Node.js only when an npm agent CLI is asked for.
    only_for_agents = re.search(r'if \[ -n "\$\{packages\}" \]; then (.*?) fi', runs)
    assert only_for_agents is not None
    assert "apt-get install -y --no-install-recommends nodejs npm" in only_for_agents.group(1)


def test_dockerfile_pins_the_agent_clis_of_ci() -> None:
    assert any(arg.startswith("AGENTS=") for arg in instructions("ARG"))
    ci = (ROOT / ".ci" / "agent-clis").read_text()
    npm = re.findall(r'^\s*"(\S+) (\S+) \S+"$', ci, re.MULTILINE)
    pip = re.findall(r'^\s*"(\S+) (\S+) \S+ --\S+"$', ci, re.MULTILINE)
    assert npm, "no npm pins found in .ci/agent-clis"
    assert pip, "no PyPI pins found in .ci/agent-clis"
    runs = " ".join(instructions("RUN"))
    assert dict(re.findall(r"((?:@[a-z0-9-]+/)?[a-z0-9-]+)@(\d+\.\d+\.\d+)", runs)) == dict(npm)
    assert dict(re.findall(r":([a-z0-9-]+)==(\d+\.\d+\.\d+)", runs)) == dict(pip)
    assert "npm install" in runs


def test_dockerfile_bakes_in_no_credential() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "BEGIN" not in text
    for word in ("ENV", "ARG", "LABEL"):
        for line in instructions(word):
            names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", " " + line)
            names += [line.split("=")[0].split()[0]] if word == "ARG" else []
            assert not [n for n in names if n in SECRETS or _SECRET_WORD.search(n)], line
    for copy in instructions("COPY") + instructions("ADD"):
        assert ".env" not in copy
        assert ".pem" not in copy


@pytest.mark.parametrize(
    "pattern", [".env", ".env.*", "*.pem", "**/*.pem", ".venv/", ".git/", ".pytest_cache/", ".hypothesis/"]
)
def test_dockerignore_keeps_secrets_and_caches_out(pattern: str) -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert pattern in patterns


def test_dockerignore_keeps_what_the_image_needs() -> None:
    patterns = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    for needed in ("app-manifest.yml", "pyproject.toml", "README.md", "bot/", "worker/", "evidence/"):
        assert needed not in patterns
        assert needed.rstrip("/") not in patterns


def test_the_smoke_script_is_there() -> None:
    script = ROOT / "scripts" / "docker-smoke"
    assert script.is_file()
    assert script.read_text().startswith("#!/usr/bin/env bash")
