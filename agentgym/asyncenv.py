"""Awaiting a wrapped env's ``reset``/``step``, every wrapper honoured.

The rollout engine and the env server drive envs from an event loop. An agentgym env
(:class:`~agentgym.env.TextEnv`) has async twins (``areset``/``astep``), but the wrappers around
it, the user's or those ``gymnasium.make`` added, have only the sync methods. :func:`async_twins`
builds coroutine functions that apply them around the core's twins:

* Gymnasium's ``OrderEnforcing`` and ``PassiveEnvChecker`` (which ``make`` adds) are bypassed:
  the callers keep order themselves, and the checker's warnings would reach no one.
* An ``ObservationWrapper``, ``ActionWrapper`` or ``RewardWrapper`` that defines only its hook
  (``observation``, ``action``, ``reward``; Gymnasium's ``TransformObservation`` and the like)
  is applied to what the inner twin takes or returns.
* Any other wrapper (one with a ``step`` or ``reset`` of its own: ``TimeLimit``,
  ``RecordEpisodeStatistics``, most of a user's) can only be called synchronously, and so can an
  env that is not a ``TextEnv``: :func:`async_twins` returns ``None``, and the caller runs the
  outermost env's sync methods in a worker thread, every wrapper included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

from agentgym.env import TextEnv

__all__ = ["BYPASSED_WRAPPERS", "AsyncTwins", "async_twins"]

BYPASSED_WRAPPERS: tuple[type[gym.Wrapper], ...] = (OrderEnforcing, PassiveEnvChecker)
"""Wrappers that :func:`async_twins` leaves out (``gymnasium.make`` adds them to every env)."""

Reset = Callable[..., Awaitable[tuple[Any, dict[str, Any]]]]
# The reward is Gymnasium's SupportsFloat: a RewardWrapper's hook may return any such number.
Step = Callable[[Any], Awaitable[tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]]]


@dataclass(frozen=True)
class AsyncTwins:
    """``areset(seed=, options=)`` and ``astep(action)`` of a wrapped env, with Gymnasium's
    return values as the outermost wrapper would give them."""

    areset: Reset
    astep: Step


def async_twins(env: gym.Env) -> AsyncTwins | None:
    """``env``'s reset and step as coroutine functions through all of its wrappers (see the
    module documentation), or ``None`` when a wrapper, or the env itself, is only synchronous."""
    chain: list[gym.Wrapper] = []
    core: Any = env
    while isinstance(core, gym.Wrapper):
        chain.append(core)
        core = core.env
    if not isinstance(core, TextEnv):
        return None
    areset: Reset = core.areset
    astep: Step = core.astep
    for wrapper in reversed(chain):  # innermost first
        if isinstance(wrapper, BYPASSED_WRAPPERS):
            continue
        hooked = _hooked(wrapper, areset, astep)
        if hooked is None:
            return None
        areset, astep = hooked
    return AsyncTwins(areset, astep)


def _overrides(wrapper: gym.Wrapper, base: type[gym.Wrapper]) -> bool:
    """Whether ``wrapper`` has a ``step`` or ``reset`` other than its hook class ``base``'s."""
    kind = type(wrapper)
    return kind.step is not base.step or kind.reset is not base.reset


def _hooked(wrapper: gym.Wrapper, areset: Reset, astep: Step) -> tuple[Reset, Step] | None:
    """``(areset, astep)`` with ``wrapper``'s hook applied, or ``None`` if it has no hook form."""
    if isinstance(wrapper, gym.ObservationWrapper) and not _overrides(wrapper, gym.ObservationWrapper):

        async def reset_obs(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
            obs, info = await areset(**kwargs)
            return wrapper.observation(obs), info

        async def step_obs(action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
            obs, reward, terminated, truncated, info = await astep(action)
            return wrapper.observation(obs), reward, terminated, truncated, info

        return reset_obs, step_obs
    if isinstance(wrapper, gym.ActionWrapper) and not _overrides(wrapper, gym.ActionWrapper):

        async def step_action(action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
            return await astep(wrapper.action(action))

        return areset, step_action
    if isinstance(wrapper, gym.RewardWrapper) and not _overrides(wrapper, gym.RewardWrapper):

        async def step_reward(action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
            obs, reward, terminated, truncated, info = await astep(action)
            return obs, wrapper.reward(reward), terminated, truncated, info

        return areset, step_reward
    return None
