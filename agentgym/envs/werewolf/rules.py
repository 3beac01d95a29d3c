"""Werewolf rules as configuration: one engine, rule options, and the two presets.

``arena`` follows Werewolf Arena (Bailis et al., 2024): 8 players, speakers chosen by bids.
``lspo`` follows the setting of Xu et al. (2023, "Language Agents with Reinforcement Learning for
Strategic Play in the Werewolf Game"): 7 players who speak in seat order. Every option can be
overridden on top of either preset (``Rules.preset("lspo", debate_turns=3)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["DOCTOR", "PRESETS", "ROLES", "SEER", "VILLAGER", "WEREWOLF", "Rules", "team_of"]

WEREWOLF, SEER, DOCTOR, VILLAGER = "werewolf", "seer", "doctor", "villager"
ROLES = (WEREWOLF, SEER, DOCTOR, VILLAGER)
WEREWOLVES, VILLAGERS = "werewolves", "villagers"


def team_of(role: str) -> str:
    """``"werewolves"`` for a werewolf, ``"villagers"`` for every other role."""
    return WEREWOLVES if role == WEREWOLF else VILLAGERS


_CHOICES = {
    "speaking_order": ("bid", "seat"),
    "exile_rule": ("majority", "plurality"),
    "vote_tie": ("no_exile", "random"),
}


@dataclass(frozen=True)
class Rules:
    """Every rule option of the engine. Counts are players; villagers fill the seats that the
    other roles leave."""

    num_players: int = 8
    werewolves: int = 2
    seers: int = 1
    """0 or 1."""
    doctors: int = 1
    """0 or 1."""
    speaking_order: str = "bid"
    """``"bid"``: before each debate turn every living player bids 0-4 and the highest bid speaks
    (ties broken by the game's seed; all bids 0 end the debate). ``"seat"``: players speak in
    seat order, starting one seat later each day."""
    debate_turns: int = 8
    """Most statements per day."""
    reveal_role_on_death: bool = False
    """Announce the role of a killed or exiled player."""
    allow_self_protect: bool = True
    """The doctor may protect themself."""
    exile_rule: str = "majority"
    """``"majority"``: exile needs votes from more than half of the living players (abstentions
    count against). ``"plurality"``: the most voted player is exiled."""
    vote_tie: str = "no_exile"
    """Under ``plurality``, a tie for most votes exiles nobody (``"no_exile"``) or one of the
    tied players drawn with the game's seed (``"random"``). A majority cannot tie."""
    max_days: int = 10
    """Days after which an undecided game stops with no winner (truncated)."""
    max_speech_chars: int = 1000
    """Longest statement accepted, in characters."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = type(f.default)
            if type(value) is not expected:  # bool is not int, int is not bool
                raise ValueError(f"werewolf rule {f.name} must be a {expected.__name__}, got {value!r}")
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"werewolf rule {name} must be one of {list(choices)}, got {getattr(self, name)!r}"
                )
        _check_range("num_players", self.num_players, 3, 20)
        _check_range("seers", self.seers, 0, 1)
        _check_range("doctors", self.doctors, 0, 1)
        _check_range("debate_turns", self.debate_turns, 0, 100)
        _check_range("max_days", self.max_days, 1, 1000)
        _check_range("max_speech_chars", self.max_speech_chars, 1, 100_000)
        others = self.num_players - self.werewolves
        if not 1 <= self.werewolves < others:
            raise ValueError(
                f"werewolf rules: need at least one werewolf and fewer werewolves "
                f"than other players, got {self.werewolves} of {self.num_players}"
            )
        if self.seers + self.doctors > others:
            raise ValueError(
                f"werewolf rules: {self.seers} seer(s) and {self.doctors} doctor(s) "
                f"do not fit beside {self.werewolves} werewolves in "
                f"{self.num_players} seats"
            )

    @property
    def villagers(self) -> int:
        return self.num_players - self.werewolves - self.seers - self.doctors

    def role_counts(self) -> dict[str, int]:
        """Players per role, every role of :data:`ROLES` present (zeros included)."""
        return {WEREWOLF: self.werewolves, SEER: self.seers, DOCTOR: self.doctors, VILLAGER: self.villagers}

    def dealt_roles(self) -> list[str]:
        """The roles with at least one player, in :data:`ROLES` order."""
        counts = self.role_counts()
        return [role for role in ROLES if counts[role]]

    @classmethod
    def preset(cls, name: str = "arena", **overrides: Any) -> Rules:
        """The rules of preset ``name`` with ``overrides`` applied. Unknown option names raise
        ``TypeError`` naming the accepted ones; bad values raise ``ValueError``."""
        if name not in PRESETS:
            raise ValueError(f"unknown werewolf preset {name!r}; choose one of {sorted(PRESETS)}")
        accepted = [f.name for f in fields(cls)]
        unknown = sorted(set(overrides) - set(accepted))
        if unknown:
            raise TypeError(
                f"werewolf got unknown option(s) {unknown}; it accepts: preset, {', '.join(accepted)}"
            )
        return replace(PRESETS[name], **overrides)


def _check_range(name: str, value: int, lowest: int, highest: int) -> None:
    if not lowest <= value <= highest:
        raise ValueError(f"werewolf rule {name} must be in [{lowest}, {highest}], got {value}")


PRESETS: dict[str, Rules] = {
    "arena": Rules(num_players=8, werewolves=2, speaking_order="bid", debate_turns=8),
    "lspo": Rules(num_players=7, werewolves=2, speaking_order="seat", debate_turns=7),
}
