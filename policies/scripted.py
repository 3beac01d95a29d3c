"""Baseline policies without a model: a random admissible action, or a function of the text."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from agentgym.policy import Generation, GenerationRequest

__all__ = ["RandomPolicy", "ScriptedPolicy"]


def _respond(action: str, tag: str) -> Generation:
    return Generation(text=f"<{tag}>{action}</{tag}>", finish_reason="stop")


class ScriptedPolicy:
    """Answers with ``act(observation, info)`` wrapped in the action tag."""

    def __init__(self, act: Callable[[str, dict[str, Any]], str], action_tag: str = "action"):
        self.act = act
        self.action_tag = action_tag

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [_respond(self.act(r.observation, r.info), self.action_tag) for r in requests]


class RandomPolicy:
    """A uniformly random action from ``info["admissible_actions"]``.

    With a per-request ``seed`` the choice depends only on that seed (reproducible under
    any scheduling); otherwise it comes from the policy's own generator seeded by ``seed``.
    """

    def __init__(self, seed: int | None = None, action_tag: str = "action"):
        self.rng = np.random.default_rng(seed)
        self.action_tag = action_tag

    def choose(self, request: GenerationRequest) -> str:
        actions = request.info.get("admissible_actions")
        if not actions:
            raise ValueError("RandomPolicy needs an env that lists info['admissible_actions']")
        rng = self.rng if request.seed is None else np.random.default_rng(request.seed)
        return actions[int(rng.integers(len(actions)))]

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [_respond(self.choose(r), self.action_tag) for r in requests]
