"""Small tests that pin behaviour a third mutation check found unguarded: the sampling core's per-row temperature,
positions and top log-probs, the built-in backend's request checks and OpenAI shapes, the trainer's batch tensors
and the environment's group layout. Expected values come from the documented behaviour, computed by hand."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hermes_stack.inference.sampling import RequestError, SamplingParams
from hermes_stack.inference.torch_sampler import Row, sample_rows
from hermes_stack.modelcore.sampling_core import sample_batch
from tests.fakes.fixture_model import build_fixture_model, build_tokenizer


class FixedLM(nn.Module):
    """A causal LM stand-in whose next-token logits are the same fixed vector at every position; it records the
    position_ids of each forward call."""

    def __init__(self, logits: list[float], context: int = 512):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.fixed = torch.tensor(logits)
        self.config = SimpleNamespace(max_position_embeddings=context)
        self.positions: list[list[list[int]]] = []

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=True, **_):
        self.positions.append(position_ids.tolist())
        batch, width = input_ids.shape
        return SimpleNamespace(logits=self.fixed.expand(batch, width, -1).clone(), past_key_values=None)


def test_drawn_rows_follow_their_own_temperature_beside_a_greedy_row():
    """Logits [1, 0, 0, 0]: the greedy row always takes token 0, a T=1 row takes another token with p = 3/(e+3)
    (~0.52), a T=0.1 row with p = 3e^-10/(1+3e^-10) (~1e-4)."""
    model = FixedLM([1.0, 0.0, 0.0, 0.0])
    greedy, warm, cold = sample_batch(model, [[1], [1], [1]], pad_token_id=0, stop_token_ids=[(), (), ()],
                                      budgets=300, temperature=[0.0, 1.0, 0.1],
                                      generator=torch.Generator().manual_seed(0))
    assert greedy.tokens == [0] * 300
    others = sum(t != 0 for t in warm.tokens)
    assert 110 <= others <= 200, others  # mean 157, sd ~8.6
    assert sum(t != 0 for t in cold.tokens) <= 2


def test_top_logprobs_are_of_the_temperature_scaled_distribution():
    """top_logprobs, like the sampled token's log-prob, are of log softmax(logits / T): logits [1, 0, 0] at T 0.5
    scale to [2, 0, 0], so the top two are 2 - log(e^2 + 2) (token 0) and -log(e^2 + 2)."""
    model = FixedLM([1.0, 0.0, 0.0])
    row, = sample_batch(model, [[1]], pad_token_id=0, stop_token_ids=[()], budgets=2, temperature=0.5,
                        top_logprobs=2, generator=torch.Generator().manual_seed(0))
    log_z = math.log(math.e ** 2 + 2)
    for position in row.top:
        assert position[0][0] == 0
        assert position[0][1] == pytest.approx(2 - log_z, abs=1e-5)
        assert position[1][1] == pytest.approx(-log_z, abs=1e-5)


def test_positions_of_left_padded_rows_start_at_zero_and_advance_by_one():
    """A left-padded row's first real token is at position 0 (padding clamped to 0), each new token one further: as
    an unpadded forward of the row alone would see it."""
    model = FixedLM([0.0, 5.0])
    sample_batch(model, [[1, 1, 1], [1]], pad_token_id=0, stop_token_ids=[(), ()], budgets=3, temperature=0.0)
    assert model.positions[0] == [[0, 1, 2], [0, 0, 0]]
    assert model.positions[1] == [[3], [1]]
    assert model.positions[2] == [[4], [2]]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok3"))


def test_each_row_gets_as_many_top_logprobs_as_it_asked_for(tokenizer):
    """One batch, rows asking 1 and 3 top log-probs: each position of a row lists exactly its own number."""
    model = FixedLM([0.0] * len(tokenizer))
    one, three = sample_rows(model, tokenizer, [Row((1,), SamplingParams(max_new_tokens=2, top_logprobs=1,
                                                                         ignore_eos=True)),
                                                Row((1,), SamplingParams(max_new_tokens=2, top_logprobs=3,
                                                                         ignore_eos=True))],
                             torch.Generator().manual_seed(0))
    assert [len(p) for p in one.top_logprobs] == [1, 1]
    assert [len(p) for p in three.top_logprobs] == [3, 3]


def test_skip_special_tokens_false_keeps_the_eos_in_the_text(tokenizer):
    """A greedy row that ends on </s>: its text is "</s>" with skip_special_tokens false and "" with the default."""
    logits = [0.0] * len(tokenizer)
    logits[tokenizer.eos_token_id] = 9.0
    model = FixedLM(logits)
    kept, skipped = sample_rows(model, tokenizer, [
        Row((1,), SamplingParams(max_new_tokens=4, temperature=0.0, skip_special_tokens=False)),
        Row((1,), SamplingParams(max_new_tokens=4, temperature=0.0))])
    assert kept.output_ids == (tokenizer.eos_token_id,)
    assert kept.text == "</s>"
    assert skipped.text == ""


# ---------------------------------------------------------------- the built-in backend


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from hermes_stack.inference.builtin import BuiltinBackend

    directory = build_fixture_model(tmp_path_factory.mktemp("gaps3") / "model", seed=0)
    return BuiltinBackend(str(directory), served_model="tiny", seed=0)


def test_a_prompt_that_fills_the_context_is_refused(backend):
    """The fixture's context is 256 tokens: a 256-token prompt leaves no room and is refused, 255 is served."""
    ctx = backend.host.facts().context_length
    with pytest.raises(RequestError, match="context"):
        backend._rows([[5] * ctx], [SamplingParams()])
    assert len(backend._rows([[5] * (ctx - 1)], [SamplingParams()])) == 1


