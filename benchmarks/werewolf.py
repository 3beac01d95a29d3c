"""Werewolf throughput: games per second with bots in every seat, and the engine's share of a
rollout's time with a zero-latency policy.

Rows, all in one process and one run, each playing the games of seeds ``0 .. games - 1``:

- plain loops over the parallel and the AEC env, every seat a rule-based bot called directly,
  its choices seeded per (game, seat, turn) as ``collect`` seeds them, so that the parallel loop
  plays the very games of the ``collect, bots`` row (the ceiling: engine + observations + bots,
  nothing else);
- ``agentgym.multiagent.collect`` with the bots as a policy (requests, batching, recording),
  64 games at once (64 envs, interleaved), then one game at a time (one env, like the plain
  loop);
- ``collect`` with a zero-latency scripted policy (the first admissible answer), timing the
  env's ``reset``/``step`` inside it: the engine's share is that time over the wall time.

``steps`` counts env calls: the ``collect`` rows count each game's ``reset`` too (one more per
game than the plain parallel loop). Printed below the table: collect's games/s with bots over
the plain parallel loop's, and the engine's share with the zero-latency policy.

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
from agentgym.rollout import default_tasks, request_seed

ENV_ID = "agentgym/Werewolf-v0"


def parallel_loop(games: int, preset: str) -> tuple[int, float]:
    """(env steps, seconds) of ``games`` bot games through the parallel env, each seat's choices
    seeded as ``collect`` seeds them (the same games)."""
    env, steps = werewolf.parallel_env(preset=preset), 0
    start = time.perf_counter()
    for seed in range(games):
        _, infos = env.reset(seed=seed)
        seats, turns = (
            {a: i for i, a in enumerate(env.possible_agents)},
            dict.fromkeys(env.possible_agents, 0),
        )
        while env.agents:
            actions = {}
            for agent in env.agents:
                if infos[agent]["action_required"]:
                    rng = random.Random(request_seed(seed, seats[agent], turns[agent]))
                    actions[agent], turns[agent] = decide(infos[agent]["werewolf"], rng), turns[agent] + 1
            *_, infos = env.step(actions)
            steps += 1
    return steps, time.perf_counter() - start


def aec_loop(games: int, preset: str) -> tuple[int, float]:
    """(agent turns, seconds) of ``games`` bot games through the AEC env, seeded like
    :func:`parallel_loop`."""
    env, steps = werewolf.env(preset=preset), 0
    start = time.perf_counter()
    for seed in range(games):
        env.reset(seed=seed)
        seats, turns = (
            {a: i for i, a in enumerate(env.possible_agents)},
            dict.fromkeys(env.possible_agents, 0),
        )
        for agent in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
            else:
                rng = random.Random(request_seed(seed, seats[agent], turns[agent]))
                env.step(decide(info["werewolf"], rng))
                turns[agent] += 1
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


def collected(games: int, preset: str, policy: Any, concurrency: int = 64) -> tuple[int, float, float]:
    """(env steps, seconds, seconds inside the env) of ``games`` games through ``collect``,
    ``concurrency`` at once."""
    clock = EnvClock(preset)
    start = time.perf_counter()
    episodes = collect(clock, policy, default_tasks(games), concurrency=concurrency, progress=False)
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
        ("collect, bots, one game at a time", *collected(args.games, args.preset, BotPolicy(), 1)),
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
    console = Console(width=140)
    console.print(table)
    (_, _, plain, _), (_, _, bots, _), (_, _, alone, _), (_, _, wall, engine) = rows[0], *rows[2:]
    console.print(f"collect/plain (bots): {plain / bots:.0%} of the plain loop's games/s")
    console.print(f"collect/plain (bots, one game at a time): {plain / alone:.0%}")
    console.print(f"engine share (zero-latency policy): {(engine or 0.0) / wall:.0%}")


if __name__ == "__main__":
    main()
