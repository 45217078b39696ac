"""The Tinker engine adapter against the installed SDK's real types (tinker 0.38.0); no network beyond loopback."""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import Future
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tinker = pytest.importorskip("tinker")

from hermes_stack.errors import InputError, StackError
from hermes_stack.trainer.engine import AlgoParams, Sequence
from hermes_stack.trainer.engine_tinker import (
    LocalCritic,
    TinkerEngine,
    build_datum,
    check_key,
    loss_config,
    probe,
    token_rewards,
    token_arrays,
)

GRPO = AlgoParams(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2,
                  value_loss_coef=0.0, kl_coef=0.0)
PPO = AlgoParams(name="ppo", advantage_estimator="gae", gamma=1.0, lam=0.95, clip_epsilon=0.2, entropy_coef=0.01,
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
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
    k1 = AlgoParams(**{**PPO.__dict__, "kl_coef": 0.1, "entropy_coef": 0.01, "kl_penalty": "k1_reward"})
    shaped = token_rewards(arrays, ref_logprobs=[-1.5, -1.0], algo=k1)
    assert shaped == pytest.approx([-0.1 * (-1.0 + 1.5) + 0.01, -0.1 * (-2.0 + 1.0) + 0.02])
    k3 = AlgoParams(**{**k1.__dict__, "kl_penalty": "k3_loss"})  # k3 enters the advantages, not the rewards
    assert token_rewards(arrays, ref_logprobs=[-1.5, -1.0], algo=k3) == pytest.approx([0.01, 0.02])


def test_sequences_without_logprobs_are_refused():
    with pytest.raises(StackError, match="logprobs"):
        token_arrays(Sequence(tokens=[1, 2, 3], mask=[-100, 2, 3], score=1.0, logprobs=[]))


def test_gae_or_kl_without_a_local_model_is_refused_up_front():
    with pytest.raises(InputError, match="critic"):
        TinkerEngine(base_model="m", algo=PPO, lora_rank=8, learning_rate=1e-5, service_client=object())


# ------------------------------------------------------------------ one step through a fake SDK boundary


def done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class FakeTrainingClient:
    """Stands in for tinker.TrainingClient at its public method boundary; answers with the SDK's own types."""

    def __init__(self):
        self.calls = []

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        assert all(isinstance(d, tinker.Datum) for d in data)
        self.calls.append(("forward_backward", data, loss_fn, loss_fn_config))
        return done(tinker.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[],
                                                 metrics={"loss:sum": 1.5}))

    def optim_step(self, params):
        assert isinstance(params, tinker.AdamParams)
        self.calls.append(("optim_step", params))
        return done(tinker.OptimStepResponse())

    def save_weights_for_sampler(self, name):
        self.calls.append(("save_weights_for_sampler", name))
        return done(tinker.types.SaveWeightsForSamplerResponse(path=f"tinker://run/sampler_weights/{name}"))


class FakeServiceClient:
    def __init__(self):
        self.training = FakeTrainingClient()
        self.created = None

    def create_lora_training_client(self, base_model, rank):
        self.created = (base_model, rank)
        return done(self.training)


def test_grpo_train_step_sends_ppo_loss_and_group_relative_advantages():
    service = FakeServiceClient()
    engine = TinkerEngine(base_model="Qwen/Qwen3-8B", algo=GRPO, lora_rank=32, learning_rate=4e-5,
                          service_client=service)
    groups = [[seq([1, 5, 6, 7], 2, 1.0), seq([1, 5, 8, 9], 2, 0.0)], [seq([1, 4, 6], 2, 0.5), seq([1, 4, 7], 2, 0.5)]]
    metrics = engine.train_step(groups)
    assert service.created == ("Qwen/Qwen3-8B", 32)
    names = [c[0] for c in service.training.calls]
    assert names == ["forward_backward", "optim_step", "save_weights_for_sampler"]
    _, data, loss_fn, cfg = service.training.calls[0]
    assert loss_fn == "ppo" and cfg == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    advantages = [d.loss_fn_inputs["advantages"].tolist() for d in data]
    assert advantages[0][1:] == pytest.approx([1.0, 1.0], abs=1e-5)
    assert advantages[1][1:] == pytest.approx([-1.0, -1.0], abs=1e-5)  # (s - mean) / (std + 1e-6)
    assert advantages[0][0] == 0.0  # prompt position
    assert advantages[2] == advantages[3] == [0.0, 0.0]  # equal scores: nothing to learn
    assert service.training.calls[1][1].learning_rate == 4e-5
    assert service.training.calls[2][1] == "step-1"
    assert engine.last_sampler_path == "tinker://run/sampler_weights/step-1"
    assert metrics["reward_mean"] == pytest.approx(0.5) and metrics["tinker/loss:sum"] == 1.5


