"""The TextEnv contract (tests/support/contract.py), checked on every text game registered through
agentgym."""

from __future__ import annotations

import numpy as np
import pytest

import agentgym
from agentgym.env import UnicodeText, coerce_action, extract_tag, match_action, normalize_action

from support import contract

ENV_IDS = sorted(i for i, m in agentgym.list_envs().items() if m.plugin == "textgames")


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_check_env(env_id, seed):
    contract.check_env_contract(env_id, seed)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bad_actions_answered_not_raised(env_id):
    contract.bad_actions_answered_not_raised(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_deterministic_across_processes(env_id):
    contract.deterministic_across_processes(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_task_id_reproduces_start_state(env_id):
    contract.task_id_reproduces_start_state(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_async_twins_match_sync(env_id):
    contract.async_twins_match_sync(env_id)


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
    assert normalize_action("  **Go  to\tCabinet 1.** ") == "go to cabinet 1"
    assert match_action("GO TO cabinet 1", ["go to cabinet 1", "look"]) == "go to cabinet 1"
    assert match_action("go to cabinet", ["go to cabinet 1"]) is None
    assert coerce_action(np.str_("up")) == "up"
