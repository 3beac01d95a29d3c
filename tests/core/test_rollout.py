"""The rollout engine: groups, reproducibility, batching, and failure isolation."""

from __future__ import annotations

import asyncio
import time

import pytest

import agentgym
from agentgym.episode import Episode
from agentgym.policies.scripted import RandomPolicy, ScriptedPolicy
from agentgym.policy import Generation, GenerationRequest
from agentgym.rollout import RequestBatcher, Task, Timeouts, acollect, collect, default_tasks

from fixtures.probe_env import ProbeEnv

SOKOBAN = "agentgym/Sokoban-v0"


def _key(ep: Episode):
    return (ep.task_id, ep.seed, [(t.action, t.reward, t.state_key) for t in ep.turns], ep.success)


def test_groups_share_task_and_seed():
    tasks = [Task(None, 10), Task(None, 11), Task("123", 12)]
    episodes = collect(SOKOBAN, RandomPolicy(), tasks, group_size=4, max_turns=5, progress=False)
    assert len(episodes) == 12
    for g in range(3):
        group = episodes[4 * g : 4 * g + 4]
        assert len({e.group_id for e in group}) == 1
        assert len({(e.task_id, e.seed) for e in group}) == 1
        assert len({e.episode_id for e in group}) == 4
    assert episodes[8].task_id == "123"
    # members draw different sampling seeds, so their trajectories differ
    assert len({tuple(t.action for t in e.turns) for e in episodes[:4]}) > 1


@pytest.mark.parametrize("env_id", ["agentgym/Sokoban-v0", "agentgym/Household-v0"])
def test_reproducible_at_fixed_seed(env_id):
    runs = [
        collect(
            env_id,
            RandomPolicy(),
            default_tasks(6, seed=3),
            group_size=2,
            max_turns=15,
            concurrency=c,
            progress=False,
        )
        for c in (1, 1, 8)
    ]
    assert [_key(e) for e in runs[0]] == [_key(e) for e in runs[1]] == [_key(e) for e in runs[2]]


def test_turn_records_pre_action_state_and_tokens():
    episodes = collect(SOKOBAN, RandomPolicy(), [Task(None, 1)], max_turns=4, progress=False)
    ep = episodes[0]
    assert ep.instruction and ep.num_turns >= 1
    first = ep.turns[0]
    env = agentgym.make(SOKOBAN)
    obs, info = env.reset(seed=1)
    assert first.observation == obs and first.state_key == info["state_key"]
    assert first.response_text == f"<action>{first.action}</action>" and first.action_valid
    for prev, nxt in zip(ep.turns, ep.turns[1:]):
        assert nxt.state_key == prev.info["state_key"]
    assert ep.outcome == pytest.approx(sum(t.reward for t in ep.turns))


def test_broken_format_is_invalid_and_env_still_answers():
    policy = ScriptedPolicy(lambda obs, info: "up")
    broken = type("Broken", (), {"generate": lambda self, reqs: _texts(["I go up"] * len(reqs))})()
    episodes = collect(SOKOBAN, broken, [Task(None, 0)], max_turns=3, progress=False)
    assert [t.action_valid for t in episodes[0].turns] == [False] * 3
    assert all(t.action == "" for t in episodes[0].turns)
    ok = collect(SOKOBAN, policy, [Task(None, 0)], max_turns=1, progress=False)
    assert ok[0].turns[0].action == "up"


async def _texts(texts):
    return [Generation(text=t) for t in texts]


class _FailOn:
    """Failure injection: a server-like policy (one call per request, as VLLMPolicy) that raises
    or hangs for the requests of one task seed."""

    max_batch_size = 1

    def __init__(self, bad_seed: int, mode: str):
        self.inner, self.bad_seed, self.mode = RandomPolicy(), bad_seed, mode

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        (request,) = requests
        if f"(seed {self.bad_seed})" in request.messages[0]["content"]:
            if self.mode == "raise":
                raise RuntimeError("model exploded")
            await asyncio.sleep(3600)
        return await self.inner.generate(requests)


