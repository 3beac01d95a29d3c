"""Recorded interaction: :class:`Turn`, :class:`Episode`, JSONL files, and the columnar
:class:`TurnTable` that trainers read.

One :class:`Turn` is one policy call and one env step. Its ``state_key`` is the key of the state
the agent acted *from* (the previous step's ``info["state_key"]``), which is what GiGPO groups on;
its ``reward`` and ``info`` are what the env answered.

Token data comes from the generator and is stored as given (never re-tokenized): ``prompt_ids``
is the exact prompt the policy saw, ``response_ids``/``response_logprobs`` the sampled tokens and
their log-probabilities under the sampling policy (natural log, one per response token). Empty
token data is always the shared ``()`` (a policy without token data, such as rules or scripts,
leaves it so, and the rollout engine and :meth:`Episode.from_dict` store any empty sequence so):
it costs an episode kept in memory nothing, where a list per field would be three more objects
per turn for the garbage collector to walk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

__all__ = [
    "Episode",
    "EpisodeFileError",
    "Turn",
    "TurnTable",
    "episode_json",
    "load_episodes",
    "role_of",
    "save_episodes",
    "to_dataset",
]


@dataclass(slots=True)
class Turn:
    """One agent decision and the env's answer to it."""

    observation: str
    """The env text the agent answered (the newest observation in its prompt)."""
    action: str
    """The action sent to the env (extracted from ``response_text``)."""
    action_valid: bool
    """Whether the response had the action format and the env accepted the action."""
    reward: float
    state_key: str | None = None
    """Key of the state acted from (pre-action); ``None`` when the env gives none."""
    response_text: str = ""
    prompt_ids: Sequence[int] = ()
    response_ids: Sequence[int] = ()
    response_logprobs: Sequence[float] = ()
    finish_reason: str | None = None
    policy_version: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    """The env's ``info`` after the step (JSON-safe values)."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent per phase: ``generate``, ``step``."""


@dataclass
class Episode:
    """One run of one agent through one task. A group is the episodes sharing ``group_id``."""

    episode_id: str
    env_id: str
    task_id: str
    group_id: str
    seed: int | None
    agent: str = "agent"
    instruction: str = ""
    task_type: str = ""
    """The env's ``info["task_type"]`` at reset (a kind of task, for per-type statistics)."""
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    outcome: float = 0.0
    """Outcome reward R: the sum of turn rewards unless the env reports its own."""
    ground_truth: str | None = None
    error: str | None = None
    """Infrastructure failure (env crash, policy error, timeout); such an episode is truncated
    and must not be counted as an agent failure."""
    failed_attempts: list[str] = field(default_factory=list)
    """Errors of earlier attempts at this episode, which were discarded and run again (see
    ``acollect(retries=...)``); empty when the first attempt counted."""
    wall_time: float = 0.0
    """Seconds from the start of the (last) attempt to its end, waiting for the env and the
    policy included."""
    tags: dict[str, str] = field(default_factory=dict)
    """Labels of the run that produced the episode (the eval harness sets ``entry``, the suite
    entry it belongs to)."""

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        """Inverse of :meth:`to_dict`; unknown keys raise ``TypeError``."""
        data = dict(data)
        data["turns"] = [_turn(t) for t in data.get("turns", [])]
        return cls(**data)


_TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_logprobs")


def _turn(data: dict[str, Any]) -> Turn:
    """The :class:`Turn` of a dict of its fields, empty token data as ``()``."""
    data = dict(data)
    for name in _TOKEN_FIELDS:
        if name in data and not data[name]:
            data[name] = ()
    return Turn(**data)


class EpisodeFileError(ValueError):
    """A line of an episodes JSONL file is not a valid episode."""


