"""``agentgym index CORPUS OUT_DIR``: the search family's command, added to the ``agentgym`` CLI
through the ``agentgym.commands`` entry point group (a family's commands are its own)."""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["add_command"]


def add_command(subparsers: Any) -> None:
    """Add ``index`` to the ``agentgym`` CLI's subcommands."""
    p = subparsers.add_parser("index", help="build a BM25 index of a passage corpus (search envs)")
    p.add_argument("corpus", help="passages as JSONL: id, title, text (or FlashRAG's contents)")
    p.add_argument("out_dir", help="index directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace an existing index")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentgym.envs.search.corpus import read_passages
    from agentgym.envs.search.index import BM25Index

    console = Console()
    started = time.perf_counter()
    try:
        with console.status(f"indexing {args.corpus}"):
            index = BM25Index.build(read_passages(args.corpus), args.out_dir, overwrite=args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        console.print(f"[red]agentgym index:[/red] {exc}", highlight=False)
        return 2
    console.print(
        f"indexed {len(index)} passages into {args.out_dir} in {time.perf_counter() - started:.1f} s",
        highlight=False,
    )
    return 0
