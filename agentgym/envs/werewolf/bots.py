"""Rule-based Werewolf players: baselines, and the default opponents of the single-seat env.

A bot reads only the player's knowledge that the env puts in ``info["werewolf"]``
(:func:`~agentgym.envs.werewolf.observations.view`), never the hidden state, and answers with
the same structured text as any model. Its strategy:

- the seer checks players it has not checked; once it knows a living werewolf it claims to be
  the seer and names the werewolves it found ("I am the seer. Player4 is a werewolf."), and
  votes for them;
- the doctor protects the latest living seer claimant (else itself, where the rules allow);
- villagers (and the doctor, and the seer without a finding) echo and vote for the players a
  claimed seer accused; else for whoever turned on the seer claimant; else for a player
  suspected at least twice (never the seer claimant); else they abstain;
- werewolves attack a claimed seer first, follow the lead werewolf's proposal, sow suspicion on
  the villagers, and never vote for each other.

Statements use fixed phrases that :func:`claims` reads back, so that bots understand each other
(and any model that speaks the same way). Randomness comes from the request's seed only.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.werewolf.rules import SEER, WEREWOLF
from agentgym.policy import Generation, GenerationRequest

__all__ = ["BotPolicy", "Claims", "claims", "decide"]

_SEER_CLAIM = re.compile(r"\bI am the seer\b", re.IGNORECASE)
_ACCUSE = re.compile(r"\b(Player\d+) is a werewolf\b", re.IGNORECASE)
_SUSPECT = re.compile(r"\bI suspect (Player\d+)\b", re.IGNORECASE)


@dataclass
class Claims:
    """What the public statements say, as far as bots read them."""

    seers: list[str] = field(default_factory=list)
    """Players who claimed to be the seer, latest claim last, without repeats."""
    seer_accused: list[str] = field(default_factory=list)
    """Players a seer claimant called a werewolf, latest last, without repeats."""
    suspicion: Counter[str] = field(default_factory=Counter)
    """Accusations and suspicions per player, over all statements."""
    seer_attackers: Counter[str] = field(default_factory=Counter)
    """Speakers who accused or suspected a seer claimant (without claiming the seer
    themselves), per statement: whoever turns on the seer is suspect to villagers."""
    said: dict[str, list[str]] = field(default_factory=dict)
    """Each speaker's statements of the current day."""


def claims(speeches: Sequence[Sequence[Any]], day: int) -> Claims:
    """Read the public ``speeches`` (``(day, name, text)``) as of ``day``."""
    out = Claims()
    for when, speaker, text in speeches:
        accused = [_canonical(n) for n in _ACCUSE.findall(text)]
        if _SEER_CLAIM.search(text):
            _move_last(out.seers, speaker)
            for name in accused:
                _move_last(out.seer_accused, name)
        named = accused + [_canonical(n) for n in _SUSPECT.findall(text)]
        out.suspicion.update(named)
        if speaker not in out.seers and any(n in out.seers for n in named):
            out.seer_attackers[speaker] += 1
        if when == day:
            out.said.setdefault(speaker, []).append(text)
    return out


def decide(view: dict[str, Any], rng: random.Random) -> str:
    """The bot's answer to the question in ``view`` (an ``info["werewolf"]`` dict)."""
    kind = view["question"]
    if kind is None:
        raise ValueError("the player has no question to answer now")
    read = claims(view["speeches"], view["day"])
    if kind == "bid":
        return f"<bid>{_bid(view, read)}</bid>"
    if kind == "speech":
        return f"<speech>{_statement(view, read, rng)}</speech>"
    target = {"attack": _attack, "protect": _protect, "check": _check, "vote": _vote}[kind](view, read, rng)
    tag = "vote" if kind == "vote" else "target"
    return f"<{tag}>{target or 'nobody'}</{tag}>"


class BotPolicy:
    """A :class:`~agentgym.policy.Policy` that plays every seat it is given with the rules of
    :func:`decide`. A request's ``seed`` seeds its choices; requests without one draw from the
    policy's own generator, seeded by ``seed``."""

    inline = True
    reads_messages = False

    def __init__(self, seed: int | None = None):
        self.rng = random.Random(seed)

    def answer(self, request: GenerationRequest) -> str:
        view = request.info.get("werewolf")
        if view is None:
            raise ValueError("BotPolicy plays Werewolf only: the request's info has no 'werewolf' view")
        rng = self.rng if request.seed is None else random.Random(request.seed)
        return decide(view, rng)

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [Generation(text=self.answer(r), finish_reason="stop") for r in requests]


