"""Eval suites: which environments an evaluation runs, on which tasks, how often.

A suite is a Hydra config in ``agentgym/conf/suite/`` (``agentgym eval suite=textgames``)::

    name: textgames
    entries:
      - name: sokoban            # unique in the suite; default: the env id
        env: agentgym/Sokoban-v0
        env_kwargs: {num_boxes: 1}
        split: test              # a label of the task set, shown in reports
        seed: 10000              # tasks use seeds seed .. seed + tasks - 1
        tasks: 8                 # how many tasks (groups of group_size episodes)
        group_size: 1            # episodes per task (pass@k needs more than one)
        max_turns: 20
        task_ids: []             # explicit task ids (cycled), else tasks drawn from the seeds

A suite may instead (or also) name other suites whose entries it runs, in order:
``include: [textgames, werewolf]`` (``full`` does).

Every entry key but ``env`` is optional: a missing one takes the top-level value of the eval
config (``seed``, ``tasks``, ``group_size``, ``max_turns``, ``env_kwargs``, ``task_ids``), so
``agentgym eval suite=smoke max_turns=4`` changes the entries that do not set their own. Without
a suite, the top-level ``env`` and those keys form a one-entry suite named after the env.

``games`` (entry key; default: whether the env id is a multi-agent one) plays multi-agent games
(:mod:`agentgym.multiagent`) instead of single-agent episodes; a game is bounded by the eval
config's ``max_game_steps`` (env steps), not by ``max_turns`` (one agent's turns).

The keys use the vocabulary of :func:`agentgym.rollout.collect` (``tasks``, ``group_size``,
``max_turns``); an entry with a key's old name (``episodes``) is an error naming the new one.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from agentgym.registry import UnknownEnvError, list_envs, manifest
from agentgym.rollout import Task, default_tasks

__all__ = ["RENAMED_ENTRY_KEYS", "Suite", "SuiteEntry", "SuiteError", "available_suites", "suite_from_config"]

_ENTRY_KEYS = {
    "name",
    "env",
    "env_kwargs",
    "split",
    "seed",
    "tasks",
    "group_size",
    "max_turns",
    "task_ids",
    "games",
}
_INHERITED = ("env_kwargs", "seed", "tasks", "group_size", "max_turns", "task_ids")
#: Old names of entry keys: ``{old: new}``.
RENAMED_ENTRY_KEYS = {"episodes": "tasks"}


class SuiteError(ValueError):
    """A suite (or the env of the config) that cannot run: unknown env, bad entry."""


@dataclass(frozen=True)
class SuiteEntry:
    """One environment of a suite and its tasks."""

    name: str
    env: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "test"
    seed: int = 0
    tasks: int = 16
    """How many tasks: seeds ``seed .. seed + tasks - 1`` (or ``task_ids``, cycled)."""
    group_size: int = 1
    max_turns: int = 30
    task_ids: tuple[str, ...] = ()
    games: bool = False

    def task_list(self) -> list[Task]:
        """The entry's tasks (:func:`agentgym.rollout.default_tasks`)."""
        return default_tasks(self.tasks, self.seed, list(self.task_ids))

    @property
    def units(self) -> int:
        """Episodes (or games) the entry runs."""
        return self.tasks * self.group_size


@dataclass(frozen=True)
class Suite:
    name: str
    entries: tuple[SuiteEntry, ...]

    @property
    def units(self) -> int:
        return sum(e.units for e in self.entries)


def _folder() -> Any:
    return resources.files("agentgym.conf") / "suite"


def available_suites() -> list[str]:
    """Names of the suites shipped in ``agentgym/conf/suite``."""
    return sorted(p.name.removesuffix(".yaml") for p in _folder().iterdir() if p.name.endswith(".yaml"))


def _entries(raw: Mapping[str, Any], seen: tuple[str, ...] = ()) -> list[Mapping[str, Any]]:
    """The raw entries of a suite, those of its ``include`` s first."""
    name = str(raw.get("name") or "suite")
    if name in seen:
        raise SuiteError(f"suite {name} includes itself: {' -> '.join((*seen, name))}")
    entries: list[Mapping[str, Any]] = []
    for included in raw.get("include") or ():
        if included not in available_suites():
            raise SuiteError(
                f"suite {name} includes unknown suite {included!r}; suites: {', '.join(available_suites())}"
            )
        text = (_folder() / f"{included}.yaml").read_text(encoding="utf-8")
        entries += _entries(yaml.safe_load(text), (*seen, name))
    return entries + list(raw.get("entries") or ())


def _renamed(keys: Any, where: str) -> None:
    for old, new in RENAMED_ENTRY_KEYS.items():
        if old in keys:
            raise SuiteError(f"{where}: {old!r} is now {new!r}")


def _entry(raw: Mapping[str, Any], defaults: Mapping[str, Any], where: str) -> SuiteEntry:
    _renamed(raw, where)
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        near = {k: difflib.get_close_matches(k, sorted(_ENTRY_KEYS), n=1) for k in unknown}
        hints = [f"{k!r} -> {m[0]!r}" for k, m in near.items() if m]
        raise SuiteError(
            f"{where}: unknown key(s) {unknown}"
            + (f" (did you mean {', '.join(hints)}?)" if hints else "")
            + f"; an entry may have {sorted(_ENTRY_KEYS)}"
        )
    env = raw.get("env")
    if not env:
        raise SuiteError(f"{where}: no `env`")
    try:
        kinds = manifest(env).kinds
    except UnknownEnvError:
        raise SuiteError(
            f"{where}: unknown env {env!r}; registered: {', '.join(sorted(list_envs()))}"
        ) from None
    values = {k: raw.get(k, defaults.get(k)) for k in _INHERITED}
    games = raw.get("games")
    multiagent = bool({"aec", "parallel"} & set(kinds))
    if games is None:
        games = multiagent
    if games and not multiagent:
        raise SuiteError(f"{where}: {env} is not a multi-agent env: it cannot play games")
    for key in ("tasks", "group_size", "max_turns"):
        if not isinstance(values[key], int) or values[key] < 1:
            raise SuiteError(f"{where}: {key} must be an integer >= 1, got {values[key]!r}")
    return SuiteEntry(
        name=str(raw.get("name") or env),
        env=env,
        env_kwargs=dict(values["env_kwargs"] or {}),
        split=str(raw.get("split", "test")),
        seed=int(values["seed"]),
        tasks=values["tasks"],
        group_size=values["group_size"],
        max_turns=values["max_turns"],
        task_ids=tuple(str(t) for t in values["task_ids"] or ()),
        games=bool(games),
    )


def suite_from_config(config: Mapping[str, Any]) -> Suite:
    """The suite of a resolved eval config (a plain mapping): ``config["suite"]`` if set, else
    the one-entry suite of ``config["env"]``. Raises :class:`SuiteError` naming what is wrong."""
    _renamed(config, "config")
    raw = config.get("suite")
    if raw is None:
        entries = [_entry({"env": config.get("env")}, config, "env")]
        return Suite(name=entries[0].name.replace("/", "_"), entries=tuple(entries))
    name = str(raw.get("name") or "suite")
    entries = [_entry(e, config, f"suite {name}, entry {i}") for i, e in enumerate(_entries(raw))]
    if not entries:
        raise SuiteError(f"suite {name} has no entries")
    names = [e.name for e in entries]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SuiteError(f"suite {name}: entry names must be unique, repeated: {repeated}")
    return Suite(name=name, entries=tuple(entries))
