"""IGPO scoring: batched teacher forcing, each chain of growing contexts run once, equals
one-context-at-a-time scoring."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from agentgym.episode import Episode, Turn, TurnTable
from agentgym.policies.models import load_tokenizer, resolve_model
from agentgym.prompting import Prompter
from agentgym.trainers.credit import igpo
from agentgym.trainers.info_gain import answer_scores, naive_answer_scores, scoring_sequences


def episode(i: int, turns: int) -> Episode:
    ts = [
        Turn(
            observation=f"Passage {k}: the capital of Veloria is Marn{'e' * k}.",
            action=f"search {k}",
            action_valid=True,
            reward=0.0,
            response_text=f"<search>capital of Veloria {k}</search>",
        )
        for k in range(turns)
    ]
    return Episode(
        episode_id=str(i),
        env_id="search",
        task_id=str(i),
        group_id="g",
        seed=0,
        instruction=f"Question {i}: what is the capital of Veloria?",
        turns=ts,
    )


@pytest.fixture(scope="module")
def model_and_tokenizer():
    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32)
    return model.eval(), load_tokenizer("smollm2-135m")


def test_batched_equals_naive(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    # Episode 0's three contexts are each a prefix of the next, and so are episode 2's first
    # three (its fourth drops the first turn: history=2). The last episode repeats the first:
    # scored alone with it, the prefix shared by the micro-batch is longer than the first two
    # contexts.
    prompter = Prompter(family="search", history=2, action_tag="search")
    episodes = [episode(0, 3), episode(1, 1), episode(2, 4), episode(0, 3)]
    answers = ["Marne", "Marn", "the city of Marnee", "Marne"]
    # one micro-batch, several, chains cut to one context each, and the repeated episode alone
    every = (0, 1, 2, 3)
    naive_of: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}  # one reference per set
    for chosen, budget in ((every, 100_000), (every, 600), (every, 200), ((0, 3), 100_000)):
        these, their_answers = [episodes[i] for i in chosen], [answers[i] for i in chosen]
        got = answer_scores(model, tokenizer, prompter, these, their_answers, token_budget=budget)
        if chosen not in naive_of:
            naive_of[chosen] = naive_answer_scores(model, tokenizer, prompter, these, their_answers)
        for batched, naive in zip(got, naive_of[chosen]):
            np.testing.assert_allclose(batched, naive, atol=1e-4)
    rows, initial = answer_scores(model, tokenizer, prompter, episodes, answers)
    assert rows.shape == (11,) and initial.shape == (4,)
    assert np.all(rows < 0) and len(set(np.round(rows, 6))) > 3  # contexts change the score
    table = TurnTable.from_episodes(episodes)
    assert np.isfinite(igpo(table, rows, initial, np.array([1.0, 0.0, 0.5, 1.0]))).all()


def test_answer_span_is_the_answer_only(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    prompter = Prompter(family="search")
    ((ids, start, end),) = scoring_sequences(tokenizer, prompter, [episode(0, 1)], ["Marne river"])
    assert tokenizer.decode(ids[start:end]).strip() == "Marne river"
    assert tokenizer.decode(ids[end:]).strip() == "</answer>"
    with pytest.raises(ValueError, match="one answer per episode"):
        scoring_sequences(tokenizer, prompter, [episode(0, 1)], [])
