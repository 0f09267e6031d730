"""No LLM SDK is imported anywhere in Baton's coordination code (bot/ and worker/).

Checked two ways: statically (every import statement in every module) and at
run time (import every module, then look at sys.modules).
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import bot
import worker

ROOT = Path(__file__).resolve().parent.parent
LLM_SDKS = (
    "anthropic", "openai", "claude_agent_sdk", "claude_code_sdk", "google.generativeai", "google.genai",
    "vertexai", "litellm", "langchain", "langchain_core", "langgraph", "llama_index", "cohere", "mistralai",
    "groq", "together", "ollama", "transformers", "huggingface_hub", "dspy", "instructor", "guidance",
    "semantic_kernel", "autogen", "crewai", "smolagents", "pydantic_ai",
)  # fmt: skip


def _is_llm(module: str) -> bool:
    return any(module == sdk or module.startswith(sdk + ".") for sdk in LLM_SDKS)


def test_no_module_imports_an_llm_sdk() -> None:
    offenders = []
    for package in ("bot", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
                    names = [
                        a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    ]
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if _is_llm(n)]
    assert offenders == []


def test_the_detector_catches_an_llm_import() -> None:
    for name in ("anthropic", "openai.types", "google.genai", "langchain_core.messages"):
        assert _is_llm(name), name
    for name in ("openapi", "anthropic_like_name", "githubkit", "rq"):
        assert not _is_llm(name), name


def test_importing_all_of_baton_loads_no_llm_sdk() -> None:
    modules = [
        m.name for pkg in (bot, worker) for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = out.stdout.split()
    assert "bot.webhooks" in loaded
    assert "worker.jobs" in loaded
    assert [m for m in loaded if _is_llm(m)] == []
