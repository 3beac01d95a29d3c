"""What the user built is what runs: the rollout engine and the env server honour every wrapper
on an env (only Gymnasium's order enforcing and passive checker are bypassed), and an env's
prompt comes from its family whether it was named by id or made by a factory."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import gymnasium as gym
import pytest

import agentgym
from agentgym.asyncenv import async_twins
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.policy import Generation, GenerationRequest
from agentgym.rollout import Task, collect
from agentgym.server import RemoteEnv, ServerProcess

from support import FIXTURES

sys.path.insert(0, str(FIXTURES))
import wrapped_env  # noqa: E402


def _say(text: str) -> ScriptedPolicy:
    return ScriptedPolicy(lambda obs, info: text)


def test_collect_records_what_hook_wrappers_make_of_the_env():
    [episode] = collect(wrapped_env.shouting, _say("hi"), [Task(None, 0)], max_turns=3, progress=False)
    assert [t.observation for t in episode.turns] == ["COUNT 0", "COUNT 1: PLEASE HI", "COUNT 2: PLEASE HI"]
    assert [t.reward for t in episode.turns] == [2.0, 2.0, 2.0]
    assert episode.turns[-1].info["action_valid"]


def test_collect_honours_a_wrapper_with_its_own_step():
    [episode] = collect(
        wrapped_env.shouting_for_two_steps, _say("hi"), [Task(None, 0)], max_turns=10, progress=False
    )
    assert episode.num_turns == 2 and episode.truncated and not episode.terminated
    assert episode.turns[1].observation == "COUNT 1: HI"


def test_async_twins_bypass_only_order_enforcing_and_the_checker():
    made = agentgym.make("agentgym/Sokoban-v0")  # OrderEnforcing(PassiveEnvChecker(core))
    assert async_twins(made) is not None
    assert async_twins(gym.wrappers.TimeLimit(made, 3)) is None
    assert async_twins(wrapped_env.shouting()) is not None

    class OwnReset(gym.ObservationWrapper):  # a hook wrapper that also resets its own way
        def observation(self, observation: str) -> str:
            return observation

        def reset(self, **kwargs: Any):
            return self.env.reset(**kwargs)

    assert async_twins(OwnReset(made)) is None
    assert async_twins(gym.make("CartPole-v1")) is None  # not a TextEnv: sync only


class _Recorder:
    """Answers "up" and keeps the first request's messages."""

    def __init__(self) -> None:
        self.first: list[dict[str, str]] | None = None

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        if self.first is None:
            self.first = requests[0].messages
        return [Generation(text="<action>up</action>") for _ in requests]


def test_the_prompt_is_the_family_s_whether_by_id_or_by_factory():
    env_id = "agentgym/Sokoban-v0"
    by_id, by_factory = _Recorder(), _Recorder()
    collect(env_id, by_id, [Task(None, 1)], max_turns=1, progress=False)
    collect(lambda: agentgym.make(env_id), by_factory, [Task(None, 1)], max_turns=1, progress=False)
    assert by_id.first is not None and by_id.first == by_factory.first
    assert "Sokoban" in by_id.first[0]["content"] or "box" in by_id.first[0]["content"].lower()


@pytest.fixture(scope="module")
def server():
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES), os.environ.get("PYTHONPATH")]))}
    with ServerProcess(allow_entry_points=True, env=env) as server:
        yield server


def test_the_server_applies_the_wrappers_of_a_native_env(server):
    env = RemoteEnv(server.url, "wrapped_env:shouting")
    try:
        assert env.reset(seed=0)[0] == "COUNT 0"
        obs, reward, *_ = env.step("hi")
        assert (obs, reward) == ("COUNT 1: PLEASE HI", 2.0)
    finally:
        env.close()


def test_the_server_honours_a_wrapper_with_its_own_step(server):
    async def two_steps() -> list[tuple[str, bool]]:
        env = await RemoteEnv.acreate(server.url, "wrapped_env:shouting_for_two_steps")
        try:
            await env.areset(seed=0)
            steps = [await env.astep("hi") for _ in range(2)]
            return [(obs, truncated) for obs, _, _, truncated, _ in steps]
        finally:
            await env.aclose()

    assert asyncio.run(two_steps()) == [("COUNT 1: HI", False), ("COUNT 2: HI", True)]


@pytest.mark.parametrize("at", ["reset", "step"])
def test_an_env_s_info_error_is_an_infrastructure_error_and_retried(at: str) -> None:
    made: list[wrapped_env.BrokenMachinery] = []

    def factory() -> wrapped_env.BrokenMachinery:
        made.append(wrapped_env.BrokenMachinery(at))
        return made[-1]

    [episode] = collect(factory, _say("hi"), [Task(None, 0)], max_turns=5, retries=1, progress=False)
    phase = "reset" if at == "reset" else "step"
    assert episode.error == f"{phase} failed: EnvFailure: browser gone"
    assert episode.failed_attempts == [episode.error] and not episode.success
    assert episode.num_turns == (0 if at == "reset" else 2)
    assert len(made) >= 2  # the failed env was not reused for the retry
