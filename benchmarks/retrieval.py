"""Retrieval benchmarks: ``bm25`` (the default) and ``dense``.

``bm25``: our BM25 retriever next to rank-bm25 on a generated corpus of 1,000,000 passages: index
build time, queries per second, and how much the two top-10 lists agree.

The corpus is :func:`agentgym.envs.search.world.iter_passages` (entity articles and distractors
of the generated world, scaled up). Queries are the gold hop queries of the generated world's
questions. Both retrievers index the same title + text with the same tokens (lowercased words
of two or more letters, English stop words removed; rank-bm25 gets bm25s's own tokenization), so
their scores differ only by the BM25 variant (ours: Lucene's idf; rank-bm25's Okapi idf with an
epsilon floor). rank-bm25 scores every passage in Python for every query, so it answers a sample
of ``--baseline-queries`` queries; ours answers ``--queries`` one request at a time, as the env
sends them, and in batches of 64, as the service accepts them. All figures come from one run.

    .venv/bin/python benchmarks/retrieval.py [bm25] [--passages 1000000] [--queries 2000]
        [--baseline-queries 20]

Needs ``rank-bm25`` (a dev dependency). About 12 GB of memory at 1,000,000 passages, most of it
rank-bm25's per-passage dictionaries.

``dense``: BM25, dense (the default encoder, all-MiniLM-L6-v2) and hybrid retrieval on the
generated world (seed 0, about 3,600 passages), on ``--threads`` CPU cores:

- recall@5 of the gold supporting passage of every hop of every question, for each retrieval,
  queried with the hop's gold query (the name and a word of the passage: "Varen Ostrel
  birthplace"), and with its paraphrase (the name in a question or description that shares no
  other word with the passage: "Where was Varen Ostrel from?"; see
  :class:`~agentgym.envs.search.world.Question`); and, harder, the fraction of a question's
  supporting passages in the top 5 when the whole question is the query;
- passages embedded per second (building the dense part), query latency p50 per retrieval
  (one query per call, embedding included);
- dense search latency p50 at ``--latency-passages`` passages (default 100,000), exact against
  FAISS (``IVF,SQ8``, ``nprobe`` 32). This corpus's vectors are random unit vectors, not
  embeddings (embedding 100,000 passages takes an hour on 2 cores): the latencies hold for any
  vectors of that size, but random vectors have no clusters, the worst case for FAISS. Each
  query is a passage's vector plus noise, given as a vector (no embedding), one per call; the
  table says how often the top hit is that passage. FAISS's recall@10 of the exact top 10 on
  real embeddings is measured on the world's, with a FAISS index forced.

    .venv/bin/python benchmarks/retrieval.py dense [--threads 2] [--latency-passages 100000]
        [--latency-queries 200]

Needs the ``dense`` extra.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

from agentgym.envs.search.index import BM25Index, Hit, Ranking, Retriever, tokenize
from agentgym.envs.search.world import generate_world, iter_passages

console = Console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", nargs="?", choices=("bm25", "dense"), default="bm25")
    parser.add_argument("--passages", type=int, default=1_000_000, help="bm25")
    parser.add_argument("--queries", type=int, default=2000, help="bm25")
    parser.add_argument("--baseline-queries", type=int, default=20, help="bm25")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="dense: CPU threads of torch and FAISS")
    parser.add_argument("--latency-passages", type=int, default=100_000, help="dense")
    parser.add_argument("--latency-queries", type=int, default=200, help="dense")
    args = parser.parse_args()
    if args.part == "dense":
        dense(args)
    else:
        bm25(args)


def bm25(args: argparse.Namespace) -> None:
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


def _recall(retriever: Retriever, pairs: list[tuple[str, set[str]]], k: int) -> float:
    """Mean fraction of each query's gold passages in its top ``k``."""
    results = retriever.search([query for query, _ in pairs], k=k)
    return float(
        np.mean([len(gold & {h.id for h in hits}) / len(gold) for (_, gold), hits in zip(pairs, results)])
    )


def _p50_ms(call: Callable[[Any], Any], items: list[Any]) -> float:
    call(items[0])  # warm
    times = []
    for item in items:
        t0 = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000)


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def _search_one(retriever: Retriever, query: str) -> list[Hit]:
    return retriever.search([query], k=5)[0]


