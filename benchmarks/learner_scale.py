"""Learner throughput with 1 and 2 gloo processes on the same batch (tokens/s), in one run.

The same rows go through ``Learner.update`` in one process and in two data-parallel ranks
(``agentgym.trainers.distributed``: rank 0 sends the rows, each rank computes the gradient of its
half of every mini-batch, the gradients are summed over gloo, both ranks step), each process with
``--threads`` threads (default 1: on a busy machine a process with a thread per core can be many
times slower, every parallel region waiting for a descheduled thread). Each setting runs in fresh
processes (the model loaded, one warm-up update, then ``--repeats`` timed updates, the fastest
counting, as measured on rank 0 from the call to the return of ``update``); the settings
alternate over ``--rounds`` rounds so that a busy machine slows them alike, and each setting's
best round counts. Tokens are every row's prompt and response tokens. Two processes at best
halve the time; what they fall short of that is the exchange (the rows, one gradient all-reduce
per optimizer step) and the work that each rank repeats. On a 2-core machine the point is that
cost, not the speed-up.

    .venv/bin/python benchmarks/learner_scale.py [--rows 16] [--prompt-tokens 128]
        [--response-tokens 32] [--group-size 4] [--lora-rank 8] [--mini-batches 1]
        [--repeats 3] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rich.console import Console
from rich.table import Table

from agentgym.trainers.distributed import World, local_launch
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow


def make_rows(args: argparse.Namespace) -> list[TrainingRow]:
    """``args.rows`` rows of random tokens; each run of ``args.group_size`` rows shares a
    prompt, as a GRPO group's first turns do."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(args.rows):
        if i % args.group_size == 0:
            prompt = rng.integers(100, 5000, size=args.prompt_tokens).tolist()
        response = rng.integers(100, 5000, size=args.response_tokens).tolist()
        rows.append(TrainingRow(prompt, response, 1.0 if i % 2 else -1.0, [-1.0] * args.response_tokens))
    return rows


def exchange_seconds(world: World, learner: Learner, rows: list[TrainingRow], repeats: int) -> float:
    """Seconds of one update's exchange alone, the ranks starting it together (the fastest of
    ``repeats``): the rows from rank 0 and one sum of the gradients over the ranks."""
    params = [p for p in learner.model.parameters() if p.requires_grad]
    spent = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        if world.is_main:
            world.send(rows)
        else:
            world.receive()
        world.sum_gradients(params, {"loss": 0.0}, learner.device)
        spent.append(time.perf_counter() - start)
    return min(spent)


def _rank(rank: int, env: dict[str, str], args: argparse.Namespace, out: Path) -> None:
    """One rank: torchrun's variables, its threads, the learner; rank 0 times the updates and,
    with several ranks, the exchange alone (:func:`exchange_seconds`), and writes the fastest of
    each to ``out``."""
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank))
    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    world = World.from_env("cpu").join()
    learner = Learner(
        LearnerConfig(
            lora_rank=args.lora_rank,
            lr=1e-6,
            mini_batches=args.mini_batches,
            micro_batch_tokens=args.micro_batch_tokens,
            device="cpu",
        ),
        world,
    )
    rows = make_rows(args)
    spent = []
    if world.is_main:
        with world.leading():
            learner.share_state()
            learner.update(rows)  # warm-up
            for _ in range(args.repeats):
                start = time.perf_counter()
                learner.update(rows)
                spent.append(time.perf_counter() - start)
    else:
        learner.follow()
    exchange = exchange_seconds(world, learner, rows, args.repeats) if world.size > 1 else 0.0
    if world.is_main:
        out.write_text(json.dumps([min(spent), exchange]))


def measure(processes: int, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds of the fastest update with ``processes`` gloo ranks on this machine, and of its
    exchange alone."""
    env = {**local_launch(processes), "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seconds.json"
        mp.start_processes(_rank, (env, args, out), nprocs=processes, start_method="spawn")
        update, exchange = json.loads(out.read_text())
        return float(update), float(exchange)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lora-rank", type=int, default=8, help="0: full fine-tune")
    parser.add_argument("--mini-batches", type=int, default=1)
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3, help="timed updates per run; the fastest counts")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the settings")
    parser.add_argument("--threads", type=int, default=1, help="threads of each process")
    args = parser.parse_args()
    settings = (1, 2)
    best: dict[int, tuple[float, float]] = {}
    for _ in range(args.rounds):
        for processes in settings:
            seconds = measure(processes, args)
            best[processes] = min(best.get(processes, seconds), seconds)
    tokens = args.rows * (args.prompt_tokens + args.response_tokens)
    table = Table(
        title=f"One learner update: {args.rows} rows x ({args.prompt_tokens} prompt + "
        f"{args.response_tokens} response) tokens, groups of {args.group_size} sharing a prompt, "
        f"{'LoRA r=' + str(args.lora_rank) if args.lora_rank else 'full fine-tune'}, "
        f"{args.mini_batches} mini-batch(es), {args.threads} thread(s) per process, gloo on the CPU",
        caption=f"fastest of {args.repeats} x {args.rounds} rounds; tokens: prompt + response; "
        "exchange: the rows and one gradient sum alone, the ranks starting together",
    )
    for column in ("processes", "update s", "tokens/s", "vs 1 process", "exchange s"):
        table.add_column(column, justify="right")
    for processes in settings:
        update, exchange = best[processes]
        table.add_row(
            str(processes),
            f"{update:.2f}",
            f"{tokens / update:,.0f}",
            f"{best[1][0] / update:.2f}x",
            f"{exchange:.3f}" if processes > 1 else "-",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
