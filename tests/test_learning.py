"""Learning, end to end on the CPU: GRPO and GiGPO each raise held-out success of the embedded
model on agentgym/GuessNumber-v0 within a few updates.

SmolLM2-135M answers this task in format about 40% of the time and wins about a third of its
games, so there is signal in most groups; four LoRA updates of 32 episodes lift it. The held-out
evaluation plays the same games before and after training with the same sampling seeds (the
rollout engine derives them from task seed, member and turn), so the two evaluations are paired
game by game: a game won or lost both times says nothing about training, and McNemar's exact
test on the games whose outcome changed asks whether training won more of them than it lost.
The overrides are the README's learning run.
"""

from __future__ import annotations

import json
import math

import pytest
from omegaconf import OmegaConf

from agentgym.conf import compose
from agentgym.trainers.loop import TrainConfig, train

pytestmark = pytest.mark.slow  # minutes each on 2 cores; part of CI

README_RUN = ["env=agentgym/GuessNumber-v0", "prompt=guess_number", "steps=4", "groups_per_step=4",
              "group_size=8", "max_turns=4", "max_tokens=6", "learner.lora_rank=16",
              "learner.lora_alpha=32", "learner.lr=2e-4", "learner.micro_batch_tokens=2048",
              "eval_every=4", "eval_tasks=128", "eval_temperature=1.0", "progress=false"]


def mcnemar(before: list[int], after: list[int]) -> tuple[int, int, float]:
    """McNemar's exact one-sided test of paired outcomes: the games won only after, those won
    only before, and the probability of at least that many only-after wins among the changed
    games if training changed nothing (each change equally likely either way)."""
    gained = sum(a > b for b, a in zip(before, after, strict=True))
    lost = sum(b > a for b, a in zip(before, after, strict=True))
    changed = gained + lost
    p = sum(math.comb(changed, k) for k in range(gained, changed + 1)) / 2 ** changed
    return gained, lost, p


def test_mcnemar() -> None:
    assert mcnemar([0, 0, 1, 1], [1, 1, 1, 0]) == (2, 1, 0.5)
    assert mcnemar([0] * 10, [1] * 10)[2] == 2 ** -10
    assert mcnemar([1, 0], [1, 0]) == (0, 0, 1.0)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_training_raises_held_out_success(tmp_path, estimator):
    cfg = compose("train", [*README_RUN, f"estimator={estimator}", f"out_dir={tmp_path}"])
    train(TrainConfig.from_dict(OmegaConf.to_container(cfg, resolve=True)))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["step"] == -1 and records[-1]["step"] == 3
    before, after = records[0]["eval_outcomes"], records[-1]["eval_outcomes"]
    gained, lost, p = mcnemar(before, after)
    print(f"{estimator}: held-out success {records[0]['eval_success']:.3f} -> "
          f"{records[-1]['eval_success']:.3f}; games gained {gained}, lost {lost}, p = {p:.4f}")
    print(f"{estimator} outcomes before {''.join(map(str, before))}")
    print(f"{estimator} outcomes after  {''.join(map(str, after))}")
    assert p < 0.01, f"{estimator} did not learn: {gained} games gained, {lost} lost (p = {p:.3f})"
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
