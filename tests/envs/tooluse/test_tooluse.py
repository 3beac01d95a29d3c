"""agentgym/ToolUse-v0: tools run in the task's sandbox, the experts solve the tasks, bad calls
are answered, and nothing an episode does reaches another."""

from __future__ import annotations

import json
import random

import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.envs.tooluse.app_tasks import app_tasks
from agentgym.envs.tooluse.data import data_tasks
from agentgym.envs.tooluse.env import ToolUseEnv
from agentgym.envs.tooluse.expert import expert_action
from agentgym.envs.tooluse.tools import MAX_TIMEOUT_S
from agentgym.sandbox.local import bwrap_usable

from support import per_kind, unavailable

# no process or dir may outlive a test
pytestmark = pytest.mark.usefixtures("no_leftovers")


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def solve(env: ToolUseEnv, task_id: str, act=expert_action, limit: int = 30):
    """Play one episode; the return, the last ``info`` and every observation in turn."""
    obs, info = env.reset(options={"task_id": task_id})
    seen, total = [obs], 0.0
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(act(obs, info))
        seen.append(obs)
        total += reward
        if terminated or truncated:
            break
    return total, info, seen


@pytest.fixture
def data_env():
    env = ToolUseEnv(tasks="data", split="test")
    yield env
    env.close()


@pytest.fixture
def patient_data_env():
    """The expert's code runs in a fraction of a second, but a loaded 2-core CI machine can stall
    a sandboxed interpreter for seconds (the default limit is 10 s): this one waits the longest."""
    env = ToolUseEnv(tasks="data", split="test", timeout_s=MAX_TIMEOUT_S)
    yield env
    env.close()


@pytest.fixture
def apps_env():
    env = ToolUseEnv(tasks="apps", split="test")
    yield env
    env.close()


def test_check_env():
    env = ToolUseEnv(tasks="all")
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.slow  # a minute or two: 100 tasks of each kind
def test_the_expert_solves_sampled_data_tasks(patient_data_env):
    for task in random.Random(0).sample(data_tasks("test"), 100):
        total, info, seen = solve(patient_data_env, task.id)
        assert total == 1.0 and info["success"], (task.id, task.instruction, seen[-2:])


@pytest.mark.slow
def test_the_expert_solves_app_tasks_of_every_kind(apps_env):
    """Three held-out tasks of each kind through the env's tools (test_tooluse_apps.py has the
    expert solve every task against the apps directly, in milliseconds)."""
    tasks = app_tasks("test")
    random.Random(0).shuffle(tasks)
    for task in per_kind(tasks, lambda t: t.kind, 3):
        total, info, _seen = solve(apps_env, task.id)
        assert total == 1.0 and info["success"] and info["problems"] == [], (task.id, info)


def test_a_collateral_change_fails_the_app_task(apps_env):
    task = next(t for t in app_tasks("test") if t.answer is None)
    notes = [n["id"] for n in task.initial["notes"]]

    def act(obs, info):
        if info["tool_calls"] == 0:
            return call("notes_delete", note_id=notes[0])
        return expert_action(obs, info | {"tool_calls": info["tool_calls"] - 1})

    total, info, _ = solve(apps_env, task.id, act)
    assert total == 0.0 and not info["success"]
    assert any(notes[0] in problem for problem in info["problems"]), info["problems"]


@pytest.mark.parametrize(
    "reply, says",
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        (call("python", code=3), "argument 'code': 3 is not of type 'string'"),
        (call("python"), "'code' is a required property"),
        (call("python", code="print(1)", timeout_s=100000), "argument 'timeout_s'"),
        (call("rm_rf", path="/"), "Unknown tool 'rm_rf'"),
        ("no action here", "No action found"),
    ],
)
def test_bad_calls_are_answered_and_the_episode_goes_on(data_env, reply, says):
    data_env.reset(seed=0)
    obs, reward, terminated, truncated, info = data_env.step(reply)
    assert says in obs and info["action_valid"] is False and reward == 0
    assert not terminated and not truncated and info["tool_calls"] == 0
    obs, *_, info = data_env.step(call("python", code="print(6 * 7)"))
    assert "42" in obs and info["action_valid"]


def test_huge_and_binary_output_is_capped_and_readable(data_env):
    data_env.reset(seed=0)
    obs, *_ = data_env.step(call("python", code="print('x' * 10_000_000)"))
    assert len(obs) < 6000 and ("cut" in obs or "over the limit" in obs)
    obs, *_, info = data_env.step(call("python", code="import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe')"))
    assert "ok\ufffd\ufffd" in obs and info["action_valid"]
    obs, *_ = data_env.step(call("read_file", path="../../etc/shadow"))
    assert "outside the workspace" in obs


def test_a_hang_is_killed_and_the_episode_goes_on(data_env):
    data_env.reset(seed=0)
    obs, _reward, terminated, truncated, _info = data_env.step(
        call("python", code="while True: pass", timeout_s=1)
    )
    assert "killed after 1 s (timeout)" in obs and not terminated and not truncated
    obs, *_ = data_env.step(call("bash", command="echo still here"))
    assert "still here" in obs


def test_deleting_the_workspace_does_not_reach_the_next_episode(data_env):
    task = data_tasks("test")[0]
    obs, _ = data_env.reset(options={"task_id": task.id})
    files = obs.rsplit("Workspace files: ", 1)[1].split(", ")
    obs, *_ = data_env.step(call("bash", command="rm -rf -- * .[!.]* ; ls -A | wc -l"))
    assert "\n0\n" in obs
    obs, _ = data_env.reset(options={"task_id": task.id})
    listed, *_ = data_env.step(call("list_files"))
    assert all(name in listed for name in files)
    _total, info, _ = solve(data_env, task.id)
    assert info["success"]


def test_one_episode_cannot_read_another_tasks_files():
    if (problem := bwrap_usable()) is not None:  # without bubblewrap tools share the host's /tmp
        unavailable(problem)
    a, b = ToolUseEnv(tasks="data", split="test"), ToolUseEnv(tasks="data", split="test")
    try:
        a.reset(seed=0)
        a.step(call("write_file", path="secret.txt", content="a's secret"))
        b.reset(seed=1)
        where = a.sandbox.host_dir if a.sandbox is not None else None
        obs, *_ = b.step(
            call(
                "bash",
                command=f"cat {where}/*/secret.txt /sandbox/../*/secret.txt; "
                "find / -name secret.txt 2>/dev/null | head",
            )
        )
        assert "a's secret" not in obs
    finally:
        a.close()
        b.close()


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="tasks must be one of"):
        ToolUseEnv(tasks="web")
    with pytest.raises(ValueError, match="max_turns"):
        ToolUseEnv(max_turns=0)
    for timeout_s in (0, -1, 86_400, float("inf"), float("nan"), True):  # it had no ceiling
        with pytest.raises(ValueError, match="timeout_s must be seconds in"):
            ToolUseEnv(timeout_s=timeout_s)
    with pytest.raises(ValueError, match="max_output_chars"):
        ToolUseEnv(max_output_chars=10**9)
    env = ToolUseEnv()
    try:
        with pytest.raises(ValueError, match="no task"):
            env.reset(options={"task_id": "nope"})
    finally:
        env.close()
