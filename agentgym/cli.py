"""The ``agentgym`` command.

    agentgym list [--family F]          every registered env (Gymnasium and multi-agent), plugins
                                        included
    agentgym play ENV_ID [--seed N]     play an env yourself in the terminal (Ctrl-D quits)
    agentgym eval [OVERRIDES...]        evaluate a policy (Hydra overrides KEY=VALUE; --help lists
                                        every key, --cfg job prints the config, --info more)
    agentgym report RUN [RUN...] [--out DIR]
                                        write a run's report.html; with several runs, a
                                        side-by-side compare.html and leaderboard.json
    agentgym train [OVERRIDES...]       train with RL (Hydra overrides; --help, --cfg job, --info)
    agentgym serve [--port 0 ...]       serve env sessions over HTTP (see agentgym.server.main)
    agentgym serve --protocol openenv --env ID [--set KEY=VALUE ...] [--port 0 ...]
                                        serve one env to OpenEnv's clients, on loopback only
                                        (see agentgym.integrations.openenv)
    agentgym build [FAMILY...] [--base-image IMG | --offline-base]
                                        build env families' container images (default: all);
                                        --offline-base first builds agentgym/base:bookworm
                                        with mmdebstrap (no registry needed) and builds on it
    agentgym sandbox gc [--older-than S] [--all] [--docker-host URL ...]
                                        remove sandboxes that crashed processes left behind
                                        (--all: also those of live processes) on this machine
                                        and on each Docker daemon named
    agentgym --version

Env families add their own commands (``agentgym.commands`` entry points): the search family's
``agentgym index CORPUS OUT_DIR`` builds a BM25 index.

Output that is not a terminal (a pipe, a file) gets no escape codes, and tables as wide as their
content instead of folded at 80 columns (``COLUMNS`` sets the width).
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
from rich.markup import escape
from rich.table import Table

import agentgym
from agentgym.console import output_console
from agentgym.harness import report
from agentgym.registry import PluginWarning
from agentgym.server import main as server_main  # argparse only: `serve` loads the server

console = output_console()

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
        env_id: m
        for env_id, m in agentgym.list_envs().items()
        if args.family is None or m.family == args.family
    }
    table = Table(title=f"agentgym environments ({len(envs)})")
    for column in ("id", "kind", "family", "description", "plugin", "extras"):
        table.add_column(column, overflow="fold")
    for env_id, m in envs.items():
        table.add_row(env_id, ", ".join(m.kinds), m.family, m.description, m.plugin, ", ".join(m.extras))
    console.print(table)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    try:
        env = agentgym.make(args.env_id, **_parse_assignments(args.set))
    except (agentgym.UnknownEnvError, TypeError, ValueError) as exc:
        console.print(f"[red]agentgym play:[/red] {exc}", highlight=False)
        return 2
    if sys.stdin.isatty():  # line editing and history: arrow keys edit the line, not the action
        try:
            import readline  # noqa: F401  (input() uses it once imported)
        except ImportError:  # (no readline on this platform)
            pass
    options = {"task_id": args.task_id} if args.task_id else None
    obs, info = env.reset(seed=args.seed, options=options)
    title = f"{args.env_id}  task {info.get('task_id', '?')}"
    if console.is_terminal:
        console.rule(title)
    else:
        console.print(f"== {title}", highlight=False, markup=False)
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


#: The module that registers each config command's schema (imported only by that command).
CONFIG_COMMANDS = {"eval": "agentgym.harness.eval", "train": "agentgym.trainers.loop"}


def _register(command: str) -> None:
    """Import the module that defines ``command``'s schema: it registers it on import."""
    import importlib

    importlib.import_module(CONFIG_COMMANDS[command])