def test_a_token_id_equal_to_the_vocab_size_is_refused(backend):
    """Token ids are in [0, vocab): the vocab size itself is out of range (an embedding lookup would fail)."""
    vocab = backend.host.facts().vocab_size
    with pytest.raises(RequestError, match="input_ids"):
        backend._rows([[1, vocab]], [SamplingParams()])
    assert len(backend._rows([[1, vocab - 1]], [SamplingParams()])) == 1


def completions(backend, body):
    async def run():
        await backend.start()
        try:
            return await backend.completions(body)
        finally:
            await backend.stop()

    return asyncio.run(run())


def test_completions_logprobs_n_gives_n_top_logprobs_and_text_offsets_of_the_tokens_before(backend):
    """The completions route's integer `logprobs` is the number of top log-probs per position; text_offset[i] is
    the length of the token texts before token i; a prompt sampled n times counts its tokens once in usage."""
    answer = completions(backend, {"prompt": "12+3=", "max_tokens": 4, "logprobs": 2, "n": 2, "temperature": 0.0,
                                   "ignore_eos": True})
    prompt_tokens = len(backend.tokenizer.encode("12+3="))
    assert answer["usage"]["prompt_tokens"] == prompt_tokens
    for choice in answer["choices"]:
        lp = choice["logprobs"]
        assert [len(p) for p in lp["top_logprobs"]] == [2, 2, 2, 2]
        assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]


# ---------------------------------------------------------------- the torch engine


@pytest.fixture(scope="module")
def ppo_engine(tmp_path_factory):
    from trainer_helpers import ppo_params

    from hermes_stack.trainer.engine_torch import TorchEngine

    directory = build_fixture_model(tmp_path_factory.mktemp("gaps3-engine") / "model", seed=0)
    engine = TorchEngine(directory, ppo_params(), 1e-3, temperature=1.0, seed=0)
    with torch.no_grad():  # the head starts at V = 0 everywhere: give it weights that tell positions apart
        for p in engine.critic.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return engine


def two_sequences_differing_in_the_last_token():
    from hermes_stack.trainer.engine import IGNORE, Sequence

    prompt, completion = [1, 10, 11, 12], [13, 14, 15]
    other = completion[:-1] + [16]
    return [Sequence(prompt + c, [IGNORE] * len(prompt) + c, 1.0, []) for c in (completion, other)]


