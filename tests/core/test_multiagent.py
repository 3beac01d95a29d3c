"""Multi-agent rollouts on a generic PettingZoo text env: seats, rewards, groups, batching across
seats and games, reproducibility and failure isolation."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentgym.multiagent import WholeResponse, collect, default_prompter
from agentgym.policy import Generation, GenerationRequest
from agentgym.rollout import RequestBatcher, Task

from fixtures.parallel_env import CounterParallelEnv


class Answering:
    """Answers ``"a"`` repeated by a function of the request's seed; records batch sizes; fails
    on requests without a seed."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.batches.append(len(requests))
        await asyncio.sleep(0)
        if any(r.seed is None for r in requests):
            raise RuntimeError("no seed")
        return [
            Generation(text="a" * (1 + r.seed % 3), finish_reason="stop")
            for r in requests
            if r.seed is not None
        ]  # (all are: checked above)


def counter() -> CounterParallelEnv:
    return CounterParallelEnv(max_cycles=4)


def test_every_agent_gets_an_episode_with_the_env_rewards():
    episodes = collect(counter, Answering(), [Task(None, 0), Task(None, 1)], group_size=2, progress=False)
    assert [e.agent for e in episodes] == ["alice", "bob"] * 4
    for index, episode in enumerate(episodes):
        assert episode.group_id.endswith(f"|{episode.seed}|{episode.agent}")
        assert episode.episode_id == f"{episode.group_id}#{index // 2 % 2}"
    for alice, bob in zip(episodes[::2], episodes[1::2], strict=True):
        assert (alice.num_turns, alice.truncated, alice.terminated) == (4, True, False)
        assert (bob.num_turns, bob.terminated) == (3, True)
        # Replaying the actions reproduces every turn's reward.
        env = counter()
        env.reset(seed=alice.seed)
        for t, turn in enumerate(alice.turns):
            actions = {"alice": turn.action}
            if t < bob.num_turns:
                actions["bob"] = bob.turns[t].action
            rewards = env.step(actions)[1]
            assert rewards["alice"] == turn.reward
            if t < bob.num_turns:
                assert rewards["bob"] == bob.turns[t].reward
        assert alice.outcome == pytest.approx(sum(t.reward for t in alice.turns))
        assert all(t.response_text == t.action for t in alice.turns)  # whole responses


def test_seats_and_games_share_batches_and_runs_reproduce():
    policy = Answering()
    tasks = [Task(None, s) for s in range(4)]
    first = collect(counter, policy, tasks, concurrency=4, progress=False)
    assert max(policy.batches) == 8  # 2 seats x 4 games in one batch
    again = collect(counter, Answering(), tasks, concurrency=1, progress=False)
    assert [[(t.action, t.reward) for t in e.turns] for e in first] == [
        [(t.action, t.reward) for t in e.turns] for e in again
    ]


class Rules(Answering):
    """:class:`Answering` as an inline policy: it awaits nothing."""

    inline = True

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.batches.append(len(requests))
        return [Generation(text="a" * (1 + (r.seed or 0) % 3), finish_reason="stop") for r in requests]


def test_an_inline_policy_answers_each_request_alone_and_batched_seats_still_share_batches():
    tasks = [Task(None, s) for s in range(4)]
    rules, model = Rules(), Answering()
    mixed = collect(counter, {"alice": rules, "bob": model}, tasks, concurrency=4, progress=False)
    assert rules.batches == [1] * 16  # alice's 4 turns in each of 4 games, one request a call
    assert max(model.batches) == 4  # bob's seats of the 4 games, one batch a step
    batched = collect(counter, Answering(), tasks, concurrency=4, progress=False)
    assert [[(t.action, t.reward) for t in e.turns] for e in mixed] == [
        [(t.action, t.reward) for t in e.turns] for e in batched
    ]


