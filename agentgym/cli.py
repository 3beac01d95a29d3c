"""The ``agentgym`` command.

    agentgym list [--family F]          every registered env (Gymnasium and multi-agent), plugins
                                        included
    agentgym play ENV_ID [--seed N]     play an env yourself in the terminal (Ctrl-D quits)
    agentgym eval [OVERRIDES...]        evaluate a policy (Hydra overrides, see conf/eval.yaml)
    agentgym report RUN [RUN...] [--out DIR]
                                        write a run's report.html; with several runs, a
                                        side-by-side compare.html and leaderboard.json
    agentgym train [OVERRIDES...]       train with RL (Hydra overrides, see conf/train.yaml)
    agentgym serve [--port 0 ...]       serve env sessions over HTTP (see agentgym.server.main)
    agentgym build [FAMILY...] [--base-image IMG | --offline-base]
                                        build env families' container images (default: all);
                                        --offline-base first builds agentgym/base:bookworm
                                        with mmdebstrap (no registry needed) and builds on it
    agentgym sandbox gc [--older-than S] [--all]
                                        remove sandboxes that crashed processes left behind
                                        (--all: also those of live processes)
    agentgym --version

Env families add their own commands (``agentgym.commands`` entry points): the search family's
``agentgym index CORPUS OUT_DIR`` builds a BM25 index.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import agentgym
from agentgym.harness import report
from agentgym.registry import PluginWarning
from agentgym.server import main as server_main  # argparse only: `serve` loads the server

console = Console()

#: The entry point group of the commands that env families add to the CLI.
COMMANDS_GROUP = "agentgym.commands"


def _parse_assignments(pairs: Sequence[str]) -> dict[str, Any]:
    """``["size=[6, 6]", "num_boxes=2"]`` -> ``{"size": [6, 6], "num_boxes": 2}`` (YAML values)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"agentgym: expected KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def cmd_list(args: argparse.Namespace) -> int:
    envs = {
        env_id: m for env_id, m in agentgym.list_envs().items()
        if args.family is None or m.family == args.family
    }
    table = Table(title=f"agentgym environments ({len(envs)})")
    for column in ("id", "kind", "family", "description", "plugin", "extras"):
        table.add_column(column, overflow="fold")
    for env_id, m in envs.items():
        table.add_row(env_id, ", ".join(m.kinds), m.family, m.description, m.plugin,
                      ", ".join(m.extras))
    console.print(table)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    try:
        env = agentgym.make(args.env_id, **_parse_assignments(args.set))
    except (agentgym.UnknownEnvError, TypeError, ValueError) as exc:
        console.print(f"[red]agentgym play:[/red] {exc}", highlight=False)
        return 2
    options = {"task_id": args.task_id} if args.task_id else None
    obs, info = env.reset(seed=args.seed, options=options)
    console.rule(f"{args.env_id}  task {info.get('task_id', '?')}")
    if info.get("instruction"):
        console.print(f"[bold]Task:[/bold] {info['instruction']}", highlight=False)
    console.print("Type an action; ':actions' lists the valid ones; Ctrl-D quits.\n", style="dim")
    console.print(obs, highlight=False, markup=False)
    total, turns = 0.0, 0
    try:
        while True:
            try:
                action = input("action> ")
            except EOFError:
                console.print("\nbye")
                return 0
            if action.strip() == ":actions":
                console.print(", ".join(info.get("admissible_actions") or ["(not listed)"]), markup=False)
                continue
            obs, reward, terminated, truncated, info = env.step(action)
            total, turns = total + float(reward), turns + 1
            console.print(obs, highlight=False, markup=False)
            note = "" if info.get("action_valid", True) else "  [red](invalid action)[/red]"
            console.print(f"[dim]reward {reward:+.2f}  return {total:+.2f}  turn {turns}[/dim]{note}")
            if terminated or truncated:
                outcome = "solved" if info.get("success") else ("out of turns" if truncated else "over")
                console.print(f"[bold]Episode {outcome}[/bold] after {turns} turns, return {total:+.2f}")
                return 0
    except KeyboardInterrupt:
        console.print("\ninterrupted")
        return 130
    finally:
        env.close()


def cmd_eval(args: argparse.Namespace) -> int:
    from agentgym.harness.eval import run_eval_cli

    return run_eval_cli(args.overrides)