class ConfigHelp(argparse.Action):
    """``-h/--help`` of a config command: argparse's help, then every config key with its
    default and meaning (:func:`agentgym.conf.config_help`, from the schema dataclass)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any):
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show this help, with every config key, and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        command = parser.prog.split()[-1]
        text = parser.format_help()
        try:
            from agentgym.conf import config_help

            _register(command)
            text += "\n" + config_help(command) + "\n"
        except ImportError as exc:  # (train needs torch)
            text += f"\n(the config keys need {exc.name}, which is missing)\n"
        print(text, end="")
        parser.exit()


def _config_request(command: str, args: argparse.Namespace) -> int | None:
    """``--cfg job`` (the composed config as YAML) and ``--info`` (where it comes from): print
    and return the exit status, 2 for a bad config; ``None`` when neither was asked."""
    if not args.cfg and not args.info:
        return None
    from omegaconf import OmegaConf

    from agentgym.conf import CONFIG_ERRORS, compose, config_info

    _register(command)
    try:
        if args.info:
            print(config_info(command, args.overrides))
        else:
            print(OmegaConf.to_yaml(compose(command, args.overrides), resolve=args.resolve), end="")
    except CONFIG_ERRORS as exc:
        console.print(
            f"[red]agentgym {command}: bad configuration:[/red] {escape(str(exc))}",
            highlight=False,
            soft_wrap=True,
        )
        return 2
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    status = _config_request("eval", args)
    if status is not None:
        return status
    from agentgym.harness.eval import run_eval_cli

    return run_eval_cli(args.overrides)


def cmd_train(args: argparse.Namespace) -> int:
    status = _config_request("train", args)
    if status is not None:
        return status
    from agentgym.conf import CONFIG_ERRORS, compose, to_dict
    from agentgym.trainers.loop import TrainConfig, train  # the command, not the core, needs it

    try:
        cfg = TrainConfig.from_dict(to_dict(compose("train", args.overrides), resolve=True))
    except (*CONFIG_ERRORS, TypeError, ValueError) as exc:
        console.print(
            f"[red]agentgym train: bad configuration:[/red] {escape(str(exc))}",
            highlight=False,
            soft_wrap=True,
        )
        return 2
    train(cfg)
    return 0


def _config_command(
    sub: Any, name: str, summary: str, description: str, example: str
) -> argparse.ArgumentParser:
    """A command configured by Hydra overrides, with Hydra's ``--cfg job`` and ``--info``."""
    p = sub.add_parser(
        name,
        help=summary,
        description=description,
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-h", "--help", action=ConfigHelp)
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help=f"Hydra overrides, e.g. {example}; +KEY=VALUE adds a key to a dict "
        "(+env_kwargs.split=dev), GROUP=OPTION picks a config of a group",
    )
    p.add_argument(
        "-c", "--cfg", choices=["job"], default=None, help="print the composed config (YAML) and exit"
    )
    p.add_argument("--resolve", action="store_true", help="with --cfg: resolve ${...} interpolations")
    p.add_argument(
        "-i",
        "--info",
        action="store_true",
        help="print where the config comes from (search path, schema, defaults list, "
        "group choices) and the composed config, and exit",
    )
    return p


#: The ``agentgym serve`` options that only the agentgym protocol has (dest names).
_AGENTGYM_PROTOCOL_ONLY = (
    "uds",
    "max_body_bytes",
    "step_timeout",
    "allow_env",
    "allow_entry_points",
    "allow_kwarg",
    "data_root",
    "trust_client_kwargs",
    "token",
)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.protocol == "agentgym":
        if args.env is not None or args.set:
            raise SystemExit("agentgym serve: --env and --set go with --protocol openenv")
        return server_main.run(args)
    defaults = argparse.ArgumentParser()
    server_main.add_arguments(defaults)
    given = [n for n in _AGENTGYM_PROTOCOL_ONLY if getattr(args, n) != defaults.get_default(n)]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise SystemExit(f"agentgym serve: {flags} go with --protocol agentgym, not openenv")
    if args.env is None:
        raise SystemExit("agentgym serve --protocol openenv: name the env with --env ID")
    from agentgym.integrations.openenv import serve  # loads openenv-core

    serve(
        args.env,
        _parse_assignments(args.set),
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        ready_file=args.ready_file,
        log_level=args.log_level,
        client_limits=server_main.client_limits(args),
    )
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from agentgym.sandbox import (
        DEFAULT_BASE_IMAGE,
        OFFLINE_BASE_IMAGE,
        SandboxError,
        build_images,
    )

    base = OFFLINE_BASE_IMAGE if args.offline_base else args.base_image or DEFAULT_BASE_IMAGE
    try:
        images = build_images(
            args.families or None, base_image=base, log=lambda line: console.print(line, highlight=False)
        )
    except SandboxError as exc:
        console.print(f"[red]agentgym build:[/red] {escape(str(exc))}", highlight=False)
        return 1
    for family, image in images.items():
        console.print(f"built {image} ({family})", highlight=False)
    return 0


