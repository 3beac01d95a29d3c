"""Sandboxes and sandboxed env servers: time to ready, round trips, Sokoban step latency.

Four tables, all measured in this one run:

1. Sandboxes: ``start()`` until a first ``exec(["true"])`` answers (cold), ``SandboxPool.acquire``
   with a warm sandbox ready, and the ``exec(["true"])`` round trip; a host subprocess for
   reference.
2. Sokoban step latency (sequential sync ``step`` calls, one env): in-process, through a local env
   server without sandbox (``ServerProcess`` over a Unix socket), and through ``RemoteEnv`` from
   ``agentgym.make(..., sandbox="local")`` (bubblewrap) and ``sandbox="docker"``.
3. Time to a ready env: ``agentgym.make(..., sandbox=...)`` cold (a new sandbox and server), from
   a warm :class:`~agentgym.hosting.EnvServerPool` (server already running), and as one more
   session on a server that has room.
4. ``collect`` of Sokoban with a random policy (64 episodes of at most 20 turns, 16 at once)
   through sandboxed servers hosting 1, 4 or 16 sessions each: wall time (sandbox starts
   included) and step latency; the measurement behind ``SESSIONS_PER_SERVER``.

    .venv/bin/python benchmarks/sandbox.py [--n 30] [--starts 10] [--steps 2000] [--no-docker]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from collections.abc import Callable, Sequence
from itertools import cycle
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

import agentgym
from agentgym.hosting import EnvServerPool
from agentgym.policies.scripted import RandomPolicy
from agentgym.rollout import acollect, default_tasks
from agentgym.sandbox import (
    OFFLINE_BASE_IMAGE,
    DockerSandbox,
    LocalSandbox,
    Sandbox,
    SandboxPool,
    SandboxSpec,
)
from agentgym.sandbox.spec import Backend
from agentgym.server import RemoteEnv, ServerProcess

ENV_ID = "agentgym/Sokoban-v0"
Rows = list[tuple[str, str, np.ndarray]]


def timed(fn: Callable[[], object], n: int) -> np.ndarray:
    """Seconds per call of ``fn``, ``n`` calls."""
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


# --- 1. sandboxes --------------------------------------------------------------------------------


def cold_start(make: Callable[[], Sandbox], n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        sb = make()
        t0 = time.perf_counter()
        sb.start()
        sb.exec(["true"]).check()
        out[i] = time.perf_counter() - t0
        sb.close()
    return out


def warm_acquire(spec: SandboxSpec, n: int) -> np.ndarray:
    with SandboxPool(warm=2) as pool:
        pool.prewarm(spec, wait_s=120)
        out = np.empty(n)
        for i in range(n):
            t0 = time.perf_counter()
            sb = pool.acquire(spec)
            out[i] = time.perf_counter() - t0
            pool.release(sb)
            pool.prewarm(spec, wait_s=120)  # recycling happens in the background: wait for it
        return out


def exec_round_trip(make: Callable[[], Sandbox], n: int) -> np.ndarray:
    with make() as sb:
        sb.exec(["true"])
        return timed(lambda: sb.exec(["true"]).check(), n)


def sandbox_rows(args: argparse.Namespace) -> Rows:
    rows: Rows = [
        (
            "host",
            "subprocess.run(['true']) (reference)",
            timed(lambda: subprocess.run(["true"], check=True), args.n),
        ),
        ("local", "cold start -> first exec answers", cold_start(LocalSandbox, args.n)),
        ("local", "warm pool acquire", warm_acquire(SandboxSpec("local"), args.n)),
        ("local", "exec round trip", exec_round_trip(LocalSandbox, args.n)),
    ]
    if not args.no_docker:

        def docker() -> DockerSandbox:
            return DockerSandbox(args.image)

        rows += [
            ("docker", "cold start -> first exec answers", cold_start(docker, args.n)),
            ("docker", "warm pool acquire", warm_acquire(SandboxSpec("docker", args.image), args.n)),
            ("docker", "exec round trip", exec_round_trip(docker, args.n)),
        ]
    return rows


# --- 2. step latency -----------------------------------------------------------------------------


def step_latencies(env: Any, steps: int) -> np.ndarray:
    """Seconds per ``step`` of ``env`` (sync), cycling through the four moves; resets (when an
    episode ends) are not timed."""
    env.reset(seed=0)
    moves = cycle(("up", "right", "down", "left"))
    out = np.empty(steps)
    for i in range(steps):
        t0 = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(next(moves))
        out[i] = time.perf_counter() - t0
        if terminated or truncated:
            env.reset(seed=i)
    return out


def step_rows(args: argparse.Namespace) -> Rows:
    rows: Rows = [("in-process", "agentgym.make(id)", step_latencies(agentgym.make(ENV_ID), args.steps))]
    with ServerProcess(use_uds=True) as server:
        env = RemoteEnv(server.url, ENV_ID, uds=server.uds)
        rows.append(
            ("local server, no sandbox", "RemoteEnv over a Unix socket", step_latencies(env, args.steps))
        )
        env.close()
    for backend in ("local", *(() if args.no_docker else ("docker",))):
        env = agentgym.make(ENV_ID, sandbox=backend)
        rows.append(
            (f"{backend} sandbox", f"agentgym.make(id, sandbox={backend!r})", step_latencies(env, args.steps))
        )
        env.close()
    return rows


# --- 3. time to a ready env ----------------------------------------------------------------------


def cold_make(backend: Backend, n: int) -> np.ndarray:
    """``make(sandbox=backend)`` from nothing: the default pool keeps no sandbox warm, and the
    env's close closes its sandbox (untimed)."""
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        env = agentgym.make(ENV_ID, sandbox=backend)
        out[i] = time.perf_counter() - t0
        env.close()
    return out


