"""`agentgym train` on multi-agent envs: the trained policy's seats, an untrained opponent, role
groups and trained roles; Werewolf for one step and Signaling learned, with the embedded model.

Signaling (agentgym/Signaling-v0) is the small game the embedded model learns on a CPU: a sender
shows its partner the secret card, three rounds, won when every round is. The model plays
``player_1`` (sender in some tasks, receiver in the others) beside the rule-based partner; held-out
success is measured on 32 games of the test split, which training never sees (a rate's standard
error is about 0.08 there; the run gains far more: 4 updates took 0.31 to 0.84 on 64 games).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from agentgym import registry
from agentgym.episode import Episode
from agentgym.trainers.learner import Learner, TrainingRow
from agentgym.trainers.loop import TrainConfig, Trainer, train

from support import FIXTURES
from support.werewolf import SHORTEST_GAME

BOT = {"_target_": "agentgym.envs.signaling.bots.BotPolicy"}
SIGNALING = {
    "env": "agentgym/Signaling-v0",
    "prompt": {
        "history": 0,
        "show_admissible": False,
        "system_prompt": "Play the card game with your partner. Answer with one number.",
        "examples": [
            ["Round 1 of 3. Cards: 2 8 4 6. The secret card is 4. Send your partner one card.", "4"],
            ["Round 1 of 3. Cards: 5 3 9 1. Your partner sent 9. Pick the secret card.", "9"],
        ],
    },  # conf/prompt/signaling.yaml
    "seats": ["player_1"],
    "opponent": BOT,
    "estimator": "grpo",
    "sampling": {"max_tokens": 6},
    "eval_env_kwargs": {"split": "test"},
    "eval_temperature": 1.0,
    "progress": False,
    "learner": {"lr": 2e-4, "lora_rank": 16, "lora_alpha": 32, "micro_batch_tokens": 2048, "seed": 0},
}
WEREWOLF = {
    "env": "agentgym/Werewolf-v0",
    "env_kwargs": SHORTEST_GAME,
    "prompt": {"history": 0},
    "estimator": "grpo",
    "tasks_per_step": 1,
    "group_size": 2,
    "sampling": {"max_tokens": 12},  # a tag and a name; a statement is cut short, which is no matter here
    "train_roles": ["villager"],
    "progress": False,
    "learner": {"lr": 1e-4, "lora_rank": 4, "seed": 0, "micro_batch_tokens": 1024},
}


def test_bad_multiagent_configuration():
    with pytest.raises(ValueError, match=r"seats \['player_9'\] are not agents of the env"):
        TrainConfig.from_dict({**SIGNALING, "seats": ["player_9"]})
    with pytest.raises(ValueError, match="set `opponent`"):
        TrainConfig.from_dict({**SIGNALING, "opponent": None})
    with pytest.raises(ValueError, match="mode=async trains on single-agent envs only"):
        TrainConfig.from_dict({**SIGNALING, "mode": "async"})
    with pytest.raises(ValueError, match="multi-agent games run in this process: no cluster= or sandbox="):
        TrainConfig.from_dict({**SIGNALING, "sandbox": "local"})
    with pytest.raises(ValueError, match="for multi-agent envs; agentgym/Sokoban-v0 is not one"):
        TrainConfig.from_dict({**SIGNALING, "env": "agentgym/Sokoban-v0", "opponent": None})


def test_trained_roles_must_be_roles_the_env_deals(monkeypatch):
    with pytest.raises(ValueError, match=r"train_roles \['vilager'\] are not roles of agentgym/Werewolf-v0"):
        TrainConfig.from_dict({**WEREWOLF, "train_roles": ["villager", "vilager"]})
    without_doctor = {**WEREWOLF, "env_kwargs": {**WEREWOLF["env_kwargs"], "doctors": 0}}
    with pytest.raises(ValueError, match=r"it deals \['werewolf', 'seer', 'villager'\]"):
        TrainConfig.from_dict({**without_doctor, "train_roles": ["doctor"]})
    assert TrainConfig.from_dict({**SIGNALING, "train_roles": ["receiver"]}).train_roles == ["receiver"]
    # an env that lists no roles: the roles cannot be checked, and the config says so
    for name in ("_manifests", "_multiagent", "_multiagent_kwargs"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    monkeypatch.syspath_prepend(str(FIXTURES))
    registry.register_multiagent(
        "test/Counter-parallel-v0", parallel_entry_point="parallel_env:CounterParallelEnv"
    )
    counter = {"env": "test/Counter-parallel-v0", "estimator": "grpo", "train_roles": ["x"]}
    with pytest.warns(UserWarning, match=r"lists no roles \(metadata\['roles'\]\): train_roles=\['x'\]"):
        TrainConfig.from_dict(counter)


@pytest.mark.slow
def test_werewolf_step_trains_the_chosen_role_of_every_seat(tmp_path, monkeypatch):
    """Self-play: the policy holds all five seats; the update gets the villagers' turns only,
    credit compares episodes within a role, and the record has the per-role rates."""
    trained: list[list[TrainingRow]] = []
    batches: list[list[Episode]] = []
    real_update, real_learn = Learner.update, Trainer.learn

    def update(self: Learner, rows: list[TrainingRow]) -> dict[str, float]:
        trained.append(rows)
        return real_update(self, rows)

    def learn(self: Trainer, k: int, episodes: Sequence[Episode], *args: Any) -> dict[str, Any]:
        batches.append(list(episodes))
        return real_learn(self, k, episodes, *args)

    monkeypatch.setattr(Learner, "update", update)
    monkeypatch.setattr(Trainer, "learn", learn)
    trainer = Trainer(TrainConfig.from_dict({**WEREWOLF, "out_dir": str(tmp_path)}))
    try:
        record = asyncio.run(trainer.step(0))
    finally:
        trainer.close()
    assert record["errors"] == 0 and record["turns"] > 0
    assert {"success/villager", "success/werewolf", "success/seer", "success/doctor"} <= set(record)
    (rows,), (episodes,) = trained, batches
    villager_turns = [
        t
        for e in episodes
        if e.turns and e.turns[-1].info.get("role") == "villager"
        for t in e.turns
        if t.response_ids
    ]
    assert rows and len(rows) == len(villager_turns)
    assert {e.agent for e in episodes} == {f"player_{i}" for i in range(1, 6)}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # past 13 minutes on a heavily loaded 2-core machine
def test_signaling_learns_beside_the_bot(tmp_path):
    cfg = TrainConfig.from_dict(
        {
            **SIGNALING,
            "steps": 3,
            "tasks_per_step": 4,
            "group_size": 8,
            "eval_every": 3,
            "eval_tasks": 32,
            "out_dir": str(tmp_path),
        }
    )
    train(cfg)
    records: list[dict[str, Any]] = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    before, after = records[0]["eval_success"], records[-1]["eval_success"]
    print(f"signaling: held-out success {before:.3f} -> {after:.3f}")
    assert after >= before + 0.2, f"did not learn: {before:.3f} -> {after:.3f}"
    trained = records[1:]
    assert {"success/sender", "success/receiver"} <= {key for r in trained for key in r}
    assert all(r["errors"] == 0 for r in trained)
