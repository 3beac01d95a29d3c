"""Spaces on the wire: the server describes an env's spaces, the client rebuilds them.

Text spaces (all that agentgym envs use) and ``Discrete`` travel exactly; any other space is
described by its ``repr`` only, and :func:`space_from_description` refuses it.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from agentgym.env import UnicodeText

__all__ = ["describe_space", "space_from_description"]


def describe_space(space: spaces.Space[Any]) -> dict[str, Any]:
    """A JSON description of ``space``: ``{"type": "text", "min_length", "max_length",
    "charset"}`` (``charset`` is ``null`` for :class:`~agentgym.env.UnicodeText`, which admits
    any Unicode), ``{"type": "discrete", "n", "start"}``, or ``{"type": "other", "repr"}``."""
    if isinstance(space, spaces.Text):
        charset = None if isinstance(space, UnicodeText) else "".join(sorted(space.character_set))
        return {
            "type": "text",
            "min_length": space.min_length,
            "max_length": space.max_length,
            "charset": charset,
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    return {"type": "other", "repr": repr(space)}


def space_from_description(description: dict[str, Any]) -> spaces.Space[Any]:
    """The space :func:`describe_space` described; ``TypeError`` for ``"other"`` spaces."""
    kind = description.get("type")
    if kind == "text":
        if description["charset"] is None:
            return UnicodeText(description["max_length"], min_length=description["min_length"])
        return spaces.Text(
            description["max_length"], min_length=description["min_length"], charset=description["charset"]
        )
    if kind == "discrete":
        return spaces.Discrete(description["n"], start=description["start"])
    shown = description.get("repr", description)
    raise TypeError(f"a remote env cannot rebuild the space {shown}; only text and discrete spaces travel")
