"""Direction of learning in the torch engine: after ONE step on fixed data, each part of the loss moves the policy
(or the critic) the way it is meant to. The math in algorithms.py has its own reference tests; these catch an engine
that wires a correct formula in backwards (a sign, a target, a mask shifted by one, the wrong behaviour log-probs),
which trains silently in the wrong direction while every finiteness check stays green.

Fixed data: hand-written completions of offline-arith prompts on the embedded tiny model (30 warm-start steps), so
positive and negative sequences differ in their answer tokens. Quantities are measured with the engine's own forward
pass at the rollout temperature.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from trainer_helpers import grpo_params as grpo
from trainer_helpers import ppo_params as ppo

from hermes_stack.config.models import AlgorithmSection
from hermes_stack.modelcore import embedded
from hermes_stack.trainer import algorithms as alg
from hermes_stack.trainer.engine import IGNORE, Sequence
from hermes_stack.trainer.engine_torch import TorchEngine, build_batch

TEMPERATURE = 0.8  # the seed's GRPO value: every check below runs off temperature 1




@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("direction") / "embedded"
    embedded.build(directory, seed=0, steps=30)
    return directory


def engine_for(model_dir, algo: AlgorithmSection, lr: float = 1e-3, sgd: float | None = None, **kwargs) -> TorchEngine:
    """The engine; with `sgd`, its optimiser swapped for plain gradient descent at that rate, so the step follows the
    engine's loss gradient itself (Adam's first step moves every parameter by +-lr, which no single sequence's
    direction has to agree with)."""
    kwargs.setdefault("temperature", TEMPERATURE)
    engine = TorchEngine(model_dir, algo, lr, seed=0, epochs=1, **kwargs)
    if sgd is not None:
        engine.optimizer = torch.optim.SGD(engine.optimizer.param_groups[0]["params"], lr=sgd)
        engine.base_lrs = [sgd]
        if engine.critic is not None:
            engine.optimizer.add_param_group({"params": list(engine.critic.parameters()), "lr": sgd})
            engine.base_lrs.append(sgd)
    return engine


def sequence(engine: TorchEngine, prompt: str, answer: str, score: float, logprobs: list[float] | None = None):
    """prompt + answer + eos, the answer's tokens trained. Behaviour log-probs: the policy's own, at the rollout
    temperature (what the inference service would have sent), unless given."""
    ids = engine.tokenizer.encode(prompt)
    completion = engine.tokenizer.encode(answer, add_special_tokens=False) + [engine.tokenizer.eos_token_id]
    tokens = ids + completion
    mask = [IGNORE] * len(ids) + completion
    if logprobs is None:
        logprobs = [0.0] * len(ids) + completion_logprobs(engine, [Sequence(tokens, mask, score, [])])[0]
    return Sequence(tokens, mask, score, logprobs)


@torch.no_grad()
def per_token(engine: TorchEngine, sequences: list[Sequence]):
    batch = build_batch(sequences, engine.pad_token_id)
    logprobs, entropy, _ = engine._forward(batch, with_values=False)
    ref = engine._reference_logprobs(batch)
    return batch.action_mask, logprobs, entropy, ref


def completion_logprobs(engine: TorchEngine, sequences: list[Sequence]) -> list[list[float]]:
    mask, logprobs, _, _ = per_token(engine, sequences)
    return [logprobs[i][mask[i] > 0].tolist() for i in range(len(sequences))]


def sequence_logprob(engine: TorchEngine, sequences: list[Sequence]) -> torch.Tensor:
    mask, logprobs, _, _ = per_token(engine, sequences)
    return (logprobs * mask).sum(dim=1)


def mean_kl(engine: TorchEngine, sequences: list[Sequence]) -> float:
    mask, logprobs, _, ref = per_token(engine, sequences)
    return float(alg.masked_mean(alg.kl_k3(logprobs, ref, max_log_ratio=None), mask))


def mean_entropy(engine: TorchEngine, sequences: list[Sequence]) -> float:
    mask, _, entropy, _ = per_token(engine, sequences)
    return float(alg.masked_mean(entropy, mask))


# Right answers use the digits 1 3 5 8 9, wrong ones 0 2 4 6 7: no answer token is pushed both ways.
PROMPTS = [("1+2=", "#### 3", "#### 0"), ("4+4=", "#### 8", "#### 2"), ("12+7=", "#### 19", "#### 46"),
           ("30+5=", "#### 35", "#### 77")]


def scored_groups(engine: TorchEngine) -> list[list[Sequence]]:
    """GRPO groups of a right (score 1) and a wrong (score 0) answer: advantages +1 and -1."""
    return [[sequence(engine, p, good, 1.0), sequence(engine, p, bad, 0.0)] for p, good, bad in PROMPTS]


def drift(engine: TorchEngine, scale: float = 0.05) -> None:
    """Move the policy off the reference (which stays the initial policy) so the KL term has something to pull."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in engine.policy.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))