def test_ppo_train_step_with_local_critic_and_reference(tmp_path_factory):
    from hermes_stack.inference.fixture import build_fixture_model

    model_dir = tmp_path_factory.getbasetemp() / "fixture-model"
    if not (model_dir / "config.json").exists():
        build_fixture_model(model_dir)
    critic = LocalCritic(str(model_dir), learning_rate=1e-3)
    service = FakeServiceClient()
    engine = TinkerEngine(base_model="tiny", algo=PPO, lora_rank=8, learning_rate=1e-5, service_client=service,
                          critic=critic)
    groups = [[seq([1, 5, 6, 7, 8], 2, 1.0)], [seq([1, 9, 10, 11], 2, 0.0)]]
    before = [p.detach().clone() for p in critic.head.parameters()]
    metrics = engine.train_step(groups)
    after = list(critic.head.parameters())
    assert any(not (a == b).all() for a, b in zip(after, before))  # the critic learned locally
    assert metrics["value_loss"] > 0 and "kl" in metrics
    data = service.training.calls[0][1]
    first = data[0].loss_fn_inputs["advantages"].tolist()
    assert first[0] == 0.0 and all(v != 0.0 for v in first[1:])
    service.training.save_state = lambda name, overwrite=False: done(tinker.types.SaveWeightsResponse(path=f"tinker://run/{name}"))
    loaded, resumed = [], FakeTrainingClient()
    service.create_training_client_from_state_with_optimizer = lambda path: done(loaded.append(path) or resumed)
    state = engine.state_dict()
    assert state["step"] == 1 and state["tinker_state_path"] == "tinker://run/state-1"
    for parameter in critic.head.parameters():
        parameter.data.fill_(123.0)
    engine.step = 0
    engine.load_state_dict(state)
    assert loaded == ["tinker://run/state-1"] and engine.step == 1
    assert engine.training_client is resumed  # a new training client from the checkpoint, not a deprecated load_state
    assert all((a == b).all() for a, b in zip(critic.head.state_dict().values(), state["critic"].values()))
    assert not any((p == 123.0).all() for p in critic.head.parameters())


def test_export_weights_downloads_the_adapter_files(tmp_path):
    service = FakeServiceClient()
    service.training.save_weights_external = lambda name: done(
        tinker.types.SaveWeightsExternalResponse(path=f"tinker://run/external_weights/{name}"))
    urls = {"adapter_config.json": "https://x/a", "adapter_model.safetensors": "https://x/b"}
    asked = []

    class FakeRestClient:
        def get_external_weights_urls(self, path):
            asked.append(path)
            return done(tinker.types.ExternalWeightsUrlsResponse(urls=urls, expires="2030-01-01T00:00:00Z"))

    fetched = []

    def download(url: str, target: Path) -> None:
        fetched.append(url)
        target.write_text(url)

    engine = TinkerEngine(base_model="m", algo=GRPO, lora_rank=8, learning_rate=1e-5, service_client=service,
                          rest_client=FakeRestClient(), download=download)
    out = engine.export_weights(tmp_path / "step-0")
    assert asked == ["tinker://run/external_weights/step-0"]
    assert (out / "adapter_config.json").read_text() == "https://x/a"
    assert sorted(fetched) == ["https://x/a", "https://x/b"]
