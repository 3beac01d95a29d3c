"""The self-play league (``agentgym.trainers.league``): the sampling rule, snapshots, eviction and
resume, per-task seating in ``multiagent.acollect``, the configurations it refuses, and one tiny
``agentgym train`` on Signaling against its own snapshots, whose league ``agentgym eval`` plays.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentgym import multiagent
from agentgym.conf import compose, to_dict
from agentgym.envs.signaling import ENV_ID
from agentgym.envs.signaling.bots import BotPolicy
from agentgym.harness.eval import EvalSetupError, compose_eval_config, run_eval
from agentgym.policy import Generation, GenerationRequest
from agentgym.rollout import Task
from agentgym.trainers.league import LATEST, League, LeagueConfig, Member, choose
from agentgym.trainers.loop import TrainConfig, Trainer, train

LEAGUE = [
    f"env={ENV_ID}",
    "prompt=signaling",
    "seats=[player_1]",
    "opponent=league",
    "estimator=grpo",
    "sampling.max_tokens=6",
    "progress=false",
    "learner.lora_rank=16",
    "learner.lora_alpha=32",
    "learner.lr=2e-4",
]


def league_config(*overrides: str) -> TrainConfig:
    """A Signaling run against its league, with ``overrides`` (Hydra syntax)."""
    return TrainConfig.from_dict(to_dict(compose("train", [*LEAGUE, *overrides]), resolve=True))


# ---------------------------------------------------------------------------------------------
# The sampling rule


def test_choose_shares_are_latest_then_uniform() -> None:
    members = ["a", "b", "c"]
    drawn = Counter(choose(members, 0.25, step, seed, salt=7) for step in range(40) for seed in range(100))
    shares = {name: count / 4000 for name, count in drawn.items()}
    assert set(shares) == {LATEST, *members}
    assert shares[LATEST] == pytest.approx(0.25, abs=0.03)
    for name in members:
        assert shares[name] == pytest.approx(0.25, abs=0.03)  # (1 - 0.25) / 3
    assert Counter(choose(members, 1.0, s, 0) for s in range(50)) == {LATEST: 50}
    assert LATEST not in {choose(members, 0.0, s, 0) for s in range(50)}


def test_choose_is_a_pure_function_of_step_seed_and_salt() -> None:
    members = [f"step-{i:06d}" for i in range(1, 6)]
    draws = [choose(members, 0.5, step, seed, 3) for step in range(10) for seed in range(10)]
    assert draws == [choose(members, 0.5, step, seed, 3) for step in range(10) for seed in range(10)]
    assert draws != [choose(members, 0.5, step, seed, 4) for step in range(10) for seed in range(10)]


def test_empty_league_plays_the_live_policy() -> None:
    assert {choose([], 0.0, step, seed) for step in range(5) for seed in range(5)} == {LATEST}


def _save(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "weights").write_text("w", encoding="utf-8")


def _listed(directory: Path) -> list[int]:
    return [m["step"] for m in json.loads((directory / "league.json").read_text())["members"]]


def test_snapshots_evict_the_oldest_and_survive_resume(tmp_path: Path) -> None:
    config = LeagueConfig(snapshot_every=2, max_members=2, latest=0.0)
    league = League(tmp_path / "league", config, lambda m: BotPolicy(), salt=1)
    assert league.members == [] and _listed(tmp_path / "league") == []
    assert [league.due(s) for s in range(5)] == [False, False, True, False, True]
    for step in (2, 4, 6):
        member = league.snapshot(step, _save, {"_target_": "agentgym.envs.signaling.bots.BotPolicy"})
        assert member.policy["model"] == member.name  # relative to the league: it may move
    assert not league.due(6)
    assert [m.name for m in league.members] == ["step-000004", "step-000006"]
    assert _listed(tmp_path / "league") == [4, 6]
    assert sorted(p.name for p in (tmp_path / "league").iterdir()) == [
        "league.json",
        "step-000004",
        "step-000006",
    ]
    choices = league.choices(7, range(20))
    assert set(choices.values()) == {"step-000004", "step-000006"}

    again = League(tmp_path / "league", config, lambda m: BotPolicy(), resume_at=7, salt=1)
    assert again.members == league.members and again.choices(7, range(20)) == choices
    earlier = League(tmp_path / "league", config, lambda m: BotPolicy(), resume_at=5, salt=1)
    assert [m.step for m in earlier.members] == [4] and _listed(tmp_path / "league") == [4]
    fresh = League(tmp_path / "league", config, lambda m: BotPolicy())
    assert fresh.members == [] and [p.name for p in (tmp_path / "league").iterdir()] == ["league.json"]


class Closable(BotPolicy):
    """The Signaling bot, recording whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


