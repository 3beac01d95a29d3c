"""The cycle collector set for rollouts while they run (survivors promoted at once, full
collections rare), and set back after them."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from agentgym.heap import FULL_COLLECTION_EVERY, GENERATIONAL, rollout_collector
from agentgym.multiagent import collect as collect_games
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.rollout import acollect, collect, default_tasks

from fixtures.parallel_env import CounterParallelEnv
from fixtures.probe_env import ProbeEnv


class Node:
    self: Node


IN_BLOCK = (700, 0, FULL_COLLECTION_EVERY)
"""The thresholds inside the block, from CPython's defaults (700, 10, 10)."""


@pytest.fixture(autouse=True)
def default_thresholds() -> Iterator[tuple[int, int, int]]:
    if not GENERATIONAL:
        pytest.skip("the block sets CPython 3.11-3.13's generational collector only")
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_the_block_sets_the_thresholds_and_sets_them_back_even_when_it_raises(default_thresholds):
    with rollout_collector():
        assert gc.get_threshold() == IN_BLOCK
    assert gc.get_threshold() == default_thresholds
    with pytest.raises(KeyError), rollout_collector():
        raise KeyError("x")
    assert gc.get_threshold() == default_thresholds


def test_overlapping_blocks_in_threads_set_it_back_when_the_last_ends(default_thresholds):
    entered, leave = threading.Barrier(3), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def hold() -> None:
        with rollout_collector():
            entered.wait(timeout=10)
            leave.wait(timeout=10)
            seen.append(gc.get_threshold())

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait(timeout=10)
    with rollout_collector():  # a third block, ending first
        pass
    during = gc.get_threshold()
    leave.set()
    for thread in threads:
        thread.join(timeout=10)
    assert during == IN_BLOCK
    assert seen == [IN_BLOCK] * 2
    assert gc.get_threshold() == default_thresholds


def test_a_threshold_set_inside_the_block_stays_and_rarer_full_collections_stay_as_rare():
    with rollout_collector():
        gc.set_threshold(700, 10, 5)  # the caller's own choice, made meanwhile
    assert gc.get_threshold() == (700, 10, 5)
    gc.set_threshold(700, 20, FULL_COLLECTION_EVERY // 10)  # a full one per 2 * FULL collections
    with rollout_collector():
        assert gc.get_threshold() == (700, 0, 2 * FULL_COLLECTION_EVERY)
    assert gc.get_threshold() == (700, 20, FULL_COLLECTION_EVERY // 10)
    gc.set_threshold(700, 0, 5 * FULL_COLLECTION_EVERY)  # already promoting, fulls rarer still
    with rollout_collector():
        assert gc.get_threshold() == (700, 0, 5 * FULL_COLLECTION_EVERY)
    assert gc.get_threshold() == (700, 0, 5 * FULL_COLLECTION_EVERY)
    gc.set_threshold(0, 10, 10)  # the collector stopped: nothing to set
    with rollout_collector():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_in_the_block_what_survives_a_collection_goes_to_the_oldest_generation():
    def generation_of(kept: object) -> int:
        return next(g for g in range(3) if any(o is kept for o in gc.get_objects(g)))

    def survive_one_collection() -> None:
        count = gc.get_count()[0]
        filler: list[list[object]] = []
        while gc.get_count()[0] >= count:  # a collection resets the young count
            count = gc.get_count()[0]
            filler.append([])

    gc.collect()
    outside = [[]]
    survive_one_collection()
    assert generation_of(outside) == 1  # CPython's default: the middle generation
    with rollout_collector():
        inside = [[]]
        survive_one_collection()
        assert generation_of(inside) == 2
        cycle = Node()
        cycle.self, gone = cycle, weakref.ref(cycle)
        del cycle  # garbage before the next collection
        gc.collect(1)  # a collection as the block's are (young and middle generations)
        assert gone() is None


def test_rollouts_run_with_the_collector_set(default_thresholds):
    seen: list[tuple[int, int, int]] = []

    def act(obs, info):
        seen.append(gc.get_threshold())
        return "0"

    policy = ScriptedPolicy(act)
    episodes = collect(ProbeEnv, policy, default_tasks(2), max_turns=2, progress=False)
    assert all(e.error is None for e in episodes)
    games = collect_games(CounterParallelEnv, policy, default_tasks(2), progress=False)
    assert all(e.error is None for e in games)
    assert len(seen) > 4 and set(seen) == {IN_BLOCK}
    assert gc.get_threshold() == default_thresholds


def test_overlapping_rollouts_on_one_loop_keep_it_set_until_the_last_returns(default_thresholds):
    seen: list[tuple[int, int, int]] = []
    policy = ScriptedPolicy(lambda obs, info: (seen.append(gc.get_threshold()), "0")[1])

    async def both() -> None:
        short = acollect(ProbeEnv, policy, default_tasks(1), max_turns=1, progress=False)
        long = acollect(ProbeEnv, policy, default_tasks(4), max_turns=3, concurrency=1, progress=False)
        await asyncio.gather(short, long)

    asyncio.run(both())
    assert len(seen) == 13 and set(seen) == {IN_BLOCK}
    assert gc.get_threshold() == default_thresholds