# ------------------------------------------------------------------ policy gradient


@pytest.mark.parametrize("algo", [grpo(), ppo()], ids=["grpo", "ppo"])
def test_positive_advantage_sequences_go_up_and_negative_ones_down(model_dir, algo):
    engine = engine_for(model_dir, algo, sgd=0.05)
    groups = scored_groups(engine)
    if algo.uses_critic:  # PPO: one completion per prompt; the critic starts at 0, so GAE signs follow the scores
        groups = [[s] for g in groups for s in g]
    flat = [s for g in groups for s in g]
    before = sequence_logprob(engine, flat)
    engine.train_step(groups)
    delta = sequence_logprob(engine, flat) - before
    for s, d in zip(flat, delta.tolist()):
        if s.score > 0:
            assert d > 0, (engine.tokenizer.decode(s.tokens), d)
        else:
            assert d < 0, (engine.tokenizer.decode(s.tokens), d)


def reference_returns(mask: torch.Tensor, scores: torch.Tensor, values: torch.Tensor, gamma: float,
                      lam: float) -> torch.Tensor:
    """The critic's regression target computed here, not by the engine: the score as the reward of the last trained
    token (no KL reward: kl_coef 0), GAE from algorithms.py's reference (tested against hand-worked values in
    test_algorithms.py) with the critic's values before the step. An engine that wires the target wrongly (negated,
    shifted, the advantages instead of the returns) trains away from this one."""
    rewards = torch.zeros_like(mask)
    for row in range(mask.shape[0]):
        last = int(mask[row].nonzero().max())
        rewards[row, last] = scores[row]
    return alg.gae(rewards, values, mask, gamma, lam)[1]


def test_critic_values_move_toward_the_returns(model_dir):
    """One step moves the critic toward returns computed independently of the engine (reference_returns), and the
    values of rewarded completions rise. Negating the returns the engine trains the critic toward fails both
    (checked by hand when this test was written; the old version took its target from engine._fixed and passed)."""
    algo = ppo()
    engine = engine_for(model_dir, algo)
    groups = [[s] for g in scored_groups(engine) for s in g]
    batch = build_batch([s for g in groups for s in g], engine.pad_token_id)
    mask = batch.action_mask

    def values() -> torch.Tensor:
        with torch.no_grad():
            return engine._forward(batch, with_values=True)[2]

    before = values()
    returns = reference_returns(mask, batch.scores, before, algo.gamma, algo.lam)
    assert float(alg.masked_mean(returns, mask)) > 0  # rewarded completions give positive targets

    def error(v: torch.Tensor) -> float:
        return float(alg.masked_mean((v - returns) ** 2, mask))

    def mean_value(v: torch.Tensor, rewarded: bool) -> float:
        rows = (batch.scores > 0.5) == rewarded
        return float(alg.masked_mean(v[rows], mask[rows]))

    engine.train_step(groups)
    after = values()
    assert error(after) < error(before)
    assert mean_value(after, True) > mean_value(before, True)


