"""``agentgym eval``: the evaluation harness.

A run evaluates one policy on a suite of environments (:mod:`agentgym.harness.suite`; one env
without a suite) and writes its run directory (:mod:`agentgym.harness.store`): ``config.yaml``,
``episodes.jsonl`` (appended and fsynced as each episode ends), ``summary.json`` and
``report.html`` (:mod:`agentgym.harness.report`). Re-running the same command resumes the run:
the default directory is named after the config's hash, finished episodes are kept, and episodes
that ended with an infrastructure error run again.

Execution: ``concurrency`` episodes (or games) in flight per entry, the entries one after another.
With ``sandbox=local|docker`` every env runs in an env server inside a sandbox: one
:class:`~agentgym.hosting.EnvServerPool` for the whole run (``sandbox_sessions`` envs per
server, ``sandbox_warm`` spare servers, the first started while the policy loads), closed at the
end. An episode whose sandbox dies, or whose env or policy call fails, is run again from its
start on a fresh env, ``retries`` times at most; if every attempt fails it is stored with
its error, counted as an infrastructure error and never as an agent failure. With
``cluster=local|auto|<address>`` the env servers run in Ray actors across a Ray cluster instead
(:class:`~agentgym.hosting.ray.RayEnvServerPool`, ``sandbox_sessions`` envs per server); a node
that dies takes only its episodes, which run again on the others.

Multi-agent entries (``games``) play games (:mod:`agentgym.multiagent`) in this process: the
policy plays ``seats`` (all of them when empty) and ``opponent`` the others; a game's episodes,
one per seat, are stored together. The env's game records go to
``games/<entry>/<seed>-<member>.json``, with ``.html`` transcripts for envs that render HTML. The
entry's summary adds per-role statistics of the policy's seats (and of the opponent's): win rates
and the env's ``metrics`` rates, each with a 95% Wilson interval.

A league (``league=<train out_dir>/league``, see :mod:`agentgym.trainers.league`): every
multi-agent entry is played once per opponent, as entries ``<entry> vs <opponent>`` (the same
tasks each): ``opponent`` first when given (named after its class, e.g. ``BotPolicy``), then
every member of the league's ``league.json`` (by name, e.g. ``step-000004``), each loaded for its
entry only. Their episodes carry ``tags["opponent"]``; the summary gets each entry's per-role
statistics (so per opponent) and ``ratings``, an Elo table of the policy and its opponents
(:mod:`agentgym.harness.ratings`).

Configuration: :class:`EvalConfig` is the schema of ``conf/eval.yaml`` (registered in Hydra's
``ConfigStore`` as ``eval_schema`` when this module is imported), its field docstrings the
meaning of every key (``agentgym eval --help``). Keys shared with
:func:`agentgym.rollout.collect` have its names (``tasks``, ``group_size``, ``max_turns``,
``concurrency``, ``retries``, ``sampling``, ...); :data:`RENAMED` maps the old names, which are
errors that name the new one.

Exit status of :func:`run_eval_cli`: 0 when the run finished, 2 when it could not start (a bad
config, an unknown env or suite, an output directory that cannot be written or that holds a run
of another config, a policy that cannot serve, a sandbox backend that cannot start), 3 when more
than ``max_infra_errors`` of the episodes ended with an infrastructure error, 130 when
interrupted (``agentgym eval`` exits 143 when that was SIGTERM). The last line on stdout is a
one-line summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import re
import shutil
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape
from rich.table import Table

from agentgym.conf import CONFIG_ERRORS, compose, register_schema, to_dict
from agentgym.console import output_console
from agentgym.episode import Episode
from agentgym.harness.ratings import game_results, rating_table
from agentgym.harness.stats import breakdown, summarize, wilson_interval
from agentgym.harness.store import RunConfigMismatch, RunDirError, RunStore, config_diff
from agentgym.harness.suite import Suite, SuiteEntry, SuiteError, suite_from_config
from agentgym.multiagent import GameResult
from agentgym.policy import PolicyUnavailable, SamplingParams
from agentgym.prompting import Prompter
from agentgym.registry import manifest
from agentgym.rollout import acollect, group_id, sandbox_choice

if TYPE_CHECKING:
    from agentgym.hosting import ServerPool
    from agentgym.hosting.ray import SandboxChoice

__all__ = [
    "EXIT_CANNOT_START",
    "EXIT_INFRA_ERRORS",
    "RENAMED",
    "EvalConfig",
    "EvalSetupError",
    "SamplingConfig",
    "compose_eval_config",
    "default_out_dir",
    "league_opponents",
    "member_policy",
    "register_configs",
    "role_statistics",
    "run_eval",
    "run_eval_cli",
]

EXIT_CANNOT_START = 2
EXIT_INFRA_ERRORS = 3

console = output_console(stderr=True)


@dataclass
class SamplingConfig:
    """Decoding settings of every request: the fields of :class:`~agentgym.policy.SamplingParams`
    (a frozen dataclass with a tuple, which Hydra cannot override), as a config."""

    max_tokens: int = 256
    """Upper bound on the tokens of one response."""
    temperature: float = 1.0
    """Sampling temperature; 0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling: sample from the most likely tokens whose probabilities add up to this."""
    stop: list[str] = field(default_factory=list)
    """Strings that end a response."""

    def params(self, **changes: Any) -> SamplingParams:
        """These settings (with ``changes``) as the :class:`~agentgym.policy.SamplingParams` of
        a request."""
        values = {**dataclasses.asdict(self), **changes}
        return SamplingParams(**{**values, "stop": tuple(values["stop"])})

    @classmethod
    def of(cls, values: Any) -> SamplingConfig:
        """From a config node or a plain mapping (``SamplingConfig`` instances pass through)."""
        if isinstance(values, cls):
            return values
        if isinstance(values, DictConfig):
            values = OmegaConf.to_container(values, resolve=True)
        return cls(**dict(values or {}))


@dataclass
class EvalConfig:
    """``agentgym eval``'s configuration: the schema of ``conf/eval.yaml``. Without a suite the
    run is the one env ``env`` with the task keys below; in a suite those keys are the defaults
    of the entries' missing keys (see :mod:`agentgym.harness.suite`)."""

    policy: Any = None
    """The policy: a config of conf/policy (its keys are set as policy.KEY=VALUE)."""
    prompt: dict[str, Any] = field(default_factory=dict)
    """How env text becomes a chat: the Prompter's fields (set as prompt.KEY=VALUE), from a
    config of conf/prompt."""
    suite: Any = None
    """A suite of envs, a config of conf/suite; null: the one env of ``env``."""
    # What to run (without a suite; in a suite, what the entries' missing keys take):
    env: str = "agentgym/Sokoban-v0"
    """The env id to evaluate when there is no suite."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Arguments of the env's constructor; add one as +env_kwargs.KEY=VALUE."""
    task_ids: list[str] = field(default_factory=list)
    """Task ids to evaluate (cycled over the tasks); empty: each task is drawn from its seed."""
    tasks: int = 16
    """How many tasks (groups of ``group_size`` episodes) each entry runs."""
    group_size: int = 1
    """Episodes per task: the same task and seed, different sampling seeds (pass@k needs more
    than one)."""
    seed: int = 0
    """Seed of the first task: tasks use seeds seed .. seed + tasks - 1."""
    max_turns: int = 30
    """Turns after which a single-agent episode is truncated (games: ``max_game_steps``)."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Decoding settings of every request."""
    # How to run it (these may change when a run is resumed):
    concurrency: int = 16
    """Episodes (or games) in flight at once."""
    sandbox: str | None = None
    """Where the envs run: null or none (this process), local (bubblewrap), docker; with a
    cluster also auto (per node: docker where the node offers the ``docker`` resource, else
    local)."""
    sandbox_warm: int = 1
    """With a sandbox: spare sandboxes kept started, their env server running."""
    sandbox_sessions: int = 16
    """With a sandbox or a cluster: env sessions per env server."""
    docker_hosts: list[str] = field(default_factory=list)
    """With sandbox=docker: the Docker daemons to spread the env servers over (unix://, tcp://
    or ssh:// URLs; each new server goes to the least-loaded); empty: the default daemon."""
    cluster: str | None = None
    """Run the env servers in Ray actors across a Ray cluster (``agentgym[ray]``): local (a Ray
    instance for the run), auto (the cluster of ``ray start``, or ``$RAY_ADDRESS``) or the
    head's address; null: not. With ``sandbox``, each server runs in a sandbox of that backend
    on its node."""
    retries: int = 2
    """Reruns of an episode that hit an infrastructure error (a dead sandbox, a failed env or
    policy call), each from its start on a fresh env."""
    max_infra_errors: float = 0.1
    """Exit status 3 when more than this fraction of the episodes ends with an infrastructure
    error."""
    out_dir: str | None = None
    """The run directory; null: runs/eval/<suite or env>-<policy>-<config hash>."""
    report: bool = True
    """Write report.html into the run directory."""
    progress: bool = True
    """Show progress bars (on stderr)."""
    # Multi-agent envs only:
    seats: list[str] = field(default_factory=list)
    """Multi-agent envs: the agents the policy plays; empty: every seat."""
    opponent: Any = None
    """Multi-agent envs: the policy config of the other seats (required when seats are given)."""
    max_game_steps: int = 1000
    """Multi-agent envs: env steps (an AEC env: agent turns) after which a game is truncated."""
    signals: dict[str, float] = field(default_factory=dict)
    """Multi-agent envs: per-turn reward shaping from the env's info signals, e.g.
    {correct_vote: 0.1}."""
    league: str | None = None
    """Multi-agent envs: a training run's league folder (``<out_dir>/league``): the policy plays
    every member in the seats ``seats`` leaves (and ``opponent`` first, when given), one entry
    per opponent, and the summary gets an Elo table of them all."""
    league_pairs: bool = False
    """With ``league``: also play every pair of members against each other (the older member
    in ``seats``), one entry per pair, so that the Elo table rates the members by their own
    games too, not only through the policy. Those games stay out of the policy's statistics."""