def test_an_inline_policy_answers_the_seats_of_a_game_that_act_together_in_one_call():
    rules, tasks = Rules(), [Task(None, 0), Task(None, 1)]
    together = collect(counter, rules, tasks, concurrency=1, progress=False)
    assert rules.batches == [2, 2, 2, 1] * 2  # alice and bob each step, alice alone at the end
    alone = collect(counter, {"alice": Rules(), "bob": Rules()}, tasks, progress=False)
    assert [[(t.action, t.reward) for t in e.turns] for e in together] == [
        [(t.action, t.reward) for t in e.turns] for e in alone
    ]


def test_seats_of_a_policy_that_reads_no_messages_send_no_chat():
    class Reading(Rules):
        def __init__(self) -> None:
            super().__init__()
            self.requests: list[GenerationRequest] = []

        async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
            self.requests += requests
            return await super().generate(requests)

    class Blind(Reading):
        reads_messages = False

    reading, blind = Reading(), Blind()
    collect(counter, {"alice": reading, "bob": blind}, [Task(None, 0)], progress=False)
    # system + observation, then a turn more each time, up to the prompter's history (2 turns)
    assert [len(r.messages) for r in reading.requests] == [2, 4, 6, 6]
    assert all(r.messages == [] and r.observation for r in blind.requests) and len(blind.requests) == 3


def _steps_of_two_games(env_class: type[CounterParallelEnv]) -> list[int]:
    """The game (its env's id) of each step of two concurrent 4-step games of ``env_class``,
    every seat an inline policy."""
    steps: list[int] = []

    class Logged(env_class):  # type: ignore[valid-type,misc]
        def step(self, actions):
            steps.append(id(self))
            return super().step(actions)

    collect(lambda: Logged(max_cycles=4), Rules(), [Task(None, 0), Task(None, 1)], progress=False)
    return steps


class Slow(CounterParallelEnv):
    """Every step takes two of the batcher's time slices."""

    def step(self, actions):
        time.sleep(2 * RequestBatcher.time_slice)
        return super().step(actions)


class Idle(CounterParallelEnv):
    """No agent ever has to act."""

    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed, options)
        return observations, _idle(infos)

    def step(self, actions):
        *result, infos = super().step(actions)
        return (*result, _idle(infos))


def _idle(infos):
    return {agent: {**info, "action_required": False} for agent, info in infos.items()}


def test_games_of_inline_seats_take_turns_on_the_event_loop():
    """No seat waits on a batch, yet a game gives the loop back once it has run a time slice
    (here every step takes longer), and after a step in which no seat acts (no batcher is asked
    then): concurrent games interleave (and a timeout or Ctrl-C is not held back until every
    game has ended)."""
    for env_class in (Slow, Idle):
        steps = _steps_of_two_games(env_class)
        first, second = steps[0], steps[1]
        assert first != second and steps == [first, second] * 4, env_class.__name__


def test_failed_game_is_isolated():
    games = []
    episodes = collect(
        counter, Answering(), [Task(None, None), Task(None, 3)], progress=False, on_game=games.append
    )
    failed, fine = episodes[:2], episodes[2:]
    assert all(e.error == "RuntimeError: no seed" and e.truncated for e in failed)
    assert all(e.error is None and e.num_turns >= 3 for e in fine)
    assert sorted(g.error is None for g in games) == [False, True]


def test_per_seat_policies_must_name_every_agent():
    with pytest.raises(ValueError, match="policies has no entry for agent 'bob'"):
        collect(counter, {"alice": Answering()}, [Task(None, 0)], progress=False)
    mixed = {"alice": Answering(), "bob": Answering()}
    episodes = collect(counter, mixed, [Task(None, 0)], progress=False)
    assert mixed["alice"].batches == [1] * 4 and mixed["bob"].batches == [1] * 3
    assert len(episodes) == 2


def test_default_prompter_passes_whole_responses():
    prompter = default_prompter("werewolf", history=0)
    assert isinstance(prompter, WholeResponse)
    assert prompter.parse("I think <vote>Player3</vote>") == "I think <vote>Player3</vote>"
    system = prompter.system("You are Player1.")
    assert system.startswith("You are a player in a multi-player text game")
    assert system.endswith("Your task: You are Player1.")
    messages = prompter.messages(system, [("old", "answer")], "now")
    assert [m["role"] for m in messages] == ["system", "user"]  # history=0
