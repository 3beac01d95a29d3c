"""The cost of isolation in the eval harness: episodes per second of the ``smoke`` suite with a
zero-latency scripted policy, every env in a Docker sandbox, at ``concurrency`` 1, 4 and 16, next to
the same suite in this process.

Each row is one whole ``run_eval`` (sandbox start, episodes, summary; no report), timed from the
call to its return, in one run of this script. The suite is ``smoke`` with every entry's
``tasks`` multiplied by ``--scale`` so that a run lasts long enough to measure. The docker
rows use the run's env server pool as the harness does: ``sandbox_sessions`` envs per sandboxed
server (default 16), plus one row with ``sandbox_sessions=1``: every env in a sandbox of its own.

    .venv/bin/python benchmarks/harness.py [--scale 8] [--concurrency 1 4 16] [--backend docker]

Needs a Docker daemon and the text games' image (``agentgym build textgames --offline-base``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agentgym.harness.eval import compose_eval_config, run_eval


def run(scale: int, concurrency: int, sandbox: str | None, sessions: int, out: Path) -> tuple[int, float]:
    """(episodes, seconds) of one scaled smoke run."""
    cfg = compose_eval_config(
        [
            "suite=smoke",
            "policy=scripted",
            f"concurrency={concurrency}",
            f"sandbox={sandbox or 'none'}",
            f"sandbox_sessions={sessions}",
            f"out_dir={out}",
            "progress=false",
            "report=false",
        ]
    )
    for entry in cfg.suite.entries:
        entry.tasks = entry.tasks * scale
    start = time.perf_counter()
    _, summary = asyncio.run(run_eval(cfg))
    seconds = time.perf_counter() - start
    assert summary["errors"] == 0, summary["error_examples"]
    return summary["episodes"], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=8, help="tasks multiplier per entry")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--backend", default="docker", choices=["docker", "local"])
    args = parser.parse_args()
    table = Table(title=f"smoke suite x{args.scale}, scripted policy: episodes/s")
    for column in (
        "concurrency",
        "where",
        "sessions/sandbox",
        "episodes",
        "seconds",
        "episodes/s",
        "vs in-process",
    ):
        table.add_column(column, justify="right")
    rows = [(c, None, 16) for c in args.concurrency] + [(c, args.backend, 16) for c in args.concurrency]
    rows.append((max(args.concurrency), args.backend, 1))
    baseline: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="agentgym-bench-harness-") as tmp:
        for index, (concurrency, sandbox, sessions) in enumerate(rows):
            episodes, seconds = run(args.scale, concurrency, sandbox, sessions, Path(tmp) / f"run{index}")
            rate = episodes / seconds
            if sandbox is None:
                baseline[concurrency] = rate
            table.add_row(
                str(concurrency),
                sandbox or "in-process",
                "-" if sandbox is None else str(sessions),
                str(episodes),
                f"{seconds:.2f}",
                f"{rate:.1f}",
                f"{rate / baseline[concurrency]:.0%}" if concurrency in baseline else "-",
            )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
