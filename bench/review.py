#!/usr/bin/env python3
"""bench/review.py: what a reviewer (``review:``) adds to an agent run, in time.

    .venv/bin/python bench/review.py [--runs 7] [--quick]

The same ``script``-agent run (the runner's whole path: gate, box, inspection, one commit; no
GitHub, no Redis) on a small repository, ``--runs`` times without a reviewer and as many times
with one, interleaved (A, B, A, B…), after one warm-up of each. "With" is the run followed by the
review of its commit (``worker.runner.review.run``: the gate on the reviewer, the result tree
exported read-only, the reviewer in its box with its own model gateway, the verdict), which is
where the review sits in a worker's run, before the push. The reviewer's model is the model
stand-in, answering a clean verdict at once: what is measured is Baton's cost and the reviewer
CLI's own start-up, not a model's thinking time (a real model adds its latency on top).

Reviewers: the demo's ``review_agent.py`` (``command`` adapter: Python, one Chat Completions call),
and the real Claude Code CLI where it is installed (``claude`` on PATH, or ``--clis DIR``).

The last line is one JSON object with every figure (seconds): per reviewer, the added time per run
(median, min, max, p90 of "with" minus the paired "without"), and both series.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulator.model.standin import ModelStandin  # noqa: E402
from worker.policy import merge, org_policy, parse  # noqa: E402
from worker.runner import box, review, review_prompt, verdict  # noqa: E402
from worker.runner import run as runner  # noqa: E402

KEY = "sk-bench-reviewer-key"
CLEAN = {c: {"found": False, "reasons": [], "locations": []} for c in verdict.CATEGORIES}
GIT = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@localhost", "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip
RECIPE = {"steps": [{"op": "write", "path": "docs/hello.md", "content": "Hello from the bench\n"}]}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **GIT})  # fmt: skip
    return done.stdout.strip()


def org(program: Path) -> str:
    return f"""\
version: 1
agents:
  script:
    adapter: script
    tools: [read_repo, edit_files]
  minimal:
    adapter: command
    command: ["{program}", "{{prompt_file}}", "mistral"]
    tools: [read_repo]
    model_endpoints: [api.mistral.ai]
    env: [MISTRAL_API_KEY]
  claude:
    adapter: claude-code
    tools: [read_repo]
    model_endpoints: [api.anthropic.com]
    env: [ANTHROPIC_API_KEY]
"""


def one_run(repo: Path, base: str, policy: Any, run_id: str) -> runner.RunRecord:
    issue = runner.Issue("Add a hello page", f"```baton-recipe\n{json.dumps(RECIPE)}\n```\n")
    request = runner.RunRequest(agent="script", repo=repo, base=base, issue=issue, policy=policy,
                                repo_private=True, run_id=run_id)  # fmt: skip
    record = runner.run(request)
    if record.outcome != "done" or record.commit is None:
        raise SystemExit(f"the script agent's run did not commit: {record.outcome}: {record.reason}")
    return record


def one_review(
    repo: Path, base: str, commit: str, policy: Any, *, standin: ModelStandin, search: str
) -> float:
    material = review_prompt.Material("run", "Add a hello page", "Please add docs/hello.md.", diff="")
    request = review.ReviewRequest(
        policy=policy, repo=repo, base=base, head=commit, material=material, repo_private=True,
        run_id="bench",
        model_keys={"MISTRAL_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY},
        model_upstreams={"mistral": standin.url, "anthropic": standin.url}, search_path=search,
    )  # fmt: skip
    started = time.perf_counter()
    done = review.run(request)
    took = time.perf_counter() - started
    if not done.passed:
        raise SystemExit(f"the review did not pass: {done.result}: {done.detail} {done.quoted or ''}")
    return took


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = statistics.quantiles(ordered, n=10)[-1] if len(ordered) >= 2 else ordered[0]
    return {"median_s": round(statistics.median(ordered), 3), "min_s": round(ordered[0], 3),
            "max_s": round(ordered[-1], 3), "p90_s": round(p90, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 runs of each")
    parser.add_argument(
        "--clis", type=Path, default=Path.home() / ".cache" / "baton-ci" / "agent-clis" / "bin"
    )
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    if box.probe().bwrap is None:
        print(json.dumps({"skipped": "bwrap is missing or cannot run here"}))
        return
    search = f"{args.clis}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    reviewers = ["minimal"] + (["claude"] if shutil.which("claude", path=search) else [])
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    figures: dict[str, Any] = {"runs": runs, "machine": machine, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="baton-bench-review-") as tmp, \
            ModelStandin({"steps": [{"text": json.dumps(CLEAN)}]}, api_key=KEY) as standin:  # fmt: skip
        program = Path(tmp) / "bin" / "review-agent"
        program.parent.mkdir()
        shutil.copyfile(ROOT / "demo" / "review_agent.py", program)
        program.chmod(0o755)
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        for n in range(20):
            (repo / f"src{n}.py").write_text(f"def f{n}():\n    return {n}\n" * 20)
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "base")
        base = git(repo, "rev-parse", "HEAD")
        for name in reviewers:
            policy = merge(org_policy(parse(org(program) + f"review: {{agent: {name}, timeout: 2m}}\n",
                                            "org.yml")), None).policy  # fmt: skip
            without, with_review, added = [], [], []
            for index in range(runs + 1):  # the first pair warms up
                started = time.perf_counter()
                one_run(repo, base, policy, f"a{name}{index}")
                plain = time.perf_counter() - started
                started = time.perf_counter()
                record = one_run(repo, base, policy, f"b{name}{index}")
                alone = time.perf_counter() - started
                reviewed = one_review(repo, base, str(record.commit), policy, standin=standin, search=search)
                if index == 0:
                    continue
                without.append(plain)
                with_review.append(alone + reviewed)
                added.append(alone + reviewed - plain)
            figures[name] = {"adapter": policy.agents[name].adapter, "added": stats(added),
                             "without": stats(without), "with": stats(with_review)}  # fmt: skip
            got = figures[name]
            print(f"{name:8} ({got['adapter']}): added per run median {got['added']['median_s']} s "
                  f"(min {got['added']['min_s']}, max {got['added']['max_s']}); "
                  f"without {got['without']['median_s']} s, with {got['with']['median_s']} s")  # fmt: skip
    figures["load_after"] = os.getloadavg()[0]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
