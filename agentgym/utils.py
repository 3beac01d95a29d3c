"""Checks for env authors: :func:`check_text_env`, the analogue of Gymnasium's ``check_env`` and
PettingZoo's ``api_test`` for the :class:`~agentgym.env.TextEnv` contract.

    from agentgym.utils import check_text_env
    check_text_env("myorg/MyEnv-v0")          # or an env instance; raises EnvContractError
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from agentgym.env import TextEnv
from agentgym.registry import make, manifest

__all__ = ["BAD_ACTIONS", "EnvContractError", "check_text_env"]

#: Actions no env may take as valid, and none may raise on: empty, NUL and junk, 100,000
#: characters, a lone surrogate, deep brackets.
BAD_ACTIONS = ("", "\x00\x01\ufffd\x1b[2J", "x" * 100_000, "\ud800", "[" * 10_000)
#: Free-text actions for envs that list no ``admissible_actions``.
FREE_TEXT = ("look", "<answer>unknown</answer>", "help", "1")


class EnvContractError(AssertionError):
    """An env breaks the TextEnv contract; the message lists every check that failed."""


def check_text_env(
    env: str | gym.Env[Any, Any],
    *,
    seeds: tuple[int, ...] = (0, 1),
    steps: int = 6,
    same_observations: bool = True,
    across_instances: bool = True,
    make_env: Callable[[], gym.Env[Any, Any]] | None = None,
) -> None:
    """Check that ``env`` (a registered id, or an instance) keeps the TextEnv contract
    (:class:`~agentgym.env.TextEnv`): Gymnasium's own checker; the ``info`` keys (``task_id``
    and ``instruction`` on every call, ``action_valid`` and ``success`` on every step,
    ``state_key`` a string wherever it is set); determinism by seed (two resets with one seed
    play the same ``steps`` actions, drawn from ``admissible_actions`` or :data:`FREE_TEXT`, to
    the same observations, rewards, ends and state keys) and by task id (``options={"task_id":
    t}`` with another seed gives the same start); :data:`BAD_ACTIONS` answered as invalid
    actions without raising or setting ``info["error"]`` (reserved for infrastructure); a
    non-``str`` action a ``TypeError``; for an id, its manifest's ``family`` the env class's.

    Args:
        env: an id (made with :func:`agentgym.make`, closed at the end) or an env (left open).
        seeds: the seeds played.
        steps: actions per seeded episode.
        same_observations: compare observations for determinism (``False`` for envs whose
            text carries live measurements, such as window geometry; keys and rewards still
            count).
        across_instances: also play the first seed in a second instance (``False`` for envs
            whose state shows live values of their host, such as a desktop's file times).
        make_env: with an instance, how to make a second one for the cross-instance check
            (default: none; an id makes its own).

    Raises:
        EnvContractError: naming every check that failed.
    """
    owned = isinstance(env, str)
    instance = make(env) if isinstance(env, str) else env
    second = ((lambda: make(env)) if isinstance(env, str) else make_env) if across_instances else None
    problems: list[str] = []
    if isinstance(env, str) and (said := manifest(env).family) != (
        own := getattr(instance.unwrapped, "family", None)
    ):
        problems.append(
            f"the manifest's family {said!r} is not the env class's {own!r} (prompts "
            "and reports would depend on how the env was named)"
        )
    try:
        _check(instance, second, problems, seeds, steps, same_observations)
    finally:
        if owned:
            instance.close()
    if problems:
        name = env if isinstance(env, str) else type(instance.unwrapped).__name__
        raise EnvContractError(f"{name} breaks the TextEnv contract:\n- " + "\n- ".join(problems))


def _check(
    env: gym.Env[Any, Any],
    second: Callable[[], gym.Env[Any, Any]] | None,
    problems: list[str],
    seeds: tuple[int, ...],
    steps: int,
    same_observations: bool,
) -> None:
    core = env.unwrapped
    if not isinstance(core, TextEnv):
        problems.append(f"it is a {type(core).__name__}, not an agentgym.env.TextEnv")
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_env(core, skip_render_check=True)
        except Exception as exc:  # the checker's own verdict, reported with the others
            problems.append(f"gymnasium's check_env: {type(exc).__name__}: {exc}")
    problems += [
        f"gymnasium's check_env warns: {w.message}" for w in caught if issubclass(w.category, UserWarning)
    ]
    for seed in seeds:
        first = _play(env, seed, steps, problems)
        again = _play(env, seed, steps, problems)
        if _comparable(first, same_observations) != _comparable(again, same_observations):
            problems.append(f"reset(seed={seed}) twice played differently: {_difference(first, again)}")
        if second is not None and seed == seeds[0]:
            other = second()
            try:
                elsewhere = _play(other, seed, steps, problems)
            finally:
                other.close()
            if _comparable(first, same_observations) != _comparable(elsewhere, same_observations):
                problems.append(
                    f"reset(seed={seed}) in a second instance played differently: "
                    f"{_difference(first, elsewhere)}"
                )
        _, info = env.reset(seed=seed)
        task_id = info.get("task_id")
        obs_by_id, info_by_id = env.reset(seed=seed + 1000, options={"task_id": task_id})
        if (
            info_by_id.get("task_id") != task_id
            or info_by_id.get("state_key") != info.get("state_key")
            or (same_observations and obs_by_id != first[0][0])
        ):
            problems.append(
                f"reset(options={{'task_id': {task_id!r}}}) did not give the start of reset(seed={seed})"
            )
    env.reset(seed=seeds[0])
    for action in BAD_ACTIONS:
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:
            problems.append(f"step({action[:20]!r}...) raised {type(exc).__name__}: {exc}")
            env.reset(seed=seeds[0])
            continue
        _check_step(obs, reward, info, f"step({action[:20]!r})", problems)
        if info.get("action_valid") is not False:
            problems.append(
                f"step({action[:20]!r}) was not answered as invalid (action_valid="
                f"{info.get('action_valid')!r})"
            )
        if terminated or truncated:
            env.reset(seed=seeds[0])
    for not_text in (1, b"look", None):
        try:
            env.step(not_text)
            problems.append(f"step({not_text!r}) did not raise TypeError")
        except TypeError:
            pass
        except Exception as exc:
            problems.append(f"step({not_text!r}) raised {type(exc).__name__}, not TypeError")


def _play(env: gym.Env[Any, Any], seed: int, steps: int, problems: list[str]) -> list[Any]:
    """Reset with ``seed`` and take up to ``steps`` actions drawn with ``seed``; the record."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    _check_info(info, "reset", problems)
    record: list[Any] = [(obs, info.get("task_id"), info.get("instruction"), info.get("state_key"))]
    for _ in range(steps):
        actions = info.get("admissible_actions") or FREE_TEXT
        action = actions[int(rng.integers(len(actions)))]
        obs, reward, terminated, truncated, info = env.step(action)
        _check_step(obs, reward, info, f"step({action!r})", problems)
        record.append(
            (obs, float(reward), terminated, truncated, info.get("state_key"), info.get("action_valid"))
        )
        if terminated or truncated:
            break
    return record


def _check_info(info: Any, call: str, problems: list[str]) -> None:
    if not isinstance(info, dict):
        problems.append(f"{call} returned info of type {type(info).__name__}, not dict")
        return
    for key in ("task_id", "instruction"):
        if not isinstance(info.get(key), str):
            problems.append(f"{call}: info[{key!r}] is {info.get(key)!r}, not a str")
    if "state_key" in info and not isinstance(info["state_key"], str):
        problems.append(f"{call}: info['state_key'] is not a str")


def _check_step(obs: Any, reward: Any, info: Any, call: str, problems: list[str]) -> None:
    if not isinstance(obs, str):
        problems.append(f"{call} returned an observation of type {type(obs).__name__}")
    if not isinstance(reward, (int, float, np.floating)) or not math.isfinite(float(reward)):
        problems.append(f"{call} returned the reward {reward!r}")
    _check_info(info, call, problems)
    if isinstance(info, dict):
        for key in ("action_valid", "success"):
            if not isinstance(info.get(key), (bool, np.bool_)):
                problems.append(f"{call}: info[{key!r}] is {info.get(key)!r}, not a bool")
        if "error" in info:
            problems.append(
                f"{call} set info['error'] ({info['error']!r}): that key is for "
                "infrastructure failures, never for an action"
            )


def _comparable(record: list[Any], same_observations: bool) -> list[Any]:
    return record if same_observations else [item[1:] for item in record]


def _difference(a: list[Any], b: list[Any]) -> str:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"call {index} differs: {str(x)[:200]} vs {str(y)[:200]}"
    return f"{len(a)} calls vs {len(b)}"
