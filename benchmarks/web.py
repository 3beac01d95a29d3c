"""The web shop's speed: step latency in the browser (Shop-v0) and in text (ShopText-v0), and
episodes per second with several browser episodes at once.

The scripted expert plays test tasks, so every step is one a real agent takes (fill the search
box, click a result, choose options, add to cart, check out). A browser step is the action plus
the new accessibility snapshot; ``click`` rows count only clicks. Concurrent episodes share one
Chromium (one browser per process), each in its own context. All figures come from one run.

    .venv/bin/python benchmarks/web.py [--episodes 30] [--concurrent 8] [--concurrent-episodes 32]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from agentgym.envs.web.browser import ShopBrowserEnv
from agentgym.envs.web.expert import aplay, expert_action
from agentgym.envs.web.tasks import tasks
from agentgym.envs.web.text import ShopTextEnv

console = Console()


def play(env, goals, label):
    """Play ``goals`` one after another; (reset seconds, [(verb, step seconds)], rewards)."""
    resets, steps, rewards = [], [], []
    for goal in track(goals, description=label, console=console):
        t0 = time.perf_counter()
        obs, info = env.reset(options={"task_id": goal.id})
        resets.append(time.perf_counter() - t0)
        total = 0.0
        for _ in range(40):
            action = expert_action(obs, info)
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(action)
            steps.append((action.split("(")[0].split("[")[0], time.perf_counter() - t0))
            total += reward
            if terminated or truncated:
                break
        rewards.append(total)
    return resets, steps, rewards


async def concurrent(goals, n_envs):
    """Episodes per second with ``n_envs`` browser episodes in flight at once."""
    envs = [ShopBrowserEnv(split="test") for _ in range(n_envs)]
    rewards = []

    async def worker(env, mine):
        for goal in mine:
            rewards.append((await aplay(env, goal.id))[0])

    try:
        await envs[0].areset(options={"task_id": goals[0].id})  # start the browser first
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(env, goals[i::n_envs]) for i, env in enumerate(envs)))
        return len(goals) / (time.perf_counter() - t0), rewards
    finally:
        for env in envs:
            env.close()


def ms(values, q):
    return f"{1000 * float(np.percentile(values, q)):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--concurrent-episodes", type=int, default=32)
    args = parser.parse_args()
    goals = tasks(0, "test")

    browser = ShopBrowserEnv(split="test")
    try:
        browser.reset(options={"task_id": goals[-1].id})  # launch outside the timing
        b_resets, b_steps, b_rewards = play(browser, goals[: args.episodes], "browser episodes")
    finally:
        browser.close()
    text = ShopTextEnv(split="test")
    t_resets, t_steps, t_rewards = play(text, goals[: args.episodes], "text episodes")
    text.close()
    t0 = time.perf_counter()
    one_rate, _ = asyncio.run(concurrent(goals[: args.concurrent_episodes // 4], 1))
    many_rate, many_rewards = asyncio.run(concurrent(goals[: args.concurrent_episodes], args.concurrent))
    console.print(f"(concurrency runs took {time.perf_counter() - t0:.1f} s)")

    table = Table(title="Web shop: latency in ms (expert on test tasks)")
    for column in ("mode", "what", "n", "p50", "p99", "mean reward"):
        table.add_column(column)
    for mode, resets, steps, rewards in (
        ("browser", b_resets, b_steps, b_rewards),
        ("text", t_resets, t_steps, t_rewards),
    ):
        all_steps = [s for _, s in steps]
        clicks = [s for verb, s in steps if verb == "click"]
        table.add_row(
            mode, "step", str(len(all_steps)), ms(all_steps, 50), ms(all_steps, 99), f"{np.mean(rewards):.3f}"
        )
        table.add_row(mode, "click step", str(len(clicks)), ms(clicks, 50), ms(clicks, 99), "")
        table.add_row(mode, "reset", str(len(resets)), ms(resets, 50), ms(resets, 99), "")
    console.print(table)
    rates = Table(title="Browser episodes per second (one Chromium, a context per episode)")
    for column in ("episodes at once", "episodes/s", "speedup", "mean reward"):
        rates.add_column(column)
    rates.add_row("1", f"{one_rate:.2f}", "1.00x", "")
    rates.add_row(
        str(args.concurrent),
        f"{many_rate:.2f}",
        f"{many_rate / one_rate:.2f}x",
        f"{np.mean(many_rewards):.3f}",
    )
    console.print(rates)


if __name__ == "__main__":
    main()
