"""Our BM25 retriever next to rank-bm25 on a generated corpus of 1,000,000 passages: index build
time, queries per second, and how much the two top-10 lists agree.

The corpus is :func:`agentgym.envs.search.world.iter_passages` (entity articles and distractors
of the generated world, scaled up). Queries are the gold hop queries of the generated world's
questions. Both retrievers index the same title + text with the same tokens (lowercased words
of two or more letters, English stop words removed; rank-bm25 gets bm25s's own tokenization), so
their scores differ only by the BM25 variant (ours: Lucene's idf; rank-bm25's Okapi idf with an
epsilon floor). rank-bm25 scores every passage in Python for every query, so it answers a sample
of ``--baseline-queries`` queries; ours answers ``--queries`` one request at a time, as the env
sends them, and in batches of 64, as the service accepts them. All figures come from one run.

    .venv/bin/python benchmarks/retrieval.py [--passages 1000000] [--queries 2000]
        [--baseline-queries 20]

Needs ``rank-bm25`` (a dev dependency). About 12 GB of memory at 1,000,000 passages, most of it
rank-bm25's per-passage dictionaries.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from agentgym.envs.search.index import BM25Index, tokenize
from agentgym.envs.search.world import generate_world, iter_passages

console = Console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--baseline-queries", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    world = generate_world(args.seed)
    queries = [q for question in world.questions for q in question.hop_queries][: args.queries]
    t0 = time.perf_counter()
    passages = list(iter_passages(args.seed, args.passages))
    generate_s = time.perf_counter() - t0
    console.print(f"{len(passages):,} passages generated in {generate_s:.1f} s; {len(queries)} queries")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index = BM25Index.build(passages, Path(tmp) / "index")
        ours_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = BM25Index.load(index.path)
        load_s = time.perf_counter() - t0
        index.search(queries[:10], k=10)  # warm the page cache
        t0 = time.perf_counter()
        ours_single = [index.search([q], k=10)[0] for q in queries]
        ours_single_qps = len(queries) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(0, len(queries), 64):
            index.search(queries[i : i + 64], k=10)
        ours_batch_qps = len(queries) / (time.perf_counter() - t0)

        from rank_bm25 import BM25Okapi

        t0 = time.perf_counter()
        tokens = tokenize([f"{p.title} {p.text}" for p in passages], return_ids=False)
        del passages
        gc.collect()
        baseline = BM25Okapi(tokens)
        base_build = time.perf_counter() - t0
        del tokens
        gc.collect()
        sample = queries[: args.baseline_queries]
        sample_tokens = tokenize(sample, return_ids=False)
        t0 = time.perf_counter()
        base_top = [
            np.argsort(-baseline.get_scores(toks), kind="stable")[:10]
            for toks in track(sample_tokens, description="rank-bm25 queries", console=console)
        ]
        base_qps = len(sample) / (time.perf_counter() - t0)
        overlap = np.mean(
            [
                len({index.passage(int(i)).id for i in top} & {h.id for h in ours}) / 10
                for top, ours in zip(base_top, ours_single)
            ]
        )

    table = Table(title=f"BM25 on {args.passages:,} generated passages (one run)")
    for col in ("retriever", "index build (s)", "queries/s", "vs rank-bm25"):
        table.add_column(col, justify="right" if col != "retriever" else "left")
    table.add_row("rank-bm25 (BM25Okapi)", f"{base_build:.1f}", f"{base_qps:.2f}", "1.0x")
    table.add_row(
        "ours, one query per call",
        f"{ours_build:.1f}",
        f"{ours_single_qps:.1f}",
        f"{ours_single_qps / base_qps:.0f}x",
    )
    table.add_row("ours, batches of 64", "", f"{ours_batch_qps:.1f}", f"{ours_batch_qps / base_qps:.0f}x")
    console.print(table)
    console.print(
        f"index load (memory-mapped): {load_s:.2f} s; top-10 overlap with rank-bm25 "
        f"over {len(sample)} queries: {overlap:.1%}"
    )


if __name__ == "__main__":
    main()
