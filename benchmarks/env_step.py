"""Steps per second of the text games: reset + random admissible actions, one process.

This is the ceiling the rollout engine is measured against (benchmarks/rollout_overhead.py).

    .venv/bin/python benchmarks/env_step.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import agentgym


def measure(env_id: str, seconds: float, kwargs: dict) -> dict[str, float]:
    env = agentgym.make(env_id, **kwargs).unwrapped  # the env itself, without checker wrappers
    rng = np.random.default_rng(0)
    steps = episodes = 0
    reset_time = step_time = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        _, info = env.reset(seed=episodes)
        t1 = time.perf_counter()
        reset_time += t1 - t0
        episodes += 1
        done = False
        while not done:
            actions = info["admissible_actions"]
            t0 = time.perf_counter()
            _obs, _reward, terminated, truncated, info = env.step(actions[rng.integers(len(actions))])
            step_time += time.perf_counter() - t0
            steps += 1
            done = terminated or truncated
    return {
        "episodes": episodes,
        "steps": steps,
        "steps_per_s": steps / (step_time + reset_time),
        "step_us": 1e6 * step_time / steps,
        "reset_ms": 1e3 * reset_time / episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    configs = [
        ("agentgym/Sokoban-v0", {}),
        ("agentgym/Sokoban-v0", {"dim_room": (8, 8), "num_boxes": 2}),
        ("agentgym/Household-v0", {}),
    ]
    table = Table(title=f"Text games, reset + random admissible actions ({args.seconds:g} s each)")
    for col in ("env", "kwargs", "episodes", "steps", "steps/s (incl. resets)", "step µs", "reset ms"):
        table.add_column(col, justify="right")
    for env_id, kwargs in configs:
        r = measure(env_id, args.seconds, kwargs)
        table.add_row(
            env_id,
            str(kwargs or "default"),
            f"{r['episodes']:,}",
            f"{r['steps']:,}",
            f"{r['steps_per_s']:,.0f}",
            f"{r['step_us']:.1f}",
            f"{r['reset_ms']:.2f}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
