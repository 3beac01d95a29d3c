"""Response tokens/s through `collect` with VLLMPolicy vs the same server driven directly.

Starts a local vLLM server (embedded SmolLM2-135M on CPU unless a GPU is present), then measures

- collect: ``--episodes`` episodes of up to ``--max-turns`` turns, ``--concurrency`` in flight,
  through :class:`VLLMPolicy` (prompt building, env steps and HTTP included);
- raw: the very prompts those episodes sent (same token ids, sampling and seeds) posted straight
  to ``/v1/completions`` by ``--concurrency`` workers.

The prefix cache is reset before each measurement, and rounds alternate the order (collect, raw;
raw, collect; ...) so that a slow drift of the machine's load does not favour either. Prints
response tokens/s over all rounds and the ratio. Target: collect delivers >= 90% of raw.

    .venv/bin/python benchmarks/rollout_vllm.py [--env agentgym/Household-v0] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from agentgym.cli import stop_on_sigterm
from agentgym.episode import Episode
from agentgym.policies.vllm import VLLMPolicy, VLLMServer
from agentgym.policy import GenerationRequest, SamplingParams
from agentgym.rollout import acollect, default_tasks, request_seed

COLLECT, RAW = "collect + VLLMPolicy", "raw /v1/completions"


async def run_collect(
    policy: VLLMPolicy, args: argparse.Namespace, sampling: SamplingParams, episodes: int
) -> tuple[list[Episode], float]:
    """The episodes and the wall time (s) of one `acollect`."""
    start = time.perf_counter()
    result = await acollect(
        args.env,
        policy,
        default_tasks(episodes),
        progress=False,
        max_turns=args.max_turns,
        concurrency=args.concurrency,
        sampling=sampling,
    )
    elapsed = time.perf_counter() - start
    errors = [e.error for e in result if e.error]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g. {errors[0]}")
    return result, elapsed


def replay_bodies(
    policy: VLLMPolicy, episodes: list[Episode], sampling: SamplingParams, model: str
) -> list[dict[str, Any]]:
    """The completion payloads of every turn of ``episodes``, turn-major (as they first arose)."""
    calls = [(turn, i, e, t) for i, e in enumerate(episodes) for turn, t in enumerate(e.turns)]
    calls.sort(key=lambda c: c[:2])
    return [
        policy.completion_body(
            t.prompt_ids,
            GenerationRequest(messages=[], sampling=sampling, seed=request_seed(e.seed, 0, turn)),
            model,
        )
        for turn, _, e, t in calls
    ]


async def run_raw(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> tuple[int, float]:
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
    """Empty the server's prefix cache (needs ``VLLM_SERVER_DEV_MODE=1``)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        (await client.post("/reset_prefix_cache")).raise_for_status()


async def measure(server: VLLMServer, args: argparse.Namespace) -> dict[str, list[float]]:
    """Runner -> [requests, response tokens, seconds], summed over ``args.rounds`` rounds."""
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    policy = VLLMPolicy(server.base_url, args.model, served_model=server.model_name, timeout=600)
    totals = {RAW: [0.0, 0.0, 0.0], COLLECT: [0.0, 0.0, 0.0]}
    try:
        await run_collect(policy, args, sampling, episodes=4)  # one-off costs of first requests
        bodies: list[dict[str, Any]] = []
        for round_index in range(args.rounds):
            for runner in (COLLECT, RAW) if round_index % 2 == 0 else (RAW, COLLECT):
                await reset_prefix_cache(server.base_url)
                if runner == COLLECT:
                    episodes, seconds = await run_collect(policy, args, sampling, args.episodes)
                    bodies = bodies or replay_bodies(policy, episodes, sampling, server.model_name)
                    turns = [t for e in episodes for t in e.turns]
                    row = (len(turns), sum(len(t.response_ids) for t in turns), seconds)
                else:
                    row = (len(bodies), *await run_raw(server.base_url, bodies, args.concurrency))
                totals[runner] = [a + b for a, b in zip(totals[runner], row)]
    finally:
        await policy.aclose()
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="agentgym/Household-v0")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--kv-cache",
        default="2G",
        help="server KV cache (the CPU default 512M holds ~11.6k tokens of "
        "SmolLM2: fewer than 32 agent prompts)",
    )
    args = parser.parse_args()
    stop_on_sigterm()  # `kill` stops the vLLM server it launches, too
    start = time.perf_counter()
    with VLLMServer(
        args.model, env={"VLLM_SERVER_DEV_MODE": "1"}, extra_args=["--kv-cache-memory-bytes", args.kv_cache]
    ) as server:
        startup_s = time.perf_counter() - start
        totals = asyncio.run(measure(server, args))
    raw_rate = totals[RAW][1] / totals[RAW][2]
    table = Table(
        title=f"vLLM rollout throughput: {args.env}, {args.episodes} episodes x "
        f"<= {args.max_turns} turns, {args.concurrency} concurrent, "
        f"max_tokens {args.max_tokens}, {args.model}, KV cache {args.kv_cache}, "
        f"{args.rounds} rounds (server start {startup_s:.0f} s)"
    )
    for col in ("runner", "requests", "response tokens", "seconds", "tokens/s", "vs raw"):
        table.add_column(col, justify="right")
    for name, (requests, tokens, seconds) in totals.items():
        table.add_row(
            name,
            f"{requests:.0f}",
            f"{tokens:,.0f}",
            f"{seconds:.1f}",
            f"{tokens / seconds:,.1f}",
            f"{tokens / seconds / raw_rate:.0%}",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
