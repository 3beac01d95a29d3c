"""Fixtures of the search family's tests."""

from __future__ import annotations

import pytest

from agentgym.envs.search.world import World, generate_world


@pytest.fixture(scope="module")
def world() -> World:
    """The generated world of seed 0 (test_search.py, test_search_world.py)."""
    return generate_world(0)
