"""Response tokens/s through `collect` with VLLMPolicy vs the same server driven directly.

Starts a local vLLM server (embedded SmolLM2-135M on CPU unless a GPU is present), then:

1. `collect`: ``--episodes`` episodes, ``--concurrency`` in flight, through :class:`VLLMPolicy`;
2. raw: the very prompts those episodes sent (same token ids, sampling and seeds) posted straight
   to ``/v1/completions`` by ``--concurrency`` workers, after the prefix cache is reset so that
   neither run starts warm.

Prints response tokens/s of both and their ratio. Target: `collect` delivers at least 90% of raw.

    .venv/bin/python benchmarks/rollout_vllm.py [--env agentgym/Household-v0] [--episodes 48]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from agentgym.episode import Episode
from agentgym.policies.vllm import VLLMPolicy, VLLMServer
from agentgym.policy import GenerationRequest, SamplingParams
from agentgym.rollout import acollect, default_tasks, request_seed


async def run_collect(policy: VLLMPolicy, args: argparse.Namespace,
                      sampling: SamplingParams) -> tuple[list[Episode], float]:
    """The episodes and the wall time (s) of one `acollect`."""
    start = time.perf_counter()
    episodes = await acollect(args.env, policy, default_tasks(args.episodes), progress=False,
                              max_turns=args.max_turns, concurrency=args.concurrency,
                              sampling=sampling)
    elapsed = time.perf_counter() - start
    errors = [e.error for e in episodes if e.error]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g. {errors[0]}")
    return episodes, elapsed


def replay_bodies(policy: VLLMPolicy, episodes: list[Episode], sampling: SamplingParams,
                  model: str) -> list[dict[str, Any]]:
    """The completion payloads of every turn of ``episodes``, turn-major (as they first arose)."""
    calls = [(turn, i, e, t) for i, e in enumerate(episodes) for turn, t in enumerate(e.turns)]
    calls.sort(key=lambda c: c[:2])
    return [policy.completion_body(
        t.prompt_ids, GenerationRequest(messages=[], sampling=sampling,
                                        seed=request_seed(e.seed, 0, turn)), model)
            for turn, _, e, t in calls]


async def run_raw(base_url: str, bodies: list[dict[str, Any]],
                  concurrency: int) -> tuple[int, float]:
    """Response tokens and wall time (s) of ``bodies`` posted by ``concurrency`` workers."""
    queue = list(reversed(bodies))
    tokens = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        async def worker() -> None:
            nonlocal tokens
            while queue:
                response = await client.post("/v1/completions", json=queue.pop())
                response.raise_for_status()
                tokens += len(response.json()["choices"][0]["token_ids"])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return tokens, time.perf_counter() - start


async def reset_prefix_cache(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        (await client.post("/reset_prefix_cache")).raise_for_status()


async def measure(server: VLLMServer, args: argparse.Namespace) -> list[tuple[str, int, int, float]]:
    """Rows (runner, requests, response tokens, seconds)."""
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    policy = VLLMPolicy(server.base_url, args.model, served_model=server.model_name, timeout=600)
    try:
        warm = argparse.Namespace(**{**vars(args), "episodes": 4, "max_turns": 1})
        await run_collect(policy, warm, sampling)  # first requests pay one-off costs
        await reset_prefix_cache(server.base_url)
        episodes, collect_s = await run_collect(policy, args, sampling)
        bodies = replay_bodies(policy, episodes, sampling, server.model_name)
    finally:
        await policy.aclose()
    await reset_prefix_cache(server.base_url)
    raw_tokens, raw_s = await run_raw(server.base_url, bodies, args.concurrency)
    collect_tokens = sum(len(t.response_ids) for e in episodes for t in e.turns)
    return [("raw /v1/completions", len(bodies), raw_tokens, raw_s),
            ("collect + VLLMPolicy", len(bodies), collect_tokens, collect_s)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="agentgym/Household-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    start = time.perf_counter()
    with VLLMServer(args.model, env={"VLLM_SERVER_DEV_MODE": "1"}) as server:
        startup_s = time.perf_counter() - start
        rows = asyncio.run(measure(server, args))
    raw_rate = rows[0][2] / rows[0][3]
    table = Table(title=f"vLLM rollout throughput: {args.env}, {args.episodes} episodes x "
                        f"<= {args.max_turns} turns, {args.concurrency} concurrent, "
                        f"max_tokens {args.max_tokens}, {args.model} (server start {startup_s:.0f} s)")
    for col in ("runner", "requests", "response tokens", "seconds", "tokens/s", "vs raw"):
        table.add_column(col, justify="right")
    for name, requests, tokens, seconds in rows:
        table.add_row(name, str(requests), f"{tokens:,}", f"{seconds:.1f}",
                      f"{tokens / seconds:,.1f}", f"{tokens / seconds / raw_rate:.0%}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
