"""Micro-benchmark of decide() for a 10-tool agent (issue 4 target: median <= 20 us).

Run from the repository root:  python bench/decide.py [--iterations N]

Each call is timed on its own with perf_counter_ns (the timer's own cost, about
0.1 us, is included, so figures are slightly pessimistic). The policy digest is
computed once per Policy and cached, as in the worker, so this measures the
decision itself. Two cases: a private repo (denied, with remedies: the longer
path) and its --offline retry (allowed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.policy import Agent, Axis, Policy, TaskFacts, decide

TOOLS = (
    "read_repo",
    "search_repo",
    "edit_files",
    "run_shell",
    "web_fetch",
    "web_search",
    "git_push",
    "github_api_read",
    "my-mcp-search",  # declared in the policy's tools: section
    "mystery",  # unknown: all three axes
)

POLICY = Policy(
    agents={
        "claude-code": Agent(
            adapter="claude-code",
            tools=TOOLS,
            model_endpoints=("api.anthropic.com",),
            egress=("pypi.org", "files.pythonhosted.org"),
            env=("ANTHROPIC_API_KEY", "SENTRY_DSN"),
        )
    },
    tools={"my-mcp-search": frozenset({Axis.UNTRUSTED_INPUT, Axis.EXTERNAL_COMM})},
)


def measure(facts: TaskFacts, iterations: int) -> tuple[float, float, bool]:
    for _ in range(2000):
        decide(POLICY, facts)
    samples = [0] * iterations
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for i in range(iterations):
            start = clock()
            decide(POLICY, facts)
            samples[i] = clock() - start
    finally:
        gc.enable()
    samples.sort()
    p99 = samples[int(iterations * 0.99) - 1]
    return statistics.median(samples) / 1000, p99 / 1000, decide(POLICY, facts).allowed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}"
    print(f"python {platform.python_version()} on {machine}")
    print(f"agent with {len(TOOLS)} tools, {args.iterations} timed calls per case")
    worst = 0.0
    cases = []
    for label, facts in (
        ("private repo (denied)", TaskFacts("claude-code", repo_private=True)),
        ("private repo --offline (allowed)", TaskFacts("claude-code", repo_private=True, offline=True)),
    ):
        median, p99, allowed = measure(facts, args.iterations)
        worst = max(worst, median)
        print(f"  {label:34} allowed={allowed!s:5}  median {median:6.2f} us   p99 {p99:6.2f} us")
        cases.append(
            {"case": label, "allowed": allowed, "median_us": round(median, 2), "p99_us": round(p99, 2)}
        )
    print("target median <= 20 us:", "met" if worst <= 20 else "MISSED")
    print(json.dumps({"iterations": args.iterations, "cases": cases, "worst_median_us": round(worst, 2)}))
    return 0 if worst <= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