def test_value_loss_coef_scales_the_critics_update(model_dir):
    moved = {}
    for coef in (0.5, 50.0):
        engine = engine_for(model_dir, ppo(value_loss_coef=coef), lr=1e-4)
        groups = [[s] for g in scored_groups(engine) for s in g]
        start = torch.cat([p.detach().flatten().clone() for p in engine.critic.parameters()])
        engine.train_step(groups)
        end = torch.cat([p.detach().flatten() for p in engine.critic.parameters()])
        moved[coef] = float((end - start).norm())
    # The critic's Adam step is value_loss_coef x lr: 100 times the coefficient, ~100 times the first step.
    assert moved[50.0] > 30 * moved[0.5] > 0


# ------------------------------------------------------------------ regularisers


def zero_advantage_groups(engine, algo) -> tuple[list, list]:
    """Equal scores everywhere, so only the regulariser under test moves the policy: GRPO groups of two, and for PPO
    one-sequence groups with a critic that predicts the score exactly (GAE advantages 0). Returns (groups, flat)."""
    groups = [[sequence(engine, p, good, 0.5), sequence(engine, p, bad, 0.5)] for p, good, bad in PROMPTS]
    if algo.uses_critic:
        groups = [[s] for g in groups for s in g]
        torch.nn.init.constant_(engine.critic.net[-1].bias, 0.5)
        engine.whiten_gae = False
    return groups, [s for g in groups for s in g]


@pytest.mark.parametrize("penalty", ["k3_loss", "k1_reward"])
@pytest.mark.parametrize("make", [grpo, ppo], ids=["grpo", "ppo"])
def test_kl_to_the_reference_goes_down_with_zero_advantages(model_dir, make, penalty):
    algo = make(kl_coef=1.0, kl_penalty=penalty)
    engine = engine_for(model_dir, algo, lr=3e-3)
    drift(engine)
    groups, flat = zero_advantage_groups(engine, algo)
    before = mean_kl(engine, flat)
    assert before > 1e-3  # the drift made the KL something to reduce
    engine.train_step(groups)
    assert mean_kl(engine, flat) < before


@pytest.mark.parametrize("make", [grpo, ppo], ids=["grpo", "ppo"])
def test_entropy_goes_up_with_a_positive_entropy_coefficient(model_dir, make):
    algo = make(entropy_coef=1.0)
    engine = engine_for(model_dir, algo, lr=3e-3)
    groups, flat = zero_advantage_groups(engine, algo)
    before = mean_entropy(engine, flat)
    engine.train_step(groups)
    assert mean_entropy(engine, flat) > before


# ------------------------------------------------------------------ what is trained, and against what


def test_prompt_tokens_get_no_gradient(model_dir, monkeypatch):
    """The loss reaches exactly the positions predicting completion tokens: none of the prompt, none of the padding."""
    engine = engine_for(model_dir, grpo())
    groups = scored_groups(engine)
    seen: list[torch.Tensor] = []
    original = engine._logprobs

    def capture(logits, batch, with_entropy):
        if logits.requires_grad:
            logits.retain_grad()
            seen.append(logits)
        return original(logits, batch, with_entropy)

    monkeypatch.setattr(engine, "_logprobs", capture)
    engine.train_step(groups)
    (logits,) = seen
    touched = logits.grad.abs().sum(dim=-1) > 0  # [B, T-1]: position t predicts token t+1
    for i, s in enumerate(s for g in groups for s in g):
        prompt = sum(m == IGNORE for m in s.mask)
        trained = [t - 1 for t in range(prompt, len(s.tokens))]  # positions predicting completion tokens
        assert touched[i].nonzero().squeeze(1).tolist() == trained, engine.tokenizer.decode(s.tokens)


