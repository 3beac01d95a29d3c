"""Training throughput, mode=sync against mode=async, from one run of each on the same settings.

Two cases:

* ``io``: envs whose steps wait on I/O with a long tail of episode durations, the case where
  not waiting for the slowest episode pays: GuessNumber whose every step first sleeps
  ``--step-wait`` seconds times a per-task factor drawn from a Pareto law of shape ``--tail``
  (capped at 20; ``tests/fixtures/waiting_env.py``), with the embedded model generating
  in-process (``generator=hf``). The held-out games do not wait.
* ``vllm``: the real vLLM server as the generator (LoRA adapters hot-swapped), on plain
  GuessNumber; pass ``--model`` to train a bigger model on a GPU.

Each run trains ``--steps`` updates (the README's learning settings: GiGPO, LoRA, 4 tasks x 8
episodes) from the same seeds and the same untrained evaluation (made once, outside the timed
runs) and evaluates every ``--eval-every`` updates. Times are wall clock with the evaluations
taken out (``elapsed_s`` minus ``eval_s`` of the records): seconds per update, and seconds until
the held-out success first reaches the target (default: the lower of the two runs' best, so
that both reach it). The ratios are sync / async: above 1, async is faster. The goal on ``io``
is 2x.

    .venv/bin/python benchmarks/train_throughput.py [--case io|vllm|both] [--steps 8]
        [--step-wait 2.0] [--tail 1.2] [--max-staleness 1] [--target 0.4] [--out runs/bench]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgym.cli import stop_on_sigterm
from agentgym.trainers.loop import TrainConfig, Trainer, atrain

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))
from waiting_env import register  # noqa: E402  (the test env, shared with the tests)

PROMPT = {
    "history": 0,
    "bare_actions": True,
    "show_admissible": False,
    "system_prompt": "Play the guessing game. Answer with one number.",
    "examples": [["Guess a number from 1 to 8. Guesses left: 4.", "4"]],
}  # conf/prompt/guess_number.yaml


def config(args: argparse.Namespace, case: str, mode: str) -> TrainConfig:
    waiting = {"step_wait": args.step_wait, "tail": args.tail} if case == "io" else {}
    return TrainConfig.from_dict(
        {
            "env": register() if case == "io" else "agentgym/GuessNumber-v0",
            "env_kwargs": waiting,
            "eval_env_kwargs": {"step_wait": 0.0, "tail": 0.0} if case == "io" else {},
            "prompt": PROMPT,
            "estimator": "gigpo",
            "mode": mode,
            "max_staleness": args.max_staleness,
            "generator": "hf" if case == "io" else "vllm",
            "steps": args.steps,
            "tasks_per_step": 4,
            "group_size": 8,
            "max_turns": 4,
            "sampling": {"max_tokens": 6},
            "eval_every": args.eval_every,
            "eval_tasks": args.eval_tasks,
            "eval_temperature": 1.0,
            "progress": False,
            "learner": {
                "model": args.model,
                "lora_rank": 16,
                "lora_alpha": 32,
                "lr": 2e-4,
                "micro_batch_tokens": 2048,
            },
            "out_dir": str(Path(args.out) / case / mode),
        }
    )


async def untrained(cfg: TrainConfig) -> dict[str, Any]:
    """The held-out evaluation of the untrained policy, which both runs share."""
    trainer = Trainer(replace(cfg, out_dir=f"{cfg.out_dir}-baseline"))
    try:
        return await trainer.evaluate()
    finally:
        trainer.close()
        await trainer.policy.aclose()


def timeline(run: Path) -> list[tuple[int, float, float | None]]:
    """(updates done, training seconds, held-out success or None) after each step."""
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    out, evaluating = [], 0.0
    for r in records:
        if r["step"] >= 0:
            evaluating += r.get("eval_s", 0.0)
            out.append((r["step"] + 1, r["elapsed_s"] - evaluating, r.get("eval_success")))
    return out


def reached(points: list[tuple[int, float, float | None]], target: float) -> float | None:
    return next(
        (seconds for _, seconds, success in points if success is not None and success >= target), None
    )


def run_case(args: argparse.Namespace, case: str, console: Console) -> None:
    baseline = asyncio.run(untrained(config(args, case, "sync")))
    points = {}
    for mode in ("sync", "async"):
        cfg = config(args, case, mode)
        console.print(f"[bold]{case}[/bold]: training mode={mode} into {cfg.out_dir}")
        asyncio.run(atrain(cfg, baseline))
        points[mode] = timeline(Path(cfg.out_dir))
    best = {m: max((s for *_, s in p if s is not None), default=0.0) for m, p in points.items()}
    target = args.target if args.target is not None else min(best.values())
    table = Table(
        title=f"{case}: {args.steps} updates, held-out success {baseline['eval_success']:.3f} untrained, "
        f"target {target:.3f}"
    )
    for column in ("mode", "s / update", "s to target", "held-out success (after updates)"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    per_update, to_target = {}, {}
    for mode, p in points.items():
        per_update[mode] = p[-1][1] / p[-1][0]
        to_target[mode] = reached(p, target)
        evals = ", ".join(f"{s:.3f} ({n})" for n, _, s in p if s is not None)
        shown = "not reached" if to_target[mode] is None else f"{to_target[mode]:.1f}"
        table.add_row(mode, f"{per_update[mode]:.1f}", shown, evals)
    speed = per_update["sync"] / per_update["async"]
    sync_t, async_t = to_target["sync"], to_target["async"]
    sooner = "-" if sync_t is None or async_t is None else f"{sync_t / async_t:.2f}x"
    table.add_row("sync / async", f"{speed:.2f}x", sooner, "")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=("io", "vllm", "both"), default="io")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--step-wait", type=float, default=2.0, help="seconds per env step (times the tail)")
    parser.add_argument("--tail", type=float, default=1.2, help="Pareto shape of the per-task factor")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--target", type=float, default=None, help="held-out success to reach")
    parser.add_argument("--out", default="runs/train_throughput")
    args = parser.parse_args()
    stop_on_sigterm()  # `kill` stops the vLLM server it launches, too
    console = Console()
    for case in ("io", "vllm") if args.case == "both" else (args.case,):
        run_case(args, case, console)


if __name__ == "__main__":
    main()
