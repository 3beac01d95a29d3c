"""HouseholdEnv: the ALFWorld-style household text world (agentgym/envs/textgames/household.py)."""

from __future__ import annotations

import json
import random
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.env import normalize_action
from agentgym.envs.textgames.household import TASK_TYPES, HouseholdEnv, generate

from support import run_python

ROOMS = {"kitchen", "living room", "bedroom", "bathroom"}
BAD_ACTIONS = [
    "",
    "   \t\n",
    "x" * 100_000,
    "\x00\xff\ufffd",
    "🦜 ünïcødé 漢字",
    "<action>look</action>",
    "put " + "mug 1 in " * 10_000,
]


def _play(env: HouseholdEnv, task_id: str, actions: list[str]) -> tuple[str, dict]:
    """Reset to ``task_id`` and play ``actions``, each of which must be valid."""
    obs, info = env.reset(options={"task_id": task_id})
    for action in actions:
        obs, _, _, _, info = env.step(action)
        assert info["action_valid"], (action, obs)
    return obs, info


def _run_expert(env: HouseholdEnv, info: dict) -> tuple[float, dict, int]:
    steps = 0
    while True:
        action = env.expert_action()
        assert action in info["admissible_actions"]
        _, reward, terminated, truncated, info = env.step(action)
        steps += 1
        assert info["action_valid"]
        if terminated or truncated:
            return reward, info, steps


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_solves_every_task_type(task_type):
    env = HouseholdEnv()
    for seed in range(100):
        _, info = env.reset(options={"task_id": f"{task_type}/{seed}"})
        assert info["task_type"] == task_type
        reward, info, steps = _run_expert(env, info)
        assert info["success"] is True and reward == 1.0 and steps <= env.max_steps, seed


def test_expert_replans_from_random_states():
    env = HouseholdEnv(max_steps=200)
    rng = random.Random(1)
    for seed in range(120):
        _, info = env.reset(options={"task_id": f"{TASK_TYPES[seed % 6]}/{seed}"})
        for _ in range(rng.randrange(1, 40)):
            _, _, terminated, _, info = env.step(rng.choice(info["admissible_actions"]))
            if terminated:
                break
        else:
            reward, info, _ = _run_expert(env, info)
            assert info["success"] and reward == 1.0, seed


@pytest.mark.parametrize("num_rooms", [1, 4, (1, 2)])
def test_room_counts_and_solvability(num_rooms):
    fewest, most = (num_rooms, num_rooms) if isinstance(num_rooms, int) else num_rooms
    env = HouseholdEnv(num_rooms=num_rooms)
    for task_type in TASK_TYPES:
        for seed in range(15):
            house, _ = generate(task_type, seed, (fewest, most))
            assert fewest <= len(house.rooms) <= most
            _, info = env.reset(options={"task_id": f"{task_type}/{seed}"})
            assert _run_expert(env, info)[0] == 1.0


def _find_layout(task_type: str = "pick_and_place") -> tuple[str, str, str, str, str]:
    """A task whose start room has a receptacle with a takeable item, an openable receptacle and
    a third receptacle: ``(task_id, source, take_action, openable, destination)``."""
    env = HouseholdEnv()
    for seed in range(200):
        task_id = f"{task_type}/{seed}"
        _, info = env.reset(options={"task_id": task_id})
        here = [a[6:] for a in info["admissible_actions"] if a.startswith("go to ") and a[6:] not in ROOMS]
        takes, openables = {}, []
        for receptacle in here:
            _, info = _play(env, task_id, [f"go to {receptacle}"])
            take = next((a for a in info["admissible_actions"] if a.startswith("take ")), None)
            if take:
                takes[receptacle] = take
            if f"open {receptacle}" in info["admissible_actions"]:
                openables.append(receptacle)
        for source, take in takes.items():
            for box in openables:
                others = [r for r in here if r not in (source, box)]
                if box != source and others:
                    return task_id, source, take, box, others[0]
    raise AssertionError("no suitable layout found")


def test_state_key_separates_hidden_state_and_merges_equal_states():
    env = HouseholdEnv()
    task_id, source, take, box, dest = _find_layout()
    plain_obs, plain = _play(env, task_id, [f"go to {dest}"])
    held_obs, held = _play(env, task_id, [f"go to {source}", take, f"go to {dest}"])
    open_obs, opened = _play(env, task_id, [f"go to {box}", f"open {box}", f"go to {dest}"])
    # Same observation text, different inventory / container state, so different keys.
    assert plain_obs == held_obs == open_obs
    assert len({plain["state_key"], held["state_key"], opened["state_key"]}) == 3
    for info in (plain, held, opened):
        assert info["state_key"].startswith(task_id + "|")
    # The same state reached along different paths has the same key.
    item = take.split(" from ")[0][len("take ") :]
    _, detour = _play(
        env,
        task_id,
        [
            f"go to {box}",
            f"open {box}",
            f"close {box}",
            f"go to {source}",
            take,
            f"put {item} in/on {source}",
            f"go to {dest}",
        ],
    )
    assert detour["state_key"] == plain["state_key"]
    _, start = env.reset(options={"task_id": task_id})
    _, back = _play(env, task_id, ["look", "inventory"])
    assert back["state_key"] == start["state_key"]


