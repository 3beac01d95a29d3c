"""Time of the advantage estimators on an ALFWorld-sized batch, one CPU core.

16 groups x 8 episodes x up to 50 turns (about 6,400 rows); anchor state keys of 200-2,000
characters, more than 65% of the turns revisiting a state already seen in their group.
Target: GiGPO under 20 ms (the reference code took about 0.5 s per iteration).

    .venv/bin/python benchmarks/credit.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agentgym.episode import Episode, Turn, TurnTable  # noqa: E402
from agentgym.trainers.credit import gae, gigpo, grpo, igpo, spa  # noqa: E402


def alfworld_batch(
    groups: int = 16, group_size: int = 8, max_turns: int = 50, seed: int = 0
) -> list[Episode]:
    """Episodes whose states are drawn from a small pool per group, so states repeat."""
    rng = np.random.default_rng(seed)
    episodes = []
    for g in range(groups):
        pool = [
            "".join(rng.choice(list("abcdefghij klmnop,."), size=int(rng.integers(200, 2000))))
            for _ in range(60)
        ]
        for m in range(group_size):
            length = max_turns if rng.random() < 0.8 else int(rng.integers(5, max_turns))
            states = rng.integers(len(pool), size=length)
            success = bool(rng.random() < 0.5)
            turns = [
                Turn(
                    observation="",
                    action="",
                    action_valid=bool(rng.random() > 0.1),
                    reward=10.0 if success and t == length - 1 else 0.0,
                    state_key=pool[s],
                )
                for t, s in enumerate(states)
            ]
            episodes.append(
                Episode(
                    episode_id=f"{g}-{m}",
                    env_id="bench",
                    task_id=str(g),
                    group_id=str(g),
                    seed=g,
                    turns=turns,
                    outcome=10.0 if success else 0.0,
                    success=success,
                )
            )
    return episodes


def timed(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    episodes = alfworld_batch()
    table = TurnTable.from_episodes(episodes)
    seen: dict[str, set[int]] = {}
    repeated = 0
    for g, s in zip(table.group.tolist(), table.state.tolist()):
        repeated += s in seen.setdefault(g, set())
        seen[g].add(s)
    rng = np.random.default_rng(1)
    rows = len(table)
    scores, v0 = -rng.random(rows), -rng.random(table.num_episodes)
    values, contrib = rng.normal(size=rows), rng.normal(size=rows)
    cases = [
        ("TurnTable.from_episodes (key coding)", lambda: TurnTable.from_episodes(episodes)),
        ("GRPO", lambda: grpo(table)),
        ("GiGPO", lambda: gigpo(table)),
        ("GiGPO, preset verl-agent", lambda: gigpo(table, preset="verl-agent", invalid_penalty=0.1)),
        ("IGPO", lambda: igpo(table, scores, v0)),
        ("SPA (group)", lambda: spa(table, contrib, estimator="group")),
        ("SPA (GAE)", lambda: spa(table, contrib, values=values)),
        ("PPO GAE", lambda: gae(table, values)),
    ]
    out = Table(
        title=f"Credit assignment: {table.num_groups} groups x "
        f"{table.num_episodes // table.num_groups} episodes, {rows:,} rows, "
        f"{repeated / rows:.0%} of turns revisit a state (median of {args.repeats})"
    )
    out.add_column("estimator")
    out.add_column("ms", justify="right")
    for name, fn in cases:
        out.add_row(name, f"{timed(fn, args.repeats):.2f}")
    Console(width=120).print(out)


if __name__ == "__main__":
    main()
