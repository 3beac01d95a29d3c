"""Seeded random streams and task splits (agentgym/seeding.py): reproducible in any process,
independent of each other, splits stable per key."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from agentgym.seeding import SPLITS, check_split, rng, split_of


def _draws(stream: random.Random, n: int = 20) -> list[int]:
    return [stream.randrange(2**32) for _ in range(n)]


def test_a_stream_is_the_same_for_the_same_key() -> None:
    assert _draws(rng("ns", 3, "products")) == _draws(rng("ns", 3, "products"))
    # The key format is part of the contract: generated tasks are pinned by it.
    assert _draws(rng("ns", 3, "products")) == _draws(random.Random("ns/3/products"))
    assert _draws(rng("ns", 7)) == _draws(rng("ns", "7"))
    r = rng("agentgym.web.catalog", 3, "products")
    assert [r.randrange(1000) for _ in range(5)] == [158, 460, 305, 798, 988]


def test_a_stream_is_the_same_in_another_process() -> None:
    code = (
        "from agentgym.seeding import rng; r = rng('ns', 3, 'products'); "
        "print([r.randrange(2**32) for _ in range(20)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout
    assert out.strip() == str(_draws(rng("ns", 3, "products")))


def test_streams_are_independent() -> None:
    keys: list[tuple[str, int] | tuple[str, int, str]] = [
        ("ns", 1, "a"),
        ("ns", 1, "b"),
        ("ns", 2, "a"),
        ("other", 1, "a"),
        ("ns", 1),
    ]
    draws = [_draws(rng(*key)) for key in keys]
    assert len({tuple(d) for d in draws}) == len(keys)
    # Drawing from one stream leaves another's draws alone.
    a, b = rng("ns", 1, "a"), rng("ns", 1, "b")
    interleaved = []
    for _ in range(20):
        b.random()
        interleaved.append(a.randrange(2**32))
    assert interleaved == draws[0]


def test_split_of_is_pinned_per_key() -> None:
    tests = [k for k in range(40) if split_of("agentgym.tooluse.data", k) == "test"]
    assert tests == [1, 5, 16, 19, 35, 38]
    assert split_of("agentgym.tooluse.data", 1) == split_of("agentgym.tooluse.data", "1")
    assert {split_of("agentgym.tooluse.data", k) for k in range(40)} <= set(SPLITS)


def test_split_of_covers_the_splits_about_one_in_five_held_out() -> None:
    counts = Counter(split_of("ns", f"task-{k}") for k in range(5000))
    assert set(counts) == set(SPLITS) == {"train", "test"}
    assert 0.17 < counts["test"] / 5000 < 0.24
    # Another namespace draws the same keys into other splits.
    assert [split_of("ns", k) for k in range(200)] != [split_of("other", k) for k in range(200)]


def test_split_of_names_the_given_splits() -> None:
    named = [split_of("ns", k, ("fit", "holdout")) for k in range(200)]
    assert named == [{"train": "fit", "test": "holdout"}[split_of("ns", k)] for k in range(200)]


def test_check_split() -> None:
    check_split("test")
    check_split("dev", ("train", "dev", "test"))
    with pytest.raises(ValueError, match="unknown split 'dev'; expected one of train, test"):
        check_split("dev")


def test_the_task_families_share_the_splits() -> None:
    from agentgym.envs.search import world
    from agentgym.envs.tooluse import app_tasks, data
    from agentgym.envs.web import tasks

    assert data.SPLITS is app_tasks.SPLITS is tasks.SPLITS is SPLITS
    assert world.SPLITS == ("train", "dev", "test")
