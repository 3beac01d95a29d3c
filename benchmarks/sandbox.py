"""Time to a ready sandbox, warm-pool acquire and exec round trip, per backend.

- cold start: ``start()`` until a first ``exec(["true"])`` has answered (then ``close()``, untimed);
- warm acquire: ``SandboxPool.acquire`` with a warm sandbox ready (target p50 < 20 ms);
- exec round trip: ``exec(["true"])`` in a started sandbox; a plain host subprocess for reference.

    .venv/bin/python benchmarks/sandbox.py [--n 30] [--image agentgym/base:bookworm] [--no-docker]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from agentgym.sandbox import (
    OFFLINE_BASE_IMAGE,
    DockerSandbox,
    LocalSandbox,
    Sandbox,
    SandboxPool,
    SandboxSpec,
)


def timed(fn: Callable[[], object], n: int) -> np.ndarray:
    """Seconds per call of ``fn``, ``n`` calls."""
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30, help="repetitions per measurement")
    parser.add_argument("--image", default=OFFLINE_BASE_IMAGE, help="docker image")
    parser.add_argument("--no-docker", action="store_true", help="local backend only")
    args = parser.parse_args()

    rows: list[tuple[str, str, np.ndarray]] = [
        ("host", "subprocess.run(['true']) (reference)", timed(lambda: subprocess.run(["true"], check=True), args.n)),
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
    table = Table(title=f"Sandboxes: time to ready and round trips ({args.n} runs each)")
    for col in ("backend", "measurement", "p50 ms", "p99 ms", "vs host subprocess (p50)"):
        table.add_column(col, justify="right")
    reference = float(np.median(rows[0][2]))
    for backend, what, seconds in rows:
        p50, p99 = np.percentile(seconds, [50, 99]) * 1e3
        table.add_row(backend, what, f"{p50:.2f}", f"{p99:.2f}", f"{p50 / 1e3 / reference:.1f}x")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
