"""The training loop: collect groups -> credit -> update -> sync weights -> evaluate -> log.

``mode="sync"`` (the default) runs these in lock-step. The embedded path runs everything in one
process: the :class:`~agentgym.trainers.learner.Learner` and the generating
:class:`~agentgym.policies.hf.HFPolicy` share one model object, so a weight push is free (only
the policy version moves); ``generator="vllm"`` launches a local vLLM server and pushes weights
to it after every update (``trainers.sync``). ``mode="async"`` overlaps collection and updates
(``trainers.async_loop``). Games may be played against a league of the policy's own frozen
snapshots (``opponent=league``, ``trainers.league``). Every step writes one JSON line to
``metrics.jsonl``, a checkpoint, and redraws ``learning_curve.png``. ``resume=True`` continues
from the last checkpoint: in sync mode the tasks of step k come from the task sampler's saved
state and every request's sampling seed is a function of (task seed, member, turn), so a resumed
run repeats the uninterrupted one. Under ``torchrun`` rank 0 runs all of this and the other ranks
hold data-parallel replicas of the learner (``trainers.distributed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from hydra.utils import instantiate

from agentgym import multiagent
from agentgym.conf import check_keys, register_schema
from agentgym.console import output_console
from agentgym.episode import Episode, Turn, TurnTable
from agentgym.files import atomic_path
from agentgym.harness.eval import SamplingConfig, member_policy
from agentgym.harness.stats import summarize
from agentgym.prompting import Prompter, PrompterProtocol
from agentgym.registry import manifest
from agentgym.rollout import Task, acollect, sandbox_choice
from agentgym.trainers import credit
from agentgym.trainers.async_loop import AsyncCollector
from agentgym.trainers.distributed import World
from agentgym.trainers.info_gain import answer_scores
from agentgym.trainers.league import LATEST, League, LeagueConfig, Member
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow, rows_from_episodes
from agentgym.trainers.sampler import SAMPLERS, TaskSampler, make_sampler
from agentgym.trainers.sync import push_weights

if TYPE_CHECKING:
    from agentgym.hosting import ServerPool
    from agentgym.hosting.ray import SandboxChoice
    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.vllm import VLLMPolicy
    from agentgym.sandbox.spec import Backend

__all__ = ["ESTIMATORS", "RENAMED", "TrainConfig", "register_configs", "train", "train_summary"]

console = output_console()

#: Estimators that need nothing but the episodes. Besides these, ``"ppo"`` runs turn-level GAE
#: on the learner's value head, ``"igpo"`` scores the ground truth with the policy
#: (``trainers.info_gain``) and ``"spa"`` fits a progress estimator (``trainers.progress``).
ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": credit.grpo,
    "rloo": credit.rloo,
    "reinforce_pp": credit.reinforce_pp,
    "gigpo": credit.gigpo,
}

_WITH_SCORERS = ("ppo", "igpo", "spa")


@dataclass
class TrainConfig:
    """One training run (``agentgym train``; the schema of ``conf/train.yaml``). The task
    sampler hands out the training task seeds (``sampler="uniform"``: step k's are
    ``k * tasks_per_step + i``); evaluation uses seeds from ``eval_seed`` on, which training
    never sees. Keys shared with :func:`agentgym.rollout.collect` have its names
    (``group_size``, ``max_turns``, ``concurrency``, ``retries``, ``sampling``, ...)."""

    env: str = "agentgym/Sokoban-v0"
    """The env id to train on."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Arguments of the env's constructor; add one as +env_kwargs.KEY=VALUE."""
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Merged over ``env_kwargs`` for the held-out evaluation, e.g. ``+eval_env_kwargs.split=dev``."""
    estimator: str = "gigpo"
    """The credit assignment: gigpo, grpo, rloo, reinforce_pp (:data:`ESTIMATORS`), ppo (GAE
    on a value head; turns on ``learner.value_head``), igpo or spa."""
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    """Arguments of the estimator, e.g. ``{gamma: 0.95, omega: 1.0, preset: verl-agent}``;
    ppo: ``{gamma: 1.0, lam: 1.0}``."""
    spa_refit_every: int = 1
    """With ``estimator="spa"``: retrain the progress estimator every this many steps on the
    newest episodes (its contributions are computed with the last fitted head in between)."""
    answer_template: str | None = None
    """With ``estimator="igpo"``: where the policy writes its final answer, ``{}`` marking the
    answer (the ground truth is scored there); default: the prompter's
    :attr:`~agentgym.prompting.Prompter.answer_template`, e.g. ``<answer>{}</answer>``
    for search, ``<action>{}</action>`` for most families, ``{}`` with ``bare_actions``."""
    mode: str = "sync"
    """``"sync"``: each step collects its groups, then updates, then pushes the weights (a
    resumed run repeats the uninterrupted one exactly). ``"async"``: episodes keep running while
    the learner updates, which takes the ``tasks_per_step`` oldest finished groups as soon as
    there are that many; unfinished episodes go on under the new weights (``max_staleness``;
    ``trainers.async_loop``). It makes the learner's default ``old_logprobs="recompute"``
    ``"decoupled"`` (the correction for turns of older weights)."""
    max_staleness: int = 1
    """With ``mode="async"``: how many weight versions older than the learner's a turn may be
    and still be trained on (older turns are dropped and counted); new groups start only while
    at most ``(max_staleness + 1) * tasks_per_step`` groups are started and not yet trained on.
    0 makes async collect each batch under one version, as sync does."""
    steps: int = 20
    """Update steps (each: collect, credit, update, push the weights)."""
    tasks_per_step: int = 8
    """Tasks (groups of ``group_size`` episodes) collected per step."""
    group_size: int = 8
    """Episodes per task: the group the estimators compare."""
    max_turns: int = 10
    """Turns after which an episode is truncated."""
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(max_tokens=64))
    """Decoding settings of the training episodes (the held-out ones use ``eval_temperature``)."""
    prompt: dict[str, Any] = field(default_factory=dict)
    """Fields of :class:`~agentgym.prompting.Prompter` (history, bare_actions,
    examples, ...); the family comes from the env's manifest."""
    concurrency: int = 64
    """Episodes in flight at once."""
    seats: list[str] = field(default_factory=list)
    """Multi-agent envs: the seats the trained policy plays; empty: every seat (self-play).
    Its turns from every seat it played are training rows."""
    opponent: Any = None
    """Multi-agent envs: the policy config of the other seats (e.g. the env's bots), required
    when ``seats`` leaves seats to it; it is never trained. Or ``league``: self-play against
    the live policy and frozen snapshots of it (``league.*``; ``trainers.league``)."""
    league: LeagueConfig = field(default_factory=LeagueConfig)
    """With ``opponent=league``: when snapshots join the league and how each group's opponent
    is drawn (:class:`~agentgym.trainers.league.LeagueConfig`)."""
    train_roles: list[str] = field(default_factory=list)
    """Multi-agent envs: the roles whose turns are trained on; empty: every role the policy
    played. Each must be one the env deals (its ``metadata["roles"]``, where it lists them).
    Credit compares an episode only with the policy's episodes of the same role from
    the same seed (``TurnTable.from_episodes(..., group_by="role")``)."""
    max_game_steps: int = 1000
    """Multi-agent envs: env steps (an AEC env: agent turns) after which a game is truncated."""
    signals: dict[str, float] = field(default_factory=dict)
    """Multi-agent envs: per-turn reward shaping from the env's info signals (each logged apart
    as ``signal/<name>``), e.g. ``{correct_vote: 0.1}``."""
    cluster: str | None = None
    """Run the envs on env servers in Ray actors across a Ray cluster (``agentgym[ray]``; one
    pool for the whole run): local (a Ray instance for the run), auto (the cluster of ``ray
    start``, or ``$RAY_ADDRESS``) or the head's address; null: in this process."""
    sandbox: str | None = None
    """Run the envs in sandboxed env servers: local (bubblewrap) or docker, one pool for the
    run; with a cluster, in a sandbox on each server's node, and also auto (per node: docker
    where the node offers the ``docker`` resource, else local). null: unsandboxed."""
    retries: int = 2
    """Times an episode that ended with an infrastructure error (a failed env or policy call, a
    timeout) is run again, alone; a group trains on the episodes without error, and those
    with one count in ``errors`` and ``masked_share``, never as reward 0."""
    sampler: str = "uniform"
    """Which task seeds training collects (``trainers.sampler``): ``"uniform"``, fresh seeds in
    order; ``"difficulty"``, a pool of tasks revisited with priority on those solved
    sometimes but not always. Its state is in the checkpoint."""
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options of the sampler, e.g. ``{pool_size: 256, cooldown: 8}`` for ``difficulty``."""
    eval_every: int = 5
    """Evaluate on the held-out tasks every this many steps (and after the last)."""
    eval_tasks: int = 32
    """Held-out tasks per evaluation."""
    eval_seed: int = 1_000_000
    """Seed of the first held-out task; training uses seeds from 0."""
    eval_temperature: float = 0.0
    """Sampling temperature of the held-out evaluation; 0 is greedy."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """The learner's settings."""
    generator: str = "hf"
    """``"hf"``: generate in-process with the learner's own model (no copy per push);
    ``"vllm"``: launch a local vLLM server and push weights to it after every update (LoRA
    hot-load, or a full in-place reload)."""
    out_dir: str = "runs/train"
    """Where the run writes its metrics, checkpoint and plots."""
    resume: bool = False
    """Continue the run in ``out_dir`` from its last checkpoint (exactly as if never stopped)."""
    progress: bool = True
    """Show progress bars."""
    compare_with: str | None = None
    """After the run, train the same budget with this estimator (e.g. ``"grpo"``) into
    ``<out_dir>-<estimator>`` and draw both held-out curves in ``<out_dir>/comparison.png``."""

    def __post_init__(self) -> None:
        self.sampling = SamplingConfig.of(self.sampling)
        if self.generator not in ("hf", "vllm"):
            raise ValueError(f"generator must be 'hf' or 'vllm', got {self.generator!r}")
        if self.generator == "vllm" and self.learner.lora_rank == 0:
            import torch

            if not torch.cuda.is_available():
                raise ValueError(
                    "generator=vllm with full fine-tuning needs a GPU: the CPU build of vLLM does "
                    "not fully apply reloaded weights (see tests/policies/test_weight_sync.py); use "
                    "learner.lora_rank > 0 (LoRA hot-load is exact) or generator=hf"
                )
        if self.learner.fsdp:
            # each of these runs the model on rank 0 alone, which sharded ranks cannot
            alone = [
                what
                for what, refused in (
                    ("generator=hf", self.generator == "hf"),
                    (f"estimator={self.estimator}", self.estimator in ("igpo", "spa")),
                    (f"compare_with={self.compare_with}", self.compare_with in ("igpo", "spa")),
                    ("opponent=league", self.opponent == "league"),
                )
                if refused
            ]
            if alone:
                raise ValueError(
                    f"learner.fsdp=true shards the model over the ranks, and {', '.join(alone)} would "
                    "run it on rank 0 alone: generate with generator=vllm (the weights are pushed) and "
                    "train without igpo, spa or a league"
                )
        try:
            Prompter(**self.prompt)
        except TypeError as exc:
            raise ValueError(f"bad prompt options {sorted(self.prompt)}: {exc}") from None
        for name in ("estimator", "compare_with"):
            value = getattr(self, name)
            if value is not None and value not in ESTIMATORS and value not in _WITH_SCORERS:
                raise ValueError(
                    f"unknown {name} {value!r}; choose one of {sorted(ESTIMATORS) + list(_WITH_SCORERS)}"
                )
        if self.estimator == "ppo":
            self.learner.value_head = True
        self.league = LeagueConfig(**self.league) if isinstance(self.league, dict) else self.league
        self._check_league()
        if self.multiagent:
            agents, metadata = multiagent.possible_agents(self.env, self.env_kwargs)
            self._check_train_roles(metadata.get("roles"))
            multiagent.seat_policies(
                agents, "policy", self.seats, None if self.opponent is None else "opponent"
            )
            if self.opponent == "league" and set(self.seats or agents) >= set(agents):
                raise ValueError(
                    f"opponent=league plays the seats that `seats` leaves: name the policy's seats "
                    f"(some of {agents}), e.g. seats=[{agents[0]}]"
                )
        elif self.seats or self.opponent is not None or self.train_roles:
            raise ValueError(
                f"seats, opponent and train_roles are for multi-agent envs; {self.env} is not one"
            )
        if self.multiagent and self.mode == "async":
            raise ValueError("mode=async trains on single-agent envs only; use mode=sync for games")
        self.sandbox = sandbox_choice(self.sandbox, self.cluster)
        if self.multiagent and (self.cluster is not None or self.sandbox is not None):
            raise ValueError("multi-agent games run in this process: no cluster= or sandbox=")
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {self.mode!r}")
        if self.mode == "async" and self.learner.old_logprobs == "recompute":
            self.learner.old_logprobs = "decoupled"
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; choose one of {sorted(SAMPLERS)}")
        if self.answer_template is not None and "{}" not in self.answer_template:
            raise ValueError(f"answer_template must contain '{{}}', got {self.answer_template!r}")
        for name in (
            "steps",
            "tasks_per_step",
            "group_size",
            "max_turns",
            "sampling.max_tokens",
            "concurrency",
            "eval_every",
            "eval_tasks",
            "spa_refit_every",
        ):
            value = self.sampling.max_tokens if name == "sampling.max_tokens" else getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.make_sampler()  # bad sampler options fail now, not at the first step
        World.from_env(self.learner.device, self.learner.dist_timeout_s)  # a bad torchrun launch, too

    def _check_train_roles(self, roles: list[str] | None) -> None:
        """``ValueError`` for a trained role that the env does not deal (its ``metadata["roles"]``):
        it would train on nothing. An env that lists no roles cannot be checked: a warning."""
        if not self.train_roles:
            return
        if roles is None:
            warnings.warn(
                f"{self.env} lists no roles (metadata['roles']): train_roles={self.train_roles} "
                f"is not checked, and a role its agents never have trains on nothing",
                stacklevel=4,  # the caller of TrainConfig(...)
            )
            return
        if not isinstance(roles, list | tuple):
            raise TypeError(f"{self.env}: metadata['roles'] must be a list of role names, got {roles!r}")
        unknown = [r for r in self.train_roles if r not in roles]
        if unknown:
            raise ValueError(
                f"train_roles {unknown} are not roles of {self.env} (with these env_kwargs): "
                f"it deals {list(roles)}"
            )

    def _check_league(self) -> None:
        """``ValueError`` for a string opponent other than ``league``, and for what a league
        cannot train with."""
        if isinstance(self.opponent, str) and self.opponent != "league":
            raise ValueError(
                f"opponent must be a policy config (with _target_) or 'league', got {self.opponent!r}"
            )
        if self.opponent != "league":
            if self.league != LeagueConfig():
                raise ValueError("league.* apply with opponent=league only")
            return
        if not self.multiagent:
            raise ValueError(f"opponent=league is for multi-agent envs; {self.env} is not one")
        if self.mode != "sync":
            raise ValueError("opponent=league trains with mode=sync only (async trains no games)")
        if self.generator != "hf":
            raise ValueError(
                "opponent=league plays frozen members as in-process HF policies: use generator=hf "
                "(serving members as vLLM adapters is not supported yet)"
            )

    @property
    def multiagent(self) -> bool:
        """Whether ``env`` is a multi-agent env (registered with ``register_multiagent``)."""
        return bool({"parallel", "aec"} & set(manifest(self.env).kinds))

    def make_sampler(self) -> TaskSampler:
        """A fresh task sampler of this run (seeded by ``learner.seed``; it refuses the
        held-out seeds)."""
        return make_sampler(
            self.sampler,
            tasks_per_step=self.tasks_per_step,
            seed=self.learner.seed,
            eval_seed=self.eval_seed,
            **self.sampler_kwargs,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a plain dict (e.g. a resolved Hydra config, or ``learner`` and ``sampling``
        as dicts); a renamed key raises naming its new name, an unknown one the nearest key
        (:class:`~agentgym.conf.ConfigError`, a ``ValueError``)."""
        check_keys(data, cls, RENAMED)
        values = dict(data)
        learner = values.pop("learner", None) or {}
        if not isinstance(learner, LearnerConfig):
            learner = LearnerConfig(**learner)
        league = values.pop("league", None) or {}
        if not isinstance(league, LeagueConfig):
            league = LeagueConfig(**league)
        sampling = values.pop("sampling", None) or {}
        if not isinstance(sampling, SamplingConfig):
            sampling = SamplingConfig(**{**dataclasses.asdict(_default("sampling")), **sampling})
        return cls(learner=learner, sampling=sampling, league=league, **values)


def _default(name: str) -> Any:
    """The default value of the :class:`TrainConfig` field ``name``."""
    f = next(f for f in fields(TrainConfig) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


#: Old names of train keys: ``{old: new}``. An override of an old name is an error naming the new.
RENAMED = {
    "trainer": "estimator",
    "groups_per_step": "tasks_per_step",
    "max_tokens": "sampling.max_tokens",
    "temperature": "sampling.temperature",
}


def register_configs() -> None:
    """Register :class:`TrainConfig` as the schema of ``conf/train.yaml`` (done on import)."""
    register_schema("train", TrainConfig, RENAMED)


register_configs()


def _gain_metrics(table: TurnTable, gains: np.ndarray) -> dict[str, float]:
    """Mean information gain of the turns that are not an episode's last, overall
    (``ig/mean``) and by turn number (``ig/turn_1``, ...)."""
    scored = table.turn < table.episode_length[table.episode] - 1
    if not scored.any():
        return {}
    out = {"ig/mean": float(gains[scored].mean())}
    for t in np.unique(table.turn[scored]):
        out[f"ig/turn_{int(t) + 1}"] = float(gains[scored & (table.turn == t)].mean())
    return out


def _seed(episode: Episode) -> int:
    """The seed of an episode of a task that has one."""
    assert episode.seed is not None, f"episode {episode.episode_id} has no seed"
    return episode.seed


def _success(episodes: list[Episode]) -> float | None:
    return summarize(episodes)["success_rate"]


def _role_metrics(table: TurnTable) -> dict[str, float]:
    """A multi-agent batch's success rate per role (``success/<role>``) and the mean of each
    per-turn signal the env reported (``signal/<name>``, before ``signals`` weighs it in)."""
    metrics = {
        f"success/{name}": float(table.episode_success[table.episode_role == code].mean())
        for code, name in enumerate(table.roles)
    }
    signals: dict[str, list[float]] = {}
    for turn in table.turns():
        for name, value in (turn.info.get("signals") or {}).items():
            signals.setdefault(name, []).append(float(value))
    return metrics | {f"signal/{name}": float(np.mean(values)) for name, values in signals.items()}


class Trainer:
    """State of one run; :func:`train` drives it. ``world``: under torchrun, rank 0's (the
    learner's replicas on the other ranks take its state and updates); default: one process."""

    def __init__(self, cfg: TrainConfig, world: World | None = None):
        from agentgym.policies.hf import HFPolicy
        from agentgym.policies.models import load_tokenizer

        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.learner = Learner(cfg.learner, world)
        self.sampler = cfg.make_sampler()
        self.progress: Any = None  # SPA's estimator, made on first use
        self.start_step = 0
        self.resumed: dict[str, Any] = {}
        """The checkpoint's ``extra`` when resuming (the asynchronous loop's state is there)."""
        checkpoint = self.out / "checkpoint"
        if cfg.resume and (checkpoint / "learner.pt").is_file():
            self.resumed = self.learner.load_checkpoint(checkpoint)
            mode = self.resumed.get("mode", "sync")
            if mode != cfg.mode:
                raise ValueError(f"{checkpoint} is of a mode={mode} run; resume it with mode={mode}")
            self.start_step = int(self.resumed["step"])
            if self.resumed.get("progress") is not None:
                self._progress_estimator().load_state_dict(self.resumed["progress"])
            if "sampler" in self.resumed:
                self.sampler.load_state_dict(self.resumed["sampler"])
            else:  # written before task samplers: the uniform schedule handed out this many
                self.sampler.next_tasks(self.start_step * cfg.tasks_per_step)
            self._truncate_metrics(self.start_step)
        elif (self.out / "metrics.jsonl").exists():
            (self.out / "metrics.jsonl").unlink()
        self.learner.share_state()  # the learner's replicas on the other ranks start from its state
        self.policy: HFPolicy | VLLMPolicy
        if cfg.generator == "hf":
            # mode=async generates while the learner updates: on a copy of the weights, which
            # pushes overwrite between two batches (sharing the model, a batch could see an
            # optimizer step half-way).
            module = self.learner.model
            if cfg.mode == "async":
                module = copy.deepcopy(module).requires_grad_(False)
            self.policy = HFPolicy(cfg.learner.model, module=module, max_batch_size=cfg.concurrency)
            self.policy.policy_version = self.learner.step
        else:
            from agentgym.policies.vllm import VLLMPolicy

            lora = cfg.learner.lora_rank > 0
            self.policy = VLLMPolicy.launch(
                cfg.learner.model,
                enable_lora=lora,
                max_lora_rank=max(cfg.learner.lora_rank, 8),
                env={"VLLM_SERVER_DEV_MODE": "1"},
                # two adapters per batch: requests of the replaced version finish beside the new
                extra_args=("--max-loras", "2") if lora and cfg.mode == "async" else (),
            )
        self.tokenizer = load_tokenizer(cfg.learner.model)
        """The learner side's own tokenizer (in async mode the policy's is in use meanwhile)."""
        family = manifest(cfg.env).family
        self.prompter: PrompterProtocol = (
            multiagent.default_prompter(family, **cfg.prompt)
            if cfg.multiagent
            else Prompter(family=family, **cfg.prompt)
        )
        self.seats: dict[str, Any] = {}
        """Multi-agent envs: the policy of every seat (the trained one, or the opponent; with a
        league, the live policy: the held-out evaluation's seating)."""
        self.trained: set[str] = set()
        """Multi-agent envs: the seats whose episodes are trained on (``seats``, else all)."""
        self.league: League | None = None
        """With ``opponent=league``: the run's league (``out_dir/league``)."""
        if cfg.multiagent:
            agents, _ = multiagent.possible_agents(cfg.env, cfg.env_kwargs)
            self.trained = set(cfg.seats or agents)
            if cfg.opponent == "league":
                opponent: Any = self.policy
                self.league = League(
                    self.out / "league",
                    cfg.league,
                    self._member_policy,
                    resume_at=self.start_step if self.resumed else None,
                    salt=cfg.learner.seed,
                )
            else:
                opponent = instantiate(cfg.opponent) if cfg.opponent is not None else None
            self.seats = multiagent.seat_policies(agents, self.policy, cfg.seats, opponent)
        self.snapshot(self.start_step)  # a run killed between a checkpoint and its snapshot
        self.tensorboard = _tensorboard(self.out / "tensorboard", self.start_step)
        self.servers: ServerPool | None = None
        """The run's env servers (``cluster``, ``sandbox``), last: nothing after can fail."""
        if cfg.cluster is not None:
            from agentgym.hosting import RayEnvServerPool  # only cluster runs load Ray

            self.servers = RayEnvServerPool(cfg.cluster, sandbox=cast("SandboxChoice", cfg.sandbox))
        elif cfg.sandbox is not None:
            from agentgym.hosting import EnvServerPool  # only sandboxed runs load it

            self.servers = EnvServerPool(cast("Backend", cfg.sandbox), warm=1)

    def _member_policy(self, member: Member) -> HFPolicy:
        """The in-process policy of a frozen league member (on the learner's device)."""
        from agentgym.policies.hf import HFPolicy

        assert self.league is not None, "members are the league's"
        model = member_policy(self.league.directory, member.policy)["model"]
        return HFPolicy(model, device=self.cfg.learner.device, max_batch_size=self.cfg.concurrency)

    def snapshot(self, updates: int) -> None:
        """Add the policy (after ``updates`` updates) to the league, when a snapshot is due and
        the league lacks it: its adapter (or weights) and tokenizer, played by an HFPolicy."""

        def save(folder: Path) -> None:
            self.learner.model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)

        if self.league is not None and self.league.due(updates):
            self.league.snapshot(updates, save, {"_target_": "agentgym.policies.hf.HFPolicy"})

    def _truncate_metrics(self, keep_below: int) -> None:
        path = self.out / "metrics.jsonl"
        if path.exists():
            lines = [
                ln
                for ln in path.read_text().splitlines()
                if ln.strip() and json.loads(ln)["step"] < keep_below
            ]
            path.write_text("".join(ln + "\n" for ln in lines))

    async def _collect(
        self,
        tasks: list[Task],
        group_size: int,
        temperature: float,
        env_kwargs: dict[str, Any] | None = None,
        seating: Callable[[Task], dict[str, Any]] | None = None,
    ) -> list[Episode]:
        """The episodes of ``group_size`` runs of every task, in (task, member) order; of a
        multi-agent env, the trained policy's seats' episodes of ``group_size`` games, seated as
        ``seating(task)`` says (default :attr:`seats`)."""
        if self.seats:
            episodes = await multiagent.acollect(
                self.cfg.env,
                seating or self.seats,
                tasks,
                group_size=group_size,
                max_game_steps=self.cfg.max_game_steps,
                concurrency=self.cfg.concurrency,
                prompter=self.prompter,
                sampling=self.cfg.sampling.params(temperature=temperature),
                signals=self.cfg.signals,
                env_kwargs=self.cfg.env_kwargs if env_kwargs is None else env_kwargs,
                progress=self.cfg.progress,
            )
            return [e for e in episodes if e.agent in self.trained]
        return await acollect(
            self.cfg.env,
            self.policy,
            tasks,
            group_size=group_size,
            max_turns=self.cfg.max_turns,
            concurrency=self.cfg.concurrency,
            prompter=self.prompter,
            sampling=self.cfg.sampling.params(temperature=temperature),
            env_kwargs=self.cfg.env_kwargs if env_kwargs is None else env_kwargs,
            progress=self.cfg.progress,
            retries=self.cfg.retries,
            sandbox=self.servers,
        )

    async def evaluate(self) -> dict[str, Any]:
        """The held-out evaluation: ``eval_success`` (the rate) and ``eval_outcomes``, 1 or 0 for
        each evaluation task in seed order. The tasks and every request's sampling seed are the
        same at each evaluation, so two evaluations of a run are paired task by task."""
        tasks = [Task(None, self.cfg.eval_seed + i) for i in range(self.cfg.eval_tasks)]
        episodes = await self._collect(
            tasks, 1, self.cfg.eval_temperature, self.cfg.env_kwargs | self.cfg.eval_env_kwargs
        )
        return {
            "eval_success": _success(episodes),
            "eval_outcomes": [int(bool(e.success)) for e in sorted(episodes, key=_seed)],
        }

    async def run_step(self, k: int) -> dict[str, Any]:
        """Synchronous step ``k`` (:meth:`step`), the evaluation when due (its seconds in
        ``eval_s``), the checkpoint; the record."""
        record = await self.step(k)
        if self.eval_due(k):
            started = time.perf_counter()
            record.update(await self.evaluate(), eval_s=time.perf_counter() - started)
        self.checkpoint(k + 1)
        self.snapshot(k + 1)
        return record

    async def step(self, k: int) -> dict[str, Any]:
        """Synchronous step ``k``: collect the sampler's next tasks, learn from every episode,
        push the weights; the metrics record (:meth:`learn`'s, with timings)."""
        cfg = self.cfg
        started = time.perf_counter()
        seeds, size = self.sampler.next_tasks(cfg.tasks_per_step), cfg.group_size
        seating, league_metrics = await self._league_seating(k, seeds)
        episodes = await self._collect(
            [Task(None, s) for s in seeds], size, cfg.sampling.temperature, seating=seating
        )
        for seed in seeds:
            self.sampler.report(seed, [e for e in episodes if e.seed == seed])
        collected = time.perf_counter()
        record = self.learn(k, episodes)
        await push_weights(self.learner, self.policy, self.out / "pushed")
        done = time.perf_counter()
        return {
            **record,
            **self.sampler_metrics(),
            **league_metrics,
            "collect_s": collected - started,
            "update_s": done - collected,
            "update_tokens_per_s": record.get("update/tokens", 0.0) / max(done - collected, 1e-9),
        }

    async def _league_seating(
        self, k: int, seeds: Sequence[int]
    ) -> tuple[Callable[[Task], dict[str, Any]] | None, dict[str, Any]]:
        """With a league: the seating of each task of step ``k`` (the trained seats to the
        policy, the others to the group's opponent, :meth:`League.choices`) and the league's
        metrics; without: ``None`` (:attr:`seats`) and no metrics."""
        if self.league is None:
            return None, {}
        chosen = self.league.choices(k, seeds)
        opponents: dict[str, Any] = {LATEST: self.policy, **await self.league.policies(set(chosen.values()))}
        seatings = {
            name: {agent: self.policy if agent in self.trained else policy for agent in self.seats}
            for name, policy in opponents.items()
        }
        return (lambda task: seatings[chosen[task.seed]]), self.league.metrics(chosen)

    def learn(
        self, k: int, episodes: Sequence[Episode], trained: Callable[[Turn], bool] | None = None
    ) -> dict[str, Any]:
        """Credit assignment and one learner update on ``episodes`` (those with an error are
        left out); the metrics record of step ``k``. ``trained(turn)`` false keeps a turn out of
        the update (it still counts in its episode's return and its group's baseline)."""
        cfg = self.cfg
        scored = [e for e in episodes if e.error is None]  # infrastructure errors never train
        table = TurnTable.from_episodes(scored, group_by="role" if self.seats else "group_id")
        if cfg.estimator == "ppo":
            rows = self._ppo_rows(scored, table)
            advantages = np.array([r.advantage for r in rows])
        else:
            if cfg.estimator == "spa":
                advantages = self._spa_advantages(k, scored, table)
            elif cfg.estimator == "igpo":
                advantages, gains = self._igpo_advantages(scored, table)
            else:
                advantages = ESTIMATORS[cfg.estimator](table, **cfg.estimator_kwargs)
            rows = rows_from_episodes(scored, advantages, keep_empty=True)
        gain_metrics = _gain_metrics(table, gains) if cfg.estimator == "igpo" else {}
        roles = set(cfg.train_roles)
        rows = [
            r
            for r, t, role in zip(rows, table.turns(), table.role)
            if r.response_ids
            and (trained is None or trained(t))
            and (not roles or table.roles[role] in roles)
        ]
        update = self.learner.update(rows)
        tokens = sum(len(t.response_ids) for e in scored for t in e.turns)
        return {
            "step": k,
            "train_success": _success(list(episodes)),
            "mean_return": float(np.mean([e.outcome for e in scored])) if scored else None,
            "errors": len(episodes) - len(scored),
            "masked_share": (len(episodes) - len(scored)) / max(len(episodes), 1),
            "turns": len(table),
            "advantage_mean": float(advantages.mean()) if len(advantages) else 0.0,
            "advantage_std": float(advantages.std()) if len(advantages) else 0.0,
            "response_length": tokens / max(len(table), 1),
            **gain_metrics,
            **(_role_metrics(table) if self.seats else {}),
            **{f"update/{k2}": v for k2, v in update.items()},
        }

    def sampler_metrics(self) -> dict[str, float]:
        return {f"sampler/{k}": v for k, v in self.sampler.metrics().items()}

    def _ppo_rows(self, episodes: list[Episode], table: TurnTable) -> list[TrainingRow]:
        """PPO: the critic's V of every turn, turn-level GAE (``credit.gae``; ``gamma``/``lam``
        from ``estimator_kwargs``), and one row per turn carrying its advantage, value target
        and old value."""
        rows = rows_from_episodes(episodes, np.zeros(len(table)), keep_empty=True)
        values = self.learner.values(rows) if rows else np.zeros(0)
        advantages, targets = credit.gae(table, values, **self.cfg.estimator_kwargs)
        for row, a, target, v in zip(rows, advantages, targets, values):
            row.advantage, row.value_target, row.old_value = float(a), float(target), float(v)
        return rows

    def _progress_estimator(self) -> Any:
        from agentgym.trainers.progress import ProgressEstimator

        if self.progress is None:
            self.progress = ProgressEstimator(
                hidden_size=self.learner.model.config.hidden_size, seed=self.cfg.learner.seed
            )
        return self.progress

    def _spa_advantages(self, k: int, episodes: list[Episode], table: TurnTable) -> np.ndarray:
        """SPA without a critic: contributions of the (re)fitted progress estimator plus
        grounding, then group-normalized returns (``credit.spa(estimator="group")``)."""
        from agentgym.trainers.progress import turn_features

        features = turn_features(self.learner.model, episodes)
        fresh = self.progress is None  # the first step of a run: fit it now
        estimator = self._progress_estimator()
        if (fresh or k % self.cfg.spa_refit_every == 0) and len(table):
            estimator.fit(features, table)
        return credit.spa(
            table, estimator.contributions(features), estimator="group", **self.cfg.estimator_kwargs
        )

    def _igpo_advantages(self, episodes: list[Episode], table: TurnTable) -> tuple[np.ndarray, np.ndarray]:
        """IGPO: the current policy's log-probability of each episode's ground truth after every
        turn, as information-gain rewards beside the outcome (``credit.igpo``). Returns the
        advantages and the raw information gains per row."""
        missing = [e.episode_id for e in episodes if e.ground_truth is None]
        if missing:
            raise ValueError(
                f"estimator=igpo needs info['ground_truth'] from the env; "
                f"{self.cfg.env} gave none for {len(missing)} episode(s), e.g. "
                f"{missing[0]!r}"
            )
        template = self.cfg.answer_template
        if template is None:  # a game's prompter answers whole: no template
            template = str(getattr(self.prompter, "answer_template", "{}"))
        scores, initial = answer_scores(
            self.learner.model,
            self.tokenizer,
            self.prompter,
            episodes,
            [str(e.ground_truth) for e in episodes],
            template=template,
            token_budget=self.cfg.learner.micro_batch_tokens,
        )
        kwargs = self.cfg.estimator_kwargs
        gains = credit.information_gains(table, scores, initial, basis=kwargs.get("basis", "logprob"))
        return credit.igpo(table, scores, initial, **kwargs), gains

    def checkpoint(self, step: int) -> None:
        """Write everything a resume needs after ``step`` steps (:meth:`checkpoint_extra`
        beside the learner's state)."""
        self.learner.save_checkpoint(self.out / "checkpoint", extra=self.checkpoint_extra(step))

    def checkpoint_extra(self, step: int, **state: Any) -> dict[str, Any]:
        """What a checkpoint holds beside the learner's state: the step, the mode, the
        sampler's state, SPA's estimator, and ``state`` (the asynchronous loop's)."""
        return {
            "step": step,
            "mode": self.cfg.mode,
            "progress": self.progress.state_dict() if self.progress is not None else None,
            "sampler": self.sampler.state_dict(),
            **state,
        }

    def eval_due(self, k: int) -> bool:
        """Whether the held-out evaluation runs after step ``k``."""
        return (k + 1) % self.cfg.eval_every == 0 or k + 1 == self.cfg.steps

    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` to metrics.jsonl (and TensorBoard), redraw the learning curve."""
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tensorboard.add_scalar(key, value, record["step"] + 1)
            self.tensorboard.flush()
        plot_learning_curve(
            self.out / "metrics.jsonl", self.out / "learning_curve.png", self.cfg.eval_temperature
        )

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.servers is not None:
            self.servers.close()


def _tensorboard(logdir: Path, start_step: int) -> Any:
    """A TensorBoard writer when ``tensorboard`` is installed, else ``None``. Events after
    ``start_step`` (from the killed run that is being resumed) are purged. Scalars are logged at
    step k + 1 for update k, so that the baseline evaluation sits at 0."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(logdir), purge_step=start_step + 1 if start_step else None)


def plot_learning_curve(metrics_path: Path, png_path: Path, eval_temperature: float = 0.0) -> None:
    """Train and held-out success per step, the policy loss and, for IGPO, the mean
    information gain per turn number, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
    evals = [
        (r["step"] + 1, r["eval_success"]) for r in records if r.get("eval_success") is not None
    ]  # evaluated after the step's update
    records = [r for r in records if r["step"] >= 0]
    gain_keys = sorted(
        {k for r in records for k in r if k.startswith("ig/turn_")}, key=lambda k: int(k.rsplit("_", 1)[1])
    )
    fig, axes = plt.subplots(1, 3 if gain_keys else 2, figsize=(15 if gain_keys else 10, 4))
    ax1, ax2 = axes[0], axes[1]
    steps = [r["step"] for r in records]
    ax1.plot(steps, [r["train_success"] for r in records], label="train (sampled)", marker=".")
    if evals:
        how = "greedy" if eval_temperature == 0 else f"sampled, T={eval_temperature:g}"
        ax1.plot(*zip(*evals), label=f"held-out ({how})", marker="o")
    ax1.set(xlabel="update step", ylabel="success rate", ylim=(-0.02, 1.02), title="Success")
    ax1.legend()
    ax2.plot(steps, [r.get("update/pg_loss") for r in records], label="policy loss")
    ax2.plot(steps, [r.get("update/entropy") for r in records], label="entropy")
    ax2.set(xlabel="step", title="Update")
    ax2.legend()
    if gain_keys:
        for key in gain_keys:
            ax = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            axes[2].plot(*zip(*ax), marker=".", label=f"turn {key.rsplit('_', 1)[1]}")
        axes[2].axhline(0.0, color="grey", lw=0.8)
        axes[2].set(
            xlabel="update step", ylabel="mean v_t - v_(t-1) (nats)", title="Information gain per turn"
        )
        axes[2].legend()
    fig.tight_layout()
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)


@contextlib.asynccontextmanager
async def _steps(trainer: Trainer) -> AsyncIterator[Callable[[int], Awaitable[dict[str, Any]]]]:
    """What runs step k of ``trainer``'s mode: update, evaluation when due, checkpoint; the
    step's record."""
    if trainer.cfg.mode == "sync":
        yield trainer.run_step
        return
    async with AsyncCollector(trainer) as collector:
        yield collector.run_step


async def atrain(
    cfg: TrainConfig, baseline: dict[str, Any] | None = None, world: World | None = None
) -> list[dict[str, Any]]:
    """Run (or resume) training; return the metric records of the steps run now. ``baseline``:
    the evaluation of the untrained policy, when another run already made it (same model, tasks
    and sampling seeds); else it is run here. Each record gets ``elapsed_s``, the seconds since
    this run (or resume) started, the model's loading left out; ``eval_s`` in a record is the
    part of them its evaluation took. ``world``: under torchrun (:func:`train` makes it), rank 0
    runs the training and every other rank holds a replica of the learner until rank 0 is done,
    also when it fails, and returns no records; default: one process."""
    world = world or World()
    if not world.is_main:
        Learner(cfg.learner, world).follow()  # blocking: nothing else runs on this rank
        return []
    with world.leading():
        return await _run(cfg, baseline, world)


async def _run(cfg: TrainConfig, baseline: dict[str, Any] | None, world: World) -> list[dict[str, Any]]:
    """Rank 0's part of :func:`atrain`: all of it."""
    trainer = Trainer(cfg, world)
    records = []
    started = time.perf_counter()
    try:
        await push_weights(trainer.learner, trainer.policy, trainer.out / "pushed")
        if trainer.start_step == 0:
            if baseline is None:
                baseline = {**await trainer.evaluate(), "eval_s": time.perf_counter() - started}
            console.print(f"step 0 held-out success (before training): {baseline['eval_success']}")
            trainer.log({"step": -1, "train_success": None, **baseline})
        async with _steps(trainer) as step:
            for k in range(trainer.start_step, cfg.steps):
                record = await step(k)
                record["elapsed_s"] = time.perf_counter() - started
                trainer.log(record)
                records.append(record)
                console.print(
                    f"step {k}: train success {record['train_success']}, "
                    f"eval {record.get('eval_success', '-')}, loss {record['update/loss']:.4f}"
                    if "update/loss" in record
                    else f"step {k}: {record}",
                    highlight=False,
                )
    finally:
        trainer.close()
        if trainer.league is not None:
            await trainer.league.aclose()
        await trainer.policy.aclose()
    return records


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Run (or resume) training, then the ``compare_with`` run if asked, then print
    :func:`train_summary`; the metric records of the main run's steps run now."""
    started = time.perf_counter()
    world = World.from_env(cfg.learner.device, cfg.learner.dist_timeout_s).join()
    if not world.is_main:  # a replica of the learner in each of rank 0's runs
        asyncio.run(atrain(cfg, world=world))
        if (other := _comparison(cfg)) is not None:
            asyncio.run(atrain(other, world=world))
        return []
    records = asyncio.run(atrain(cfg, world=world))
    if (other := _comparison(cfg)) is not None:
        console.print(f"comparison run: estimator={other.estimator} into {other.out_dir}")
        # Both runs start from the same weights and evaluate the same tasks with the same
        # sampling seeds: the main run's baseline evaluation is the comparison's too.
        metrics = (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines()
        baseline = next(
            (
                {k: r[k] for k in ("eval_success", "eval_outcomes")}
                for r in map(json.loads, metrics)
                if r["step"] == -1
            ),
            None,
        )
        asyncio.run(atrain(other, baseline, world))
        plot_comparison(
            {cfg.estimator: Path(cfg.out_dir), other.estimator: Path(other.out_dir)},
            Path(cfg.out_dir) / "comparison.png",
        )
    console.print(
        train_summary(
            cfg, time.perf_counter() - started, len(records), other.out_dir if other is not None else None
        ),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return records


def _comparison(cfg: TrainConfig) -> TrainConfig | None:
    """The ``compare_with`` run of ``cfg`` (into ``<out_dir>-<estimator>``), if it asks one."""
    if cfg.compare_with is None:
        return None
    return replace(
        cfg,
        estimator=cfg.compare_with,
        compare_with=None,
        out_dir=f"{cfg.out_dir.rstrip('/')}-{cfg.compare_with}",
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h {minutes:02d}m {secs:02d}s"
        if hours
        else (f"{minutes}m {secs:02d}s" if minutes else f"{seconds:.1f}s")
    )


def _held_out(run: Path) -> tuple[float | None, tuple[int, float] | None, int]:
    """(untrained success, (step, success) of the last evaluation after an update, steps done)
    of the run directory ``run``, from its metrics.jsonl."""
    path = run / "metrics.jsonl"
    records = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []
    before = next((r.get("eval_success") for r in records if r["step"] == -1), None)
    after = [
        (r["step"] + 1, r["eval_success"])
        for r in records
        if r["step"] >= 0 and r.get("eval_success") is not None
    ]
    return before, after[-1] if after else None, max((r["step"] + 1 for r in records), default=0)


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def train_summary(cfg: TrainConfig, seconds: float, steps_run: int, comparison_dir: str | None = None) -> str:
    """What ``agentgym train`` prints last: the steps, the held-out success before training and
    after (as measured), the time, and the paths the run wrote."""
    out = Path(cfg.out_dir)
    before, after, done = _held_out(out)
    how = (
        "greedy" if cfg.eval_temperature == 0 else f"T={cfg.eval_temperature:g}"
    ) + f", {cfg.eval_tasks} held-out tasks"
    lines = [
        f"agentgym train: done: {cfg.estimator} on {cfg.env}, {done}/{cfg.steps} steps "
        f"({steps_run} in this run) in {_duration(seconds)}"
    ]
    if after is not None:
        lines.append(
            f"  held-out success: {_rate(before)} untrained -> {_rate(after[1])} after "
            f"step {after[0]} ({how})"
        )
    elif before is not None:
        lines.append(f"  held-out success untrained: {_rate(before)} ({how})")
    if comparison_dir is not None:
        c_before, c_after, _ = _held_out(Path(comparison_dir))
        if c_after is not None:
            lines.append(
                f"  {cfg.compare_with} (comparison): {_rate(c_before)} untrained -> "
                f"{_rate(c_after[1])} after step {c_after[0]}"
            )
    wrote = [
        (out / "metrics.jsonl", "metrics, one JSON line per step"),
        (out / "learning_curve.png", "learning curve"),
        (out / "checkpoint" / "learner.pt", "checkpoint (resume=true continues from it)"),
        (out / "tensorboard", "TensorBoard events"),
        (out / "pushed", "weights pushed to the generator"),
        (out / "league" / "league.json", "the league's frozen members (agentgym eval league=...)"),
    ]
    if comparison_dir is not None:
        wrote += [
            (Path(comparison_dir), f"the {cfg.compare_with} comparison run (the same files)"),
            (out / "comparison.png", "both runs' curves"),
        ]
    lines.append("  wrote:")
    lines += [f"    {path}  {what}" for path, what in wrote if path.exists()]
    return "\n".join(lines)


def plot_comparison(runs: dict[str, Path], png_path: Path) -> None:
    """Held-out and train success per step of several runs (label -> run directory)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for label, run in runs.items():
        records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]
        evals = [(r["step"] + 1, r["eval_success"]) for r in records if r.get("eval_success") is not None]
        if evals:
            ax1.plot(*zip(*evals), marker="o", label=label)
        trained = [
            (r["step"], r["mean_return"])
            for r in records
            if r["step"] >= 0 and r.get("mean_return") is not None
        ]
        if trained:
            ax2.plot(*zip(*trained), marker=".", label=label)
    ax1.set(xlabel="update step", ylabel="success rate", ylim=(-0.02, 1.02), title="Held-out success")
    ax2.set(xlabel="update step", ylabel="mean episode return", title="Training return")
    ax1.legend()
    ax2.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