def test_the_critics_value_at_a_position_depends_only_on_the_prefix_up_to_it(ppo_engine):
    """values[t] is V of the prefix tokens[0..t] (aligned with logits[t], which predict token t+1): two sequences
    that differ only in their last token have the same values at every position."""
    from hermes_stack.trainer.engine_torch import build_batch

    batch = build_batch(two_sequences_differing_in_the_last_token(), ppo_engine.pad_token_id)
    with torch.no_grad():
        _, _, values = ppo_engine._forward(batch, with_values=True)
    assert values.shape == (2, 6)
    assert values.std() > 1e-3  # the randomised head does tell positions apart
    torch.testing.assert_close(values[0], values[1])


def test_the_critics_loss_sends_no_gradient_into_the_policy(ppo_engine):
    """The critic reads the policy's hidden states detached: a loss on the values alone leaves every policy
    parameter without gradient."""
    from hermes_stack.trainer.engine_torch import build_batch

    batch = build_batch(two_sequences_differing_in_the_last_token(), ppo_engine.pad_token_id)
    ppo_engine.optimizer.zero_grad(set_to_none=True)
    _, _, values = ppo_engine._forward(batch, with_values=True)
    values.sum().backward()
    leaked = [n for n, p in ppo_engine.policy.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    ppo_engine.optimizer.zero_grad(set_to_none=True)
    assert leaked == []


def test_group_relative_advantages_are_per_group():
    """GRPO advantages come from each group's own scores: groups [1, 0] and [3, 2] each give (s - mean) / std =
    [+1, -1], whatever the other group scored."""
    from trainer_helpers import grpo_params

    from hermes_stack.trainer.engine import Sequence

    def group(a, b):
        return [Sequence([1, 2], [-100, 2], a, []), Sequence([1, 2], [-100, 2], b, [])]

    engine = SimpleNamespace(algo=grpo_params(), device=torch.device("cpu"))
    from hermes_stack.trainer.engine_torch import TorchEngine

    advantages = TorchEngine._advantage_inputs(engine, [group(1.0, 0.0), group(3.0, 2.0)])
    torch.testing.assert_close(advantages, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4, rtol=0)


def test_generate_applies_top_p(ppo_engine):
    """top_p so small that only the most likely token is left: sampling at temperature 1 gives the greedy tokens."""
    prompts = [[1, 10, 11], [1, 20]]
    greedy = ppo_engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=8)
    cut = ppo_engine.generate(prompts, n=2, temperature=1.0, top_p=1e-6, max_new_tokens=8)
    for (g,), pair in zip(greedy, cut):
        assert [c.tokens for c in pair] == [g.tokens, g.tokens]


@pytest.fixture
def frozen_grpo_engine(tmp_path_factory):
    """A GRPO engine (an entropy bonus: a gradient even where advantages cancel) whose optimiser is plain gradient
    descent at rate 0: steps compute gradients, weights stay."""
    from trainer_helpers import grpo_params

    from hermes_stack.trainer.engine_torch import TorchEngine

    directory = tmp_path_factory.getbasetemp() / "gaps3-frozen"
    if not (directory / "config.json").exists():
        build_fixture_model(directory, seed=0)
    engine = TorchEngine(directory, grpo_params(entropy_coef=0.1), 1e-3, temperature=1.0, seed=0, epochs=2)
    engine.optimizer = torch.optim.SGD(engine.optimizer.param_groups[0]["params"], lr=0.0)
    engine.base_lrs = [0.0]
    return engine


def same_sequence_group(copies: int = 4):
    from hermes_stack.trainer.engine import IGNORE, Sequence

    prompt, completion = [1, 10, 11, 12], [13, 14, 15]
    return [[Sequence(prompt + completion, [IGNORE] * len(prompt) + completion, float(i), [])
             for i in range(copies)]]


