"""The Tinker engine's pure parts and fail-fast checks against the installed SDK's real types (tinker 0.38.0).

Everything that talks to Tinker (both losses, the local critic, export, checkpoints and resume, every error case)
runs the real SDK over HTTP in test_engine_tinker_sdk.py; the object-level fakes that stood in for the SDK's
clients here are gone. What stays needs no server: key rules, the probe, Datum layout, shaping."""

from __future__ import annotations

import os
import time

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tinker = pytest.importorskip("tinker")

from fakes.loopback import free_port

from hermes_stack.config.models import AlgorithmSection
from hermes_stack.errors import InputError, StackError
from hermes_stack.trainer.engine import Sequence
from hermes_stack.trainer.engine_tinker import (
    TinkerEngine,
    build_datum,
    check_key,
    loss_config,
    probe,
    token_arrays,
    token_rewards,
)

GRPO = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2,
                  value_loss_coef=0.0, kl_coef=0.0)
PPO = AlgorithmSection(name="ppo", advantage_estimator="gae", gamma=1.0, lam=0.95, clip_epsilon=0.2, entropy_coef=0.01,
                 value_loss_coef=0.5, kl_coef=0.1)


def seq(tokens, prompt_len, score, logprobs=None):
    mask = [-100] * prompt_len + tokens[prompt_len:]
    return Sequence(tokens=tokens, mask=mask, score=score,
                    logprobs=logprobs if logprobs is not None else [0.0] * prompt_len + [-0.5] * (len(tokens) - prompt_len))


# ------------------------------------------------------------------ fail fast


def test_key_prefix_is_checked_without_echoing_the_key():
    assert check_key("tml-abc") == "tml-abc"
    assert check_key("eyJhbGciOi.x.y").startswith("eyJ")
    with pytest.raises(InputError) as err:
        check_key("sk-gateway-secret-123")
    assert "secret-123" not in str(err.value) and "tml-" in str(err.value)
    with pytest.raises(InputError):
        check_key(None)


def test_probe_fails_fast_on_a_closed_port():
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(StackError, match="not reachable"):
        probe(f"http://127.0.0.1:{port}", timeout_s=2.0)
    assert time.monotonic() - start < 10  # bounded, unlike the SDK's ~300 s retry loop


def test_probe_accepts_any_http_answer_and_hits_healthz():
    seen = []
    transport = httpx.MockTransport(lambda r: seen.append(r.url.path) or httpx.Response(401))
    probe("http://tinker.test", transport=transport)
    assert seen == ["/api/v1/healthz"]


def test_engine_probes_before_building_the_sdk_client(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("ServiceClient must not be created when the probe fails")

    monkeypatch.setattr(tinker, "ServiceClient", boom)
    down = httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ConnectTimeout("timed out")))
    with pytest.raises(StackError, match="not reachable"):
        TinkerEngine(base_model="m", algo=GRPO, lora_rank=8, learning_rate=1e-5, api_key="tml-x",
                     base_url="http://tinker.test", probe_transport=down)


# ------------------------------------------------------------------ pure shaping


def test_datum_matches_the_sdk_layout():
    s = seq([1, 10, 11, 12, 13], prompt_len=2, score=1.0, logprobs=[0.0, 0.0, -0.1, -0.2, -0.3])
    arrays = token_arrays(s)
    assert arrays.inputs == [1, 10, 11, 12] and arrays.targets == [10, 11, 12, 13]
    assert arrays.trained == [0.0, 1.0, 1.0, 1.0]
    datum = build_datum(arrays, [5.0, 2.0, 2.0, 2.0])
    assert isinstance(datum, tinker.Datum) and isinstance(datum.model_input, tinker.ModelInput)
    assert datum.model_input.to_ints() == [1, 10, 11, 12]
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].tolist() == [10, 11, 12, 13]
    assert inputs["target_tokens"].dtype == "int64" and inputs["advantages"].dtype == "float32"
    assert inputs["advantages"].tolist() == [0.0, 2.0, 2.0, 2.0]  # prompt position masked out
    assert inputs["logprobs"].tolist() == pytest.approx([0.0, -0.1, -0.2, -0.3])


def test_loss_config_uses_clip_epsilon():
    assert loss_config("ppo", 0.2) == ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    assert loss_config("importance_sampling", 0.2) == ("importance_sampling", None)
    with pytest.raises(InputError):
        loss_config("cross_entropy", 0.2)


def test_token_rewards_add_entropy_and_k1_only_when_kl_is_in_the_reward():
    arrays = token_arrays(seq([1, 10, 11], prompt_len=1, score=0.0, logprobs=[0.0, -1.0, -2.0]))
    k1 = AlgorithmSection(**{**PPO.__dict__, "kl_coef": 0.1, "entropy_coef": 0.01, "kl_penalty": "k1_reward"})
    shaped = token_rewards(arrays, ref_logprobs=[-1.5, -1.0], algo=k1)
    assert shaped == pytest.approx([-0.1 * (-1.0 + 1.5) + 0.01, -0.1 * (-2.0 + 1.0) + 0.02])
    k3 = AlgorithmSection(**{**k1.__dict__, "kl_penalty": "k3_loss"})  # k3 enters the advantages, not the rewards
    assert token_rewards(arrays, ref_logprobs=[-1.5, -1.0], algo=k3) == pytest.approx([0.01, 0.02])