# ---------------------------------------------------------------------- night


def _attack(view: dict[str, Any], read: Claims, rng: random.Random) -> str:
    options = view["options"]
    if view.get("proposal") in options:
        return view["proposal"]
    for seer in reversed(read.seers):
        if seer in options:
            return seer
    return rng.choice(options)


def _protect(view: dict[str, Any], read: Claims, rng: random.Random) -> str:
    options = view["options"]
    for seer in reversed(read.seers):
        if seer in options and seer != view["you"]:
            return seer
    return view["you"] if view["you"] in options else rng.choice(options)


def _check(view: dict[str, Any], read: Claims, rng: random.Random) -> str:
    return rng.choice(view["options"])


# ---------------------------------------------------------------------- day


def _found_wolves(view: dict[str, Any]) -> list[str]:
    """Living werewolves the seer has checked."""
    if view["role"] != SEER:
        return []
    return [n for n, role in view["known_roles"].items() if role == WEREWOLF and n in view["alive"]]


def _accused(view: dict[str, Any], read: Claims) -> list[str]:
    """Living players a living seer claimant (other than the bot) called a werewolf."""
    claimants = [s for s in read.seers if s in view["alive"] and s != view["you"]]
    if not claimants:
        return []
    return [n for n in read.seer_accused if n in view["alive"] and n != view["you"]]


def _bid(view: dict[str, Any], read: Claims) -> int:
    me, mine = view["you"], read.said.get(view["you"], [])
    if any(f"{wolf} is a werewolf" not in " ".join(mine) for wolf in _found_wolves(view)):
        return 4
    if mine:
        return 0
    if any(re.search(rf"\b{me}\b", text) for texts in read.said.values() for text in texts):
        return 3  # named today: defend
    if view["role"] == WEREWOLF or _accused(view, read):
        return 2
    return 0


def _statement(view: dict[str, Any], read: Claims, rng: random.Random) -> str:
    me = view["you"]
    wolves = _found_wolves(view)
    if wolves:
        named = " ".join(f"{w} is a werewolf." for w in wolves)
        return f"I am the seer. {named} Vote for {wolves[0]}."
    if view["role"] == WEREWOLF:
        targets = [n for n in view["alive"] if view["known_roles"].get(n) != WEREWOLF]
        claimant = [s for s in read.seers if s in targets]
        return f"I suspect {claimant[-1] if claimant else rng.choice(targets)}."
    if read.suspicion[me]:
        return "I am not a werewolf."
    accused = _accused(view, read)
    if accused:
        return f"I believe the seer: {accused[-1]} is a werewolf."
    return "I have no information yet."


def _vote(view: dict[str, Any], read: Claims, rng: random.Random) -> str | None:
    options = view["options"]
    if view["role"] == WEREWOLF:
        for seer in reversed(read.seers):
            if seer in options and view["known_roles"].get(seer) != WEREWOLF:
                return seer
        choices = [n for n in options if view["known_roles"].get(n) != WEREWOLF]
        return _most(choices, read.suspicion) or (rng.choice(choices) if choices else None)
    for wolf in _found_wolves(view) + list(reversed(_accused(view, read))):
        if wolf in options:
            return wolf
    trusted = set(read.seers[-1:])  # the latest seer claimant
    return _most(options, read.seer_attackers) or _most(
        [n for n in options if n not in trusted], read.suspicion, at_least=2
    )


def _most(names: list[str], counts: Counter[str], at_least: int = 1) -> str | None:
    """The name among ``names`` counted most often, at least ``at_least`` times (the first in
    seat order on ties), or ``None``."""
    ranked = [(counts[n], -i, n) for i, n in enumerate(names) if counts[n] >= at_least]
    return max(ranked)[2] if ranked else None


def _canonical(name: str) -> str:
    return f"Player{int(name[6:])}"


def _move_last(items: list[str], item: str) -> None:
    if item in items:
        items.remove(item)
    items.append(item)
