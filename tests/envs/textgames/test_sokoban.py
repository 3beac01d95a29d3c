"""Tests of the Sokoban text game: generation, solver, rewards, API contract and determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym
from agentgym.envs.textgames import sokoban
from agentgym.envs.textgames.sokoban import ACTIONS, Level, SokobanEnv, generate_level, solve

ENV_ID = "agentgym/Sokoban-v0"
SMALL_CONFIGS = [((5, 5), 1), ((5, 5), 2), ((6, 6), 1), ((6, 6), 2), ((7, 7), 1), ((7, 7), 2)]


def make_level(rows: list[str]) -> Level:
    """A level drawn in the env's own symbols."""
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    return Level(
        dim=(len(rows), len(rows[0])),
        walls=frozenset(p for p, ch in cells.items() if ch == "#"),
        targets=frozenset(p for p, ch in cells.items() if ch in "O√S"),
        boxes=frozenset(p for p, ch in cells.items() if ch in "X√"),
        player=next(p for p, ch in cells.items() if ch in "PS"),
    )


# Two boxes: pushing right puts the first on its target, pushing right again takes it off.
TWO_BOXES = ["######", "#PXO_#", "#____#", "#__XO#", "#____#", "######"]
ONE_PUSH_TO_WIN = ["######", "#PXO_#", "#____#", "#____#", "#____#", "######"]


@pytest.fixture
def hand_level_env(monkeypatch: pytest.MonkeyPatch):
    """A factory of envs whose every level is the one drawn in ``rows``."""

    def factory(rows: list[str], **kwargs) -> SokobanEnv:
        level = make_level(rows)
        monkeypatch.setattr(sokoban, "generate_level", lambda dim, num_boxes, seed: level)
        env = SokobanEnv(dim_room=level.dim, num_boxes=len(level.boxes), **kwargs)
        env.reset(seed=0)
        return env

    return factory


# ---------------------------------------------------------------------------------------------
# Generation and solver


@pytest.mark.parametrize(("dim", "num_boxes"), SMALL_CONFIGS)
def test_generated_levels_are_solvable_and_replay_to_success(dim, num_boxes):
    env = SokobanEnv(dim_room=dim, num_boxes=num_boxes, max_steps=500)
    for seed in range(200):
        _, info = env.reset(options={"task_id": str(seed)})
        level = env.level
        assert level.boxes != level.targets, f"level {seed} starts solved"
        assert len(level.boxes) == len(level.targets) == num_boxes
        actions = env.solution()
        assert actions, f"level {seed} of {dim}/{num_boxes} was not solved"
        for action in actions[:-1]:
            _, _, terminated, truncated, info = env.step(action)
            assert not terminated and not truncated and info["action_valid"]
        _, reward, terminated, truncated, info = env.step(actions[-1])
        assert terminated and not truncated and info["success"]
        assert reward == pytest.approx(-0.1 + 1.0 + 10.0)
        assert info["boxes_on_target"] == num_boxes


def test_generation_is_fast_and_deterministic():
    start = time.perf_counter()
    levels = [generate_level((6, 6), 2, seed) for seed in range(100)]
    per_level = (time.perf_counter() - start) / 100
    assert per_level < 0.05
    assert levels == [generate_level((6, 6), 2, seed) for seed in range(100)]
    assert len({level.text() for level in levels}) > 90


@pytest.mark.parametrize(("dim", "num_boxes"), [((30, 30), 1), ((5, 30), 5), ((12, 12), 30)])
def test_generation_handles_large_and_crowded_rooms(dim, num_boxes):
    level = generate_level(dim, num_boxes, seed=3)
    assert level.dim == dim and len(level.boxes) == num_boxes
    assert level.boxes != level.targets
    assert level.player not in level.walls | level.boxes


def test_solver_edge_cases():
    solved = make_level(["#####", "#P√_#", "#___#", "#___#", "#####"])
    assert solve(solved) == []
    box_in_corner = make_level(["#####", "#X__#", "#_P_#", "#__O#", "#####"])
    assert solve(box_in_corner) is None
    far = make_level(["#######", "#_____#", "#_X__O#", "#_____#", "#____P#", "#######"])
    assert solve(far, max_states=3) is None
    actions = solve(far)
    assert actions is not None and len(actions) == 9  # walk 6 to the box's left, push 3
    for action in actions:
        _, far = far.move(action)
    assert far.solved


def test_level_text_symbols():
    level = make_level(["#####", "#S√_#", "#XO_#", "#___#", "#####"])
    assert level.text() == "#####\n#S√_#\n#XO_#\n#___#\n#####"
    assert level.boxes_on_target == 1 and not level.solved


# ---------------------------------------------------------------------------------------------
# Rewards and episode ends