def cmd_sandbox_gc(args: argparse.Namespace) -> int:
    from agentgym.sandbox import gc

    hosts = args.docker_host or [None]
    report = gc(older_than_s=args.older_than, only_dead_owners=not args.all, docker_hosts=hosts)
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
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env constructor argument (YAML value); repeatable",
    )
    p.set_defaults(func=cmd_play)

    p = _config_command(
        sub,
        "eval",
        "evaluate a policy on environments (Hydra overrides)",
        "Evaluate a policy on a suite of environments or on one env; re-running a command resumes its run.",
        "suite=smoke policy=random concurrency=8",
    )
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", help="write a run's report.html, or compare runs side by side")
    report.add_arguments(p)
    p.set_defaults(func=report.run)

    p = _config_command(
        sub,
        "train",
        "train a policy with RL (Hydra overrides)",
        "Train a policy with RL on one environment, with turn-level credit "
        "assignment; resume=true continues a stopped run exactly.",
        "estimator=grpo steps=50 learner.lr=1e-5",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("serve", help="serve env sessions over HTTP (keep-alive JSON, or OpenEnv's)")
    server_main.add_arguments(p)
    p.add_argument(
        "--protocol",
        choices=["agentgym", "openenv"],
        default="agentgym",
        help="agentgym: clients name envs and kwargs (RemoteEnv); openenv: one env, --env, "
        "for openenv-core's clients (WebSocket /ws), loopback only (default %(default)s)",
    )
    p.add_argument("--env", metavar="ID", default=None, help="with --protocol openenv: the env served")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --protocol openenv: env constructor argument (YAML value); repeatable",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("build", help="build env families' container images, without network")
    p.add_argument(
        "families",
        nargs="*",
        metavar="FAMILY",
        help="families with a containers/<family>/Dockerfile (default: all)",
    )
    base = p.add_mutually_exclusive_group()
    base.add_argument(
        "--base-image",
        metavar="IMG",
        default=None,
        help="base image (default: python:3.11-slim-bookworm, from a registry)",
    )
    base.add_argument(
        "--offline-base",
        action="store_true",
        help="build on agentgym/base:bookworm, made first with mmdebstrap if missing",
    )
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("sandbox", help="manage sandboxes")
    sandbox_sub = p.add_subparsers(dest="sandbox_command", required=True)
    p = sandbox_sub.add_parser("gc", help="remove sandboxes that crashed processes left behind")
    p.add_argument(
        "--older-than",
        type=float,
        default=0.0,
        metavar="S",
        help="only those created at least S seconds ago (default %(default)s)",
    )
    p.add_argument(
        "--all", action="store_true", help="also sandboxes of processes still running (stop them first)"
    )
    p.add_argument(
        "--docker-host",
        action="append",
        metavar="URL",
        help="a Docker daemon to clean (unix://, tcp:// or ssh:// URL; repeat for several; "
        "default: the default daemon)",
    )
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
            warnings.warn(
                f"agentgym command plugin {ep.name!r} ({ep.value}) failed to load and "
                f"was skipped: {type(exc).__name__}: {exc}",
                PluginWarning,
                stacklevel=2,
            )


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


def stop_on_sigterm() -> None:
    """Make SIGTERM stop this process the way Ctrl-C does (its servers, sandboxes and browsers
    closed on the way out), as every agentgym command does; for scripts that launch them too
    (the benchmarks). Only from the main thread; elsewhere nothing changes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; an interrupted one exits 130 (Ctrl-C) or 143 (SIGTERM), without a
    traceback."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # overrides after an option (`eval env=X --cfg job tasks=2`) are overrides too
        if getattr(args, "overrides", None) is None or any(x.startswith("-") for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    stop_on_sigterm()
    try:
        status = args.func(args)
    except KeyboardInterrupt:  # a command that does not catch it (serve: uvicorn re-raises)
        status = 130
    return 128 + signal.SIGTERM if status == 130 and _terminated.is_set() else status


if __name__ == "__main__":
    sys.exit(main())
