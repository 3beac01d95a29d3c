"""Episode records: JSONL round trips, corrupted files, the columnar TurnTable."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from agentgym.episode import (
    Episode,
    EpisodeFileError,
    Turn,
    TurnTable,
    load_episodes,
    save_episodes,
    to_dataset,
)
from agentgym.policies.scripted import RandomPolicy
from agentgym.rollout import Task, collect


def _episode(eid: str, group: str, rewards: list[float], keys: list[str | None]) -> Episode:
    turns = [
        Turn(
            observation=f"obs {i} ü🦜",
            action="up",
            action_valid=i % 2 == 0,
            reward=r,
            state_key=k,
            response_text="<action>up</action>",
            prompt_ids=[1, 2, 3],
            response_ids=[4, 5],
            response_logprobs=[-0.1234567890123, -2.5e-9],
            finish_reason="stop",
            info={"nested": {"x": [1, 2.5, None]}},
            timings={"generate": 0.01},
        )
        for i, (r, k) in enumerate(zip(rewards, keys))
    ]
    return Episode(
        episode_id=eid,
        env_id="agentgym/Sokoban-v0",
        task_id="7",
        group_id=group,
        seed=3,
        turns=turns,
        terminated=True,
        success=True,
        outcome=sum(rewards),
    )


def test_jsonl_round_trip_is_exact(tmp_path):
    episodes = [
        _episode("a", "g1", [0.1, -1 / 3, 10.0], ["s1", "s2", None]),
        _episode("b", "g1", [], []),
        Episode(
            episode_id="c",
            env_id="e",
            task_id="",
            group_id="g2",
            seed=None,
            error="step failed: boom",
            truncated=True,
        ),
    ]
    path = tmp_path / "episodes.jsonl"
    save_episodes(path, episodes[:2])
    save_episodes(path, episodes[2:], append=True, fsync=True)
    assert load_episodes(path) == episodes
    assert len(path.read_text().splitlines()) == 3


def test_turns_without_token_data_keep_the_shared_empty_tuple(tmp_path):
    """A policy without token data (rules, scripts) leaves a turn's three token fields ``()``, no
    object for the garbage collector to walk, and so does loading them; equal after a round trip."""
    episodes = collect("agentgym/Sokoban-v0", RandomPolicy(), [Task(None, 1)], max_turns=3, progress=False)
    turns = [t for e in episodes for t in e.turns]
    assert turns and all(t.prompt_ids == t.response_ids == t.response_logprobs == () for t in turns)
    assert not any(gc.is_tracked(t.prompt_ids) for t in turns)
    path = tmp_path / "episodes.jsonl"
    save_episodes(path, episodes)
    assert load_episodes(path) == episodes
    (loaded,) = load_episodes(path)
    assert all(t.prompt_ids == () for t in loaded.turns)


@pytest.mark.parametrize(
    "bad", ["{not json", json.dumps({"episode_id": "x"}), "[1, 2]", json.dumps({"unknown_field": 1})]
)
def test_corrupted_line_is_named(tmp_path, bad):
    path = tmp_path / "episodes.jsonl"
    save_episodes(path, [_episode("a", "g", [1.0], ["s"])])
    with open(path, "a") as fh:
        fh.write(bad + "\n")
    with pytest.raises(EpisodeFileError, match=r"episodes.jsonl:2: not a valid episode"):
        load_episodes(path)


def test_turn_table_columns():
    episodes = [
        _episode("a", "g1", [1.0, 2.0], ["s1", "s2"]),
        _episode("b", "g2", [3.0], ["s2"]),
        _episode("c", "g1", [4.0, 5.0, 6.0], ["s1", None, "s1"]),
    ]
    table = TurnTable.from_episodes(episodes)
    assert len(table) == 6 and table.num_episodes == 3 and table.num_groups == 2
    np.testing.assert_array_equal(table.group, [0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(table.episode, [0, 0, 1, 2, 2, 2])
    np.testing.assert_array_equal(table.turn, [0, 1, 0, 0, 1, 2])
    np.testing.assert_array_equal(table.state, [0, 1, 1, 0, -1, 0])
    np.testing.assert_array_equal(table.reward, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(table.valid, [True, False, True, True, False, True])
    np.testing.assert_array_equal(table.episode_length, [2, 1, 3])
    np.testing.assert_array_equal(table.episode_outcome, [3.0, 3.0, 15.0])
    assert [t.reward for t in table.turns()] == [1, 2, 3, 4, 5, 6]


def test_turn_table_empty():
    table = TurnTable.from_episodes([])
    assert len(table) == 0 and table.num_groups == 0
    assert table.roles == () and table.by_role().num_groups == 0


def _seat(seed: int, member: int, agent: str, roles: list[str | None]) -> Episode:
    """A multi-agent episode as recorded: group ``env|task|seed|agent``, roles in turn infos."""
    turns = [
        Turn(observation="", action="", action_valid=True, reward=0.0, info={} if r is None else {"role": r})
        for r in roles
    ]
    return Episode(f"w|-|{seed}|{agent}#{member}", "w", "-", f"w|-|{seed}|{agent}", seed, agent, turns=turns)


def test_turn_table_roles():
    episodes = [
        _seat(1, 0, "p0", ["villager", None]),  # the last turn that has a role gives it
        _seat(1, 0, "p1", ["werewolf", "werewolf"]),
        _seat(1, 0, "p2", []),  # no turn, no role
        _seat(1, 1, "p0", [None, "villager"]),
        _seat(2, 0, "p0", ["seer", "villager"]),
    ]
    table = TurnTable.from_episodes(episodes)
    assert table.roles == ("villager", "werewolf", "")
    np.testing.assert_array_equal(table.episode_role, [0, 1, 2, 0, 0])
    np.testing.assert_array_equal(table.role, [0, 0, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(table.episode_group, [0, 1, 2, 0, 3])  # one group per seat
    # by role: the seed's group (seat suffix removed) split by role, codes by first appearance
    by_role = TurnTable.from_episodes(episodes, group_by="role")
    np.testing.assert_array_equal(by_role.episode_group, [0, 1, 2, 0, 3])
    np.testing.assert_array_equal(by_role.group, [0, 0, 1, 1, 0, 0, 3, 3])
    # by_role() keeps the table's groups (here per seat) and splits them by role; idempotent
    np.testing.assert_array_equal(table.by_role().episode_group, table.episode_group)
    np.testing.assert_array_equal(by_role.by_role().group, by_role.group)
    np.testing.assert_array_equal(by_role.state, table.state)


def test_turn_table_roles_of_single_agent_tables():
    episodes = [
        _episode("a", "g1", [1.0, 2.0], ["s1", "s2"]),
        _episode("b", "g2", [3.0], ["s2"]),
        _episode("c", "g1", [4.0], ["s1"]),
    ]
    table = TurnTable.from_episodes(episodes)
    assert table.roles == ("",)
    np.testing.assert_array_equal(table.role, [0, 0, 0, 0])
    for regrouped in (TurnTable.from_episodes(episodes, group_by="role"), table.by_role()):
        np.testing.assert_array_equal(regrouped.group, table.group)
        np.testing.assert_array_equal(regrouped.episode_group, table.episode_group)


def test_turn_table_unknown_grouping():
    with pytest.raises(ValueError, match="group_by must be 'group_id' or 'role', got 'seat'"):
        TurnTable.from_episodes([], group_by="seat")


def test_to_dataset():
    pytest.importorskip("datasets", reason="datasets is an optional dependency (in the dev extra)")
    ds = to_dataset([_episode("a", "g1", [1.0, 2.0], ["s1", "s2"])])
    assert ds.num_rows == 2
    assert ds[1]["episode_episode_id"] == "a" and ds[1]["turn_index"] == 1
    assert ds[0]["response_ids"] == [4, 5] and json.loads(ds[0]["info"])["nested"]["x"][1] == 2.5