def test_push_onto_and_off_a_target(hand_level_env):
    env = hand_level_env(TWO_BOXES)
    obs, reward, terminated, truncated, info = env.step("right")
    assert reward == pytest.approx(0.9)
    assert not terminated and not truncated and not info["success"]
    assert info["boxes_on_target"] == 1
    assert obs.startswith("You pushed a box right. Boxes on target: 1/2.")
    assert "#_P√_#" in obs.splitlines()

    obs, reward, terminated, _, info = env.step("right")
    assert reward == pytest.approx(-1.1)
    assert not terminated and info["boxes_on_target"] == 0
    assert "#__SX#" in obs.splitlines()


def test_solving_pays_the_bonus_and_terminates(hand_level_env):
    env = hand_level_env(ONE_PUSH_TO_WIN)
    obs, reward, terminated, truncated, info = env.step("right")
    assert reward == pytest.approx(10.9)
    assert terminated and not truncated and info["success"]
    assert "Level solved!" in obs.splitlines()[0]
    # Stepping on after the end keeps answering; no second bonus for a level already solved.
    _, reward, terminated, _, info = env.step("left")
    assert reward == pytest.approx(-0.1) and terminated and info["success"]


def test_wall_bump_and_blocked_push_are_valid_moves_that_change_nothing(hand_level_env):
    env = hand_level_env(TWO_BOXES)
    before = env.level
    obs, reward, terminated, truncated, info = env.step("up")
    assert reward == pytest.approx(-0.1)
    assert info["action_valid"] and not terminated and not truncated
    assert env.level == before
    assert obs.startswith("You cannot move up: a wall is in the way.")

    env.step("right")
    env.step("right")
    before = env.level
    obs, reward, _, _, info = env.step("right")
    assert reward == pytest.approx(-0.1) and info["action_valid"] and env.level == before
    assert obs.startswith("You cannot push the box right: it is blocked.")


def test_truncation_at_max_steps(hand_level_env):
    env = hand_level_env(TWO_BOXES, max_steps=3)
    results = [env.step(action) for action in ("up", "nonsense", "left")]
    assert [r[3] for r in results] == [False, False, True]
    assert [r[2] for r in results] == [False, False, False]
    assert not results[-1][4]["success"]
    assert "Out of steps." in results[-1][0].splitlines()[0]


# ---------------------------------------------------------------------------------------------
# API contract


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"dim_room": (5, 5), "num_boxes": 2},
        {"dim_room": (7, 9), "num_boxes": 3, "max_steps": 5},
    ],
)
def test_passes_gymnasium_env_checker_without_warnings(kwargs, capsys):
    env = agentgym.make(ENV_ID, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    env.close()


def test_reset_observation_and_info():
    env = gym.make(ENV_ID, render_mode="ansi")
    obs, info = env.reset(options={"task_id": "123"})
    lines = obs.splitlines()
    assert lines[0] == info["instruction"] == sokoban.INSTRUCTION
    assert lines[1] == "Boxes on target: 0/1. Steps left: 100."
    assert "\n".join(lines[2:8]) == env.render() == env.unwrapped.level.text()
    assert lines[8].startswith("Legend: # wall")
    assert info["task_id"] == "123"
    assert info["admissible_actions"] == list(ACTIONS)
    level = env.unwrapped.level
    boxes = ";".join(f"{r},{c}" for r, c in sorted(level.boxes))
    player = f"{level.player[0]},{level.player[1]}"
    assert info["state_key"] == f"sokoban/6x6/123|p={player}|b={boxes}"


def test_actions_match_loosely():
    env = SokobanEnv()
    env.reset(options={"task_id": "5"})
    for action in ("UP", "  Left. ", "**down**", "'right'"):
        assert env.step(action)[4]["action_valid"], action


@pytest.mark.parametrize(
    "action",
    ["", "   \n\t", "x" * 100_000, "\x00\xff\x1b[31m", "⬆️ 上 😀", "<action>up</action>", "up up"],
)
def test_bad_action_text_is_answered_not_raised(action):
    env = SokobanEnv()
    _, info = env.reset(options={"task_id": "9"})
    obs, reward, terminated, truncated, step_info = env.step(action)
    assert not step_info["action_valid"] and not step_info["success"]
    assert reward == pytest.approx(-0.1) and not terminated and not truncated
    assert step_info["state_key"] == info["state_key"]
    first_line = obs.splitlines()[0]
    assert first_line.startswith("Invalid action ")
    assert "Valid actions: up, down, left, right." in first_line
    assert len(first_line) < 200
    assert env.level.text() in obs


@pytest.mark.parametrize("action", [1, b"up", None, ["up"]])
def test_non_str_action_raises_type_error(action):
    env = SokobanEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="actions are text"):
        env.step(action)


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        SokobanEnv().step("up")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"dim_room": (4, 6)}, ValueError, r"dim_room must have rows and cols between 5 and 30"),
        ({"dim_room": (6, 31)}, ValueError, r"between 5 and 30.*got \(6, 31\)"),
        ({"dim_room": (-6, 6)}, ValueError, r"dim_room"),
        ({"dim_room": (6,)}, TypeError, r"dim_room must be a pair of ints"),
        ({"dim_room": "66"}, TypeError, r"dim_room must be a pair of ints"),
        ({"dim_room": (6.0, 6)}, TypeError, r"dim_room must be a pair of ints"),
        ({"num_boxes": 0}, ValueError, r"num_boxes must be between 1 and 4 for dim_room=\(6, 6\)"),
        ({"num_boxes": 5}, ValueError, r"num_boxes must be between 1 and 4"),
        ({"dim_room": (5, 5), "num_boxes": 3}, ValueError, r"between 1 and 2"),
        ({"num_boxes": "2"}, TypeError, r"num_boxes must be an int, got str"),
        ({"num_boxes": True}, TypeError, r"num_boxes must be an int"),
        ({"max_steps": 0}, ValueError, r"max_steps must be at least 1; got 0"),
        ({"render_mode": "rgb_array"}, ValueError, r"render_mode"),
    ],
)
def test_bad_kwargs_raise_clear_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        SokobanEnv(**kwargs)


