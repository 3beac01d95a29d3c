"""Baseline policies without a model: a random admissible action, or a function of the text."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from agentgym.policy import Generation, GenerationRequest

__all__ = ["RandomPolicy", "ScriptedPolicy", "first_admissible", "resolve_act"]

Act = Callable[[str, dict[str, Any]], str]
"""``act(observation, info) -> action``."""


def _respond(action: str, tag: str | None) -> Generation:
    """``action`` in ``<tag>`` (``None``: ``<action>``, which an env that parses the whole
    response also accepts around its own format; ``""``: bare)."""
    tag = "action" if tag is None else tag
    return Generation(text=f"<{tag}>{action}</{tag}>" if tag else action, finish_reason="stop")


def _admissible(info: dict[str, Any], who: str) -> list[str]:
    """``info["admissible_actions"]``; ValueError naming ``who`` when the env lists none."""
    actions = info.get("admissible_actions")
    if not actions:
        raise ValueError(f"{who} needs an env that lists info['admissible_actions']")
    return list(actions)


def first_admissible(observation: str, info: dict[str, Any]) -> str:
    """The first of the env's admissible actions: a deterministic baseline for any env that
    lists them (raises ValueError for one that does not)."""
    return _admissible(info, "first_admissible")[0]


def resolve_act(act: Act | str) -> Act:
    """``act`` itself when callable; a ``"module:function"`` or ``"module.function"`` string is
    imported (``module:a.b`` reaches attribute ``b`` of ``a``). Raises ValueError naming the
    string and the cause when it does not import or is not callable."""
    if callable(act):
        return act
    module_name, sep, attr_path = act.partition(":")
    if not sep:
        module_name, _, attr_path = act.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(f"ScriptedPolicy act {act!r} is not 'module:function' or 'module.function'")
    try:
        target: Any = importlib.import_module(module_name)
        for attr in attr_path.split("."):
            target = getattr(target, attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"ScriptedPolicy act {act!r} does not import: {type(exc).__name__}: {exc}") from exc
    if not callable(target):
        raise ValueError(f"ScriptedPolicy act {act!r} is not callable: {target!r}")
    return target


class ScriptedPolicy:
    """Answers with ``act(observation, info)`` wrapped in the action tag.

    ``act`` is a callable or its import string (see :func:`resolve_act`), resolved here, so a
    bad string fails at construction; e.g. ``"agentgym.policies.scripted:first_admissible"``.
    """

    inline = True
    reads_messages = False

    def __init__(self, act: Act | str, action_tag: str | None = "action"):
        self.act = resolve_act(act)
        self.action_tag = action_tag

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [_respond(self.act(r.observation, r.info), self.action_tag) for r in requests]


class RandomPolicy:
    """A uniformly random action from ``info["admissible_actions"]``.

    With a per-request ``seed`` the choice depends only on that seed (reproducible under
    any scheduling); otherwise it comes from the policy's own generator seeded by ``seed``.
    """

    inline = True
    reads_messages = False

    def __init__(self, seed: int | None = None, action_tag: str | None = "action"):
        self.rng = np.random.default_rng(seed)
        self.action_tag = action_tag

    def choose(self, request: GenerationRequest) -> str:
        actions = _admissible(request.info, "RandomPolicy")
        rng = self.rng if request.seed is None else np.random.default_rng(request.seed)
        return actions[int(rng.integers(len(actions)))]

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return [_respond(self.choose(r), self.action_tag) for r in requests]
