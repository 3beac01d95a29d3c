"""Training tokens/s of one learner update on the embedded model, next to a plain transformers
forward + backward over the same tokens (the ceiling), in one run.

The learner does more per token than the ceiling: a no-grad pass for the old log-probabilities
(``old_logprobs="recompute"``), the PPO loss and entropy, clipping and the optimizer step; the
``generator`` row skips the recompute pass. Those rows have a distinct prompt each. In the
``shared prompts`` row, groups of ``--group-size`` rows share a prompt, as a GRPO group's first
turns do: the learner runs each distinct prompt once, the ceiling runs every row whole.

    .venv/bin/python benchmarks/update.py [--rows 8] [--prompt-tokens 256] [--response-tokens 32]
                                          [--group-size 4]
"""

from __future__ import annotations

import argparse
import time

import torch
from rich.console import Console
from rich.table import Table

from agentgym.policies.models import encode_chat, load_tokenizer
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow


def make_rows(
    tokenizer, rows: int, prompt_tokens: int, response_tokens: int, group_size: int = 1
) -> list[TrainingRow]:
    """Rows whose prompts are the same within each run of ``group_size`` rows."""
    out = []
    for i in range(rows):
        content = f"task {i // group_size}: " + "go " * prompt_tokens
        prompt = encode_chat(tokenizer, [{"role": "user", "content": content}])
        response = [(i * 7 + j) % 1000 + 100 for j in range(response_tokens)]
        out.append(
            TrainingRow(prompt[:prompt_tokens], response, 1.0 if i % 2 else -1.0, [-1.0] * response_tokens)
        )
    return out


def ceiling(learner: Learner, rows: list[TrainingRow]) -> float:
    """Seconds of a plain forward + backward (mean log-likelihood of the responses)."""
    ids = torch.tensor([r.prompt_ids + r.response_ids for r in rows])
    start = time.perf_counter()
    logits = learner.model(input_ids=ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    learner.model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args()
    tokenizer = load_tokenizer("smollm2-135m")
    tokens = args.rows * (args.prompt_tokens + args.response_tokens)
    results = []
    for mode, group_size in (("recompute", 1), ("generator", 1), ("generator", args.group_size)):
        rows = make_rows(tokenizer, args.rows, args.prompt_tokens, args.response_tokens, group_size)
        learner = Learner(
            LearnerConfig(lr=1e-6, lora_rank=args.lora_rank, old_logprobs=mode, micro_batch_tokens=tokens)
        )
        ceiling(learner, rows)  # warm-up
        base = min(ceiling(learner, rows) for _ in range(2))
        learner.update(rows)  # warm-up
        start = time.perf_counter()
        learner.update(rows)
        label = mode if group_size == 1 else f"{mode}, shared prompts (groups of {group_size})"
        results.append((label, time.perf_counter() - start, base))
    table = Table(
        title=f"One update: {args.rows} rows x ({args.prompt_tokens} prompt + "
        f"{args.response_tokens} response) tokens, {tokens:,} tokens, "
        f"{'LoRA r=' + str(args.lora_rank) if args.lora_rank else 'full fine-tune'}"
    )
    for col in ("rows", "update s", "update tokens/s", "fwd+bwd s", "fwd+bwd tokens/s", "vs fwd+bwd"):
        table.add_column(col, justify="right")
    for mode, seconds, base in results:
        table.add_row(
            mode,
            f"{seconds:.2f}",
            f"{tokens / seconds:,.0f}",
            f"{base:.2f}",
            f"{tokens / base:,.0f}",
            f"{base / seconds:.0%}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