def test_bad_kwargs_through_make():
    with pytest.raises(ValueError, match="num_boxes must be between 1 and 4"):
        agentgym.make(ENV_ID, num_boxes=99)


def test_list_dim_room_from_configs_is_accepted():
    assert SokobanEnv(dim_room=[7, 8]).dim_room == (7, 8)


@pytest.mark.parametrize("task_id", ["abc", "-1", "", "1.5", " 12", "1" * 21, 12])
def test_bad_task_id_raises(task_id):
    env = SokobanEnv()
    with pytest.raises(ValueError, match="task_id must be the level seed"):
        env.reset(options={"task_id": task_id})


def test_unknown_reset_option_raises():
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['task'\]"):
        SokobanEnv().reset(options={"task": "1"})


# ---------------------------------------------------------------------------------------------
# Determinism


def play(env: gym.Env, actions: list[str], **reset_kwargs) -> list:
    transcript: list = [env.reset(**reset_kwargs)]
    transcript += [env.step(action) for action in actions]
    return transcript


SCRIPT = ["up", "left", "left", "down", "bogus", "right", "down", "down", "left", "up"]


def test_same_seed_or_task_gives_identical_episodes():
    first, second = (SokobanEnv(dim_room=(7, 7), num_boxes=2) for _ in range(2))
    assert play(first, SCRIPT, seed=11) == play(second, SCRIPT, seed=11)
    # reset() without a seed continues the seeded stream, identically in both envs.
    assert play(first, SCRIPT) == play(second, SCRIPT)
    by_task = play(first, SCRIPT, seed=1, options={"task_id": "77"})
    assert by_task == play(second, SCRIPT, seed=2, options={"task_id": "77"})
    assert by_task[0][1]["task_id"] == "77"


def test_seeded_reset_draws_a_task_and_then_continues_the_stream():
    env = SokobanEnv()
    _, info_a = env.reset(seed=123)
    _, info_b = env.reset()
    _, info_c = env.reset(seed=123)
    assert info_a["task_id"] == info_c["task_id"] != info_b["task_id"]
    assert env.reset(options={"task_id": info_b["task_id"]})[1] == info_b


def test_equal_states_have_equal_keys_and_different_states_different_keys():
    env = SokobanEnv()
    _, start = env.reset(options={"task_id": "3"})
    keys = {start["state_key"]}
    for action in ACTIONS:
        _, _, _, _, info = env.step(action)
        keys.add(info["state_key"])
    assert len(keys) > 1
    # A walk whose moves all succeed and push nothing, undone, comes back to the start key.
    env.reset(options={"task_id": "3"})
    for action, back in (("up", "down"), ("down", "up"), ("left", "right"), ("right", "left")):
        obs, _, _, _, _ = env.step(action)
        if obs.startswith("You moved"):
            assert env.step(back)[4]["state_key"] == start["state_key"]
            break
    else:
        pytest.fail("no free move from the start of level 3")


_CHILD = """
import json, agentgym, gymnasium as gym
env = gym.make("agentgym/Sokoban-v0", dim_room=(7, 7), num_boxes=2)
out = [env.reset(seed=5)[0]]
out += [env.step(a)[0] for a in {script!r}]
out.append(env.reset(options={{"task_id": "4242"}})[0])
out.append(env.unwrapped.solution())
print(json.dumps(out))
"""


def test_episodes_are_identical_across_processes_and_hash_seeds():
    code = _CHILD.format(script=SCRIPT)
    outputs = []
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(outputs[0]) == len(SCRIPT) + 3
