"""Training tokens/s of one learner update on the embedded model, next to a plain transformers
forward + backward of the same rows (the ceiling), in one run.

The ceiling is the work that any update must do: one forward + backward of the responses'
log-likelihood, with the LM head on the response positions only and the learner's autocast, as
the learner runs it; no optimizer step. Each row runs one learner update on one batch (one
micro-batch per optimizer step):

* ``generator``: the generator's log-probs are the old policy; one optimizer step: one forward +
  backward, the PPO loss and entropy, gradient clipping and the AdamW step. (``recompute`` with a
  single optimizer step does exactly this: it reuses the step's own forward pass.)
* ``recompute, 2 mini-batches``: a no-grad pass over the batch recomputes the old log-probs, then
  two optimizer steps on half the rows each.
* ``decoupled, 2 mini-batches``: the same recompute (the proximal policy), and the loss weighted
  by the truncated importance weight over the generator's log-probs.
* ``generator, shared prompts``: as ``generator``, but groups of ``--group-size`` rows share a
  prompt, as a GRPO group's first turns do: the learner runs each distinct prompt once, the
  ceiling runs every row whole.
* ``generator, episodes``: as ``generator``, but the rows are the turns of episodes of
  ``--turns`` turns, each turn's prompt the one before it, its response and a 16-token
  observation (a chat with its history): the learner runs every episode's tokens once (its
  prefix tree), the ceiling runs every row whole.

    .venv/bin/python benchmarks/update.py [--rows 8] [--prompt-tokens 256] [--response-tokens 32]
                                          [--group-size 4] [--turns 4] [--lora-rank 0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
from rich.console import Console
from rich.table import Table

from agentgym.policies.batching import left_pad
from agentgym.policies.models import encode_chat, load_tokenizer
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow

#: (label, what the update runs, learner settings, how rows share tokens: "", "groups", "episodes")
CASES = (
    ("generator", "fwd+bwd, 1 step", dict(old_logprobs="generator"), ""),
    ("recompute, 2 mini-batches", "no-grad fwd + fwd+bwd, 2 steps", dict(mini_batches=2), ""),
    (
        "decoupled, 2 mini-batches",
        "no-grad fwd + fwd+bwd, 2 steps",
        dict(old_logprobs="decoupled", mini_batches=2),
        "",
    ),
    ("generator, shared prompts", "fwd+bwd (prompts once), 1 step", dict(old_logprobs="generator"), "groups"),
    ("generator, episodes", "fwd+bwd (turns once), 1 step", dict(old_logprobs="generator"), "episodes"),
)
OBSERVATION_TOKENS = 16
"""Tokens of the observation between one turn's response and the next turn's prompt's end."""


def make_rows(
    tokenizer, rows: int, prompt_tokens: int, response_tokens: int, group_size: int = 1, turns: int = 1
) -> list[TrainingRow]:
    """Rows whose prompts are the same within each run of ``group_size`` rows; with ``turns``,
    each run of ``turns`` rows is an episode, a row's prompt the row before it, its response and
    an observation."""
    out: list[TrainingRow] = []
    for i in range(rows):
        response = [(i * 7 + j) % 1000 + 100 for j in range(response_tokens)]
        if i % turns:
            before = out[-1]
            observation = [(i * 11 + j) % 1000 + 100 for j in range(OBSERVATION_TOKENS)]
            prompt = before.prompt_ids + before.response_ids + observation
        else:
            content = f"task {i // (group_size * turns)}: " + "go " * prompt_tokens
            prompt = encode_chat(tokenizer, [{"role": "user", "content": content}])[:prompt_tokens]
        out.append(TrainingRow(prompt, response, 1.0 if i % 2 else -1.0, [-1.0] * response_tokens))
    return out


def fastest(learner: Learner, works: list[Callable[[], object]], repeats: int) -> list[float]:
    """Seconds of the fastest of ``repeats`` runs of each of ``works`` after one warm-up run
    each; the runs alternate, so that a busy machine slows them alike, and the device's queue
    is drained around each."""

    def sync() -> None:
        if learner.device.type == "cuda":
            torch.cuda.synchronize(learner.device)

    for work in works:
        work()
    times: list[list[float]] = [[] for _ in works]
    for _ in range(repeats):
        for work, spent in zip(works, times):
            sync()
            start = time.perf_counter()
            work()
            sync()
            spent.append(time.perf_counter() - start)
    return [min(spent) for spent in times]


def ceiling(learner: Learner, rows: list[TrainingRow]) -> None:
    """A plain forward + backward of the mean log-likelihood of the responses (all of one
    length; rows left-padded), every row whole, the LM head on the response positions only."""
    ids, mask, positions = left_pad([r.prompt_ids + r.response_ids for r in rows], 0, learner.device)
    n = len(rows[0].response_ids)
    with torch.autocast(learner.device.type, dtype=torch.bfloat16, enabled=learner.autocast):
        logits = learner.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, logits_to_keep=n + 1
        ).logits
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, -n:, None])
    (-logprobs.mean()).backward()
    learner.model.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4, help="turns of an episode (the episodes row)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the fastest counts")
    args = parser.parse_args()
    tokenizer = load_tokenizer("smollm2-135m")
    results = []
    for label, work, settings, shared in CASES:
        group_size = args.group_size if shared == "groups" else 1
        turns = args.turns if shared == "episodes" else 1
        rows = make_rows(tokenizer, args.rows, args.prompt_tokens, args.response_tokens, group_size, turns)
        tokens = sum(r.length for r in rows)
        learner = Learner(
            LearnerConfig(lr=1e-6, lora_rank=args.lora_rank, micro_batch_tokens=tokens, **settings)
        )
        base, seconds = fastest(
            learner, [partial(ceiling, learner, rows), partial(learner.update, rows)], args.repeats
        )
        label = {"groups": f"{label} (groups of {group_size})", "episodes": f"{label} ({turns} turns)"}.get(
            shared, label
        )
        results.append((label, work, tokens, seconds, base))
    table = Table(
        caption="ceiling: one forward + backward of the responses' log-likelihood, every row whole, "
        "the LM head on the response positions only; tokens: of the rows whole",
        title=f"One update: {args.rows} rows of {args.prompt_tokens} prompt (the first turn's) + "
        f"{args.response_tokens} response tokens, "
        f"{'LoRA r=' + str(args.lora_rank) if args.lora_rank else 'full fine-tune'}, on {learner.device}",
    )
    for col in (
        "rows",
        "update runs",
        "tokens",
        "update s",
        "update tokens/s",
        "ceiling s",
        "ceiling tokens/s",
    ):
        table.add_column(col, justify="right")
    table.add_column("vs ceiling", justify="right")
    for label, work, tokens, seconds, base in results:
        table.add_row(
            label,
            work,
            f"{tokens:,}",
            f"{seconds:.2f}",
            f"{tokens / seconds:,.0f}",
            f"{base:.2f}",
            f"{tokens / base:,.0f}",
            f"{base / seconds:.0%}",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
