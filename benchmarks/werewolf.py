"""Werewolf throughput: games per second with bots in every seat, and the engine's share of a
rollout's time with a zero-latency policy.

Rows, all in one process and one run:

- plain loops over the parallel and the AEC env, every seat a rule-based bot called directly
  (the ceiling: engine + observations + bots, nothing else);
- ``agentgym.multiagent.collect`` with the bots as a policy (requests, batching, recording);
- ``collect`` with a zero-latency scripted policy (the first admissible answer), timing the
  env's ``reset``/``step`` inside it: the engine's share is that time over the wall time.

    .venv/bin/python benchmarks/werewolf.py [--games 200] [--preset arena]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgym.envs import werewolf
from agentgym.envs.werewolf.bots import decide
from agentgym.multiagent import collect
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import default_tasks

ENV_ID = "agentgym/Werewolf-v0"


def parallel_loop(games: int, preset: str) -> tuple[int, float]:
    """(env steps, seconds) of ``games`` bot games through the parallel env."""
    env, steps = werewolf.parallel_env(preset=preset), 0
    start = time.perf_counter()
    for seed in range(games):
        _, infos = env.reset(seed=seed)
        while env.agents:
            rng = random.Random(steps)
            *_, infos = env.step(
                {a: decide(infos[a]["werewolf"], rng) for a in env.agents if infos[a]["action_required"]}
            )
            steps += 1
    return steps, time.perf_counter() - start


def aec_loop(games: int, preset: str) -> tuple[int, float]:
    """(agent turns, seconds) of ``games`` bot games through the AEC env."""
    env, steps = werewolf.env(preset=preset), 0
    start = time.perf_counter()
    for seed in range(games):
        env.reset(seed=seed)
        for _ in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            env.step(None if terminated or truncated else decide(info["werewolf"], random.Random(steps)))
            steps += 1
    return steps, time.perf_counter() - start


class EnvClock:
    """Makes parallel envs whose ``reset`` and ``step`` add their seconds to ``seconds``."""

    def __init__(self, preset: str):
        self.preset = preset
        self.seconds = 0.0
        self.steps = 0

    def __call__(self) -> Any:
        env = werewolf.parallel_env(preset=self.preset)
        for name in ("reset", "step"):
            setattr(env, name, self._timed(getattr(env, name)))
        return env

    def _timed(self, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.steps += 1

        return call


def collected(games: int, preset: str, policy: Any) -> tuple[int, float, float]:
    """(env steps, seconds, seconds inside the env) of ``games`` games through ``collect``."""
    clock = EnvClock(preset)
    start = time.perf_counter()
    episodes = collect(clock, policy, default_tasks(games), concurrency=64, progress=False)
    elapsed = time.perf_counter() - start
    assert not any(e.error for e in episodes)
    return clock.steps, elapsed, clock.seconds


def main() -> None:
    from agentgym.envs.werewolf.bots import BotPolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--preset", default="arena", choices=["arena", "lspo"])
    args = parser.parse_args()
    scripted = ScriptedPolicy(lambda obs, info: info["admissible_actions"][0])
    parallel_loop(5, args.preset)  # warm-up: imports, first games
    rows = [
        ("parallel env, bots (plain loop)", *parallel_loop(args.games, args.preset), None),
        ("AEC env, bots (plain loop)", *aec_loop(args.games, args.preset), None),
        ("collect, bots", *collected(args.games, args.preset, BotPolicy())),
        ("collect, zero-latency scripted", *collected(args.games, args.preset, scripted)),
    ]
    table = Table(title=f"Werewolf ({args.preset}), {args.games} games per row")
    for col in ("runner", "steps", "seconds", "games/s", "ms/game", "steps/s", "engine share"):
        table.add_column(col, justify="right")
    for name, steps, seconds, engine in rows:
        table.add_row(
            name,
            f"{steps:,}",
            f"{seconds:.2f}",
            f"{args.games / seconds:,.0f}",
            f"{1e3 * seconds / args.games:.2f}",
            f"{steps / seconds:,.0f}",
            "-" if engine is None else f"{engine / seconds:.0%}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
