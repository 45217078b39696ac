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
    # A masked-out position (a tool's output, say) is skipped, not counted as a discounting step: 0.5, not 0.25.
    close(alg.discounted_returns(t([[0, 0, 1.0]]), t([[1, 0, 1]]), gamma=0.5), [[0.5, 0, 1.0]])


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
    logp = t([math.log(0.5), math.log(0.25), -1.0, 0.0, -30.0])
    ref = t([math.log(0.25), math.log(0.5), -1.0, -30.0, 0.0])
    close(alg.kl_k3(logp, ref, max_log_ratio=None),
          [ln2 - 0.5, 1 - ln2, 0.0, math.exp(-30.0) + 30.0 - 1.0, math.exp(30.0) - 31.0])
    # default clamp: the log-ratio d = 30 of the last token is capped at 2.5 (e^2.5 - 3.5); d = -30 is not clamped
    c = alg.KL_LOG_RATIO_MAX
    close(alg.kl_k3(logp, ref), [ln2 - 0.5, 1 - ln2, 0.0, math.exp(-30.0) + 29.0, math.exp(c) - c - 1.0])

    term, kl = alg.kl_penalty(logp[:4], ref[:4], t([1, 1, 1, 0]), kl_coef=0.1)
    close(kl, 0.5 / 3)
    close(term, 0.05 / 3)


def test_kl_k3_clamp_keeps_a_bounded_gradient_on_drifted_tokens():
    # d(k3)/d(logp) = 1 - e^d^: d = 12 is clamped to 2.5 (gradient 1 - e^2.5, not 0); d = ln 2: 1 - 2 = -1;
    # d = -5 (policy far above the reference): 1 - e^-5, unclamped
    logp = t([-12.0, math.log(0.5), 5.0]).requires_grad_()
    alg.kl_k3(logp, t([0.0, 0.0, 0.0])).sum().backward()
    close(logp.grad, [1.0 - math.exp(alg.KL_LOG_RATIO_MAX), -1.0, 1.0 - math.exp(-5.0)])


def test_k3_advantage_is_the_k3_loss_gradient_at_ratio_one():
    # A policy-gradient loss -ratio * a has d/dlogp = -a at ratio 1; the k3 loss term kl_coef * k3 has
    # kl_coef * (1 - e^d^). They agree token by token, the clamped one included.
    old, ref, mask = t([-12.0, math.log(0.5), 5.0, -1.0]), t([0.0, 0.0, 0.0, 0.0]), t([1, 1, 1, 0])
    logp = old.clone().requires_grad_()
    (0.3 * alg.kl_k3(logp, ref) * mask).sum().backward()
    close(-alg.k3_advantage(old, ref, mask, 0.3), logp.grad)


def test_kl_rewards_are_k1_on_the_behaviour_logprobs():
    close(alg.kl_rewards(t([-1.0, -2.0, -3.0]), t([-1.5, -1.0, 0.0]), t([1, 1, 0]), 0.1), [-0.05, 0.1, 0.0])


def test_critic_learning_rate_scales_with_value_loss_coef():
    assert alg.critic_learning_rate(1e-3, 0.5) == pytest.approx(5e-4)
    assert alg.critic_learning_rate(1e-3, 50.0) == pytest.approx(5e-2)


def test_masked_mean_with_a_count_is_a_share_of_the_full_mean():
    values, mask = t([1.0, 2.0, 3.0, 4.0]), t([1, 1, 1, 0])
    close(alg.masked_mean(values[:2], mask[:2], count=3) + alg.masked_mean(values[2:], mask[2:], count=3),
          alg.masked_mean(values, mask))


def test_logprobs_and_entropy_scale_by_temperature_and_chunk_exactly():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 7, (3, 5))
    logp, h = alg.logprobs_and_entropy(logits, targets, temperature=0.8)
    close(logp, alg.gather_logprobs(logits / 0.8, targets))
    close(h, alg.token_entropy(logits / 0.8))
    greedy, _ = alg.logprobs_and_entropy(logits, targets, temperature=0.0)  # greedy: raw logits
    close(greedy, alg.gather_logprobs(logits, targets))
    (logp.sum() + h.sum()).backward()
    full_grad = logits.grad.clone()
    logits.grad = None
    chunk_logp, chunk_h = alg.logprobs_and_entropy(logits, targets, temperature=0.8, chunk_tokens=4)
    close(chunk_logp, logp)
    close(chunk_h, h)
    (chunk_logp.sum() + chunk_h.sum()).backward()
    close(logits.grad, full_grad)


def test_masked_mean_of_empty_mask_is_zero():
    close(alg.masked_mean(t([1.0, 2.0]), t([0, 0])), 0.0)


def test_gather_logprobs():
    logits = t([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    close(alg.gather_logprobs(logits, torch.tensor([[1, 0]])), [[math.log(0.75), math.log(0.5)]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_upcast(dtype):
    logits = torch.zeros(1, 1, 4, dtype=dtype)
    assert alg.token_entropy(logits).dtype == torch.float32


def test_behaviour_weights_by_hand():
    """w = min(exp(prox - behaviour), cap), 0 off the mask: lag -0.5 nat -> e^0.5 = 1.6487; +0.5 -> e^-0.5; +2 nats
    the other way -> e^2 = 7.39, capped at 2; equal -> 1."""
    prox = torch.tensor([[0.0, -1.0, -1.5, -0.2, -3.0]])
    behaviour = torch.tensor([[0.0, -1.5, -1.0, -2.2, -3.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0]])
    w = alg.behaviour_weights(prox, behaviour, mask, cap=2.0)
    assert w.tolist()[0] == pytest.approx([0.0, math.exp(0.5), math.exp(-0.5), 2.0, 1.0])


def test_weighted_surrogate_by_hand():
    """The weights multiply each token's clipped surrogate: ratio 1 (first pass), advantages 1 and -1, weights 2 and
    0.5 -> loss = -(2 * 1 + 0.5 * -1) / 2 = -0.75; without weights 0."""
    logprobs = torch.tensor([[-1.0, -2.0]])
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    weighted, _ = alg.policy_loss(logprobs, logprobs.clone(), adv, mask, 0.2, weights=torch.tensor([[2.0, 0.5]]))
    plain, _ = alg.policy_loss(logprobs, logprobs.clone(), adv, mask, 0.2)
    assert float(weighted) == pytest.approx(-0.75) and float(plain) == pytest.approx(0.0)
