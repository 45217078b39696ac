"""The local Tinker service's losses and optimiser, against hand-computed values (Tinker's documented definitions)."""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from tests.fakes.tinker_policy import DatumIn, Policy, token_losses

LOGP = torch.tensor([-0.5, -1.0, -2.0])
OLD = torch.tensor([-1.0, -1.0, -1.0])  # ratios e^0.5 = 1.6487, 1, e^-1 = 0.3679
ADV = torch.tensor([1.0, -2.0, -1.0])


def test_importance_sampling_is_minus_ratio_times_advantage_per_token():
    got = token_losses(LOGP, OLD, ADV, "importance_sampling")
    assert got.tolist() == pytest.approx([-math.exp(0.5), 2.0, math.exp(-1.0)], rel=1e-6)


def test_ppo_takes_the_pessimistic_side_of_the_default_clip_08_12():
    got = token_losses(LOGP, OLD, ADV, "ppo")
    # A > 0, ratio 1.65 > 1.2: clipped to 1.2. A < 0, ratio 1: unclipped. A < 0, ratio 0.37 < 0.8: min picks the
    # clipped 0.8 * -1 (more pessimistic than 0.37 * -1).
    assert got.tolist() == pytest.approx([-1.2, 2.0, 0.8], rel=1e-6)


def test_ppo_thresholds_come_from_the_loss_config():
    got = token_losses(LOGP, OLD, ADV, "ppo", {"clip_low_threshold": 0.5, "clip_high_threshold": 2.0})
    assert got.tolist() == pytest.approx([-math.exp(0.5), 2.0, 0.5], rel=1e-6)


def test_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="cross_entropy"):
        token_losses(LOGP, OLD, ADV, "cross_entropy")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.fakes.fixture_model import build_fixture_model

    return build_fixture_model(tmp_path_factory.mktemp("policy-model"))


DATA = [DatumIn([1, 5, 6], [5, 6, 7], [0.0, -2.0, -2.0], [0.0, 1.0, 1.0]),
        DatumIn([1, 8], [8, 9], [0.0, -2.0], [0.0, -1.0])]


def test_gradients_accumulate_until_optim_step_and_the_loss_is_the_token_sum(model_dir):
    policy = Policy(model_dir, lora_rank=4, full=True, seed=0)
    logprobs, metrics = policy.forward_backward(DATA, "importance_sampling", None)
    expected = sum(float(token_losses(torch.tensor(lp), torch.tensor(d.logprobs), torch.tensor(d.advantages),
                                      "importance_sampling").sum()) for lp, d in zip(logprobs, DATA))
    assert metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    assert all(v < 0 for lp in logprobs for v in lp) and [len(x) for x in logprobs] == [3, 2]
    once = [p.grad.clone() for p in policy.params]
    policy.forward_backward(DATA, "importance_sampling", None)  # same data again: gradients add up
    assert all(torch.allclose(p.grad, 2 * g, atol=1e-6) for p, g in zip(policy.params, once))
    before = [p.detach().clone() for p in policy.params]
    policy.optim_step(learning_rate=1e-2)
    assert all(p.grad is None for p in policy.params)
    assert any(not torch.equal(p, b) for p, b in zip(policy.params, before))
    after, _ = policy.forward_backward(DATA, "importance_sampling", None, forward_only=True)
    # The update raised the log-prob of the positively advantaged tokens and lowered the negative one.
    assert after[0][1] > logprobs[0][1] and after[0][2] > logprobs[0][2] and after[1][1] < logprobs[1][1]


def test_lora_starts_at_the_base_model_and_its_state_round_trips_with_the_optimizer(model_dir):
    from transformers import AutoModelForCausalLM

    policy = Policy(model_dir, lora_rank=4, seed=0)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        ref = torch.log_softmax(base(input_ids=torch.tensor([[1, 5, 6]])).logits, -1)[0, [0, 1, 2], [5, 6, 7]]
    logprobs, _ = policy.forward_backward(DATA[:1], "ppo", None)
    assert logprobs[0] == pytest.approx(ref.tolist(), abs=1e-5)  # B = 0 at init: the policy is the base model
    policy.optim_step(learning_rate=1e-2)
    saved = policy.state()
    policy.forward_backward(DATA, "ppo", None)
    policy.optim_step(learning_rate=1e-2)
    one = policy.trainable_state()

    again = Policy(model_dir, lora_rank=4, seed=1)
    again.load(saved, with_optimizer=True)
    again.forward_backward(DATA, "ppo", None)
    again.optim_step(learning_rate=1e-2)
    # The same step from the same state (Adam moments included) gives the same weights.
    assert all(torch.allclose(one[k], v, atol=1e-6) for k, v in again.trainable_state().items())
    with pytest.raises(ValueError, match="rank"):
        Policy(model_dir, lora_rank=8, seed=0).load(saved, with_optimizer=True)
