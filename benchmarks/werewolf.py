"""Werewolf throughput: games per second with bots in every seat, and the engine's share of a
rollout's time with a zero-latency policy.

Rows, all in one process and one run, each playing the games of seeds ``0 .. games - 1``:

- plain loops over the parallel and the AEC env, every seat a rule-based bot called directly,
  its choices seeded per (game, seat, turn) as ``collect`` seeds them, so that the parallel loop
  plays the very games of the ``collect, bots`` row (the ceiling: engine + observations + bots,
  nothing else);
- the plain parallel loop keeping every seat's transitions (observation, action, reward, info)
  until its last game ends, as a loop that collects training data must: what keeping the data
  costs by itself (the garbage collector walks what is kept, with CPython's thresholds;
  ``collect`` sets them for a heap that grows by what it keeps: ``agentgym.heap``);
- ``agentgym.multiagent.collect`` with the bots as a policy (requests, recording every seat's
  episode), up to 64 games at once, then one game at a time. The bots are an inline policy
  (they await nothing) that reads no chat messages: the seats of a game that act in one step
  are answered together in one call as soon as they ask, without waiting for a batch, and
  without building a chat; the event loop gets a turn once a 5 ms time slice has passed;
- ``collect`` with a zero-latency scripted policy (the first admissible answer), timing the
  env's ``reset``/``step`` inside it: the engine's share is that time over the wall time. (The
  bots rows do not time the env, as the plain loops do not.)

``steps`` counts env calls: the ``collect`` rows count each game's ``reset`` too (one more per
game than the plain parallel loop; the warm-up checks that ``collect`` plays the plain loop's
games). A busy machine slows whatever runs while it is busy, so every
row runs ``--rounds`` times, the rows alternated (a different one first in each round); the
table gives each row's median, and its games/s over the plain parallel loop's and over the
keeping loop's of the same round (medians; the range of the first).

With ``--instructions``, both plain loops over the parallel env and both ``collect, bots`` rows
are counted in CPU instructions instead (valgrind's cachegrind, each row in a process of its own,
less that of a process which only imports and warms up): a count the machine's load does not
change, unlike seconds. What it leaves out is where time goes without instructions: memory
stalls, most of them the garbage collector's walks over what is kept.

    .venv/bin/python benchmarks/werewolf.py [--games 200] [--rounds 10] [--preset arena]
        [--instructions]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from agentgym.envs import werewolf
from agentgym.envs.werewolf.bots import decide
from agentgym.multiagent import collect
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import default_tasks, request_seed

ENV_ID = "agentgym/Werewolf-v0"


def parallel_loop(games: int, preset: str, keep: bool = False) -> tuple[int, float]:
    """(env steps, seconds) of ``games`` bot games through the parallel env, each seat's choices
    seeded as ``collect`` seeds them (the same games). ``keep``: every seat's transitions are
    kept, as a loop that collects training data keeps them (observation, action, then the reward
    and info the step answered), until the last game ends."""
    env, steps = werewolf.parallel_env(preset=preset), 0
    kept: list[tuple[Any, ...]] = []
    start = time.perf_counter()
    for seed in range(games):
        observations, infos = env.reset(seed=seed)
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
            acted = observations
            observations, rewards, *_, infos = env.step(actions)
            steps += 1
            if keep:
                kept.extend((acted[a], action, rewards[a], infos[a]) for a, action in actions.items())
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


def collected(
    games: int, preset: str, policy: Any, concurrency: int = 64, timed: bool = False
) -> tuple[int | None, float, float | None]:
    """(env steps, seconds, seconds inside the env) of ``games`` games through ``collect``,
    ``concurrency`` at once. Untimed (``timed=False``: the env is not wrapped, as the plain
    loops' is not), the steps and the seconds inside the env are ``None``."""
    clock = EnvClock(preset) if timed else None
    make = clock or (lambda: werewolf.parallel_env(preset=preset))
    start = time.perf_counter()
    episodes = collect(make, policy, default_tasks(games), concurrency=concurrency, progress=False)
    elapsed = time.perf_counter() - start
    assert not any(e.error for e in episodes)
    return (clock.steps, elapsed, clock.seconds) if clock else (None, elapsed, None)


def main() -> None:
    from agentgym.envs.werewolf.bots import BotPolicy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10, help="runs of every row, alternated")
    parser.add_argument("--preset", default="arena", choices=["arena", "lspo"])
    parser.add_argument("--instructions", action="store_true", help="count CPU instructions (valgrind)")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one run of one row (--instructions)
    args = parser.parse_args()
    scripted = ScriptedPolicy(lambda obs, info: info["admissible_actions"][0])
    runs: dict[str, Callable[[], tuple[int | None, float, float | None]]] = {
        "parallel env, bots (plain loop)": lambda: (*parallel_loop(args.games, args.preset), None),
        "parallel env, bots, keeping transitions": lambda: (
            *parallel_loop(args.games, args.preset, True),
            None,
        ),
        "AEC env, bots (plain loop)": lambda: (*aec_loop(args.games, args.preset), None),
        "collect, bots": lambda: collected(args.games, args.preset, BotPolicy()),
        "collect, bots, one game at a time": lambda: collected(args.games, args.preset, BotPolicy(), 1),
        "collect, zero-latency scripted": lambda: collected(args.games, args.preset, scripted, timed=True),
    }
    if args.instructions:
        rows = [
            "parallel env, bots (plain loop)",
            "parallel env, bots, keeping transitions",
            "collect, bots",
            "collect, bots, one game at a time",
        ]
        return count_instructions(args, rows)
    # warm-up (imports, first games), and a check that collect plays the plain loop's games
    assert collected(5, args.preset, BotPolicy(), timed=True)[0] == parallel_loop(5, args.preset)[0] + 5
    if args.row is not None:
        if args.row:
            runs[args.row]()
        return
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    counted: dict[str, int | None] = {}
    engine: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(args.rounds):  # a different row first in each round
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            counted[name], elapsed, inside = runs[name]()
            seconds[name].append(elapsed)
            if inside is not None:
                engine[name].append(inside / elapsed)
    plain, keeping = np.asarray(seconds[names[0]]), np.asarray(seconds[names[1]])
    # untimed collect rows: the plain parallel loop's games and their resets
    steps = {name: counted[name] or (counted[names[0]] or 0) + args.games for name in names}
    table = Table(
        title=f"Werewolf ({args.preset}), {args.games} games per row, median of {args.rounds} rounds",
        caption="vs plain loop: games/s over the plain parallel loop's in the same round (median, range); "
        "vs keeping loop: the same over the loop that keeps its transitions (median)",
    )
    for col in (
        "runner",
        "steps",
        "games/s",
        "ms/game",
        "steps/s",
        "vs plain loop",
        "vs keeping loop",
        "engine share",
    ):
        table.add_column(col, justify="right")
    for name in names:
        median, ratios = float(np.median(seconds[name])), plain / np.asarray(seconds[name])
        table.add_row(
            name,
            f"{steps[name]:,}",
            f"{args.games / median:,.0f}",
            f"{1e3 * median / args.games:.2f}",
            f"{steps[name] / median:,.0f}",
            f"{np.median(ratios):.0%} ({ratios.min():.0%}-{ratios.max():.0%})",
            f"{np.median(keeping / np.asarray(seconds[name])):.0%}",
            f"{np.median(engine[name]):.0%}" if engine[name] else "-",
        )
    Console(width=150).print(table)


def count_instructions(args: argparse.Namespace, rows: list[str]) -> None:
    """Instructions per game of each of ``rows`` (run once each under cachegrind), less those of
    a process that only imports and warms up, and their ratio to the first row's."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")

    def instructions(row: str) -> int:
        options = [f"--games={args.games}", f"--preset={args.preset}", f"--row={row}"]
        command = [sys.executable, __file__, *options]
        proc = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *command],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)[1].replace(",", ""))  # type: ignore[index]

    startup = instructions("")
    counts = {row: instructions(row) - startup for row in track(rows, description="valgrind")}
    table = Table(
        title=f"Werewolf ({args.preset}), {args.games} games per row, CPU instructions",
        caption=f"startup and warm-up ({startup / 1e9:.2f} G instructions) subtracted",
    )
    for col in ("runner", "instructions/game", "share of the plain loop"):
        table.add_column(col, justify="right")
    plain = counts[rows[0]]
    for row, count in counts.items():
        table.add_row(row, f"{count / args.games / 1e6:.1f} M", f"{plain / count:.1%}")
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