def warm_make(backend: Backend, n: int) -> np.ndarray:
    """``make(sandbox=pool)`` with a warm server ready (the pool re-warms between calls)."""
    with EnvServerPool(backend, warm=1) as pool:
        out = np.empty(n)
        for i in range(n):
            pool.prewarm(ENV_ID, wait_s=120)
            t0 = time.perf_counter()
            env = agentgym.make(ENV_ID, sandbox=pool)
            out[i] = time.perf_counter() - t0
            env.close()
        return out


def session_make(backend: Backend, n: int) -> np.ndarray:
    """``make(sandbox=pool)`` while another env keeps a server with room running."""
    with EnvServerPool(backend) as pool:
        keep = agentgym.make(ENV_ID, sandbox=pool)

        def one() -> None:
            agentgym.make(ENV_ID, sandbox=pool).close()

        out = timed(one, n)
        keep.close()
        return out


def ready_rows(args: argparse.Namespace) -> Rows:
    rows: Rows = [("in-process", "agentgym.make(id)", timed(lambda: agentgym.make(ENV_ID).close(), args.n))]
    for backend in ("local", *(() if args.no_docker else ("docker",))):
        rows += [
            (backend, "make(id, sandbox=...) cold: new sandbox + server", cold_make(backend, args.starts)),
            (backend, "make(id, sandbox=pool) warm server ready", warm_make(backend, args.starts)),
            (backend, "make(id, sandbox=pool) on a server with room", session_make(backend, args.n)),
        ]
    return rows


# --- 4. sessions per server ----------------------------------------------------------------------


async def timed_collect(sandbox: EnvServerPool | None) -> tuple[float, np.ndarray]:
    """Wall seconds of a Sokoban collect (servers started on demand) and its step latencies."""
    t0 = time.perf_counter()
    episodes = await acollect(
        ENV_ID,
        RandomPolicy(),
        default_tasks(64),
        max_turns=20,
        concurrency=16,
        progress=False,
        sandbox=sandbox,
    )
    wall = time.perf_counter() - t0
    assert not any(e.error for e in episodes), [e.error for e in episodes if e.error][:3]
    return wall, np.array([t.timings["step"] for e in episodes for t in e.turns])


async def sandboxed_collect(backend: Backend, sessions: int) -> tuple[float, np.ndarray]:
    with EnvServerPool(backend, sessions_per_server=sessions) as pool:
        return await timed_collect(pool)


def sessions_table(backends: Sequence[Backend]) -> Table:
    table = Table(title="collect: 64 Sokoban episodes (<= 20 turns), 16 at once, RandomPolicy")
    for col in ("backend", "sessions per server", "servers", "wall s", "step p50 ms", "step p99 ms"):
        table.add_column(col, justify="right")
    runs = [("in-process", "-", "-", asyncio.run(timed_collect(None)))]
    runs += [
        (backend, str(sessions), str(-(-16 // sessions)), asyncio.run(sandboxed_collect(backend, sessions)))
        for backend in backends
        for sessions in (1, 4, 16)
    ]
    for backend, sessions, servers, (wall, steps) in runs:
        p50, p99 = np.percentile(steps, [50, 99]) * 1e3
        table.add_row(backend, sessions, servers, f"{wall:.2f}", f"{p50:.2f}", f"{p99:.2f}")
    return table


# --- output --------------------------------------------------------------------------------------


def latency_table(title: str, rows: Rows, reference: str) -> Table:
    """p50/p99 in ms of every row, and its p50 over the first row's (``reference``)."""
    table = Table(title=title)
    for col in ("where", "measurement", "p50 ms", "p99 ms", f"vs {reference} (p50)"):
        table.add_column(col, justify="right")
    base = float(np.median(rows[0][2]))
    for where, what, seconds in rows:
        p50, p99 = np.percentile(seconds, [50, 99]) * 1e3
        table.add_row(where, what, f"{p50:.2f}", f"{p99:.2f}", f"{p50 / 1e3 / base:.1f}x")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="repetitions of the quick measurements")
    parser.add_argument("--starts", type=int, default=10, help="repetitions of env cold starts")
    parser.add_argument("--steps", type=int, default=2000, help="steps per step-latency row")
    parser.add_argument("--image", default=OFFLINE_BASE_IMAGE, help="docker image of table 1")
    parser.add_argument("--no-docker", action="store_true", help="local backend only")
    args = parser.parse_args()

    console = Console(width=130)
    console.print(
        latency_table(
            f"Sandboxes: time to ready and round trips ({args.n} runs each)",
            sandbox_rows(args),
            "host subprocess",
        )
    )
    console.print(
        latency_table(
            f"Sokoban step latency ({args.steps} sequential steps each)", step_rows(args), "in-process"
        )
    )
    console.print(
        latency_table(
            f"Time to a ready Sokoban env ({args.starts} cold/warm starts, {args.n} sessions)",
            ready_rows(args),
            "in-process",
        )
    )
    console.print(sessions_table(("local", *(() if args.no_docker else ("docker",)))))


if __name__ == "__main__":
    main()
