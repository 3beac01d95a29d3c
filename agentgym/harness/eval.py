"""``agentgym eval``: run a policy on an env and store episodes, a summary and a table.

The run directory holds ``config.yaml`` (the resolved config), ``episodes.jsonl`` (appended and
fsynced as each episode ends) and ``summary.json``.

A multi-agent id (one registered with :func:`agentgym.registry.register_multiagent`, such as
``agentgym/Werewolf-v0``) is evaluated as games (:mod:`agentgym.multiagent`): the policy plays
``seats`` (all of them when empty) and ``opponent`` the others; each task is a game, and its
episodes, one per seat, are appended to ``episodes.jsonl`` when it ends. The env's game records
go to ``games/<seed>-<member>.json``, with ``.html`` transcripts for envs that render HTML. The
summary adds per-role statistics of the policy's seats (and of the opponent's): win rates and
the env's ``metrics`` rates, each with a 95% Wilson interval.

With ``sandbox=local|docker`` the env runs in env servers inside sandboxes: one
:class:`~agentgym.sandbox.envs.EnvServerPool` for the whole run (``sandbox_sessions`` envs per
server, ``sandbox_warm`` spare servers, the first started while the policy loads), closed at
the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Sequence

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from agentgym.conf import CONFIG_ERRORS, compose
from agentgym.harness.stats import summarize, wilson_interval
from agentgym.episode import Episode, save_episodes
from agentgym.multiagent import GameResult
from agentgym.policy import SamplingParams
from agentgym.registry import make_aec, make_parallel, manifest
from agentgym.rollout import acollect, default_tasks

if TYPE_CHECKING:
    from agentgym.sandbox.envs import EnvServerPool

__all__ = ["compose_eval_config", "role_statistics", "run_eval", "run_eval_cli"]

console = Console()


def _rate(hits: int, trials: int) -> dict[str, Any]:
    low, high = wilson_interval(hits, trials)
    return {"hits": hits, "trials": trials, "rate": hits / trials if trials else None,
            "ci95": [low, high]}


def role_statistics(games: Sequence[GameResult], seats: Collection[str]) -> dict[str, Any]:
    """Per role (``info["role"]``, ``"player"`` where the env has none) of the agents in
    ``seats``: ``players``, ``wins`` (``{hits, trials, rate, ci95}`` of ``success``), every
    ``metrics`` rate of the env in the same form, and ``invalid_action_rate``. Games with an
    error are left out."""
    wins: dict[str, list[int]] = {}
    metrics: dict[str, dict[str, list[int]]] = {}
    invalid: dict[str, list[float]] = {}
    for game in games:
        if game.error is not None:
            continue
        for agent in seats:
            info = game.infos.get(agent, {})
            role = str(info.get("role", "player"))
            won = wins.setdefault(role, [0, 0])
            won[0] += bool(info.get("success", False))
            won[1] += 1
            for name, (hits, trials) in (info.get("metrics") or {}).items():
                total = metrics.setdefault(role, {}).setdefault(name, [0, 0])
                total[0] += int(hits)
                total[1] += int(trials)
            invalid.setdefault(role, []).extend(
                1.0 - t.action_valid for t in game.episodes[agent].turns)
    return {
        role: {"players": won[1], "wins": _rate(*won),
               **{name: _rate(*total) for name, total in sorted(metrics.get(role, {}).items())},
               "invalid_action_rate": sum(invalid[role]) / len(invalid[role])
               if invalid[role] else None}
        for role, won in sorted(wins.items())
    }


def compose_eval_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The eval config of ``agentgym/conf/eval.yaml`` with Hydra command-line overrides."""
    return compose("eval", overrides)