def dense(args: argparse.Namespace) -> None:
    import faiss
    import torch

    from agentgym.envs.search.dense import NPROBE, DenseIndex
    from agentgym.envs.search.encoder import load_encoder
    from agentgym.envs.search.retrieval import HybridRetriever

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    world = generate_world(args.seed)
    hops = [(q.hop_queries[i], {q.supporting[i]}) for q in world.questions for i in range(q.hops)]
    paraphrases = [(q.hop_paraphrases[i], {q.supporting[i]}) for q in world.questions for i in range(q.hops)]
    questions = [(q.question, set(q.supporting)) for q in world.questions]
    encoder = load_encoder()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index = BM25Index.build(world.passages, Path(tmp) / "world")
        bm25_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        dense_index = DenseIndex.build(index, progress=True)
        dense_build = time.perf_counter() - t0
        retrievers: dict[str, Retriever] = {
            "bm25": index,
            "dense": dense_index,
            "hybrid": HybridRetriever(index, dense_index),
        }
        sample = [hops[i][0] for i in rng.choice(len(hops), size=min(200, len(hops)), replace=False)]
        dense_mb = _size_mb(dense_index.path)
        costs = {  # build time and disk added by each retrieval
            "bm25": (f"{bm25_build:.1f}", f"{_size_mb(index.path) - dense_mb:.1f}"),
            "dense": (f"+{dense_build:.1f}", f"+{dense_mb:.1f}"),
            "hybrid": ("", ""),
        }
        table = Table(
            title=f"Retrieval on the generated world: {len(index):,} passages, {args.threads} threads"
        )
        for col in (
            "retrieval",
            "hop recall@5",
            "paraphrase recall@5",
            "question recall@5",
            "query p50 (ms)",
            "build (s)",
            "disk (MB)",
        ):
            table.add_column(col, justify="left" if col == "retrieval" else "right")
        for name, retriever in retrievers.items():
            p50 = _p50_ms(partial(_search_one, retriever), sample)
            recalls = [f"{_recall(retriever, pairs, 5):.1%}" for pairs in (hops, paraphrases, questions)]
            table.add_row(name, *recalls, f"{p50:.1f}", *costs[name])
        console.print(table)
        console.print(
            f"{len(hops)} hop queries and as many paraphrases, {len(questions)} questions; embedding: "
            f"{len(index) / dense_build:.0f} passages/s ({encoder.device}, {args.threads} threads)"
        )
        # FAISS on real embeddings: the world's, forced (it is small enough for exact search)
        stored = np.load(dense_index.path / "embeddings.npy").astype(np.float32)
        DenseIndex.build(index, vectors=stored, faiss=True, overwrite=True)
        sample_vectors = encoder.encode_queries(sample)
        world_recall = _overlap(
            DenseIndex.load(index, search="exact").rank_vectors(sample_vectors, 10),
            DenseIndex.load(index, search="faiss").rank_vectors(sample_vectors, 10),
        )
        console.print(
            f"FAISS on the world's embeddings (nprobe {NPROBE}): recall@10 of exact {world_recall:.1%}"
        )

        big = BM25Index.build(iter_passages(args.seed, args.latency_passages), Path(tmp) / "big")
        vectors = rng.standard_normal((len(big), encoder.dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        build_s = {}
        for kind, with_faiss in (("exact", False), ("faiss", True)):
            t0 = time.perf_counter()
            DenseIndex.build(big, vectors=vectors, faiss=with_faiss, overwrite=True)
            build_s[kind] = time.perf_counter() - t0
        # each query: a passage's vector moved by noise of norm 0.5 (cosine about 0.9 with it)
        sources = rng.choice(len(big), size=args.latency_queries, replace=False)
        queries = vectors[sources] + 0.5 * rng.standard_normal(
            (len(sources), encoder.dim), dtype=np.float32
        ) / np.sqrt(encoder.dim)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        latency = Table(
            title=f"Dense search at {len(big):,} passages (random unit vectors, {args.threads} threads)"
        )
        for col in ("search", "p50 (ms)", "finds the source", "build from vectors (s)", "disk (MB)"):
            latency.add_column(col, justify="left" if col == "search" else "right")
        dense_dir = big.path / "dense"
        faiss_mb = (dense_dir / "faiss.index").stat().st_size / 1e6
        for kind, mb in (("exact", _size_mb(dense_dir) - faiss_mb), ("faiss", faiss_mb)):
            searcher = DenseIndex.load(big, search=kind)
            p50 = _p50_ms(partial(searcher.rank_vectors, k=10), list(queries[:, None, :]))
            top = [int(indices[0]) for indices, _ in searcher.rank_vectors(queries, 10)]
            found = np.mean(np.array(top) == sources)
            latency.add_row(kind, f"{p50:.1f}", f"{found:.1%}", f"{build_s[kind]:.1f}", f"{mb:.0f}")
        console.print(latency)


def _overlap(truth: list[Ranking], found: list[Ranking]) -> float:
    """Mean fraction of each true top list that ``found`` holds."""
    return float(
        np.mean([len(set(t[0].tolist()) & set(f[0].tolist())) / len(t[0]) for t, f in zip(truth, found)])
    )


if __name__ == "__main__":
    main()