def test_every_pass_starts_from_zero_gradients(frozen_grpo_engine, monkeypatch):
    """Weights that do not move give every pass the same gradient: each optimiser step's gradient norm (before
    clipping) is the first one's, not the sum of the passes so far."""
    norms = []
    original = torch.nn.utils.clip_grad_norm_

    def recording(parameters, max_norm, *args, **kwargs):
        norm = original(parameters, max_norm, *args, **kwargs)
        norms.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    frozen_grpo_engine.train_step(same_sequence_group())
    assert len(norms) == 2 and norms[0] > 0
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)


def test_a_minibatchs_terms_are_its_own_token_mean(frozen_grpo_engine):
    """Four identical sequences: the token-mean entropy of any minibatch is the whole batch's, so the reported
    entropy is the same with one minibatch per pass and with two."""
    frozen_grpo_engine.minibatches = 1
    whole = frozen_grpo_engine.train_step(same_sequence_group())["entropy"]
    frozen_grpo_engine.minibatches = 2
    halves = frozen_grpo_engine.train_step(same_sequence_group())["entropy"]
    assert whole > 0
    assert halves == pytest.approx(whole, rel=1e-4)


def test_the_coupled_clip_is_centred_on_the_logprobs_the_inference_service_sent(tmp_path_factory):
    """PPO with decoupled=False: the "old" log-probs are the behaviour log-probs the batch carried (token t+1's at t),
    not the policy's recomputation (its no-gradient pass runs anyway, for the critic's values)."""
    from trainer_helpers import ppo_params

    from hermes_stack.trainer.engine import IGNORE, Sequence
    from hermes_stack.trainer.engine_torch import TorchEngine, build_batch

    directory = tmp_path_factory.getbasetemp() / "gaps3-frozen"
    if not (directory / "config.json").exists():
        build_fixture_model(directory, seed=0)
    engine = TorchEngine(directory, ppo_params(), 1e-3, temperature=1.0, seed=0, decoupled=False)
    sent = [-0.5, -1.5, -2.5]
    sequences = [Sequence([1, 10, 11, 13, 14, 15], [IGNORE] * 3 + [13, 14, 15], s, [1.0] * 3 + sent)
                 for s in (0.0, 1.0)]
    batch = build_batch(sequences, engine.pad_token_id)
    fixed = engine._fixed(batch, None)
    assert fixed["old_logprobs"][0, 2:].tolist() == sent


# ---------------------------------------------------------------- the Atropos batch


def test_completion_only_logprobs_are_counted_against_the_trained_positions():
    """Logprobs for just the 2 trained (non -100) positions of 5 tokens are right-aligned after 3 prompt 1.0s."""
    from hermes_stack.trainer.atropos_client import groups_from_batch

    batch = [{"tokens": [[1, 2, 3, 7, 8]], "masks": [[-100, -100, -100, 7, 8]], "scores": [1.0],
              "inference_logprobs": [[-0.25, -0.5]]}]
    (sequence,), = groups_from_batch(batch)
    assert sequence.logprobs == [1.0, 1.0, 1.0, -0.25, -0.5]


# ---------------------------------------------------------------- the environment's budget


def test_new_token_budget_stays_one_below_the_max_token_length():
    """Atropos drops a sequence of >= max_token_len tokens: a 10-token prompt under 64 may generate 64 - 10 - 1."""
    from hermes_stack.tasks.prompting import new_token_budget

    assert new_token_budget(64, 10) == 53
    assert new_token_budget(64, 63) == 1


def test_the_environments_budget_counts_the_prompts_tokens_not_its_characters(tokenizer):
    """The fixture tokenizer gives one token per character plus <s>: "12+3=" is 6 tokens, so 32 leaves 25."""
    from hermes_stack.environment.env import HermesMathEnv

    env = SimpleNamespace(config=SimpleNamespace(max_token_length=32), tokenizer=tokenizer, _encoded={})
    env._prompt_ids = lambda prompt: HermesMathEnv._prompt_ids(env, prompt)
    assert HermesMathEnv._budget(env, "12+3=") == 32 - 6 - 1