def test_member_policies_are_loaded_once_and_the_least_recent_closed(tmp_path: Path) -> None:
    loaded: list[str] = []
    policies: dict[str, Closable] = {}

    def load(member: Member) -> Closable:
        loaded.append(member.name)
        return policies.setdefault(member.name, Closable())

    league = League(tmp_path, LeagueConfig(cached=1), load)
    for step in (1, 2, 3):
        league.snapshot(step, _save, {"_target_": "x"})

    async def draws() -> None:
        assert set(await league.policies({LATEST, "step-000001", "step-000002"})) == {
            "step-000001",
            "step-000002",
        }
        await league.policies({"step-000002"})  # keeps one: step-000002, drawn last
        assert policies["step-000001"].closed and not policies["step-000002"].closed
        await league.policies({"step-000002", "step-000003"})
        await league.aclose()

    asyncio.run(draws())
    assert loaded == ["step-000001", "step-000002", "step-000003"]
    assert all(p.closed for p in policies.values())


class Recorder:
    """A real policy (the Signaling bot) that records each batch's sessions."""

    max_batch_size = 64

    def __init__(self) -> None:
        self.bot = BotPolicy()
        self.batches: list[list[str]] = []

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.batches.append([str(r.session) for r in requests])
        return await self.bot.generate(requests)


def test_acollect_seats_each_task_and_batches_the_shared_policy_across_tasks() -> None:
    """A seating per task: every game of a task has its opponent, and the policy that plays in
    every task answers requests of several tasks in one batch."""
    policy, first, second = Recorder(), Recorder(), Recorder()
    tasks = [Task(None, s) for s in range(6)]

    def seating(task: Task) -> dict[str, Any]:
        return {"player_1": policy, "player_2": first if (task.seed or 0) % 2 else second}

    episodes = multiagent.collect(ENV_ID, seating, tasks, group_size=3, concurrency=18, progress=False)
    assert len(episodes) == 36 and all(e.error is None for e in episodes)

    def seeds(recorder: Recorder) -> set[int]:
        return {int(s.split("|")[2]) for batch in recorder.batches for s in batch}

    assert seeds(first) == {1, 3, 5} and seeds(second) == {0, 2, 4} and seeds(policy) == set(range(6))
    assert max(len({s.split("|")[2] for s in batch}) for batch in policy.batches) > 1
    with pytest.raises(ValueError, match="policies has no entry for agent 'player_2'"):
        multiagent.collect(ENV_ID, lambda task: {"player_1": policy}, tasks, progress=False)


