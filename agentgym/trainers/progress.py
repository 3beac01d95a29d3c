"""SPA's progress estimator: per-turn contributions c_t whose sum matches the episode outcome.

Choice (ALGORITHMS.md leaves it open): a small regression head on the *frozen* policy backbone.
A turn's feature is the backbone's last hidden state at the turn's last response token (the
model has then read the observation it acted on and its own action); the head maps it to c_t.
The head is trained on collected episodes so that sum_t c_t approximates the outcome R (MSE on
the sum; single turns are unconstrained), and retrained on the newest episodes every N
iterations by the caller. Reading the backbone costs one no-grad forward per turn row; training
the head costs milliseconds. The contributions become dense rewards through
:func:`agentgym.trainers.credit.spa_rewards`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentgym.episode import Episode, TurnTable
from agentgym.policies.batching import budget_batches, left_pad

__all__ = ["ProgressEstimator", "turn_features"]


@torch.no_grad()
def turn_features(model: Any, episodes: Sequence[Episode], token_budget: int = 8192) -> np.ndarray:
    """[rows, hidden] last-layer hidden states at each turn's last response token, in TurnTable
    row order (a turn without response tokens reads its last prompt token)."""
    turns = [t for ep in episodes for t in ep.turns]
    sequences = [[*t.prompt_ids, *t.response_ids] for t in turns]
    if not sequences:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    device = next(model.parameters()).device
    out = np.zeros((len(sequences), model.config.hidden_size), dtype=np.float32)
    for chunk in budget_batches([len(s) for s in sequences], token_budget):
        ids, mask, positions = left_pad([sequences[i] for i in chunk], 0, device)
        hidden = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=False,
            output_hidden_states=True,
            logits_to_keep=1,
        ).hidden_states[-1]
        out[chunk] = hidden[:, -1].float().cpu().numpy()  # left-padded: last token at the end
    return out


@dataclass
class ProgressEstimator:
    """A two-layer regression head c = w2 tanh(W1 x + b1) + b2 trained on episode outcomes."""

    hidden_size: int
    width: int = 64
    lr: float = 3e-3
    epochs: int = 200
    weight_decay: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        self.head = torch.nn.Sequential(
            torch.nn.Linear(self.hidden_size, self.width), torch.nn.Tanh(), torch.nn.Linear(self.width, 1)
        )
        for p in self.head.parameters():  # deterministic initialisation, whatever the global RNG
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
        self.scale = torch.ones(self.hidden_size)
        """Per-feature scale set by :meth:`fit` (features are divided by it)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fitted head and feature scale (what a checkpoint needs to resume the estimator)."""
        return {**{f"head.{k}": v for k, v in self.head.state_dict().items()}, "scale": self.scale}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
        self.scale = state["scale"].clone()

    def contributions(self, features: np.ndarray) -> np.ndarray:
        """c_t for each row of ``features``."""
        with torch.no_grad():
            x = torch.as_tensor(features, dtype=torch.float32) / self.scale
            return self.head(x).squeeze(-1).double().numpy()

    def fit(self, features: np.ndarray, table: TurnTable) -> float:
        """Train the head so that each episode's sum of contributions matches its outcome (MSE
        on the sums, full batch); returns the final mean squared error. Episodes without turns
        are left out."""
        if features.shape != (len(table), self.hidden_size):
            raise ValueError(f"features must be ({len(table)}, {self.hidden_size}), got {features.shape}")
        if not np.isfinite(features).all() or not np.isfinite(table.episode_outcome).all():
            raise ValueError("features and outcomes must be finite")
        has_turns = torch.as_tensor(table.episode_length > 0)
        x = torch.as_tensor(features, dtype=torch.float32)
        self.scale = x.std(dim=0).clamp_min(1e-6) if len(x) > 1 else torch.ones(self.hidden_size)
        x = x / self.scale
        episode = torch.as_tensor(table.episode)
        target = torch.as_tensor(table.episode_outcome, dtype=torch.float32)[has_turns]
        optimizer = torch.optim.Adam(self.head.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        loss = torch.tensor(0.0)
        for _ in range(self.epochs):
            c = self.head(x).squeeze(-1)
            sums = torch.zeros(table.num_episodes).index_add(0, episode, c)[has_turns]
            loss = torch.mean((sums - target) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return float(loss.detach())