def episode_json(episode: Episode) -> str:
    """The JSONL line of ``episode`` (no newline): non-ASCII text as it is, unless the episode
    holds a lone surrogate (an agent may write one), which UTF-8 cannot encode: then every
    non-ASCII character is ``\\u``-escaped, which :func:`iter_episodes` reads back exactly."""
    text = json.dumps(episode.to_dict(), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(episode.to_dict())
    return text


def save_episodes(
    path: str | os.PathLike[str], episodes: Iterable[Episode], *, append: bool = False, fsync: bool = False
) -> None:
    """Write episodes as JSONL, one episode per line (``append`` adds to an existing file).

    With ``fsync`` each line is flushed to disk before the next is written, so that a killed
    process loses at most the line being written.
    """
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        for episode in episodes:
            fh.write(episode_json(episode) + "\n")
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())


def iter_episodes(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Yield the episodes of a JSONL file; a bad line raises :class:`EpisodeFileError` naming it."""
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield Episode.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError, AttributeError) as exc:
                raise EpisodeFileError(f"{path}:{number}: not a valid episode: {exc}") from exc


def load_episodes(path: str | os.PathLike[str]) -> list[Episode]:
    """All episodes of a JSONL file written by :func:`save_episodes`."""
    return list(iter_episodes(path))


def to_dataset(episodes: Sequence[Episode]):  # -> datasets.Dataset
    """One row per turn, episode fields prefixed ``episode_``, as a Hugging Face ``Dataset``.

    Needs the ``datasets`` package.
    """
    try:
        import datasets
    except ImportError as exc:
        raise ImportError("to_dataset needs the `datasets` package: pip install datasets") from exc
    episode_fields = [f.name for f in fields(Episode) if f.name != "turns"]
    rows = []
    for ep in episodes:
        head = {f"episode_{name}": getattr(ep, name) for name in episode_fields}
        for index, turn in enumerate(ep.turns):
            row = asdict(turn)
            row["info"] = json.dumps(row["info"], ensure_ascii=False)
            rows.append({**head, "turn_index": index, **row})
    return datasets.Dataset.from_list(rows)


def role_of(episode: Episode) -> str:
    """The episode's role: the last ``info["role"]`` among its turns, ``""`` when none has one."""
    for turn in reversed(episode.turns):
        role = turn.info.get("role")
        if role is not None:
            return str(role)
    return ""


def _codes_by_first_appearance(values: np.ndarray) -> np.ndarray:
    """Dense int64 codes of ``values``, numbered in order of first appearance."""
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first), dtype=np.int64)
    return rank[inverse.reshape(-1)]


