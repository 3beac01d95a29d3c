"""Losses against direct formulas, branch by branch."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym.trainers.losses import aggregate, kl_penalty, policy_loss, value_loss


def one(logp_new: float, logp_old: float, adv: float, **kw) -> float:
    out = policy_loss(
        torch.tensor([[logp_new]]), torch.tensor([[logp_old]]), torch.tensor([[adv]]), torch.ones(1, 1), **kw
    )
    return out.loss.item()


@pytest.mark.parametrize(
    "ratio,adv,expected",
    [
        (1.1, 1.0, -1.1),  # inside the trust region
        (1.5, 1.0, -1.2),  # A > 0, ratio above 1 + eps: clipped
        (0.5, 1.0, -0.5),  # A > 0, ratio below 1 - eps: unclipped (max picks it)
        (0.5, -1.0, 0.8),  # A < 0, ratio below 1 - eps: clipped at 0.8
        (2.0, -1.0, 2.0),  # A < 0, ratio above 1 + eps: unclipped 2.0 (below dual cap 3)
        (5.0, -1.0, 3.0),  # A < 0, ratio 5: dual-clip caps the loss at c |A| = 3
    ],
)
def test_ppo_clip_branches(ratio, adv, expected):
    assert one(math.log(ratio), 0.0, adv) == pytest.approx(expected, rel=1e-6)


def test_clip_higher_and_no_dual_clip():
    assert one(math.log(1.5), 0.0, 1.0, clip_high=0.28) == pytest.approx(-1.28)
    assert one(math.log(5.0), 0.0, -1.0, dual_clip=None) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        one(0.0, 0.0, 1.0, dual_clip=0.5)


def test_clipfrac_and_approx_kl():
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5, 5.0]]))
    out = policy_loss(logp, torch.zeros(1, 4), torch.tensor([[1.0, 1.0, -1.0, -1.0]]), torch.ones(1, 4))
    assert out.pg_clipfrac.item() == pytest.approx(0.75)  # 1.5 clipped, 0.5 clipped, 5.0 dual
    r = torch.tensor([1.5, 1.0, 0.5, 5.0])
    assert out.approx_kl.item() == pytest.approx((r - torch.log(r) - 1).mean().item(), rel=1e-5)


def test_aggregations():
    loss = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 / 4 + 4 / 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(0.5)
    assert aggregate(loss, torch.zeros_like(mask), "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(loss, mask, "mean")


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    d = logp - ref
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), d)
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.exp(ref - logp) - (ref - logp) - 1)
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([50.0]), "low_var_kl").item() == 10.0
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(logp, ref, "k4")


def test_kl_and_entropy_terms():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.2, -1.8]])
    adv, mask, ent = torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([[0.5, 1.5]])
    out = policy_loss(logp, old, adv, mask, ref_logp=ref, kl_coef=0.01, entropy=ent, entropy_coeff=0.001)
    k3 = (torch.exp(ref - logp) - (ref - logp) - 1).mean()
    assert out.loss.item() == pytest.approx(-1.0 + 0.01 * k3.item() - 0.001 * 1.0, rel=1e-6)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()


def test_value_loss():
    v, old, ret, mask = (
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([[0.5, 0.0]]),
        torch.tensor([[0.0, 2.0]]),
        torch.tensor([[1, 1]]),
    )
    # position 0: (1-0)^2 = 1 vs clipped 0.5+0.2=0.7 -> 0.49: max 1; position 1: 4 vs 4
    assert value_loss(v, old, ret, mask).item() == pytest.approx(0.5 * (1 + 4) / 2)
    assert value_loss(v, old, ret, mask, clip=None).item() == pytest.approx(0.5 * 2.5)
    # the clipped branch is larger: V jumped straight to the return, beyond the clip range
    assert value_loss(
        torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]]), torch.tensor([[1]])
    ).item() == pytest.approx(0.5 * (0.2 - 2.0) ** 2)