def test_the_coupled_ratio_uses_the_behaviour_logprobs_the_inference_service_sent(model_dir):
    """decoupled=False (the plain PPO objective): behaviour log-probs 1 nat below the policy's put every ratio at
    e > 1 + clip with positive advantages: the clipped surrogate has no gradient, so the policy must not move.
    Recomputed log-probs would give ratio 1 and move it."""
    engine = engine_for(model_dir, grpo(), decoupled=False)

    def shifted(s: Sequence, by: float) -> Sequence:
        return Sequence(s.tokens, s.mask, s.score, [lp + by if m != IGNORE else 0.0 for lp, m in zip(s.logprobs, s.mask)])

    # Right answers (advantage +1) with ratio e^1 > 1 + clip, wrong ones (advantage -1) with ratio e^-1 < 1 - clip:
    # the clip binds on both sides, so no token has a gradient.
    groups = [[shifted(good, -1.0), shifted(bad, +1.0)] for good, bad in scored_groups(engine)]
    before = {k: v.clone() for k, v in engine.policy.state_dict().items()}
    metrics = engine.train_step(groups)
    assert metrics["clip_fraction"] == pytest.approx(1.0)
    assert all(torch.equal(before[k], v) for k, v in engine.policy.state_dict().items())


def test_the_decoupled_objective_weighs_each_token_by_the_behaviour_lag_outside_the_clip(model_dir, monkeypatch):
    """The default (decoupled): the same shifted batch trains, its clip centred on the policy itself (first-pass
    ratio 1, nothing clipped) and each token weighted by min(exp(proximal - behaviour), cap): e^1 capped at 2 for the
    right answers sampled "less likely", e^-1 for the wrong ones. The right answers gain."""
    from hermes_stack.trainer import algorithms as alg
    from hermes_stack.trainer import engine_torch

    engine = engine_for(model_dir, grpo(), sgd=0.01)
    assert engine.decoupled

    def shifted(s: Sequence, by: float) -> Sequence:
        return Sequence(s.tokens, s.mask, s.score, [lp + by if m != IGNORE else 0.0 for lp, m in zip(s.logprobs, s.mask)])

    pairs = scored_groups(engine)
    groups = [[shifted(good, -1.0), shifted(bad, +1.0)] for good, bad in pairs]
    seen = {}
    original = alg.policy_loss

    def spy(logprobs, old_logprobs, advantages, mask, *args, weights=None, **kwargs):
        seen.setdefault("ratio", torch.exp(logprobs - old_logprobs).detach())
        seen.setdefault("weights", weights.detach().clone())
        seen.setdefault("advantages", advantages.detach().clone())
        seen.setdefault("mask", mask.detach().clone())
        return original(logprobs, old_logprobs, advantages, mask, *args, weights=weights, **kwargs)

    monkeypatch.setattr(engine_torch.alg, "policy_loss", spy)
    before = sequence_logprob(engine, [s for pair in pairs for s in pair])
    metrics = engine.train_step(groups)
    on = seen["mask"] > 0
    assert torch.allclose(seen["ratio"][on], torch.ones_like(seen["ratio"][on]), atol=1e-5)
    assert metrics["clip_fraction"] == 0.0
    weights, adv = seen["weights"][on], seen["advantages"][on]
    assert torch.allclose(weights[adv > 0], torch.full_like(weights[adv > 0], alg.BEHAVIOUR_WEIGHT_CAP), atol=1e-4)
    assert torch.allclose(weights[adv < 0], torch.full_like(weights[adv < 0], math.exp(-1.0)), rtol=1e-3)
    delta = sequence_logprob(engine, [s for pair in pairs for s in pair]) - before
    # The right answers rise, each more than its wrong twin (which shares the prompt and the "#### " tokens and is
    # pushed down at 0.37 against 2, so it may rise a little with them).
    good, bad = delta[0::2], delta[1::2]
    assert bool((good > 0).all()) and bool((good > bad).all()), delta


# ------------------------------------------------------------------ one temperature convention


