"""The learner on the embedded model: logprobs, update direction, accumulation, exact resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agentgym.episode import Episode, Turn
from agentgym.policies.models import encode_chat, load_tokenizer
from agentgym.trainers import learner as learner_module
from agentgym.trainers.learner import Learner, LearnerConfig, TrainingRow, rows_from_episodes
from agentgym.trainers.learner import _micro_batches as learner_batches


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")


def make_rows(tokenizer, n=4, advantages=None):
    rows = []
    for i in range(n):
        prompt = encode_chat(tokenizer, [{"role": "user", "content": f"Task {i}: pick a door." * (i + 1)}])
        response = tokenizer(f"<action>open door {i % 3}</action>", add_special_tokens=False)["input_ids"]
        adv = 1.0 if advantages is None else advantages[i]
        rows.append(TrainingRow(prompt, [*response, tokenizer.eos_token_id], adv, []))
    return rows


def params(learner):
    return {k: v.detach().clone() for k, v in learner.trainable_state().items()}


def test_logprobs_match_a_plain_forward(tokenizer):
    learner = Learner(LearnerConfig(lr=1e-5))
    rows = make_rows(tokenizer, 3)
    got = learner.logprobs(rows)
    for row, lp in zip(rows, got):
        ids = torch.tensor([row.prompt_ids + row.response_ids])
        with torch.no_grad():
            logits = learner.model(input_ids=ids).logits[0].float()
        ref = torch.log_softmax(logits, -1)[len(row.prompt_ids) - 1 : -1]
        ref = ref.gather(-1, ids[0, len(row.prompt_ids) :, None]).squeeze(-1)
        np.testing.assert_allclose(lp, ref.tolist(), atol=1e-4)


@pytest.mark.parametrize("packed", [True, False])
def test_rows_that_share_a_prefix_run_it_once_with_the_same_result(tokenizer, monkeypatch, packed):
    """A group's members share their first prompt, and a row may hold another whole (an earlier
    turn): the learner runs their prefix tree (``packed``), each distinct prefix once, or the
    rows left-padded after their distinct prompts, and either way gets the log-probs and gradient
    of whole sequences."""
    monkeypatch.setattr(learner_module, "_packing_pays", lambda rows: packed)
    learner = Learner(LearnerConfig(lr=1e-4))
    shared = make_rows(tokenizer, 2)
    rows = [
        TrainingRow(shared[i % 2].prompt_ids, shared[i % 2].response_ids[: 3 + i], 1.0, []) for i in range(5)
    ] + [
        TrainingRow(shared[0].prompt_ids[:1], [5, 6], 1.0, []),
        TrainingRow(shared[0].prompt_ids + shared[0].response_ids[:3] + [7], [8, 9], 1.0, []),
    ]
    sequences = [r.prompt_ids + r.response_ids for r in rows]
    nodes = len({tuple(s[:k]) for s in sequences for k in range(1, len(s) + 1)})
    assert nodes < sum(map(len, sequences)) / 3
    assert learner_batches(rows, nodes) == [sorted(range(len(rows)), key=lambda i: sequences[i])]
    assert len(learner_batches(rows, nodes - 1)) == 2
    if not packed:
        del rows[5]  # left-padded rows either all have a prompt before their last token or none has

    def plain(row):
        ids = torch.tensor([row.prompt_ids + row.response_ids])
        logp = torch.log_softmax(learner.model(input_ids=ids).logits[0].float(), -1)
        return logp[len(row.prompt_ids) - 1 : -1].gather(-1, ids[0, len(row.prompt_ids) :, None])

    def gradient(total):
        learner.model.zero_grad(set_to_none=True)
        total.backward()
        return torch.cat([p.grad.flatten() for p in learner.model.parameters() if p.requires_grad])

    expected = gradient(sum(plain(r).sum() for r in rows))
    logp, mask, _, _ = learner._forward(rows)
    assert mask.sum(1).tolist() == [len(r.response_ids) for r in rows]
    got = gradient(logp.sum())
    for row, lp in zip(rows, learner.logprobs(rows)):
        np.testing.assert_allclose(lp, plain(row).flatten().tolist(), atol=1e-4)
    assert (got - expected).norm() / expected.norm() < 1e-4


def test_update_moves_logprobs_the_way_of_the_advantage(tokenizer):
    learner = Learner(LearnerConfig(lr=1e-4))
    rows = make_rows(tokenizer, 2, advantages=[1.0, -1.0])
    before = [sum(lp) for lp in learner.logprobs(rows)]
    metrics = learner.update(rows)
    after = [sum(lp) for lp in learner.logprobs(rows)]
    assert after[0] > before[0] and after[1] < before[1]
    assert learner.step == 1 and metrics["grad_norm"] > 0 and metrics["pg_clipfrac"] == 0.0
    assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # recomputed old logprobs


def test_micro_batches_accumulate_to_the_same_update(tokenizer):
    rows = make_rows(tokenizer, 4, advantages=[1.0, -0.5, 0.3, -1.0])
    results, metrics = [], []
    for budget in (100_000, 1):  # one micro-batch vs one row at a time
        learner = Learner(LearnerConfig(lr=1e-4, micro_batch_tokens=budget, lora_rank=4))
        initial = params(learner)
        metrics.append(learner.update(rows))
        after = params(learner)
        results.append(torch.cat([(after[k] - initial[k]).flatten() for k in sorted(after)]))
    for name in ("loss", "grad_norm", "entropy"):
        assert metrics[0][name] == pytest.approx(metrics[1][name], rel=1e-5)
    # Compare whole updates: Adam turns float noise on a near-zero gradient into a visible
    # difference of that one element, but not of the update as a whole.
    assert (results[0] - results[1]).norm() / results[0].norm() < 1e-3


def test_decoupled_update_weights_stale_turns(tokenizer):
    """old_logprobs="decoupled": the proximal log-probs are recomputed at the start of the update
    (two mini-batches: a real recompute), the generator's are the behaviour policy's."""
    learner = Learner(LearnerConfig(lr=1e-4, lora_rank=4, mini_batches=2, old_logprobs="decoupled"))
    rows = make_rows(tokenizer, 2, advantages=[1.0, -1.0])
    for row, lp in zip(rows, learner.logprobs(rows)):
        row.generator_logprobs = lp  # generated by these very weights: w = 1
    metrics = learner.update(rows)
    assert learner.step == 2 and metrics["grad_norm"] > 0
    assert (metrics["is_weight_mean"], metrics["is_truncated_frac"], metrics["staleness_mean"]) == (1, 0, 0)
    # Two optimizer steps later, replay the rows as generated by version 0 with the generator
    # twice as likely (w = 0.5) on row 0's tokens and a quarter as likely (w = 4, truncated to 2)
    # on row 1's. Each mini-batch holds one row: mean w over steps (0.5 + 2) / 2.
    for row, lp, shift in zip(rows, learner.logprobs(rows), (math.log(2), -math.log(4))):
        row.generator_logprobs = [x + shift for x in lp]
    metrics = learner.update(rows)
    assert metrics["is_weight_mean"] == pytest.approx(1.25, rel=1e-5)
    assert metrics["is_truncated_frac"] == 0.5 and metrics["staleness_mean"] == 2.0
    assert learner.step == 4 and metrics["grad_norm"] > 0
    rows[0].generator_logprobs = []
    with pytest.raises(ValueError, match="old_logprobs='decoupled' needs the generator's log-prob"):
        learner.update(rows)


def with_value_targets(rows, targets):
    for row, target in zip(rows, targets):
        row.value_target, row.old_value = float(target), 0.0
    return rows


def test_value_head_learns_the_value_targets(tokenizer):
    learner = Learner(LearnerConfig(lr=1e-4, lora_rank=4, value_head=True, value_lr=1e-2))
    rows = with_value_targets(make_rows(tokenizer, 2, advantages=[0.0, 0.0]), [1.0, -1.0])
    assert learner.values(rows).tolist() == [0.0, 0.0]  # zero-initialised head
    for _ in range(5):
        metrics = learner.update(rows)
        for row, v in zip(rows, learner.values(rows)):
            row.old_value = float(v)
    values = learner.values(rows)
    assert values[0] > 0.2 and values[1] < -0.2 and metrics["vf_loss"] > 0
    plain = Learner(LearnerConfig(lora_rank=4))
    with pytest.raises(ValueError, match="no value head"):
        plain.values(rows)
    with pytest.raises(ValueError, match="needs value_target and old_value"):
        learner.update(make_rows(tokenizer, 2))


@pytest.mark.parametrize("lora_rank, value_head", [(0, False), (4, False), (4, True)])
def test_resume_is_bitwise_exact(tokenizer, tmp_path, lora_rank, value_head):
    config = LearnerConfig(
        lr=1e-4, lora_rank=lora_rank, warmup_steps=3, mini_batches=2, value_head=value_head
    )
    # Three updates of two rows (one per mini-batch), saved after the first: the resumed run
    # must pick up the optimizer's moments and the warm-up schedule mid-way.
    batches = [
        with_value_targets(
            make_rows(tokenizer, 2, advantages=list(np.random.default_rng(k).normal(size=2))),
            np.random.default_rng(k + 10).normal(size=2),
        )
        for k in range(3)
    ]
    straight = Learner(config)
    for k, batch in enumerate(batches):
        straight.update(batch)
        if k == 0:
            straight.save_checkpoint(tmp_path / "ckpt", extra={"data_position": 1})
    resumed = Learner(config)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == {"data_position": 1}
    assert resumed.step == 2  # 1 update x 2 mini-batches
    for batch in batches[1:]:
        resumed.update(batch)
    a, b = params(straight), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_bad_input(tokenizer):
    learner = Learner(LearnerConfig(lora_rank=4))
    assert learner.update([]) == {"skipped_empty_batch": 1.0}
    turn = Turn(
        observation="",
        action="",
        action_valid=True,
        reward=0.0,
        prompt_ids=[1, 2],
        response_ids=[3],
        response_logprobs=[-1.0],
        policy_version=3,
    )
    episodes = [Episode(episode_id="e", env_id="x", task_id="t", group_id="g", seed=0, turns=[turn])]
    with pytest.raises(ValueError, match="NaN"):
        rows_from_episodes(episodes, np.array([np.nan]))
    with pytest.raises(ValueError, match="one advantage per turn"):
        rows_from_episodes(episodes, np.array([1.0, 2.0]))
    rows = rows_from_episodes(episodes, np.array([0.5]))
    assert rows[0].policy_version == 3
    gen = Learner(LearnerConfig(lora_rank=4, old_logprobs="generator"))
    rows[0].generator_logprobs = [-1.0, -2.0]
    with pytest.raises(ValueError, match="do not match its response length"):
        gen.update(rows)
    with pytest.raises(ValueError, match="needs a prompt"):
        learner.update([TrainingRow([], [3], 1.0, [])])
    assert learner.step == 0
    for bad, match in (
        (dict(old_logprobs="stale"), "old_logprobs must be one of"),
        (dict(is_cap=0.9), "is_cap"),
    ):
        with pytest.raises(ValueError, match=match):
            LearnerConfig(**bad)