def _out_dir(cfg: DictConfig) -> Path:
    if cfg.out_dir:
        return Path(cfg.out_dir)
    name = str(cfg.env).replace("/", "_")
    return Path("runs") / "eval" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _env_servers(cfg: DictConfig) -> EnvServerPool | None:
    """The run's :class:`~agentgym.sandbox.envs.EnvServerPool` (already warming), or ``None``
    without ``sandbox``."""
    if cfg.sandbox is None:
        return None
    from agentgym.sandbox.envs import EnvServerPool  # only sandboxed runs load it

    servers = EnvServerPool(cfg.sandbox, warm=cfg.sandbox_warm,
                            sessions_per_server=cfg.sandbox_sessions)
    try:
        servers.prewarm(cfg.env)
    except BaseException:
        servers.close()
        raise
    return servers


async def run_eval(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """Run the evaluation ``cfg`` describes; return the run directory and the summary."""
    out = _out_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True), encoding="utf-8")
    if {"aec", "parallel"} & set(manifest(cfg.env).kinds):
        summary = await _run_games(cfg, out)
    else:
        summary = await _run_episodes(cfg, out)
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / "summary.json")
    return out, summary


async def _run_episodes(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """Single-agent evaluation: ``cfg.episodes`` tasks times ``group_size`` episodes."""
    from agentgym.policies.prompting import Prompter

    servers = _env_servers(cfg)
    policy = None
    episodes_path = out / "episodes.jsonl"
    episodes_path.write_text("", encoding="utf-8")
    try:
        policy = instantiate(cfg.policy)
        episodes = await acollect(
            cfg.env, policy,
            default_tasks(cfg.episodes, cfg.seed, list(cfg.task_ids)),
            group_size=cfg.group_size, max_turns=cfg.max_turns, concurrency=cfg.concurrency,
            prompter=Prompter(family=manifest(cfg.env).family,
                              **OmegaConf.to_container(cfg.prompt)),
            sampling=SamplingParams(**OmegaConf.to_container(cfg.sampling)),
            env_kwargs=OmegaConf.to_container(cfg.env_kwargs),
            progress=cfg.progress,
            on_episode=lambda ep: save_episodes(episodes_path, [ep], append=True, fsync=True),
            sandbox=servers,
        )
    finally:
        close = getattr(policy, "aclose", None)
        if close is not None:
            await close()
        if servers is not None:
            await servers.aclose()
    return {"env": cfg.env, "policy": cfg.policy.get("_target_"), **summarize(episodes)}


async def _run_games(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """Multi-agent evaluation: ``cfg.episodes`` tasks times ``group_size`` games."""
    from agentgym import multiagent

    if cfg.sandbox is not None:
        raise ValueError(f"{cfg.env} is a multi-agent env: its games run in this process "
                         "(sandbox=null)")
    env_kwargs = OmegaConf.to_container(cfg.env_kwargs)
    probe = (make_parallel if "parallel" in manifest(cfg.env).kinds else make_aec)(
        cfg.env, **env_kwargs)
    agents, render_modes = list(probe.possible_agents), probe.metadata.get("render_modes", ())
    probe.close()
    seats = list(cfg.seats) or agents
    unknown = sorted(set(seats) - set(agents))
    if unknown:
        raise ValueError(f"seats {unknown} are not agents of {cfg.env}: {agents}")
    if len(seats) < len(agents) and cfg.opponent is None:
        raise ValueError(f"the policy plays {seats} only: set `opponent` to the policy of the "
                         "other seats")
    if "html" in render_modes:
        env_kwargs.setdefault("render_mode", "html")
    prompt = {k: v for k, v in OmegaConf.to_container(cfg.prompt).items()
              if not (k == "system_prompt" and v is None)}
    games_dir = out / "games"
    games_dir.mkdir(exist_ok=True)
    episodes_path = out / "episodes.jsonl"
    episodes_path.write_text("", encoding="utf-8")
    games: list[GameResult] = []

    def on_game(game: GameResult) -> None:
        games.append(game)
        save_episodes(episodes_path, game.episodes.values(), append=True, fsync=True)
        name = games_dir / f"{game.task.seed}-{game.member}"
        if game.record is not None:
            name.with_suffix(".json").write_text(json.dumps(game.record, indent=1),
                                                 encoding="utf-8")
        if isinstance(game.rendering, str) and env_kwargs.get("render_mode") == "html":
            name.with_suffix(".html").write_text(game.rendering, encoding="utf-8")

    policy = opponent = None
    try:
        policy = instantiate(cfg.policy)
        opponent = instantiate(cfg.opponent) if cfg.opponent is not None else None
        episodes = await multiagent.acollect(
            cfg.env, {a: policy if a in seats else opponent for a in agents},
            default_tasks(cfg.episodes, cfg.seed, list(cfg.task_ids)),
            group_size=cfg.group_size, max_steps=cfg.max_steps, concurrency=cfg.concurrency,
            prompter=multiagent.default_prompter(manifest(cfg.env).family, **prompt),
            sampling=SamplingParams(**OmegaConf.to_container(cfg.sampling)),
            signals=OmegaConf.to_container(cfg.signals), env_kwargs=env_kwargs,
            progress=cfg.progress, on_game=on_game,
        )
    finally:
        for closing in (policy, opponent):
            close = getattr(closing, "aclose", None)
            if close is not None:
                await close()
    others = [a for a in agents if a not in seats]
    return {
        "env": cfg.env, "policy": cfg.policy.get("_target_"), "seats": seats,
        "opponent": cfg.opponent.get("_target_") if cfg.opponent is not None else None,
        "games": len(games), "game_errors": sum(g.error is not None for g in games),
        **summarize([e for e in episodes if e.agent in seats]),
        "roles": role_statistics(games, seats),
        **({"opponent_roles": role_statistics(games, others)} if others else {}),
    }


def print_summary(out: Path, summary: dict[str, Any]) -> None:
    table = Table(title=f"{summary['env']}  ({out})")
    for column in ("episodes", "success", "95% CI", "return", "turns", "invalid", "errors"):
        table.add_column(column, justify="right")

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    low, high = summary["success_ci95"]
    table.add_row(
        str(summary["episodes"]), fmt(summary["success_rate"], ".1%"), f"{low:.1%} - {high:.1%}",
        fmt(summary["mean_return"], ".2f"), fmt(summary["mean_turns"], ".1f"),
        fmt(summary["invalid_action_rate"], ".1%"), str(summary["errors"]),
    )
    console.print(table)


def print_roles(title: str, roles: dict[str, Any]) -> None:
    """A table of :func:`role_statistics`."""
    names = sorted({k for stats in roles.values() for k, v in stats.items()
                    if isinstance(v, dict) and k != "wins"})
    table = Table(title=title)
    for column in ("role", "players", "win rate", "95% CI", *names, "invalid"):
        table.add_column(column, justify="right")

    def rate(stat: dict[str, Any] | None) -> str:
        if not stat or stat["rate"] is None:
            return "-"
        low, high = stat["ci95"]
        return f"{stat['rate']:.0%} ({low:.0%}-{high:.0%})"

    for role, stats in roles.items():
        wins = stats["wins"]
        low, high = wins["ci95"]
        invalid = stats["invalid_action_rate"]
        table.add_row(role, str(stats["players"]), f"{wins['rate']:.1%}",
                      f"{low:.1%} - {high:.1%}", *(rate(stats.get(n)) for n in names),
                      "-" if invalid is None else f"{invalid:.1%}")
    console.print(table)


def run_eval_cli(overrides: Sequence[str]) -> int:
    try:
        cfg = compose_eval_config(overrides)
    except CONFIG_ERRORS as exc:
        console.print(f"[red]agentgym eval: bad configuration:[/red] {exc}", highlight=False)
        return 2
    out, summary = asyncio.run(run_eval(cfg))
    print_summary(out, summary)
    if "roles" in summary:
        print_roles(f"{summary['policy']} by role ({summary['games']} games)", summary["roles"])
    if "opponent_roles" in summary:
        print_roles(f"opponent {summary['opponent']} by role", summary["opponent_roles"])
    return 0