# ---------------------------------------------------------------------------------------------
# What a league refuses


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["opponent=leage"], "opponent must be a policy config .* or 'league', got 'leage'"),
        (["env=agentgym/Sokoban-v0", "seats=[]"], "opponent=league is for multi-agent envs"),
        (["mode=async"], "opponent=league trains with mode=sync only"),
        (["generator=vllm"], "use generator=hf"),
        (["seats=[]"], "opponent=league plays the seats that `seats` leaves"),
        (["seats=[player_1,player_2]"], "opponent=league plays the seats that `seats` leaves"),
        (["league.latest=1.5"], r"league.latest must be in \[0, 1\], got 1.5"),
        (["league.snapshot_every=0"], "league.snapshot_every must be >= 1, got 0"),
        (["league.max_members=0"], "league.max_members must be >= 1, got 0"),
        (
            ["opponent={_target_: agentgym.envs.signaling.bots.BotPolicy}", "league.latest=0.2"],
            r"league\.\* apply with opponent=league only",
        ),
    ],
)
def test_bad_league_configuration(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        league_config(*overrides)


def test_eval_league_errors(tmp_path: Path) -> None:
    def run(*overrides: str) -> None:
        cfg = compose_eval_config(
            [f"env={ENV_ID}", "tasks=1", f"out_dir={tmp_path / 'run'}", "progress=false", *overrides]
        )
        asyncio.run(run_eval(cfg))

    with pytest.raises(EvalSetupError, match="no league to read at .*league.json"):
        run("seats=[player_1]", f"league={tmp_path / 'nowhere'}")
    with pytest.raises(EvalSetupError, match="name the policy's seats"):
        run(f"league={tmp_path}")
    (tmp_path / "league.json").write_text('{"members": []}', encoding="utf-8")
    with pytest.raises(EvalSetupError, match="has no member yet, and there is no `opponent`"):
        run("seats=[player_1]", f"league={tmp_path}")
    with pytest.raises(EvalSetupError, match="league_pairs=true plays the members of a league: give league="):
        run("seats=[player_1]", "league_pairs=true")


# ---------------------------------------------------------------------------------------------
# Training against the league, then evaluating against it


@pytest.mark.slow
def test_train_against_the_league_then_eval_it(tmp_path: Path) -> None:
    """Two updates of one task x two games (of one round), every group against a frozen member
    when there is one: update 1 plays the live policy (empty league), update 2 the snapshot of
    update 1; the run leaves two members, which a resumed run completes and ``agentgym eval``
    plays. About 2 minutes on a loaded 2-core machine with three rounds, a minute with one."""
    out = tmp_path / "run"
    overrides = [
        "+env_kwargs.rounds=1",  # one turn per seat and game
        "league.latest=0",
        "steps=2",
        "tasks_per_step=1",
        "group_size=2",
        "eval_every=2",
        "eval_tasks=1",
        f"out_dir={out}",
    ]
    records = train(league_config(*overrides))
    assert [r["league/opponents"] for r in records] == [[LATEST], ["step-000001"]]
    assert [(r["league/members"], r["league/latest_share"]) for r in records] == [(0, 1.0), (1, 0.0)]
    assert all(r["errors"] == 0 and r["turns"] > 0 for r in records)
    assert _listed(out / "league") == [1, 2]
    assert (out / "league" / "step-000002" / "adapter_config.json").is_file()

    # Killed between the checkpoint of update 2 and its snapshot: the resumed run takes it.
    listing = json.loads((out / "league" / "league.json").read_text())
    listing["members"] = listing["members"][:1]
    (out / "league" / "league.json").write_text(json.dumps(listing))
    trainer = Trainer(league_config(*overrides, "resume=true"))
    try:
        assert trainer.league is not None and trainer.start_step == 2
        assert [m.step for m in trainer.league.members] == [1, 2]
    finally:
        trainer.close()

    out = out.rename(tmp_path / "moved")  # a league names its members' folders relative to it
    cfg = compose_eval_config(
        [
            f"env={ENV_ID}",
            "+env_kwargs.rounds=1",
            "tasks=2",
            f"out_dir={tmp_path / 'eval'}",
            "progress=false",
            "prompt=signaling",
            "seats=[player_1]",
            "opponent={_target_: agentgym.envs.signaling.bots.BotPolicy}",
            f"league={out / 'league'}",
            "league_pairs=true",
            "policy=scripted",
            "policy.act=agentgym.envs.signaling.bots:expert_action",
        ]
    )
    _, summary = asyncio.run(run_eval(cfg))
    names = [f"{ENV_ID} vs {o}" for o in ("BotPolicy", "step-000001", "step-000002")]
    pair = f"{ENV_ID}: step-000001 vs step-000002"  # the members play each other too
    assert list(summary["entries"]) == [*names, pair] and summary["complete"]
    assert all(summary["entries"][n]["games_played"] == 2 for n in [*names, pair])
    assert summary["episodes"] == 6  # the policy's seats only: not the members' own game
    assert {r["player"]: r["games"] for r in summary["ratings"]} == {
        "policy": 6,
        "BotPolicy": 2,
        "step-000001": 4,
        "step-000002": 4,
    }
