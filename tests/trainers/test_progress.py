"""SPA's progress estimator: contributions whose sums match outcomes; real backbone features."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from agentgym.episode import Episode, Turn, TurnTable
from agentgym.policies.models import resolve_model
from agentgym.trainers.credit import spa
from agentgym.trainers.progress import ProgressEstimator, turn_features


def synthetic(num_episodes=60, dim=8, seed=0):
    """Turns with random features; an episode's outcome is the sum of w . x_t over its turns."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    episodes, feats = [], []
    for i in range(num_episodes):
        n = int(rng.integers(1, 6))
        x = rng.normal(size=(n, dim))
        feats.append(x)
        turns = [Turn(observation="", action="", action_valid=True, reward=0.0) for _ in range(n)]
        episodes.append(
            Episode(
                episode_id=str(i),
                env_id="e",
                task_id="t",
                group_id=str(i % 6),
                seed=0,
                turns=turns,
                outcome=float((x @ w).sum()),
            )
        )
    return TurnTable.from_episodes(episodes), np.concatenate(feats), w


def test_fit_matches_outcome_sums_and_recovers_turn_credit():
    table, x, w = synthetic()
    est = ProgressEstimator(hidden_size=x.shape[1], epochs=600)
    before = np.mean((np.bincount(table.episode, est.contributions(x)) - table.episode_outcome) ** 2)
    mse = est.fit(x, table)
    assert mse < 0.05 * before
    c = est.contributions(x)
    sums = np.bincount(table.episode, weights=c, minlength=table.num_episodes)
    assert np.corrcoef(sums, table.episode_outcome)[0, 1] > 0.97
    assert np.corrcoef(c, x @ w)[0, 1] > 0.9  # per-turn credit although only sums are supervised
    assert np.isfinite(spa(table, c, estimator="group")).all()


def test_fit_is_deterministic_and_checks_input():
    table, x, _ = synthetic(20)
    a, b = ProgressEstimator(x.shape[1], epochs=50), ProgressEstimator(x.shape[1], epochs=50)
    torch.manual_seed(123)
    a.fit(x, table)
    torch.manual_seed(456)
    b.fit(x, table)
    np.testing.assert_array_equal(a.contributions(x), b.contributions(x))
    with pytest.raises(ValueError, match="features must be"):
        a.fit(x[:3], table)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        a.fit(bad, table)


def test_turn_features_from_the_backbone():
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32)
    turns = [
        Turn(
            observation="",
            action="",
            action_valid=True,
            reward=0.0,
            prompt_ids=list(range(1, 1 + n)),
            response_ids=[200, 201],
        )
        for n in (5, 17, 9)
    ]
    ep = Episode(episode_id="e", env_id="e", task_id="t", group_id="g", seed=0, turns=turns)
    batched = turn_features(model, [ep], token_budget=40)  # several chunks
    for row, turn in enumerate(turns):
        ids = torch.tensor([turn.prompt_ids + turn.response_ids])
        with torch.no_grad():
            alone = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
        np.testing.assert_allclose(batched[row], alone.numpy(), rtol=1e-3, atol=2e-3)  # padding noise
    assert turn_features(model, []).shape == (0, model.config.hidden_size)