def _tagged_env_factory(fail_seed: int | None = None):
    """Sokoban whose instruction names its reset seed; raises on step when seed == fail_seed."""
    from agentgym.envs.textgames.sokoban import SokobanEnv

    class Tagged(SokobanEnv):
        def reset(self, *, seed=None, options=None):
            self._seed = seed
            obs, info = super().reset(seed=seed, options=options)
            info["instruction"] += f" (seed {seed})"
            return obs, info

        def close(self):
            self.closed = True
            super().close()

        def step(self, action):
            if self._seed == fail_seed:
                raise OSError("env backend crashed")
            return super().step(action)

    return Tagged


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_policy_failure_truncates_only_affected_episodes(mode):
    episodes = collect(
        _tagged_env_factory(),
        _FailOn(2, mode),
        default_tasks(4),
        group_size=2,
        max_turns=6,
        timeouts=Timeouts(generate=0.5),
        progress=False,
    )
    bad = [e for e in episodes if e.seed == 2]
    good = [e for e in episodes if e.seed != 2]
    assert len(bad) == 2 and all(e.truncated and not e.success for e in bad)
    expected = "model exploded" if mode == "raise" else "generate timed out after 0.5 s"
    assert all(expected in e.error for e in bad), [e.error for e in bad]
    assert all(e.error is None and e.num_turns > 0 for e in good)


def test_env_failure_truncates_only_affected_episodes():
    created = []

    def factory():
        env = _tagged_env_factory(fail_seed=1)()
        created.append(env)
        return env

    episodes = collect(factory, RandomPolicy(), default_tasks(3), max_turns=5, concurrency=3, progress=False)
    assert "step failed: OSError: env backend crashed" in episodes[1].error
    assert episodes[1].truncated and episodes[1].num_turns == 0
    assert episodes[0].error is None and episodes[2].error is None
    assert all(env.closed for env in created)


def test_nothing_left_running_after_collect():
    async def main():
        before = set(asyncio.all_tasks())
        await acollect(
            _tagged_env_factory(),
            _FailOn(0, "hang"),
            default_tasks(3),
            max_turns=3,
            timeouts=Timeouts(generate=0.2),
            progress=False,
        )
        await asyncio.sleep(0)
        return set(asyncio.all_tasks()) - before

    assert asyncio.run(main()) == set()


def test_batcher_groups_concurrent_requests():
    sizes = []

    class Recording:
        max_concurrent_batches = 1

        async def generate(self, requests):
            sizes.append(len(requests))
            await asyncio.sleep(0.01)
            return [Generation(text="<action>up</action>") for _ in requests]

    collect(SOKOBAN, Recording(), default_tasks(16), max_turns=3, concurrency=16, progress=False)
    assert max(sizes) >= 8, sizes  # requests that wait behind a running batch go out together


def test_a_request_waiting_for_a_busy_model_goes_out_when_the_batch_ends():
    """Regression: the flush at the end of a batch ran while the batch still counted as in
    flight, so a request that waited behind it stayed pending unless another request came."""

    class OneAtATime:
        async def generate(self, requests):
            await asyncio.sleep(0.02)
            return [Generation(text="x") for _ in requests]

    async def main():
        batcher = RequestBatcher(OneAtATime(), max_inflight=1)
        first = batcher.submit(GenerationRequest(messages=[]))
        await asyncio.sleep(0.005)  # the first batch is running
        second = batcher.submit(GenerationRequest(messages=[]))
        await asyncio.wait_for(first, 1)
        await asyncio.wait_for(second, 1)  # nothing else is ever submitted

    asyncio.run(main())


@pytest.mark.parametrize("inline", [False, True])
def test_batcher_rejects_wrong_generation_count(inline):
    class Short:
        async def generate(self, requests):
            return []

    Short.inline = inline

    async def main():
        batcher = RequestBatcher(Short())
        with pytest.raises(RuntimeError, match="returned 0 generations for 1 requests"):
            await batcher.submit(GenerationRequest(messages=[]))

    asyncio.run(main())


def test_episodes_of_an_inline_policy_take_turns_on_the_event_loop():
    """An inline policy and an env that steps on the loop never wait, yet an episode gives the
    loop back once it has run a time slice (here every step takes longer): concurrent episodes
    interleave (and a timeout or Ctrl-C is not held back until every episode has ended)."""
    steps: list[int] = []

    class Logged(ProbeEnv):
        def step(self, action):
            steps.append(id(self))
            time.sleep(2 * RequestBatcher.time_slice)
            return super().step(action)

    collect(Logged, ScriptedPolicy(lambda obs, info: "x"), default_tasks(2), max_turns=3, progress=False)
    first, second = steps[0], steps[1]
    assert first != second and steps == [first, second] * 3