@dataclass(frozen=True)
class TurnTable:
    """Columnar view of a batch of episodes: one row per turn, rows ordered episode by episode.

    All arrays of the row axis have the same length. Codes are dense ints assigned in order of
    first appearance: ``group`` codes distinct ``group_id``s, ``episode`` indexes ``episodes``,
    ``state`` codes distinct state keys exactly (string equality, no hashing), ``-1`` when the
    turn has no key; ``state_keys[code]`` is the key itself. ``episode_role`` (``role`` per
    row) codes the episode's role, the last ``info["role"]`` among its turns (as ``str``; ``""``
    when no turn has one, so a single-agent table has the one role ``""``); ``roles[code]`` is
    its name. An episode without turns (a seat out of the game before its first turn) has role
    ``""`` too: grouped by role, it counts in no role's baseline, and it has no rows to train.

    Role-aware groups. Estimators compare episodes only through ``group`` and
    ``episode_group``; :meth:`by_role` re-codes them as (group, role) pairs, so that every
    estimator compares an episode only with episodes of the same role::

        G'(i) = {j : group(j) = group(i) and role(j) = role(i)}

    For self-play batches (one episode per seat and game, see :mod:`agentgym.multiagent`),
    ``from_episodes(episodes, group_by="role")`` makes the group of every seat of the K games of
    one seed ``env|task|seed`` first, then splits it by role: a villager's return is compared
    with every villager's of that seed (other seats and other games included), never with a
    werewolf's.
    """

    episodes: tuple[Episode, ...]
    state_keys: tuple[str, ...]
    roles: tuple[str, ...]
    group: np.ndarray  # int64 [rows]
    episode: np.ndarray  # int64 [rows]
    turn: np.ndarray  # int64 [rows], position within its episode
    reward: np.ndarray  # float64 [rows]
    state: np.ndarray  # int64 [rows]
    valid: np.ndarray  # bool [rows]
    role: np.ndarray  # int64 [rows]
    episode_group: np.ndarray  # int64 [episodes]
    episode_role: np.ndarray  # int64 [episodes]
    episode_outcome: np.ndarray  # float64 [episodes]
    episode_success: np.ndarray  # bool [episodes]
    episode_length: np.ndarray  # int64 [episodes]

    @classmethod
    def from_episodes(
        cls, episodes: Sequence[Episode], *, group_by: Literal["group_id", "role"] = "group_id"
    ) -> TurnTable:
        """The table of ``episodes``, grouped by ``group_id`` as recorded (the default), or with
        ``group_by="role"`` by (game group, role): the game group of a multi-agent episode is its
        ``group_id`` without the seat suffix ``|{agent}`` (``env|task|seed``, shared by every
        seat of the games of one seed); an episode whose ``group_id`` has no such suffix keeps
        it whole, so a single-agent table is grouped as by default."""
        if group_by not in ("group_id", "role"):
            raise ValueError(f"group_by must be 'group_id' or 'role', got {group_by!r}")
        episodes = tuple(episodes)
        lengths = np.array([ep.num_turns for ep in episodes], dtype=np.int64)
        group_ids = (
            [ep.group_id for ep in episodes]
            if group_by == "group_id"
            else [ep.group_id.removesuffix(f"|{ep.agent}") for ep in episodes]
        )
        group_codes: dict[str, int] = {}
        episode_group = np.array(
            [group_codes.setdefault(g, len(group_codes)) for g in group_ids], dtype=np.int64
        )
        role_codes: dict[str, int] = {}
        episode_role = np.array(
            [role_codes.setdefault(role_of(ep), len(role_codes)) for ep in episodes], dtype=np.int64
        )
        turns = [t for ep in episodes for t in ep.turns]
        state_codes: dict[str, int] = {}
        state = np.array(
            [
                -1 if t.state_key is None else state_codes.setdefault(t.state_key, len(state_codes))
                for t in turns
            ],
            dtype=np.int64,
        )
        episode = np.repeat(np.arange(len(episodes), dtype=np.int64), lengths)
        starts = np.cumsum(lengths) - lengths
        table = cls(
            episodes=episodes,
            state_keys=tuple(state_codes),
            roles=tuple(role_codes),
            group=episode_group[episode],
            episode=episode,
            turn=np.arange(len(turns), dtype=np.int64) - np.repeat(starts, lengths),
            reward=np.array([t.reward for t in turns], dtype=np.float64),
            state=state,
            valid=np.array([t.action_valid for t in turns], dtype=bool),
            role=episode_role[episode],
            episode_group=episode_group,
            episode_role=episode_role,
            episode_outcome=np.array([ep.outcome for ep in episodes], dtype=np.float64),
            episode_success=np.array([ep.success for ep in episodes], dtype=bool),
            episode_length=lengths,
        )
        return table.by_role() if group_by == "role" else table

    def by_role(self) -> TurnTable:
        """This table with one group per (group, role) pair present, coded in order of first
        appearance; every other column unchanged. Idempotent; a table with one role keeps its
        groups."""
        pair = self.episode_group * max(len(self.roles), 1) + self.episode_role
        episode_group = _codes_by_first_appearance(pair)
        return replace(self, group=episode_group[self.episode], episode_group=episode_group)

    def __len__(self) -> int:
        return len(self.reward)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    @property
    def num_groups(self) -> int:
        return int(self.episode_group.max()) + 1 if len(self.episode_group) else 0

    def turns(self) -> Iterator[Turn]:
        """The turns in row order."""
        return (t for ep in self.episodes for t in ep.turns)
