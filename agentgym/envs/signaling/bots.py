"""Rule-based signaling players: the partner that models learn with, and the expert.

Both follow the convention that wins every round: the sender sends the secret card, the receiver
picks the card it was sent (the first card when it was sent none). They read only the player's
knowledge in ``info["signaling"]`` (:meth:`~agentgym.envs.signaling.game.Game.view`) and answer
with a bare card, as a model does.
"""

from __future__ import annotations

import random
from typing import Any

from agentgym.policy import Generation, GenerationRequest

__all__ = ["BotPolicy", "decide", "expert_action"]


def decide(view: dict[str, Any]) -> str:
    """The convention's answer to the question in ``view`` (an ``info["signaling"]`` dict)."""
    question = view["question"]
    if question is None:
        raise ValueError("the player has no question to answer now")
    if question == "send":
        return str(view["secret"])
    return str(view["sent"] if view.get("sent") in view["cards"] else view["cards"][0])


def expert_action(observation: str, info: dict[str, Any]) -> str:
    """:func:`decide` as a :class:`~agentgym.policies.scripted.ScriptedPolicy` ``act``: with
    expert partners every game is won."""
    return decide(info["signaling"])


class BotPolicy:
    """A :class:`~agentgym.policy.Policy` that plays every seat it is given by :func:`decide`,
    except that with probability ``error_rate`` it answers a card drawn at random instead (a
    fallible partner). A request's ``seed`` seeds the draws; requests without one draw from the
    policy's own generator, seeded by ``seed``."""

    inline = True
    reads_messages = False

    def __init__(self, error_rate: float = 0.0, seed: int | None = None):
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate!r}")
        self.error_rate = error_rate
        self.rng = random.Random(seed)

    def answer(self, request: GenerationRequest) -> str:
        view = request.info.get("signaling")
        if view is None:
            raise ValueError(
                "BotPolicy plays the signaling game only: the request's info has no 'signaling' view"
            )
        rng = self.rng if request.seed is None else random.Random(request.seed)
        if view["question"] is not None and rng.random() < self.error_rate:
            return str(rng.choice(view["cards"]))
        return decide(view)

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [Generation(text=self.answer(r), finish_reason="stop") for r in requests]
