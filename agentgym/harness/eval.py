"""``agentgym eval``: run a policy on an env and store episodes, a summary and a table.

The run directory holds ``config.yaml`` (the resolved config), ``episodes.jsonl`` (appended and
fsynced as each episode ends) and ``summary.json``.

With ``sandbox=local|docker`` the env runs in env servers inside sandboxes: one
:class:`~agentgym.sandbox.envs.EnvServerPool` for the whole run (``sandbox_sessions`` envs per
server, ``sandbox_warm`` spare servers, the first started while the policy loads), closed at
the end.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from agentgym.conf import CONFIG_ERRORS, compose
from agentgym.episode import Episode, save_episodes
from agentgym.policy import SamplingParams
from agentgym.rollout import acollect, default_tasks

if TYPE_CHECKING:
    from agentgym.sandbox.envs import EnvServerPool

__all__ = ["compose_eval_config", "run_eval", "run_eval_cli", "summarize", "wilson_interval"]

console = Console()


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (``(0, 1)`` when ``n == 0``)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, center - half), min(1.0, center + half)


def summarize(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Success rate (95% interval), mean return, turns, tokens and errors.

    Episodes with an infrastructure error are counted apart, never as agent failures.
    """
    scored = [e for e in episodes if e.error is None]
    n, wins = len(scored), sum(e.success for e in scored)
    low, high = wilson_interval(wins, n)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "episodes": len(episodes),
        "scored": n,
        "errors": len(episodes) - n,
        "success_rate": wins / n if n else None,
        "success_ci95": [low, high],
        "mean_return": mean([e.outcome for e in scored]),
        "mean_turns": mean([e.num_turns for e in scored]),
        "invalid_action_rate": mean([1.0 - t.action_valid for e in scored for t in e.turns]),
        "response_tokens": sum(len(t.response_ids) for e in episodes for t in e.turns),
        "error_examples": sorted({e.error for e in episodes if e.error})[:5],
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
    from agentgym.policies.prompting import Prompter
    from agentgym.registry import manifest

    out = _out_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True), encoding="utf-8")
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
    summary = {"env": cfg.env, "policy": cfg.policy.get("_target_"), **summarize(episodes)}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / "summary.json")
    return out, summary


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


def run_eval_cli(overrides: Sequence[str]) -> int:
    try:
        cfg = compose_eval_config(overrides)
    except CONFIG_ERRORS as exc:
        console.print(f"[red]agentgym eval: bad configuration:[/red] {exc}", highlight=False)
        return 2
    out, summary = asyncio.run(run_eval(cfg))
    print_summary(out, summary)
    return 0
