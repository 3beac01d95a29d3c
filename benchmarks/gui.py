"""GUI desktop: reset time, step time (action + new accessibility tree) and tree size per app.

For each application family the expert plays ``--episodes`` tasks on one desktop: a reset is
stopping the last episode's applications, rebuilding the home directory and launching the
task's applications until their trees are settled; a step is one action (xdotool), the
``settle_s`` pause and a new tree with its text. Steps are taken as the expert plays (clicks,
typing, keys; ``wait()`` steps, a deliberate one-second pause, are left out). Tree size is the
observation in tokens of the embedded model's tokenizer (SmolLM2), at reset. All figures come
from one run on one machine.

    .venv/bin/python benchmarks/gui.py [--episodes 6]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from agentgym.envs.gui.env import DesktopEnv
from agentgym.envs.gui.expert import expert_action
from agentgym.policies.models import load_tokenizer

console = Console()
APPS = {
    "mousepad": "text",
    "galculator + mousepad": "calculator",
    "thunar": "files",
    "libreoffice calc": "spreadsheet",
}


def measure(tasks: str, episodes: int, tokenizer) -> dict[str, list[float]]:
    env = DesktopEnv(tasks=tasks, split="all")
    figures: dict[str, list[float]] = {"reset": [], "step": [], "tokens": [], "solved": []}
    try:
        env.reset(options={"task_id": env.tasks[0].id})  # the desktop's own start is not a reset
        for task in track(env.tasks[:episodes], description=tasks, console=console):
            started = time.perf_counter()
            obs, info = env.reset(options={"task_id": task.id})
            figures["reset"].append(time.perf_counter() - started)
            figures["tokens"].append(len(tokenizer(obs)["input_ids"]))
            for _ in range(30):
                action = expert_action(obs, info)
                started = time.perf_counter()
                obs, _reward, terminated, truncated, info = env.step(action)
                if action not in ("wait()", "done()"):
                    figures["step"].append(time.perf_counter() - started)
                if terminated or truncated:
                    break
            figures["solved"].append(float(info["success"]))
    finally:
        env.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    tokenizer = load_tokenizer("smollm2-135m")
    results = {app: measure(tasks, args.episodes, tokenizer) for app, tasks in APPS.items()}
    every_step = np.concatenate([results[app]["step"] for app in results])

    table = Table(title="Desktop-v0 (ms; tokens of the reset observation)")
    for column in ("app", "reset p50", "step p50", "step p99", "steps", "tree tokens", "solved"):
        table.add_column(column, justify="left" if column == "app" else "right")
    summary = {}
    for app, figures in results.items():
        reset, step = np.array(figures["reset"]) * 1e3, np.array(figures["step"]) * 1e3
        row = {
            "reset_p50_ms": float(np.median(reset)),
            "step_p50_ms": float(np.median(step)),
            "step_p99_ms": float(np.percentile(step, 99)),
            "steps": len(step),
            "tree_tokens": float(np.median(figures["tokens"])),
            "solved": float(np.mean(figures["solved"])),
        }
        summary[app] = row
        table.add_row(
            app,
            f"{row['reset_p50_ms']:.0f}",
            f"{row['step_p50_ms']:.0f}",
            f"{row['step_p99_ms']:.0f}",
            str(row["steps"]),
            f"{row['tree_tokens']:.0f}",
            f"{row['solved']:.0%}",
        )
    all_ms = every_step * 1e3
    summary["all steps"] = {
        "step_p50_ms": float(np.median(all_ms)),
        "step_p99_ms": float(np.percentile(all_ms, 99)),
    }
    table.add_row(
        "all steps",
        "",
        f"{np.median(all_ms):.0f}",
        f"{np.percentile(all_ms, 99):.0f}",
        str(len(all_ms)),
        "",
        "",
    )
    console.print(table)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
