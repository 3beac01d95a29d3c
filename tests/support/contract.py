"""The TextEnv contract, as checks on one env id: tests/core/test_env_contract.py runs them on
every text game, envs/werewolf/test_werewolf.py on the single-seat werewolf env."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import agentgym

from support import run_python

BAD_ACTIONS = [
    "",
    "   ",
    "x" * 100_000,
    "\x00\xff\ufffd\x1b[2J",
    "🦜 ünïcødé 漢字",
    "<action>up</action>",
    "\n".join(["up"] * 1000),
]


def check_env_contract(env_id, seed):
    """The Gymnasium checker passes (no warning either) and a reset gives what agentgym needs."""
    env = agentgym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning is a failure
        gym_check_env(env.unwrapped)
    obs, info = env.reset(seed=seed)
    assert env.observation_space.contains(obs)
    for key in ("task_id", "instruction", "state_key", "admissible_actions"):
        assert key in info, key
    env.close()


def bad_actions_answered_not_raised(env_id):
    """Junk and non-text actions are answered (an invalid action, a TypeError), never crash."""
    env = agentgym.make(env_id)
    obs, info = env.reset(seed=3)
    for action in BAD_ACTIONS:
        obs, reward, _terminated, _truncated, info = env.step(action)
        assert isinstance(obs, str) and obs and len(obs) < 5_000
        assert info["action_valid"] is False
        assert np.isfinite(reward)
    for not_text in (1, b"up", None, ["up"]):
        with pytest.raises(TypeError, match="actions are text"):
            env.step(not_text)
    env.close()


def _trajectory_code(env_id: str, seed: int) -> str:
    return (
        "import json, agentgym, numpy as np\n"
        f"env = agentgym.make({env_id!r})\n"
        f"obs, info = env.reset(seed={seed})\n"
        "rng = np.random.default_rng(7)\n"
        "out = [obs, info['state_key']]\n"
        "for _ in range(25):\n"
        "    acts = info['admissible_actions']\n"
        "    obs, r, term, trunc, info = env.step(acts[int(rng.integers(len(acts)))])\n"
        "    out += [obs, r, info['state_key']]\n"
        "    if term or trunc: break\n"
        "obs, info = env.reset(seed=1, options={'task_id': info['task_id']})\n"
        "out.append(obs)\n"
        "print(json.dumps(out))\n"
    )


def deterministic_across_processes(env_id):
    """The same seed and actions play the same in two interpreters with other hash seeds."""
    code = _trajectory_code(env_id, seed=11)
    runs = [json.loads(run_python(code, env={"PYTHONHASHSEED": h}).stdout) for h in ("1", "2")]
    assert runs[0] == runs[1]
    assert len(runs[0]) > 3


def task_id_reproduces_start_state(env_id):
    """``reset(options={"task_id": ...})`` starts the same task whatever the seed."""
    env = agentgym.make(env_id)
    obs, info = env.reset(seed=5)
    obs_again, info_again = env.reset(seed=99, options={"task_id": info["task_id"]})
    assert obs_again == obs and info_again["state_key"] == info["state_key"]
    env.close()


def async_twins_match_sync(env_id):
    """``areset``/``astep`` answer what ``reset``/``step`` do."""
    import asyncio

    async def run():
        env = agentgym.make(env_id).unwrapped
        obs, info = await env.areset(seed=4)
        step = await env.astep(info["admissible_actions"][0])
        return obs, step[0]

    env = agentgym.make(env_id)
    obs, info = env.reset(seed=4)
    assert asyncio.run(run()) == (obs, env.step(info["admissible_actions"][0])[0])