def builtin_logprobs(model_dir, prompt: list[int], temperature: float) -> tuple[list[int], list[float]]:
    """One completion and its log-probs from the built-in inference server's /generate (SGLang's shape)."""
    from hermes_stack.inference.builtin import BuiltinBackend

    async def run():
        backend = BuiltinBackend(str(model_dir), seed=3)
        await backend.start()
        try:
            return await backend.generate({"input_ids": prompt, "return_logprob": True, "sampling_params": {
                "max_new_tokens": 8, "temperature": temperature, "top_p": 0.95}})
        finally:
            await backend.stop()

    answer = asyncio.run(run())
    entries = answer["meta_info"]["output_token_logprobs"]
    return [e[1] for e in entries], [e[0] for e in entries]


def sglang_convention_logprobs(model_dir, prompt: list[int], output: list[int], temperature: float) -> list[float]:
    """SGLang's default (sampler: log_softmax(logits / temperature), top-p not applied to them), computed here from
    an independent forward pass of the checkpoint."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(output)]


@pytest.mark.parametrize("source", ["builtin", "sglang"])
def test_first_pass_ratio_is_one_at_temperature_0_8(model_dir, source):
    engine = engine_for(model_dir, grpo(), temperature=TEMPERATURE)
    prompt = engine.tokenizer.encode("23+45=")
    output, sent = builtin_logprobs(model_dir, prompt, TEMPERATURE)
    if source == "sglang":
        sent = sglang_convention_logprobs(model_dir, prompt, output, TEMPERATURE)
    seq = Sequence(prompt + output, [IGNORE] * len(prompt) + output, 1.0, [0.0] * len(prompt) + sent)
    mask, logprobs, _, _ = per_token(engine, [seq])
    ratio = torch.exp(logprobs[0][mask[0] > 0] - torch.tensor(sent))
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
    # At temperature 1 the trainer would see another distribution: the convention is what makes the ratio 1.
    raw = engine_for(model_dir, grpo(), temperature=1.0)
    mask, raw_logprobs, _, _ = per_token(raw, [seq])
    assert (raw_logprobs[0][mask[0] > 0] - torch.tensor(sent)).abs().max() > 1e-2


def test_greedy_sampling_reports_raw_logprobs(model_dir):
    engine = engine_for(model_dir, grpo(), temperature=TEMPERATURE)
    prompt = engine.tokenizer.encode("23+45=")
    output, sent = builtin_logprobs(model_dir, prompt, 0.0)
    raw = sglang_convention_logprobs(model_dir, prompt, output, 1.0)
    assert sent == pytest.approx(raw, abs=1e-5)


# ------------------------------------------------------------------ micro-batches


@pytest.mark.parametrize("make", [grpo, ppo], ids=["grpo", "ppo"])
def test_micro_batches_equal_one_full_pass(model_dir, make):
    """One step in micro-batches of 3 sequences (gradient accumulation) leaves the same parameters as one full pass
    (float64, so only the summation order differs)."""
    algo = make(kl_coef=0.1, entropy_coef=0.01)
    results = []
    for micro in (None, 3):
        engine = TorchEngine(model_dir, algo, 1e-3, seed=0, epochs=2, temperature=TEMPERATURE,
                             dtype=torch.float64, micro_batch_size=micro)
        engine.policy.double()
        if engine.critic is not None:
            engine.critic.double()
        drift(engine, 0.02)  # a KL term with a gradient too
        groups = scored_groups(engine)
        if algo.uses_critic:
            groups = [[s] for g in groups for s in g]
        torch.manual_seed(5)  # the second epoch's shuffle
        metrics = engine.train_step(groups)
        state = {k: v.clone() for k, v in engine.policy.state_dict().items()}
        if engine.critic is not None:
            state.update({f"critic.{k}": v.clone() for k, v in engine.critic.state_dict().items()})
        results.append((state, metrics))
    (full, full_metrics), (micro, micro_metrics) = results
    assert full.keys() == micro.keys()
    for k in full:
        torch.testing.assert_close(micro[k], full[k], atol=1e-10, rtol=1e-9, msg=k)
    for k in ("loss", "policy_loss", "kl", "entropy"):
        assert micro_metrics[k] == pytest.approx(full_metrics[k], rel=1e-9, abs=1e-12)
