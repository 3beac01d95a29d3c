"""Tool use: the round trip of a ``python`` tool call in a warm sandbox, in each backend, and
tasks per second for the experts.

A round trip is one ``step`` with a ``<tool_call>`` running ``print(1)``: parsing and checking
the call, starting Python in the session's sandbox (bubblewrap, as a uid of its own where the
env runs as root), and reading its output. Backends: in process (the env's own sandbox; and,
for comparison, plain subprocesses with ``isolate=False``), ``sandbox="local"`` (the env server
under bubblewrap, the session's sandbox nested in it) and ``sandbox="docker"`` (the env server
in the tooluse image, the sandbox nested in the container; build it first with
``agentgym build tooluse``). Expert rates count whole episodes: reset (a clean workspace with the
task's files) and every call until the answer is graded. All figures come from one run.

    .venv/bin/python benchmarks/tooluse.py [--calls 200] [--tasks 40] [--backends in-process local docker]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TypedDict

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

import agentgym
from agentgym.envs.tooluse.env import ToolUseEnv
from agentgym.envs.tooluse.expert import expert_action
from agentgym.sandbox.spec import Backend

console = Console()


class MakeArgs(TypedDict, total=False):
    """What ``agentgym.make`` gets for a backend, beyond the env id."""

    sandbox: Backend
    isolate: bool


BACKENDS: dict[str, MakeArgs] = {
    "in-process": {},
    "subprocess": {"isolate": False},
    "local": {"sandbox": "local"},
    "docker": {"sandbox": "docker"},
}


def round_trips(backend: str, n: int) -> list[float]:
    env = agentgym.make("agentgym/ToolUse-v0", max_turns=50, **BACKENDS[backend])
    try:
        env.reset(seed=0)
        call = (
            "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "print(1)"}}) + "</tool_call>"
        )
        env.step(call)  # warm
        times = []
        for i in track(range(n), description=f"python calls ({backend})", console=console):
            t0 = time.perf_counter()
            obs, *_ = env.step(call)
            times.append(time.perf_counter() - t0)
            assert "stdout:\n1" in obs, obs
            if i % 40 == 39:
                env.reset(seed=0)
        return times
    finally:
        env.close()


def expert_rate(family: str, n: int) -> tuple[float, float]:
    env = ToolUseEnv(tasks=family, split="test")
    try:
        solved = 0
        t0 = time.perf_counter()
        for task in track(env.tasks[:n], description=f"{family} expert", console=console):
            obs, info = env.reset(options={"task_id": task.id})
            for _ in range(30):
                obs, _reward, terminated, truncated, info = env.step(expert_action(obs, info))
                if terminated or truncated:
                    break
            solved += info["success"]
        return n / (time.perf_counter() - t0), solved / n
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    args = parser.parse_args()
    table = Table(title="python tool call round trip, warm sandbox (ms)")
    for column in ("backend", "calls", "p50", "p99"):
        table.add_column(column)
    for backend in args.backends:
        times = round_trips(backend, args.calls)
        table.add_row(
            backend,
            str(len(times)),
            f"{1000 * np.percentile(times, 50):.1f}",
            f"{1000 * np.percentile(times, 99):.1f}",
        )
    console.print(table)
    rates = Table(title="Experts: whole episodes (reset, calls, graded answer)")
    for column in ("tasks", "episodes", "tasks/s", "solved"):
        rates.add_column(column)
    for family in ("data", "apps"):
        rate, solved = expert_rate(family, args.tasks)
        rates.add_row(family, str(args.tasks), f"{rate:.2f}", f"{solved:.0%}")
    console.print(rates)


if __name__ == "__main__":
    main()
