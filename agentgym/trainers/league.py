"""A self-play league: frozen snapshots of the trained policy, kept as opponents.

Layout, under a training run's ``out_dir``::

    league/league.json          {"members": [{name, step, path, policy}, ...]}, oldest first
    league/step-000002/         one member: the learner's ``save_pretrained`` (a LoRA adapter,
                                or the whole model under full fine-tuning) and the tokenizer

``step`` is the number of updates the member's weights had; ``path`` its folder, relative to the
league; ``policy`` the Hydra config that plays it (an :class:`~agentgym.policies.hf.HFPolicy` on
the member's folder, its ``model`` relative to the league's folder too, so that a league can be
moved or copied), which ``agentgym eval league=<out_dir>/league`` reads
(:func:`~agentgym.harness.eval.member_policy` resolves the folder).

The trainer snapshots its policy after every ``snapshot_every`` updates (after the step's
checkpoint: a run resumed from that checkpoint takes a missing snapshot again, with the same
weights), and picks each group's opponent with :func:`choose`: the trained policy plays its
``seats``, the opponent every other seat, in every game of the group (so that the group's
baseline compares games against one opponent). Seats keep their agents; the roles rotate with
the task where the env deals them so (Werewolf deals roles by seed, Signaling makes either
player the sender by task), and credit compares episodes of one role only. ``league.json`` is
the league's whole state: a resumed run reads it back, dropping members newer than its
checkpoint.

The held-out evaluation of such a run seats the live policy everywhere (the trained seats
scored); ``agentgym eval league=...`` plays the members one by one and rates them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.files import atomic_path
from agentgym.policy import Policy

__all__ = ["LATEST", "League", "LeagueConfig", "Member", "choose"]

LATEST = "latest"
"""The name :func:`choose` and the metrics give the live policy (self-play)."""


@dataclass
class LeagueConfig:
    """The league of a run with ``opponent=league`` (the keys ``league.*`` of ``agentgym
    train``)."""

    snapshot_every: int = 1
    """Add a frozen copy of the policy to the league after every this many updates."""
    latest: float = 0.5
    """Probability that a group plays the live policy (self-play); otherwise its opponent is
    drawn uniformly from the frozen members. An empty league always plays the live policy."""
    max_members: int | None = None
    """Most frozen members kept: a new snapshot beyond it removes the oldest (its folder too);
    null keeps them all."""
    cached: int = 2
    """Frozen members' policies kept loaded between steps (a step loads every member it draws)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.latest <= 1.0:
            raise ValueError(f"league.latest must be in [0, 1], got {self.latest}")
        for name in ("snapshot_every", "max_members", "cached"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"league.{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class Member:
    """One frozen snapshot of the league."""

    name: str
    step: int
    """Updates its weights had."""
    path: str
    """Its folder, relative to the league's."""
    policy: dict[str, Any]
    """The Hydra config of the policy that plays it."""


def choose(members: Sequence[str], latest: float, step: int, seed: int, salt: int = 0) -> str:
    """The opponent of the group of task ``seed`` at update ``step``: :data:`LATEST` (the live
    policy) with probability ``latest``, else one of ``members`` uniformly; always
    :data:`LATEST` when there is no member.

    A pure function: the draws come from a generator seeded by ``(salt, step, seed)`` (numpy's
    ``default_rng``, the same on every platform), so every game of a group, a resumed run and a
    rerun get the same opponent. ``step``, ``seed`` and ``salt`` must be >= 0."""
    rng = np.random.default_rng([salt, step, seed])
    if not members or rng.random() < latest:
        return LATEST
    return members[int(rng.integers(len(members)))]


class League:
    """The frozen members of one run (in ``directory``), their policies, and the sampling rule.

    ``load(member)`` makes the policy of a member (called when a step first draws it; at most
    ``config.cached`` stay loaded between steps, the least recently drawn closed first)."""

    FILE = "league.json"

    def __init__(
        self,
        directory: str | Path,
        config: LeagueConfig,
        load: Callable[[Member], Policy],
        *,
        resume_at: int | None = None,
        salt: int = 0,
    ):
        """Open the league in ``directory``: with ``resume_at`` (the step of the checkpoint a
        run resumes from) keep its members of at most that many updates; otherwise start empty,
        removing what an earlier run left there."""
        self.directory = Path(directory)
        self.config = config
        self.salt = salt
        self._load = load
        self._loaded: dict[str, Policy] = {}  # least recently drawn first
        self.members: list[Member] = []
        if resume_at is None:
            shutil.rmtree(self.directory, ignore_errors=True)
        elif (self.directory / self.FILE).is_file():
            listed = json.loads((self.directory / self.FILE).read_text(encoding="utf-8"))["members"]
            self.members = [m for m in map(lambda m: Member(**m), listed) if m.step <= resume_at]
        self.directory.mkdir(parents=True, exist_ok=True)
        self._write()

    def due(self, step: int) -> bool:
        """Whether the policy after ``step`` updates joins the league (and is not in it yet)."""
        return (
            step > 0 and step % self.config.snapshot_every == 0 and all(m.step != step for m in self.members)
        )

    def snapshot(self, step: int, save: Callable[[Path], None], policy: dict[str, Any]) -> Member:
        """Add the member of ``step`` updates: ``save(folder)`` writes its weights (into a
        temporary folder, renamed when complete), ``policy`` is the config that plays it
        (its ``model`` set to the folder, relative to the league's). Beyond ``max_members`` the
        oldest leave."""
        name = f"step-{step:06d}"
        folder, partial = self.directory / name, self.directory / f".{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        save(partial)
        partial.rename(folder)
        member = Member(name, step, name, {**policy, "model": name})
        self.members.append(member)
        cap = self.config.max_members
        gone = self.members[:-cap] if cap is not None else []
        self.members = self.members[len(gone) :]
        self._write()  # before removing folders: league.json never names a missing one
        for old in gone:
            shutil.rmtree(self.directory / old.path, ignore_errors=True)
        return member

    def _write(self) -> None:
        with atomic_path(self.directory / self.FILE) as tmp:
            tmp.write_text(
                json.dumps({"members": [asdict(m) for m in self.members]}, indent=1) + "\n", encoding="utf-8"
            )

    def choices(self, step: int, seeds: Collection[int]) -> dict[int, str]:
        """:func:`choose` for the group of every task seed of update ``step``."""
        names = [m.name for m in self.members]
        return {s: choose(names, self.config.latest, step, s, self.salt) for s in seeds}

    async def policies(self, names: Collection[str]) -> dict[str, Policy]:
        """The policies of the members ``names`` (:data:`LATEST` left out), loaded as needed;
        loaded ones beyond ``cached`` that ``names`` does not hold are closed."""
        by_name = {m.name: m for m in self.members}
        wanted = sorted(set(names) - {LATEST})
        for name in wanted:  # drawn now: to the end of the order, loaded if need be
            self._loaded[name] = self._loaded.pop(name) if name in self._loaded else self._load(by_name[name])
        idle = [n for n in self._loaded if n not in wanted]
        for name in idle[: max(len(self._loaded) - max(self.config.cached, len(wanted)), 0)]:
            await _close(self._loaded.pop(name))
        return {n: self._loaded[n] for n in wanted}

    async def aclose(self) -> None:
        """Close every loaded member's policy."""
        while self._loaded:
            await _close(self._loaded.popitem()[1])

    def metrics(self, chosen: dict[int, str]) -> dict[str, Any]:
        """A step's league metrics: ``league/members`` (frozen members now),
        ``league/latest_share`` (share of the step's groups that played the live policy) and
        ``league/opponents`` (each group's opponent, in seed order)."""
        return {
            "league/members": len(self.members),
            "league/latest_share": sum(c == LATEST for c in chosen.values()) / max(len(chosen), 1),
            "league/opponents": [chosen[s] for s in sorted(chosen)],
        }


async def _close(policy: Policy) -> None:
    close = getattr(policy, "aclose", None)
    if close is not None:
        await close()