#: Old names of eval keys: ``{old: new}``. An override of an old name is an error naming the new.
RENAMED = {
    "workers": "concurrency",
    "max_retries": "retries",
    "episodes": "tasks",
    "max_steps": "max_game_steps",
}


def register_configs() -> None:
    """Register :class:`EvalConfig` as the schema of ``conf/eval.yaml`` (done on import)."""
    register_schema("eval", EvalConfig, RENAMED)


register_configs()


class EvalSetupError(RuntimeError):
    """The run cannot start; the message says why (exit status 2)."""


def _rate(hits: int, trials: int) -> dict[str, Any]:
    low, high = wilson_interval(hits, trials)
    return {"hits": hits, "trials": trials, "rate": hits / trials if trials else None, "ci95": [low, high]}


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
            invalid.setdefault(role, []).extend(1.0 - t.action_valid for t in game.episodes[agent].turns)
    return {
        role: {
            "players": won[1],
            "wins": _rate(*won),
            **{name: _rate(*total) for name, total in sorted(metrics.get(role, {}).items())},
            "invalid_action_rate": sum(invalid[role]) / len(invalid[role]) if invalid[role] else None,
        }
        for role, won in sorted(wins.items())
    }


def league_opponents(folder: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(name, policy config)`` of every member of the league in ``folder`` (its
    ``league.json``), oldest first, each config's model folder resolved
    (:func:`member_policy`). :class:`EvalSetupError` when there is none to read."""
    path = Path(folder) / "league.json"
    try:
        members = json.loads(path.read_text(encoding="utf-8"))["members"]
        return [(str(m["name"]), member_policy(folder, m["policy"])) for m in members]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalSetupError(f"league={folder}: no league to read at {path} ({exc})") from None


def member_policy(folder: str | Path, policy: Mapping[str, Any]) -> dict[str, Any]:
    """A league member's policy config with its ``model`` (the member's folder, relative to
    the league's ``folder``) made absolute; an absolute ``model`` stays as it is."""
    config = dict(policy)
    if isinstance(config.get("model"), str):
        config["model"] = str((Path(folder) / config["model"]).resolve())
    return config


@dataclass(frozen=True)
class Versus:
    """Who plays a league entry's games: the ``opponent`` (its name, and its policy config;
    ``None``: the run's ``opponent``, instantiated once) in the seats ``seats`` leaves, and in
    ``seats`` the evaluated policy, or, for a pair of members (``league_pairs``), the
    ``player`` member (name and policy config)."""

    opponent: str
    opponent_config: Any
    player: str | None = None
    player_config: Any = None


def _versus(cfg: DictConfig, suite: Suite) -> tuple[Suite, dict[str, Versus]]:
    """With ``league``: ``suite`` with every games entry replaced by one entry per opponent
    (and per pair of members, with ``league_pairs``), and who plays each such entry. Without:
    ``suite`` and no opponents."""
    if cfg.league is None:
        if cfg.league_pairs:
            raise EvalSetupError("league_pairs=true plays the members of a league: give league=")
        return suite, {}
    if not cfg.seats:
        raise EvalSetupError("league= plays the seats that `seats` leaves: name the policy's seats")
    opponents: list[tuple[str, Any]] = list(league_opponents(cfg.league))
    if cfg.opponent is not None:
        opponents.insert(0, (_policy_label(to_dict(cfg.opponent)), None))
    if not opponents:
        raise EvalSetupError(f"league={cfg.league} has no member yet, and there is no `opponent`")
    if not any(e.games for e in suite.entries):
        raise EvalSetupError("league= plays games: the run has no multi-agent entry")
    members = [(name, config) for name, config in opponents if config is not None]
    pairs = list(itertools.combinations(members, 2)) if cfg.league_pairs else []
    entries, versus = [], {}
    for entry in suite.entries:
        if not entry.games:
            entries.append(entry)
            continue
        for name, config in opponents:
            entries.append(dataclasses.replace(entry, name=f"{entry.name} vs {name}"))
            versus[entries[-1].name] = Versus(name, config)
        for (older, older_config), (newer, newer_config) in pairs:
            entries.append(dataclasses.replace(entry, name=f"{entry.name}: {older} vs {newer}"))
            versus[entries[-1].name] = Versus(newer, newer_config, older, older_config)
    return Suite(suite.name, tuple(entries)), versus


def compose_eval_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The eval config of ``agentgym/conf/eval.yaml`` (an :class:`EvalConfig`) with Hydra
    command-line overrides; raises one of :data:`~agentgym.conf.CONFIG_ERRORS`."""
    return compose("eval", overrides)


def _identity(config: dict[str, Any]) -> str:
    """Hash of what determines a run's results (:func:`config_diff` ignores the rest)."""
    relevant = config_diff({}, config)
    return hashlib.sha256("\n".join(relevant).encode()).hexdigest()[:10]


def _policy_label(policy: dict[str, Any]) -> str:
    target = str(policy.get("_target_", "policy")).rsplit(".", 1)[-1]
    model = policy.get("model")
    label = f"{target}-{Path(str(model)).name}" if model else target
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def default_out_dir(suite: Suite, config: dict[str, Any]) -> Path:
    """``runs/eval/<suite>-<policy>-<hash>``: the same command gets the same directory (and so
    resumes), a config that changes results gets another."""
    return Path("runs") / "eval" / f"{suite.name}-{_policy_label(config['policy'])}-{_identity(config)}"


def _backend(sandbox: Any, cluster: str | None) -> SandboxChoice | None:
    try:
        return sandbox_choice(sandbox, cluster)
    except ValueError as exc:
        raise EvalSetupError(str(exc)) from None


@dataclass
class _Run:
    """What the entries of one run share."""

    cfg: DictConfig
    store: RunStore
    servers: ServerPool | None
    policy: Any = None
    opponent: Any = None
    versus: dict[str, Versus] = field(default_factory=dict)
    """With a league: each games entry's opponent, ``(name, config)`` (``None``: ``opponent``)."""
    episodes: list[Episode] = field(default_factory=list)
    """This run's stored episodes, finished before (resumed) or now."""
    games: dict[str, list[GameResult]] = field(default_factory=lambda: defaultdict(list))

    def skip(self, entry: SuiteEntry):
        """``skip(task, member)`` of an entry: true for units the store already has."""
        return lambda task, member: f"{entry.name}::{group_id(entry.env, task)}#{member}" in self.store.done

    def keep(self, episodes: list[Episode]) -> None:
        self.store.append(episodes)
        self.episodes.extend(episodes)


async def run_eval(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) the evaluation ``cfg`` describes; return the run directory and the
    summary. Raises :class:`EvalSetupError` (or a :class:`~agentgym.harness.suite.SuiteError`,
    :class:`~agentgym.harness.store.RunDirError`,
    :class:`~agentgym.harness.store.RunConfigMismatch`,
    :class:`~agentgym.policy.PolicyUnavailable`) when it cannot start."""
    config = to_dict(cfg, resolve=True)
    suite, versus = _versus(cfg, suite_from_config(config))
    backend = _backend(cfg.sandbox, cfg.cluster)
    games = [e.name for e in suite.entries if e.games]
    if (backend is not None or cfg.cluster is not None) and games:
        raise SuiteError(
            f"entries {games} play multi-agent games, which run in this process: "
            "use sandbox=none and no cluster, or `games: false` to play one seat against bots"
        )
    out = Path(cfg.out_dir) if cfg.out_dir else default_out_dir(suite, config)
    created = not out.exists()
    store = RunStore.open(out, config)
    run = _Run(cfg, store, None, versus=versus, episodes=[e for eps in store.done.values() for e in eps])
    async with contextlib.AsyncExitStack() as opened:  # closed in reverse: policies, then servers
        try:
            run.servers = _env_servers(cfg, backend, suite)
            if run.servers is not None:
                opened.push_async_callback(run.servers.aclose)
            run.policy = await _open_policy(opened, cfg.policy)
            if cfg.opponent is not None:
                run.opponent = await _open_policy(opened, cfg.opponent)
        except BaseException:
            if created:  # nothing ran: leave no empty run directory behind
                shutil.rmtree(out, ignore_errors=True)
            raise
        for entry in suite.entries:
            await (_run_games if entry.games else _run_episodes)(run, entry)
    summary = _summary(suite, run)
    store.write_summary(summary)
    if cfg.report:
        _write_report(out)
    return out, summary


def _env_servers(cfg: DictConfig, backend: SandboxChoice | None, suite: Suite) -> ServerPool | None:
    """The run's env server pool (its first servers already starting), or ``None``."""
    if cfg.cluster is not None:
        from agentgym.hosting import RayEnvServerPool  # only cluster runs load Ray

        return RayEnvServerPool(cfg.cluster, sessions_per_server=cfg.sandbox_sessions, sandbox=backend)
    if backend is None:
        return None
    assert backend != "auto", "_backend refuses auto without a cluster"
    from agentgym.hosting import EnvServerPool  # only sandboxed runs load it
    from agentgym.sandbox.gc import gc

    # What killed runs left (the run being resumed, most likely): their owners are dead.
    hosts = list(cfg.docker_hosts)
    if hosts and backend != "docker":
        raise EvalSetupError(f"docker_hosts need sandbox=docker, not sandbox={backend}")
    reclaimed = gc(docker=backend == "docker", docker_hosts=hosts or [None])
    if reclaimed.containers or reclaimed.dirs or reclaimed.cgroups:
        console.print(
            f"agentgym eval: {str(reclaimed).splitlines()[0]} that dead runs left behind", highlight=False
        )
    servers = EnvServerPool(
        backend, warm=cfg.sandbox_warm, sessions_per_server=cfg.sandbox_sessions, docker_hosts=hosts
    )
    try:
        for spec_env in {servers.spec(e.env): e.env for e in suite.entries}.values():
            servers.prewarm(spec_env)
    except BaseException:
        servers.close()
        raise
    return servers


async def _run_episodes(run: _Run, entry: SuiteEntry) -> None:
    """A single-agent entry: its missing episodes."""
    cfg = run.cfg
    await acollect(
        entry.env,
        run.policy,
        entry.task_list(),
        group_size=entry.group_size,
        max_turns=entry.max_turns,
        concurrency=cfg.concurrency,
        prompter=Prompter(family=manifest(entry.env).family, **to_dict(cfg.prompt)),
        sampling=SamplingConfig.of(cfg.sampling).params(),
        env_kwargs=dict(entry.env_kwargs),
        progress=cfg.progress,
        on_episode=lambda episode: run.keep([episode]),
        sandbox=run.servers,
        retries=cfg.retries,
        tags={"entry": entry.name},
        skip=run.skip(entry),
    )


async def _run_games(run: _Run, entry: SuiteEntry) -> None:
    """A multi-agent entry: its missing games (against its league opponent, and with a pair of
    members its player, each loaded for it)."""
    versus = run.versus.get(entry.name)
    if versus is None or versus.opponent_config is None:
        await _play_games(run, entry, run.policy, run.opponent, versus)
        return
    skip = run.skip(entry)
    if all(skip(t, m) for t in entry.task_list() for m in range(entry.group_size)):
        return  # a resumed run that has them all: the members need not load
    async with contextlib.AsyncExitStack() as opened:
        opponent = await _open_policy(opened, versus.opponent_config)
        player = (
            run.policy if versus.player_config is None else await _open_policy(opened, versus.player_config)
        )
        await _play_games(run, entry, player, opponent, versus)


async def _open_policy(opened: contextlib.AsyncExitStack, config: Any) -> Any:
    """The policy of ``config``, instantiated, closed (its ``aclose()``, where it has one) with
    ``opened``, and checked (its ``check()``, where it has one)."""
    policy = instantiate(config)
    if (close := getattr(policy, "aclose", None)) is not None:
        opened.push_async_callback(close)
    if (check := getattr(policy, "check", None)) is not None:
        await check()
    return policy


async def _play_games(
    run: _Run, entry: SuiteEntry, player: Any, opponent: Any, versus: Versus | None
) -> None:
    """The missing games of ``entry``: ``player`` in ``seats``, ``opponent`` in the seats it
    leaves (with a league, ``versus`` names them in the episodes' ``opponent`` and ``player``
    tags)."""
    from agentgym import multiagent

    cfg = run.cfg
    env_kwargs = dict(entry.env_kwargs)
    agents, metadata = multiagent.possible_agents(entry.env, env_kwargs)
    try:
        policies = multiagent.seat_policies(agents, player, cfg.seats, opponent)
    except ValueError as exc:
        raise EvalSetupError(f"{entry.env}: {exc}") from None
    if "html" in metadata.get("render_modes", ()):
        env_kwargs.setdefault("render_mode", "html")
    games_dir = run.store.path / "games" / re.sub(r"[^A-Za-z0-9_.-]+", "_", entry.name)
    games_dir.mkdir(parents=True, exist_ok=True)
    tags = {"entry": entry.name, "seats": str(len(agents))}
    if versus is not None:
        tags["opponent"] = versus.opponent
        if versus.player is not None:
            tags["player"] = versus.player

    def on_game(game: GameResult) -> None:
        for episode in game.episodes.values():
            episode.tags = dict(tags)
        run.keep(list(game.episodes.values()))
        run.games[entry.name].append(game)
        name = games_dir / f"{game.task.seed}-{game.member}"
        if game.record is not None:
            name.with_suffix(".json").write_text(json.dumps(game.record, indent=1), encoding="utf-8")
        if isinstance(game.rendering, str) and env_kwargs.get("render_mode") == "html":
            name.with_suffix(".html").write_text(game.rendering, encoding="utf-8")

    await multiagent.acollect(
        entry.env,
        policies,
        entry.task_list(),
        group_size=entry.group_size,
        max_game_steps=cfg.max_game_steps,
        concurrency=cfg.concurrency,
        prompter=multiagent.default_prompter(manifest(entry.env).family, **to_dict(cfg.prompt)),
        sampling=SamplingConfig.of(cfg.sampling).params(),
        signals=to_dict(cfg.signals),
        env_kwargs=env_kwargs,
        progress=cfg.progress,
        on_game=on_game,
        skip=run.skip(entry),
    )


def _entry_summary(run: _Run, entry: SuiteEntry) -> dict[str, Any]:
    """Statistics of one entry: of the policy's seats for games, with per-role tables of the
    games played in this invocation."""
    episodes = [e for e in run.episodes if e.tags.get("entry") == entry.name]
    head = {"env": entry.env, "split": entry.split, "games": entry.games, "planned": entry.units}
    if not entry.games:
        return {
            **head,
            **summarize(episodes),
            "task_types": breakdown([e for e in episodes if e.task_type], lambda e: e.task_type),
        }
    seats = list(run.cfg.seats) or sorted({e.agent for e in episodes})
    played = run.games[entry.name]
    others = sorted({e.agent for e in episodes} - set(seats))
    return {
        **head,
        **summarize([e for e in episodes if e.agent in seats]),
        "seats": seats,
        "games_played": len(played),
        "game_errors": sum(g.error is not None for g in played),
        "task_types": breakdown(
            [e for e in episodes if e.agent in seats and e.task_type], lambda e: e.task_type
        ),
        "roles": role_statistics(played, seats),
        **({"opponent_roles": role_statistics(played, others)} if others else {}),
    }


def _summary(suite: Suite, run: _Run) -> dict[str, Any]:
    """``summary.json``: the run, its overall statistics (the policy's episodes of every
    entry) and each entry's."""
    entries = {e.name: _entry_summary(run, e) for e in suite.entries}
    seats = set(run.cfg.seats)
    mine = [
        e
        for e in run.episodes
        if ("seats" not in e.tags or not seats or e.agent in seats) and "player" not in e.tags
    ]
    resumed = run.store.resumed
    ratings = rating_table(game_results(run.episodes, lambda e: e.agent in seats)) if run.versus else None
    return {
        "suite": suite.name,
        "policy": run.cfg.policy.get("_target_"),
        "model": run.cfg.policy.get("model"),
        "out_dir": str(run.store.path),
        "planned": suite.units,
        "complete": len(run.store.done) == suite.units,
        "resumed": None if resumed is None else vars(resumed),
        **summarize(mine),
        "entries": entries,
        **({"ratings": ratings} if ratings is not None else {}),
    }


def _write_report(out: Path) -> None:
    """``report.html`` of the run; a failure is reported, not raised (the results are stored)."""
    try:
        from agentgym.harness.report import write_report

        write_report(out)
    except ImportError as exc:
        console.print(
            f"[yellow]agentgym eval: no report ({exc.name} is missing: pip install "
            "'agentgym[harness]')[/yellow]"
        )
    except Exception as exc:  # the report is derived data: the run itself succeeded
        console.print(f"[yellow]agentgym eval: no report: {escape(str(exc))}[/yellow]")


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_summary(summary: dict[str, Any]) -> None:
    """A table of the entries and the total (on stderr)."""
    table = Table(title=f"{summary['suite']}: {summary['policy']}  ({summary['out_dir']})")
    for column in (
        "entry",
        "episodes",
        "success",
        "95% CI",
        "return",
        "turns",
        "invalid",
        "infra errors",
        "retried",
    ):
        table.add_column(column, justify="left" if column == "entry" else "right")
    rows = [*summary["entries"].items()]
    if len(rows) > 1:
        rows.append(("total", summary))
    for name, stats in rows:
        low, high = stats["success_ci95"]
        table.add_row(
            name,
            str(stats["episodes"]),
            _fmt(stats["success_rate"], ".1%"),
            f"{low:.1%} - {high:.1%}",
            _fmt(stats["mean_return"], ".2f"),
            _fmt(stats["mean_turns"], ".1f"),
            _fmt(stats["invalid_action_rate"], ".1%"),
            str(stats["errors"]),
            str(stats["retried"]),
        )
    console.print(table)
    for name, stats in summary["entries"].items():
        if "roles" in stats:
            print_roles(
                f"{name}: {summary['policy']} by role ({stats['games_played']} games)", stats["roles"]
            )
        if "opponent_roles" in stats:
            print_roles(f"{name}: opponent by role", stats["opponent_roles"])
    if "ratings" in summary:
        ratings = Table(title="Elo ratings (K=32, from 1000; agentgym.harness.ratings)")
        for column in ("player", "rating", "games", "mean score"):
            ratings.add_column(column, justify="left" if column == "player" else "right")
        for row in summary["ratings"]:
            ratings.add_row(row["player"], f"{row['rating']:.0f}", str(row["games"]), f"{row['score']:.2f}")
        console.print(ratings)


def print_roles(title: str, roles: dict[str, Any]) -> None:
    """A table of :func:`role_statistics`."""
    names = sorted(
        {k for stats in roles.values() for k, v in stats.items() if isinstance(v, dict) and k != "wins"}
    )
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
        table.add_row(
            role,
            str(stats["players"]),
            f"{wins['rate']:.1%}",
            f"{low:.1%} - {high:.1%}",
            *(rate(stats.get(n)) for n in names),
            "-" if invalid is None else f"{invalid:.1%}",
        )
    console.print(table)


def summary_line(summary: dict[str, Any], status: str) -> str:
    """The one-line summary ``agentgym eval`` prints last on stdout."""
    low, high = summary["success_ci95"]
    return (
        f"agentgym eval: {status} suite={summary['suite']} episodes={summary['episodes']} "
        f"success={_fmt(summary['success_rate'], '.1%')} ci95=[{low:.1%}, {high:.1%}] "
        f"infra_errors={summary['errors']} retried={summary['retried']} "
        f"complete={str(summary['complete']).lower()} run={summary['out_dir']}"
    )


SETUP_ERRORS = (EvalSetupError, SuiteError, RunDirError, RunConfigMismatch, PolicyUnavailable)
"""What :func:`run_eval` raises when a run cannot start."""


def _cannot_start(message: str, why: str = "cannot start: ") -> int:
    console.print(f"[red]agentgym eval: {why}[/red]{escape(message)}", highlight=False, soft_wrap=True)
    print(f"agentgym eval: error {message.splitlines()[0] if message else ''}")
    return EXIT_CANNOT_START


def run_eval_cli(overrides: Sequence[str]) -> int:
    """``agentgym eval OVERRIDES...``; returns the exit status (see the module documentation)."""
    try:
        cfg = compose_eval_config(overrides)
    except CONFIG_ERRORS as exc:
        return _cannot_start(f"bad configuration: {exc}", "")
    from agentgym.sandbox import SandboxError  # the sandbox package loads no backend

    try:
        _, summary = asyncio.run(run_eval(cfg))
    except (*SETUP_ERRORS, SandboxError) as exc:
        return _cannot_start(str(exc))
    except KeyboardInterrupt:
        console.print("[yellow]agentgym eval: interrupted; re-run the command to resume[/yellow]")
        return 130
    print_summary(summary)
    rate = summary["errors"] / summary["episodes"] if summary["episodes"] else 0.0
    failed = rate > cfg.max_infra_errors
    print(summary_line(summary, "infra-errors" if failed else "ok"))
    return EXIT_INFRA_ERRORS if failed else 0
