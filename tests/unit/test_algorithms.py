"""Reference tests for hermes_stack.trainer.algorithms: fixed tensors, expectations computed by hand (see comments)."""

from __future__ import annotations

import math

import pytest
import torch

from hermes_stack.trainer import algorithms as alg

TOL = 1e-6


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual, t(expected) if not isinstance(expected, torch.Tensor) else expected,
                               atol=TOL, rtol=0)


# ------------------------------------------------------------------ group-relative advantages


def test_group_relative_mean_centred_only():
    # mean(1.1, 0.1, 0.0) = 0.4
    close(alg.group_relative_advantages(t([1.1, 0.1, 0.0]), normalize_std=False), [0.7, -0.3, -0.4])


def test_group_relative_std_normalised():
    # mean 0.5, population std 0.5: 0.5 / (0.5 + 1e-6)
    a = 0.5 / (0.5 + 1e-6)
    close(alg.group_relative_advantages(t([1.0, 0.0, 0.0, 1.0])), [a, -a, -a, a])


def test_group_relative_eps_is_used():
    # eps = 0.5: 0.5 / (0.5 + 0.5) = 0.5
    close(alg.group_relative_advantages(t([1.0, 0.0]), eps=0.5), [0.5, -0.5])


def test_group_relative_batched_groups_and_equal_scores_give_zero():
    got = alg.group_relative_advantages(t([[2.0, 2.0, 2.0], [0.0, 0.0, 3.0]]), normalize_std=False)
    close(got, [[0.0, 0.0, 0.0], [-1.0, -1.0, 2.0]])
    close(alg.group_relative_advantages(t([0.3, 0.3, 0.3, 0.3])), [0.0, 0.0, 0.0, 0.0])


# ------------------------------------------------------------------ token-level rewards, GAE, returns


def test_terminal_rewards_sit_on_last_completion_token():
    mask = t([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    close(alg.terminal_rewards(t([1.0, 0.5, 7.0]), mask), [[0, 0, 1.0, 0], [0, 0, 0, 0.5], [0, 0, 0, 0]])


def test_gae_single_sequence_by_hand():
    # prompt at t=0 (masked out, value 9 must be ignored); gamma 1, lam 0.5
    # t3: delta = 1 + 0 - 0.7 = 0.3                 A3 = 0.3
    # t2: delta = 0 + 0.7 - 0.6 = 0.1               A2 = 0.1 + 0.5 * 0.3  = 0.25
    # t1: delta = 0 + 0.6 - 0.5 = 0.1               A1 = 0.1 + 0.5 * 0.25 = 0.225
    # returns = A + V = 0.725, 0.85, 1.0
    adv, ret = alg.gae(t([[0, 0, 0, 1.0]]), t([[9.0, 0.5, 0.6, 0.7]]), t([[0, 1, 1, 1]]), gamma=1.0, lam=0.5)
    close(adv, [[0, 0.225, 0.25, 0.3]])
    close(ret, [[0, 0.725, 0.85, 1.0]])


def test_gae_skips_masked_out_positions_inside_and_after():
    # mask 1,0,1,0; gamma 0.9, lam 0.95; values at masked-out positions (5, 7) must not matter
    # t2: delta = 2 + 0.9*0 - 0.4 = 1.6            A2 = 1.6
    # t0: delta = 0 + 0.9*0.4 - 0.2 = 0.16         A0 = 0.16 + 0.9*0.95*1.6 = 1.528
    adv, ret = alg.gae(t([[0, 0, 2.0, 0]]), t([[0.2, 5.0, 0.4, 7.0]]), t([[1, 0, 1, 0]]), gamma=0.9, lam=0.95)
    close(adv, [[1.528, 0, 1.6, 0]])
    close(ret, [[1.728, 0, 2.0, 0]])


def test_gae_lambda_one_gamma_one_equals_reward_minus_value():
    # lam = gamma = 1: A_t = (sum of future rewards) - V_t
    adv, _ = alg.gae(t([[0, 0, 1.0]]), t([[0.1, 0.2, 0.3]]), t([[1, 1, 1]]), gamma=1.0, lam=1.0)
    close(adv, [[0.9, 0.8, 0.7]])


def test_discounted_returns():
    close(alg.discounted_returns(t([[0, 0, 1.0], [3.0, 0, 0]]), t([[1, 1, 1], [1, 1, 0]]), gamma=0.5),
          [[0.25, 0.5, 1.0], [3.0, 0, 0]])


def test_whiten_ignores_masked_out():
    # mean of 1,2,3 = 2, population variance 2/3
    s = math.sqrt(2 / 3) + 1e-6
    close(alg.whiten(t([1.0, 2.0, 3.0, 100.0]), t([1, 1, 1, 0])), [-1 / s, 0, 1 / s, 0])


# ------------------------------------------------------------------ PPO clipped surrogate


def test_policy_loss_clipped_surrogate_by_hand():
    # ratios 1.5, 0.5, 1.1 (old logp 0), advantages 1, -1, 2, clip 0.2
    # t0: min(1.5, 1.2) = 1.2 (clipped)   t1: min(-0.5, -0.8) = -0.8 (clipped)   t2: min(2.2, 2.2) = 2.2
    # loss = -(1.2 - 0.8 + 2.2) / 3; the 4th position is masked out (its huge ratio must not count)
    logp = t([math.log(1.5), math.log(0.5), math.log(1.1), 5.0])
    loss, clipfrac = alg.policy_loss(logp, t([0, 0, 0, 0]), t([1.0, -1.0, 2.0, 10.0]), t([1, 1, 1, 0]), 0.2)
    close(loss, -2.6 / 3)
    close(clipfrac, 2 / 3)


def test_policy_loss_gradient_is_zero_when_clipped():
    logp = t([math.log(1.5)]).requires_grad_()
    loss, _ = alg.policy_loss(logp, t([0.0]), t([1.0]), t([1]), 0.2)
    loss.backward()
    close(logp.grad, [0.0])


def test_policy_loss_on_policy_gradient_is_minus_advantage():
    # ratio 1: d(-ratio*A)/dlogp = -A, averaged over 2 tokens
    logp = t([0.0, 0.0]).requires_grad_()
    loss, _ = alg.policy_loss(logp, t([0.0, 0.0]), t([0.5, -2.0]), t([1, 1]), 0.2)
    loss.backward()
    close(logp.grad, [-0.25, 1.0])


# ------------------------------------------------------------------ value loss


def test_value_loss_unclipped():
    # errors 0.25, 1.0 → mean 0.625; 0.5 * coef 0.5 * 0.625
    close(alg.value_loss(t([0.5, 1.0, 3.0]), t([1.0, 0.0, 0.0]), t([1, 1, 0]), value_loss_coef=0.5), 0.15625)


def test_value_loss_clipped_takes_the_larger_error():
    # row 0: unclipped (0.9-1)^2 = 0.01, clipped value 0 + 0.2 → (0.2-1)^2 = 0.64 → 0.64
    # row 1: unclipped (1-0)^2 = 1, clipped value 0.2 + 0.2 → 0.16 → 1
    # mean 0.82 * 0.5 * coef 0.5 = 0.205
    got = alg.value_loss(t([0.9, 1.0]), t([1.0, 0.0]), t([1, 1]), 0.5, old_values=t([0.0, 0.2]), clip_range=0.2)
    close(got, 0.205)


# ------------------------------------------------------------------ entropy


def test_token_entropy_and_bonus():
    # uniform over 4: ln 4; p = (0.25, 0.75, 0, 0): -(0.25 ln 0.25 + 0.75 ln 0.75)
    logits = t([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e4, -1e4], [0.0, 0.0, 0.0, 0.0]]])
    h1 = math.log(4.0)
    h2 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    close(alg.token_entropy(logits), [[h1, h2, h1]])
    close(alg.entropy_bonus(alg.token_entropy(logits), t([[1, 1, 0]]), 0.01), -0.01 * (h1 + h2) / 2)