def test_sequences_without_logprobs_are_refused():
    with pytest.raises(StackError, match="logprobs"):
        token_arrays(Sequence(tokens=[1, 2, 3], mask=[-100, 2, 3], score=1.0, logprobs=[]))


def test_gae_or_kl_without_a_local_model_is_refused_up_front():
    with pytest.raises(InputError, match="critic"):
        TinkerEngine(base_model="m", algo=PPO, lora_rank=8, learning_rate=1e-5, service_client=object())


# ------------------------------------------------------------------ the local model's memory (issue 24, finding 2)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from hermes_stack.modelcore import embedded

    directory = tmp_path_factory.mktemp("critic") / "embedded"
    embedded.build(directory, seed=0, steps=5)
    return directory


def uneven_arrays(vocab: int) -> list:
    import random

    rng = random.Random(2)
    lengths = [30, 4, 7, 5, 12, 3, 9]
    return [token_arrays(seq([rng.randrange(3, vocab) for _ in range(n)], 2, 0.0)) for n in lengths]


@pytest.mark.parametrize("with_head", [True, False], ids=["ppo-critic", "kl-reference-only"])
def test_local_model_runs_micro_batches_and_a_chunked_log_softmax_equal_to_the_whole_batch(tiny_model, with_head):
    """The local model never runs the whole batch in one forward (256 sequences with Qwen3's vocabulary were ~155
    GB of float32 log-softmax): at most micro_batch_size rows a forward, each cut to its own longest row, hidden
    states only for a value head, and the chunked log-softmax gives the unchunked reference's values."""
    import torch

    from hermes_stack.trainer.engine_tinker import LocalCritic

    critic = LocalCritic(str(tiny_model), with_value_head=with_head, temperature=0.8, micro_batch_size=2,
                         chunk_tokens=5)
    assert critic.base.dtype == torch.float32  # a dtype on load: float32 on CPU, bfloat16 on a GPU
    calls = []
    forward = critic.base.forward

    def spy(*args, **kwargs):
        calls.append((tuple(kwargs["input_ids"].shape), kwargs.get("output_hidden_states")))
        return forward(*args, **kwargs)

    critic.base.forward = spy
    arrays = uneven_arrays(critic.base.config.vocab_size)
    refs, hidden = critic.reference_and_hidden(arrays)
    assert len(calls) == 4 and all(rows <= 2 for (rows, _), _h in calls)
    assert [w for (_, w), _h in calls] == [29, 6, 11, 8]  # each micro-batch's own longest input (tokens - 1)
    assert all(h is with_head for _, h in calls)
    # the reference: one unchunked float64 log-softmax of softmax(logits / T) per sequence
    for a, ref in zip(arrays, refs):
        with torch.no_grad():
            logits = forward(input_ids=torch.tensor([a.inputs])).logits[0].double()
        expected = torch.log_softmax(logits / 0.8, dim=-1).gather(-1, torch.tensor(a.targets).unsqueeze(-1))
        assert ref == pytest.approx(expected.squeeze(-1).tolist(), abs=1e-5)
    if with_head:
        assert hidden.shape[:2] == (len(arrays), 29)
        with torch.no_grad():
            alone = forward(input_ids=torch.tensor([arrays[4].inputs]), output_hidden_states=True).hidden_states[-1]
        assert torch.allclose(hidden[4, : len(arrays[4].inputs)], alone[0], atol=1e-5)
    else:
        assert hidden is None


def test_the_value_head_runs_in_micro_batches_and_its_update_equals_the_whole_batch(tiny_model):
    """PPO's value head saw the whole step at once ([256, 2048, hidden] in float32 for an 8B model: ~30 GiB of
    activations): values and the update now go micro_batch_size rows at a time, the update accumulating each
    term over the whole batch's token count, so values, loss and the head after the step equal the one-shot
    reference."""
    import torch

    from hermes_stack.trainer import algorithms as alg
    from hermes_stack.trainer.engine_tinker import LocalCritic

    torch.manual_seed(0)
    split = LocalCritic(str(tiny_model), with_value_head=True, micro_batch_size=2)
    whole = LocalCritic(str(tiny_model), with_value_head=True, micro_batch_size=None)
    with torch.no_grad():
        for p in split.head.parameters():
            p.normal_(0, 0.1)  # a head that is not all zeros: the values and the gradient mean something
    whole.head.load_state_dict(split.head.state_dict())
    shapes = []
    head_forward = split.head.forward
    split.head.forward = lambda h: (shapes.append(h.shape[0]), head_forward(h))[1]

    _, hidden = split.reference_and_hidden(uneven_arrays(split.base.config.vocab_size))
    mask = (torch.arange(hidden.shape[1]).unsqueeze(0) < torch.tensor([[29], [4], [7], [5], [12], [3], [9]])).float()
    returns = torch.linspace(-1, 1, hidden.shape[0]).unsqueeze(1).expand_as(mask).contiguous()
    with torch.no_grad():
        old = split.values(hidden)
        assert torch.allclose(old, whole.values(hidden), atol=1e-6)
    assert shapes and max(shapes) <= 2
    reference = float(alg.value_loss(whole.values(hidden), returns, mask, 1.0, old, 0.2))
    loss = split.update(hidden, returns, mask, 0.2, old)
    assert loss == pytest.approx(whole.update(hidden, returns, mask, 0.2, old), abs=1e-6)
    assert loss == pytest.approx(reference, abs=1e-6)
    for a, b in zip(split.head.parameters(), whole.head.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
