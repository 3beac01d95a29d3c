"""IGPO's scorer: contexts scored per second by ``answer_scores`` (each chain of growing contexts
run once, then only the answers) next to one forward pass per context (``naive_answer_scores``),
in one run, on agentgym/SearchQA-v0 episodes with the embedded model.

The episodes are those of the IGPO test: for each of the first ``--questions`` bridge questions
of the dev split, the gold searches (one per hop) and then the answer, and the same with random
words searched; each is scored against its ground truth. ``tokens`` counts the tokens through the
model: every context whole (naive), or each chain's longest context and one answer per context.

    .venv/bin/python benchmarks/info_gain.py [--questions 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForCausalLM

import agentgym
from agentgym.envs.search.world import generate_world
from agentgym.policies.models import load_tokenizer, resolve_model
from agentgym.prompting import Prompter
from agentgym.trainers.info_gain import _chains, answer_scores, naive_answer_scores, scoring_sequences

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.search import WORDS, play  # noqa: E402  (the IGPO test's episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each row, alternated; best kept")
    args = parser.parse_args()
    torch.manual_seed(0)
    world = generate_world(0)
    questions = [q for q in world.split("dev") if q.type == "bridge"][: args.questions]
    env = agentgym.make("agentgym/SearchQA-v0", split="dev", top_k=3)
    rng = np.random.default_rng(0)
    episodes = [play(env, q, list(q.hop_queries), q.answers[0]) for q in questions] + [
        play(env, q, [" ".join(rng.choice(WORDS, 3)) for _ in range(q.hops)], q.answers[0]) for q in questions
    ]
    answers = [str(e.ground_truth) for e in episodes]
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32).eval()
    tokenizer, prompter = load_tokenizer("smollm2-135m"), Prompter(family="search")
    template = prompter.answer_template
    sequences = scoring_sequences(tokenizer, prompter, episodes, answers, template)
    chains = _chains(tokenizer, prompter, episodes, answers, template)
    tokens = {
        "one forward pass per context": sum(len(seq) for seq, _, _ in sequences),
        "answer_scores (chains)": sum(len(c.context) + len(c.members) * len(c.answer[0]) for c in chains),
    }
    runs = {
        "one forward pass per context": lambda: naive_answer_scores(
            model, tokenizer, prompter, episodes, answers, template=template
        ),
        "answer_scores (chains)": lambda: answer_scores(
            model, tokenizer, prompter, episodes, answers, template=template
        ),
    }
    seconds: dict[str, float] = {name: float("inf") for name in runs}
    results = {}
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            results[name] = run()
            seconds[name] = min(seconds[name], time.perf_counter() - start)
    naive, batched = results.values()
    gap = max(float(np.abs(a - b).max()) for a, b in zip(naive, batched))
    table = Table(
        title=f"IGPO scoring: {len(episodes)} episodes, {len(sequences)} contexts in {len(chains)} chains, "
        f"best of {args.repeats}",
        caption=f"largest difference between the two rows' scores: {gap:.1e} nats",
    )
    for column in ("scorer", "tokens", "seconds", "contexts/s", "speed-up"):
        table.add_column(column, justify="right")
    base = seconds["one forward pass per context"]
    for name in runs:
        table.add_row(
            name,
            f"{tokens[name]:,}",
            f"{seconds[name]:.2f}",
            f"{len(sequences) / seconds[name]:.1f}",
            f"{base / seconds[name]:.2f}x",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
