"""Each real agent CLI on the Chat Completions or Gemini dialect, run directly (no box) against the stand-in
on loopback with a private HOME and git checkout: one provider-neutral script makes every one of them
write the same file."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.model.standin import ModelStandin

PROMPT = "Create the file hello.txt containing hello"
SCRIPT = {"steps": [{"write": {"path": "hello.txt", "content": "hello\n"}}, {"text": "Created hello.txt."}]}
TIMEOUT = 180


def _executable(agent_cli_bin: Path, name: str) -> Path:
    """The CLI from the fixture's directory, else from the installer's ``bin`` two levels up."""
    for directory in (agent_cli_bin, agent_cli_bin.parent.parent / "bin"):
        if (directory / name).exists():
            return directory / name
    raise AssertionError(
        f"{name} is not installed under {agent_cli_bin} or {agent_cli_bin.parent.parent}/bin"
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "T"]):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    (repo / "README.md").write_text("seed\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "seed"], cwd=repo, check=True)
    return repo


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[ModelStandin]:
    with ModelStandin(SCRIPT, record_dir=tmp_path / "record", api_key="k") as server:
        yield server


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A private HOME and no proxy settings (Qwen Code ignores NO_PROXY), plus the CLI's own variables."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    return {**base, "NO_PROXY": "127.0.0.1,localhost", **extra}


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _assert_wrote(done: subprocess.CompletedProcess[str], checkout: Path, standin: ModelStandin) -> None:
    served = [(r["dialect"], r["served"], r["step"]) for r in standin.requests()]
    detail = (
        f"rc={done.returncode}\nrequests={served}\nstdout={done.stdout[-2000:]}\nstderr={done.stderr[-2000:]}"
    )
    assert (checkout / "hello.txt").read_text() == "hello\n", detail


def test_gemini_cli_writes_the_file(
    agent_cli_bin: Path, tmp_path: Path, checkout: Path, standin: ModelStandin
) -> None:
    env = _env(
        tmp_path,
        GEMINI_API_KEY="k",
        GOOGLE_GEMINI_BASE_URL=standin.url,
        GEMINI_CLI_HOME=str(tmp_path / "home"),
    )
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"maxAttempts": 1},
            }
        )
    )
    gemini = str(_executable(agent_cli_bin, "gemini"))
    done = _run(
        [gemini, "-m", "gemini-2.5-pro", "-p", PROMPT, "--yolo", "--skip-trust", "-o", "json"], checkout, env
    )
    _assert_wrote(done, checkout, standin)
    first = standin.requests()[0]
    assert (first["path"], first["query"], first["dialect"]) == (
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        {"alt": "sse"},
        "gemini",
    )
    assert [r["step"] for r in standin.requests()] == [0, 1]


def test_qwen_code_writes_the_file(
    agent_cli_bin: Path, tmp_path: Path, checkout: Path, standin: ModelStandin
) -> None:
    qwen_home = tmp_path / "qwen-home"
    qwen_home.mkdir()
    (qwen_home / "settings.json").write_text(
        json.dumps(
            {"privacy": {"usageStatisticsEnabled": False}, "model": {"generationConfig": {"maxRetries": 0}}}
        )
    )
    env = _env(
        tmp_path,
        OPENAI_API_KEY="k",
        OPENAI_BASE_URL=standin.openai_base_url,
        OPENAI_MODEL="qwen-m",
        QWEN_HOME=str(qwen_home),
    )
    done = _run([str(_executable(agent_cli_bin, "qwen")), PROMPT, "--yolo", "-o", "json"], checkout, env)
    _assert_wrote(done, checkout, standin)
    assert [(r["dialect"], r["body"]["stream"], r["step"]) for r in standin.requests()] == [
        ("openai-chat", True, 0),
        ("openai-chat", True, 1),
    ]


def test_opencode_writes_the_file(
    agent_cli_bin: Path, tmp_path: Path, checkout: Path, standin: ModelStandin
) -> None:
    config = {
        "provider": {
            "p": {
                "npm": "@ai-sdk/openai-compatible",
                "models": {"m": {}},
                "options": {"baseURL": standin.openai_base_url, "apiKey": "k"},
            }
        },
        "model": "p/m",
        "small_model": "p/m",
    }
    env = _env(
        tmp_path,
        OPENCODE_CONFIG_CONTENT=json.dumps(config),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        npm_config_registry="http://127.0.0.1:9/",
    )
    done = _run(
        [str(_executable(agent_cli_bin, "opencode")), "run", "--format", "json", PROMPT], checkout, env
    )
    _assert_wrote(done, checkout, standin)
    # Its title request offers no tools: a clear 400 it shrugs off, not a wrong guess.
    served = [(r["served"], r["step"]) for r in standin.requests()]
    assert served[0] == ("bad_script", 0)
    assert served[-2:] == [("answer", 0), ("answer", 1)]


def test_aider_writes_the_file(
    agent_cli_bin: Path, tmp_path: Path, checkout: Path, standin: ModelStandin
) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(
        json.dumps(
            {
                "openai/m": {
                    "max_tokens": 4096,
                    "max_input_tokens": 100000,
                    "max_output_tokens": 4096,
                    "input_cost_per_token": 0,
                    "output_cost_per_token": 0,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
        )
    )
    env = _env(
        tmp_path,
        OPENAI_API_KEY="k",
        OPENAI_API_BASE=standin.openai_base_url,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    argv = [
        str(_executable(agent_cli_bin, "aider")),
        "--model",
        "openai/m",
        "--model-metadata-file",
        str(meta),
        "--no-check-update",
        "--analytics-disable",
        "--no-auto-commits",
        "--no-dirty-commits",
        "--no-gitignore",
        "--yes-always",
        "--no-pretty",
        "--map-tokens",
        "0",
        "--chat-history-file",
        "/dev/null",
        "--input-history-file",
        "/dev/null",
        "--no-show-model-warnings",
        "--message",
        PROMPT,
    ]
    done = _run(argv, checkout, env)
    _assert_wrote(done, checkout, standin)
    assert "with whole edit format" in done.stdout
    assert [(r["served"], r["turn"]) for r in standin.requests()] == [("answer", 0)]


def test_mini_swe_agent_writes_the_file_and_submits(
    agent_cli_bin: Path, tmp_path: Path, checkout: Path, standin: ModelStandin
) -> None:
    env = _env(
        tmp_path,
        MSWEA_CONFIGURED="true",
        MSWEA_COST_TRACKING="ignore_errors",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT="1",
        OPENAI_API_KEY="k",
        OPENAI_API_BASE=standin.openai_base_url,
    )
    trajectory = tmp_path / "traj.json"
    argv = [
        str(_executable(agent_cli_bin, "mini")),
        "-m",
        "openai/m",
        "--yolo",
        "--exit-immediately",
        "-t",
        PROMPT,
        "-o",
        str(trajectory),
    ]
    done = _run(argv, checkout, env)
    _assert_wrote(done, checkout, standin)
    assert json.loads(trajectory.read_text())["info"]["exit_status"] == "Submitted"
    assert [("stream" in r["body"], r["step"]) for r in standin.requests()] == [(False, 0), (False, 1)]