def test_put_accepts_in_on_and_literal_in_on():
    env = HouseholdEnv()
    task_id, source, take, _, _ = _find_layout()
    item = take.split(" from ")[0][len("take ") :]
    for preposition in ("in", "on", "in/on"):
        _, info = _play(env, task_id, [f"go to {source}", take])
        obs, _, _, _, info = env.step(f"Put {item} {preposition} {source}.")
        assert info["action_valid"] and obs.startswith(f"You put the {item}")


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_check_env(task_type):
    for seed in (0, 1):
        env = agentgym.make("agentgym/Household-v0", task_types=[task_type])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
        _, info = env.reset(seed=seed)
        assert info["task_type"] == task_type
    assert isinstance(gym.make("agentgym/Household-v0").unwrapped, HouseholdEnv)


def _trajectory(env: HouseholdEnv, seed: int) -> list:
    obs, info = env.reset(seed=seed)
    rng = random.Random(seed)
    out: list[object] = [obs, info]
    for _ in range(30):
        action = rng.choice(info["admissible_actions"] + ["nonsense"])
        obs, reward, terminated, truncated, info = env.step(action)
        out.append([obs, reward, terminated, truncated, info])
        if terminated or truncated:
            break
    return out


def test_determinism_and_seed_stream():
    for seed in range(5):
        assert _trajectory(HouseholdEnv(), seed) == _trajectory(HouseholdEnv(), seed)
    env = HouseholdEnv()
    first = [env.reset(seed=123)[1]["task_id"], env.reset()[1]["task_id"]]
    again = [env.reset(seed=123)[1]["task_id"], env.reset()[1]["task_id"]]
    assert first == again and first[0] != first[1]
    obs, info = env.reset(seed=7)
    assert env.reset(seed=999, options={"task_id": info["task_id"]}) == (obs, info)


def test_deterministic_across_processes():
    code = (
        "import json, random\n"
        "from agentgym.envs.textgames.household import HouseholdEnv\n"
        "env, rng, out = HouseholdEnv(), random.Random(3), []\n"
        "for seed in range(6):\n"
        "    obs, info = env.reset(seed=seed)\n"
        "    out += [obs, info['state_key']]\n"
        "    for _ in range(20):\n"
        "        obs, r, term, trunc, info = env.step(rng.choice(info['admissible_actions']))\n"
        "        out += [obs, info['state_key']]\n"
        "print(json.dumps(out))\n"
    )
    runs = [json.loads(run_python(code, env={"PYTHONHASHSEED": h}).stdout) for h in ("0", "4242")]
    assert runs[0] == runs[1] and len(runs[0]) > 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task_types": ["pick_and_place", "fly_to_moon"]}, "unknown task type.*fly_to_moon.*valid"),
        ({"task_types": []}, "no task types"),
        ({"num_rooms": 0}, "num_rooms"),
        ({"num_rooms": 5}, "num_rooms"),
        ({"num_rooms": (3, 2)}, "num_rooms"),
        ({"max_steps": 0}, "max_steps must be an int >= 1"),
        ({"invalid_penalty": -1.0}, "invalid_penalty"),
        ({"render_mode": "rgb_array"}, "render_mode"),
    ],
)
def test_bad_kwargs(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HouseholdEnv(**kwargs)
    with pytest.raises(ValueError, match="unknown option"):
        HouseholdEnv().reset(options={"task": "pick_and_place/1"})


@pytest.mark.parametrize(
    "task_id",
    ["pick_and_place", "pick_and_place/-1", "nope/3", "pick_and_place/abc", "pick_and_place/007", 17],
)
def test_malformed_task_id(task_id):
    env = HouseholdEnv()
    with pytest.raises(ValueError, match="malformed task_id.*'<task type>/<world seed>'"):
        env.reset(options={"task_id": task_id})


def test_bad_actions_are_answered():
    env = HouseholdEnv(max_steps=len(BAD_ACTIONS) + 1, invalid_penalty=0.25)
    _, start = env.reset(seed=3)
    for action in BAD_ACTIONS:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.startswith("That action is not available here.") and len(obs) < 1000
        assert "look" in obs
        assert info["action_valid"] is False and info["success"] is False
        assert reward == -0.25 and not terminated and not truncated
        assert info["state_key"] == start["state_key"]
        assert info["admissible_actions"] == start["admissible_actions"]
    _, _, _, truncated, _ = env.step("")
    assert truncated  # invalid steps count toward max_steps
    for not_text in (1, b"look", None, ["look"]):
        with pytest.raises(TypeError, match="actions are text"):
            env.step(not_text)


def test_known_command_that_is_not_admissible_says_nothing_happens():
    env = HouseholdEnv()
    _, info = env.reset(options={"task_id": "pick_cool_then_place/0"})  # has a kitchen
    obs, reward, _, _, after = env.step("open fridge 1")  # the agent is not at the fridge
    assert obs == "Nothing happens." and after["action_valid"] is False and reward == 0.0
    assert after["state_key"] == info["state_key"]


def test_random_rollouts_keep_invariants():
    env = HouseholdEnv(render_mode="ansi")
    rng = random.Random(0)
    for seed in range(150):
        obs, info = env.reset(seed=seed)
        assert f"Your task is to: {info['instruction']}" in obs
        while True:
            actions = info["admissible_actions"]
            assert {"look", "inventory"} <= set(actions) and actions == sorted(actions)
            assert all(normalize_action(a) == a for a in actions)
            previous = info
            obs, reward, terminated, truncated, info = env.step(rng.choice(actions))
            assert isinstance(obs, str) and obs and info["action_valid"]
            assert info["admissible_actions"] is not previous["admissible_actions"]
            assert reward == (1.0 if terminated else 0.0) and info["success"] == terminated
            assert "carrying" in env.render()
            if terminated or truncated:
                break