def test_an_inline_policy_is_asked_when_its_request_is_awaited_and_waits_while_paused():
    class Rules:
        inline = True

        def __init__(self):
            self.calls: list[int] = []

        async def generate(self, requests):
            self.calls.append(len(requests))
            return [Generation(text="x") for _ in requests]

    async def main():
        rules = Rules()
        batcher = RequestBatcher(rules, max_batch=8)
        asked = [batcher.submit(GenerationRequest(messages=[])) for _ in range(3)]
        assert rules.calls == []  # not before its submitter awaits it
        assert [(await a).text for a in asked] == ["x"] * 3 and rules.calls == [1, 1, 1]
        batcher.pause()
        held = asyncio.ensure_future(batcher.submit(GenerationRequest(messages=[])))
        await asyncio.sleep(0.01)
        assert not held.done() and rules.calls == [1, 1, 1]
        batcher.resume()
        assert (await asyncio.wait_for(held, 1)).text == "x"

    asyncio.run(main())


def test_submit_all_asks_an_inline_policy_once_and_queues_the_others():
    class Rules:
        inline = True

        def __init__(self):
            self.calls: list[list[int | None]] = []

        async def generate(self, requests):
            self.calls.append([r.seed for r in requests])
            return [Generation(text=str(r.seed)) for r in requests]

    class Model(Rules):
        inline = False

    async def main():
        requests = [GenerationRequest(messages=[], seed=s) for s in range(3)]
        for policy in (Rules(), Model()):
            batcher = RequestBatcher(policy, max_batch=8)
            assert [g.text for g in await batcher.submit_all(requests)] == ["0", "1", "2"]
            assert policy.calls == [[0, 1, 2]]
        rules = Rules()
        batcher = RequestBatcher(rules)
        batcher.pause()
        held = asyncio.ensure_future(batcher.submit_all(requests))
        await asyncio.sleep(0.01)
        assert not held.done() and rules.calls == []
        batcher.resume()
        assert [g.text for g in await asyncio.wait_for(held, 1)] == ["0", "1", "2"]

    asyncio.run(main())


@pytest.mark.parametrize("reads_messages", [True, False])
def test_a_policy_that_reads_no_messages_is_sent_none(reads_messages):
    seen: list[GenerationRequest] = []

    def act(obs, info):
        return "x"

    policy = ScriptedPolicy(act)
    policy.reads_messages = reads_messages
    generate = policy.generate

    async def recording(requests):
        seen.extend(requests)
        return await generate(requests)

    policy.generate = recording
    collect(ProbeEnv, policy, default_tasks(1), max_turns=2, progress=False)
    assert len(seen) == 2 and all(r.observation for r in seen)
    if reads_messages:
        assert [m["role"] for m in seen[1].messages] == ["system", "user", "assistant", "user"]
    else:
        assert all(r.messages == [] for r in seen)


def test_bad_arguments():
    with pytest.raises(ValueError, match="group_size"):
        collect(SOKOBAN, RandomPolicy(), default_tasks(1), group_size=0, progress=False)
    with pytest.raises(agentgym.UnknownEnvError):
        collect("agentgym/Nope-v0", RandomPolicy(), default_tasks(1), progress=False)


def test_the_progress_bar_moves_with_every_turn(monkeypatch):
    """Long episodes show movement before any of them ends: turns and tokens/s per turn."""
    import agentgym.rollout as rollout

    shown: list[tuple[int, str]] = []
    update = rollout.Progress.update

    def spy(self, task_id, **fields):
        shown.append((fields.get("advance"), fields.get("status")))
        return update(self, task_id, **fields)

    class ThreeTokens:
        async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
            return [Generation(text="<action>up</action>", response_ids=[1, 2, 3]) for _ in requests]

    monkeypatch.setattr(rollout.Progress, "update", spy)
    collect(SOKOBAN, ThreeTokens(), [Task(None, 0)], max_turns=3, progress=True)
    turns, [(advance, last)] = shown[:-1], shown[-1:]
    assert [a for a, _ in turns] == [0, 0, 0] and advance == 1
    assert [s.split("  ")[0] for _, s in turns] == ["1 turns", "2 turns", "3 turns"]
    assert all("tokens/s" in s for _, s in turns)
    assert last.startswith("success 0%  3 turns")
