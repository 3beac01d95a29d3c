"""The TextEnv contract, checked on every env registered through agentgym."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import run_python
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.env import UnicodeText, coerce_action, extract_tag, match_action, normalize_action

ENV_IDS = sorted(i for i, m in agentgym.list_envs().items() if m.plugin == "textgames")
BAD_ACTIONS = ["", "   ", "x" * 100_000, "\x00\xff\ufffd\x1b[2J", "🦜 ünïcødé 漢字", "<action>up</action>",
               "\n".join(["up"] * 1000)]


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_check_env(env_id, seed):
    env = agentgym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning is a failure
        check_env(env.unwrapped)
    obs, info = env.reset(seed=seed)
    assert env.observation_space.contains(obs)
    for key in ("task_id", "instruction", "state_key", "admissible_actions"):
        assert key in info, key
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bad_actions_answered_not_raised(env_id):
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


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_deterministic_across_processes(env_id):
    code = _trajectory_code(env_id, seed=11)
    runs = [json.loads(run_python(code, env={"PYTHONHASHSEED": h}).stdout) for h in ("1", "2")]
    assert runs[0] == runs[1]
    assert len(runs[0]) > 3


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_task_id_reproduces_start_state(env_id):
    env = agentgym.make(env_id)
    obs, info = env.reset(seed=5)
    obs_again, info_again = env.reset(seed=99, options={"task_id": info["task_id"]})
    assert obs_again == obs and info_again["state_key"] == info["state_key"]
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_async_twins_match_sync(env_id):
    import asyncio

    async def run():
        env = agentgym.make(env_id).unwrapped
        obs, info = await env.areset(seed=4)
        step = await env.astep(info["admissible_actions"][0])
        return obs, step[0]

    env = agentgym.make(env_id)
    obs, info = env.reset(seed=4)
    assert asyncio.run(run()) == (obs, env.step(info["admissible_actions"][0])[0])


def test_render_modes():
    for mode in ("ansi", "human", None):
        env = agentgym.make("agentgym/Sokoban-v0", render_mode=mode)
        env.reset(seed=0)
        out = env.render()
        assert (isinstance(out, str) and out) if mode == "ansi" else out is None
    with pytest.raises(ValueError, match="render_mode"), pytest.warns(UserWarning, match="rgb_array"):
        agentgym.make("agentgym/Sokoban-v0", render_mode="rgb_array")


def test_unicode_text_space():
    space = UnicodeText(10)
    assert space.contains("ünï🦜") and space.contains("") and not space.contains("x" * 11)
    assert not space.contains(b"abc")
    assert space.contains(space.sample())


def test_action_helpers():
    assert extract_tag("a <action>up</action> b <ACTION> Left </ACTION>") == "Left"
    assert extract_tag("no tag here") is None
    assert extract_tag("<answer>\nParis\n</answer>", "answer") == "Paris"
    assert normalize_action('  **Go  to\tCabinet 1.** ') == "go to cabinet 1"
    assert match_action("GO TO cabinet 1", ["go to cabinet 1", "look"]) == "go to cabinet 1"
    assert match_action("go to cabinet", ["go to cabinet 1"]) is None
    assert coerce_action(np.str_("up")) == "up"
