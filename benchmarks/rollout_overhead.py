"""Overhead of the rollout engine: `collect` with a zero-latency policy vs a plain loop.

Runs the same Sokoban episodes (same seeds, random admissible actions, same turn limit) through
a plain synchronous loop over one env (the ceiling) and through `collect` at several
concurrencies, all in one process and one run, and prints turns/s and the ratio to the ceiling.
Target: at concurrency 64 the engine delivers at least 50% of the plain loop's turns/s.

    .venv/bin/python benchmarks/rollout_overhead.py [--episodes 1024] [--max-turns 30]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

import agentgym
from agentgym.policies.scripted import RandomPolicy
from agentgym.policy import GenerationRequest
from agentgym.rollout import collect, default_tasks, request_seed

ENV_ID = "agentgym/Sokoban-v0"


def plain_loop(episodes: int, max_turns: int) -> tuple[int, float]:
    """Same episodes, no engine: reset, then choose with the same policy logic, step."""
    env = agentgym.make(ENV_ID).unwrapped
    policy = RandomPolicy()
    turns = 0
    start = time.perf_counter()
    for task in default_tasks(episodes):
        obs, info = env.reset(seed=task.seed)
        for turn in range(max_turns):
            request = GenerationRequest(
                messages=[], observation=obs, info=info, seed=request_seed(task.seed, 0, turn)
            )
            obs, _, terminated, truncated, info = env.step(policy.choose(request))
            turns += 1
            if terminated or truncated:
                break
    return turns, time.perf_counter() - start


def engine(episodes: int, max_turns: int, concurrency: int) -> tuple[int, float]:
    start = time.perf_counter()
    result = collect(
        ENV_ID,
        RandomPolicy(),
        default_tasks(episodes),
        max_turns=max_turns,
        concurrency=concurrency,
        progress=False,
    )
    elapsed = time.perf_counter() - start
    assert not any(e.error for e in result)
    return sum(e.num_turns for e in result), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--max-turns", type=int, default=30)
    args = parser.parse_args()
    engine(64, args.max_turns, 8)  # warm-up: imports, first env
    rows = [("plain loop (ceiling)", *plain_loop(args.episodes, args.max_turns))]
    for concurrency in (1, 64, 512):
        rows.append(
            (f"collect, concurrency {concurrency}", *engine(args.episodes, args.max_turns, concurrency))
        )
    ceiling = rows[0][1] / rows[0][2]
    table = Table(title=f"Rollout overhead: {ENV_ID}, {args.episodes} episodes, zero-latency random policy")
    for col in ("runner", "turns", "seconds", "episodes/s", "turns/s", "vs plain loop"):
        table.add_column(col, justify="right")
    for name, turns, seconds in rows:
        table.add_row(
            name,
            f"{turns:,}",
            f"{seconds:.2f}",
            f"{args.episodes / seconds:,.0f}",
            f"{turns / seconds:,.0f}",
            f"{turns / seconds / ceiling:.0%}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