# ------------------------------------------------------------------ KL to the reference


def test_kl_k3_by_hand():
    # d = ln(0.25/0.5) = -ln 2: e^d - d - 1 = 0.5 + ln 2 - 1;  d = ln 2: 2 - ln 2 - 1;  equal: 0
    ln2 = math.log(2.0)
    logp = t([math.log(0.5), math.log(0.25), -1.0, 0.0])
    ref = t([math.log(0.25), math.log(0.5), -1.0, -30.0])
    close(alg.kl_k3(logp, ref, clamp=None), [ln2 - 0.5, 1 - ln2, 0.0, math.exp(-30.0) + 30.0 - 1.0])
    # default clamp 10: the last token's 29.0 is capped, the others untouched
    close(alg.kl_k3(logp, ref), [ln2 - 0.5, 1 - ln2, 0.0, 10.0])

    term, kl = alg.kl_penalty(logp, ref, t([1, 1, 1, 0]), kl_coef=0.1)
    close(kl, 0.5 / 3)
    close(term, 0.05 / 3)


def test_kl_k3_clamp_cuts_the_gradient_of_exploded_tokens():
    # d = 12 - 0 = 12: e^12 - 13 > 10, clamped, so no gradient; d = ln 2: gradient d/dlogp = 1 - e^d = -1
    logp = t([-12.0, math.log(0.5)]).requires_grad_()
    alg.kl_k3(logp, t([0.0, 0.0])).sum().backward()
    close(logp.grad, [0.0, -1.0])


def test_masked_mean_of_empty_mask_is_zero():
    close(alg.masked_mean(t([1.0, 2.0]), t([0, 0])), 0.0)


def test_gather_logprobs():
    logits = t([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    close(alg.gather_logprobs(logits, torch.tensor([[1, 0]])), [[math.log(0.75), math.log(0.5)]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_upcast(dtype):
    logits = torch.zeros(1, 1, 4, dtype=dtype)
    assert alg.token_entropy(logits).dtype == torch.float32