def cmd_train(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    from agentgym.conf import CONFIG_ERRORS, compose
    from agentgym.trainers.loop import TrainConfig, train  # the command, not the core, needs it

    try:
        cfg = TrainConfig.from_dict(
            OmegaConf.to_container(compose("train", args.overrides), resolve=True))
    except (*CONFIG_ERRORS, TypeError, ValueError) as exc:
        console.print(f"[red]agentgym train: bad configuration:[/red] {exc}", highlight=False)
        return 2
    train(cfg)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    return server_main.run(args)


def cmd_build(args: argparse.Namespace) -> int:
    from agentgym.sandbox import (
        DEFAULT_BASE_IMAGE,
        OFFLINE_BASE_IMAGE,
        SandboxError,
        build_images,
    )

    base = OFFLINE_BASE_IMAGE if args.offline_base else args.base_image or DEFAULT_BASE_IMAGE
    try:
        images = build_images(args.families or None, base_image=base,
                              log=lambda line: console.print(line, highlight=False))
    except SandboxError as exc:
        console.print(f"[red]agentgym build:[/red] {escape(str(exc))}", highlight=False)
        return 1
    for family, image in images.items():
        console.print(f"built {image} ({family})", highlight=False)
    return 0


def cmd_sandbox_gc(args: argparse.Namespace) -> int:
    from agentgym.sandbox import gc

    report = gc(older_than_s=args.older_than, only_dead_owners=not args.all)
    console.print(str(report), highlight=False, markup=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description="A gym for LLM agents.")
    parser.add_argument("--version", action="version", version=f"agentgym {agentgym.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered environments")
    p.add_argument("--family", help="only this env family")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("play", help="play an environment in the terminal")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--task-id", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="env constructor argument (YAML value); repeatable")
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("eval", help="evaluate a policy on environments (Hydra overrides)")
    p.add_argument("overrides", nargs="*", help="e.g. env=agentgym/Sokoban-v0 episodes=16")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="write a run's report.html, or compare runs side by side")
    report.add_arguments(p)
    p.set_defaults(func=report.run)

    p = sub.add_parser("train", help="train a policy with RL (Hydra overrides)")
    p.add_argument("overrides", nargs="*", help="e.g. estimator=grpo steps=50 learner.lr=1e-5")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("serve", help="serve env sessions over HTTP (keep-alive JSON)")
    server_main.add_arguments(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("build", help="build env families' container images, without network")
    p.add_argument("families", nargs="*", metavar="FAMILY",
                   help="families with a containers/<family>/Dockerfile (default: all)")
    base = p.add_mutually_exclusive_group()
    base.add_argument("--base-image", metavar="IMG", default=None,
                      help="base image (default: python:3.11-slim-bookworm, from a registry)")
    base.add_argument("--offline-base", action="store_true",
                      help="build on agentgym/base:bookworm, made first with mmdebstrap if missing")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("sandbox", help="manage sandboxes")
    sandbox_sub = p.add_subparsers(dest="sandbox_command", required=True)
    p = sandbox_sub.add_parser("gc", help="remove sandboxes that crashed processes left behind")
    p.add_argument("--older-than", type=float, default=0.0, metavar="S",
                   help="only those created at least S seconds ago (default %(default)s)")
    p.add_argument("--all", action="store_true",
                   help="also sandboxes of processes still running (stop them first)")
    p.set_defaults(func=cmd_sandbox_gc)
    add_family_commands(sub)
    return parser


def add_family_commands(subparsers: Any) -> None:
    """Let each installed family add its commands: every ``agentgym.commands`` entry point is
    a function that takes the subparsers (ours: the search family's ``index``). One that fails
    is a :class:`~agentgym.registry.PluginWarning`; the other commands work."""
    for ep in entry_points(group=COMMANDS_GROUP):
        try:
            ep.load()(subparsers)
        except Exception as exc:  # a broken plugin must not take the CLI down
            warnings.warn(f"agentgym command plugin {ep.name!r} ({ep.value}) failed to load and "
                          f"was skipped: {type(exc).__name__}: {exc}", PluginWarning, stacklevel=2)


_terminated = threading.Event()


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM (`kill`, `docker stop`) stops a command the way Ctrl-C does: cleanly, its
    sandboxes, servers and browsers closed, instead of ending Python on the spot. The SIGINT
    handler in place runs (inside ``asyncio.run``, the one that cancels the loop's main task in
    order); where SIGINT is ignored (a background job), KeyboardInterrupt is raised."""
    _terminated.set()
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; an interrupted one exits 130 (Ctrl-C) or 143 (SIGTERM), without a
    traceback."""
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        status = args.func(args)
    except KeyboardInterrupt:  # a command that does not catch it (serve: uvicorn re-raises)
        status = 130
    return 128 + signal.SIGTERM if status == 130 and _terminated.is_set() else status


if __name__ == "__main__":
    sys.exit(main())
