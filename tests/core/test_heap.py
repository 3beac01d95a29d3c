"""Full collections deferred while rollouts run, and set back after them."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator

import pytest

from agentgym.heap import FULL_COLLECTION_EVERY, deferred_full_collections
from agentgym.multiagent import collect as collect_games
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import acollect, collect, default_tasks

from fixtures.parallel_env import CounterParallelEnv
from fixtures.probe_env import ProbeEnv


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    if gc.get_threshold()[2] != 10:
        gc.set_threshold(*before)
        pytest.skip("this Python's collector has no oldest-generation threshold (incremental)")
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_the_block_raises_the_oldest_threshold_and_sets_it_back_even_when_it_raises(default_thresholds):
    with deferred_full_collections():
        assert gc.get_threshold() == (700, 10, FULL_COLLECTION_EVERY)
    assert gc.get_threshold() == default_thresholds
    with pytest.raises(KeyError), deferred_full_collections():
        raise KeyError("x")
    assert gc.get_threshold() == default_thresholds


def test_overlapping_blocks_in_threads_set_it_back_when_the_last_ends(default_thresholds):
    entered, leave = threading.Barrier(3), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def hold() -> None:
        with deferred_full_collections():
            entered.wait(timeout=10)
            leave.wait(timeout=10)
            seen.append(gc.get_threshold())

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait(timeout=10)
    with deferred_full_collections():  # a third block, ending first
        pass
    during = gc.get_threshold()[2]
    leave.set()
    for thread in threads:
        thread.join(timeout=10)
    assert during == FULL_COLLECTION_EVERY
    assert seen == [(700, 10, FULL_COLLECTION_EVERY)] * 2
    assert gc.get_threshold() == default_thresholds


def test_a_threshold_set_inside_the_block_or_higher_before_it_is_left_alone():
    with deferred_full_collections():
        gc.set_threshold(700, 10, 5)  # the caller's own choice, made meanwhile
    assert gc.get_threshold() == (700, 10, 5)
    gc.set_threshold(700, 10, 10 * FULL_COLLECTION_EVERY)
    with deferred_full_collections():
        assert gc.get_threshold()[2] == 10 * FULL_COLLECTION_EVERY
    assert gc.get_threshold()[2] == 10 * FULL_COLLECTION_EVERY


def test_rollouts_run_with_full_collections_deferred(default_thresholds):
    seen: list[int] = []

    def act(obs, info):
        seen.append(gc.get_threshold()[2])
        return "0"

    policy = ScriptedPolicy(act)
    episodes = collect(ProbeEnv, policy, default_tasks(2), max_turns=2, progress=False)
    assert all(e.error is None for e in episodes)
    games = collect_games(CounterParallelEnv, policy, default_tasks(2), progress=False)
    assert all(e.error is None for e in games)
    assert len(seen) > 4 and set(seen) == {FULL_COLLECTION_EVERY}
    assert gc.get_threshold() == default_thresholds


def test_overlapping_rollouts_on_one_loop_keep_it_raised_until_the_last_returns(default_thresholds):
    seen: list[int] = []
    policy = ScriptedPolicy(lambda obs, info: (seen.append(gc.get_threshold()[2]), "0")[1])

    async def both() -> None:
        short = acollect(ProbeEnv, policy, default_tasks(1), max_turns=1, progress=False)
        long = acollect(ProbeEnv, policy, default_tasks(4), max_turns=3, concurrency=1, progress=False)
        await asyncio.gather(short, long)

    asyncio.run(both())
    assert len(seen) == 13 and set(seen) == {FULL_COLLECTION_EVERY}
    assert gc.get_threshold() == default_thresholds
