"""Comparing episodes across runs: what must match when the same rollouts run elsewhere."""

from __future__ import annotations

import zlib
from typing import Any

from agentgym.episode import Episode
from agentgym.server.jsonsafe import to_jsonable

FREE_TEXT = [
    "<search>capital country</search>",
    "<search>founded</search>",
    "no tags at all",
    "<search>born</search>",
    "<answer>Quillmoor</answer>",
]
"""Actions for envs without ``admissible_actions`` (search)."""


def varied_action(observation: str, info: dict[str, Any]) -> str:
    """A deterministic action that depends on the observation: one of the env's admissible
    actions, or of FREE_TEXT."""
    actions = info.get("admissible_actions") or FREE_TEXT
    return actions[zlib.crc32(observation.encode()) % len(actions)]


def comparable(episode: Episode) -> dict[str, Any]:
    """An episode without its timings and retried attempts, as JSON values."""
    data = episode.to_dict()
    data.pop("wall_time")
    data.pop("failed_attempts")
    for turn in data["turns"]:
        turn.pop("timings")
    return to_jsonable(data)
