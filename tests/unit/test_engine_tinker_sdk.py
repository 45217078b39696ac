"""The Tinker engine driving the real tinker SDK (0.38: ServiceClient, TrainingClient, RestClient, its futures and
protobuf/JSON wire types) against tests/fakes/fake_tinker.py on loopback: only the remote end is replaced."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tinker = pytest.importorskip("tinker")
from fakes.fake_tinker import ADAPTER_FILES, API, FakeTinker
from fakes.guards import bounded as _bounded
from fakes.loopback import free_port

from hermes_stack.config.models import AlgorithmSection
from hermes_stack.errors import StackError
from hermes_stack.trainer.engine import Sequence
from hermes_stack.trainer.engine_tinker import TinkerEngine

GUARD_S = 60.0  # generous: a hang here means the SDK's own ~300 s retry loop, which the engine must not reach
GRPO = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.3,
                  value_loss_coef=0.0, kl_coef=0.0)


def bounded(fn: Callable[[], Any], seconds: float = GUARD_S) -> Any:
    return _bounded(fn, seconds)


def seq(tokens: list[int], prompt_len: int, score: float, completion_logprob: float = -0.5) -> Sequence:
    return Sequence(tokens=tokens, mask=[-100] * prompt_len + tokens[prompt_len:], score=score,
                    logprobs=[1.0] * prompt_len + [completion_logprob] * (len(tokens) - prompt_len))


GROUPS = [[seq([1, 5, 6, 7], 2, 1.0, -0.25), seq([1, 5, 8, 9], 2, 0.0, -0.75)],
          [seq([1, 4, 6], 2, 0.5), seq([1, 4, 7], 2, 0.5)]]


@pytest.fixture(autouse=True)
def clean_tinker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK reads these; a developer's own settings must not steer the tests off loopback.
    for name in ("TINKER_BASE_URL", "TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "TINKER_PROJECT_ID", "TINKER_TAGS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeTinker]:
    with FakeTinker() as server:
        yield server
    assert server.errors == [], server.errors[0]  # the fake's own bugs would otherwise be retried away unseen
    assert server.unknown == []  # the SDK called nothing the fake does not speak


@pytest.fixture
def engines() -> Iterator[list[TinkerEngine]]:
    made: list[TinkerEngine] = []
    yield made
    for engine in made:
        engine.close()  # ends the session: the SDK's heartbeat would outlive the fake server otherwise


def make_engine(fake: FakeTinker, engines: list[TinkerEngine], **kwargs: Any) -> TinkerEngine:
    options = {"base_model": "Qwen/Qwen3-8B", "algo": GRPO, "lora_rank": 16, "learning_rate": 4e-5,
               "api_key": fake.api_key, "base_url": fake.base_url, "probe_timeout_s": 2.0} | kwargs
    engine = bounded(lambda: TinkerEngine(**options))
    engines.append(engine)
    return engine


# ------------------------------------------------------------------ the happy path, as the server sees it


@pytest.mark.parametrize("pyqwest, zstd", [(True, False), (False, True)], ids=["pyqwest", "httpx-zstd"])
def test_grpo_step_sends_ppo_loss_clip_thresholds_and_per_datum_arrays(engines, pyqwest, zstd):
    with FakeTinker(use_pyqwest=pyqwest, compress_fwdbwd=zstd) as fake:
        engine = make_engine(fake, engines)
        metrics = bounded(lambda: engine.train_step(GROUPS))
        engine.close()
        engines.clear()

    paths = fake.paths()
    assert paths[0] == f"{API}/healthz"  # the engine's probe comes before the SDK's first call
    assert paths[1] == f"{API}/client/config"
    assert len(fake.bodies(f"{API}/create_session")) == 1
    (create,) = fake.bodies(f"{API}/create_model")
    assert create.base_model == "Qwen/Qwen3-8B" and create.lora_config.rank == 16
    # No adapter on lm_head: SGLang's LoRA targets are the attention and MLP projections (sglang.LORA_TARGET_MODULES).
    assert create.lora_config.train_unembed is False
    model_id = engine.training_client.model_id
    assert model_id == f"{create.session_id}:train:{create.model_seq_id}"

    (fb_call,) = [c for c in fake.calls if c.path == f"{API}/forward_backward"]
    assert (fb_call.headers.get("content-encoding") == "zstd") is zstd  # the server's flag decides the body's encoding
    fb = fb_call.body
    assert fb["model_id"] == model_id and not fb["forward_only"]
    assert fb["loss_fn"] == "ppo"
    assert fb["loss_fn_config"] == pytest.approx({"clip_low_threshold": 0.7, "clip_high_threshold": 1.3})
    assert len(fb["data"]) == 4
    first = fb["data"][0]
    assert first["tokens"] == [1, 5, 6]  # model input: tokens[:-1]
    inputs = first["loss_fn_inputs"]
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    assert inputs["target_tokens"] == {"dtype": "int64", "values": [5, 6, 7], "shape": [3]}
    assert inputs["logprobs"]["dtype"] == "float32" and inputs["logprobs"]["values"] == [0.0, -0.25, -0.25]
    assert inputs["advantages"]["dtype"] == "float32"
    advantages = [d["loss_fn_inputs"]["advantages"]["values"] for d in fb["data"]]
    assert advantages[0] == pytest.approx([0.0, 1.0, 1.0], abs=1e-5)  # prompt position 0, then (s - mean) / std
    assert advantages[1] == pytest.approx([0.0, -1.0, -1.0], abs=1e-5)
    assert advantages[2] == advantages[3] == [0.0, 0.0]  # equal scores in the group: no signal
    assert fb["data"][1]["loss_fn_inputs"]["logprobs"]["values"] == [0.0, -0.75, -0.75]

    (optim,) = fake.bodies(f"{API}/optim_step")
    assert isinstance(optim.optim_params, tinker.AdamParams) and optim.optim_params.learning_rate == 4e-5
    # The SDK's per-client order: forward_backward, then optim_step; nothing saved for Tinker's own sampler (the
    # inference service serves the exported adapter), so no checkpoint that never expires is left a step.
    assert [fb["seq_id"], optim.seq_id] == [1, 2]
    assert fake.bodies(f"{API}/save_weights_for_sampler") == []

    # Every future was polled through a try_again before its result arrived (create, fb, optim).
    assert paths.count(f"{API}/retrieve_future") == 2 * 3
    trained = 6  # target tokens summed over the 4 datums (3 + 3 + 2 + 2; the fake's loss counts all of them)
    assert metrics["tinker/tokens:sum"] == 10 and metrics["tinker/loss:sum"] == pytest.approx(0.5 * 10)
    assert metrics["tinker/grad_norm:mean"] == 0.25  # optim_step's metrics reach the step metrics too
    assert metrics["trained_tokens"] == trained and metrics["reward_mean"] == pytest.approx(0.5)
    assert fake.sessions == {session_id: "success" for session_id in fake.sessions}  # close() finished it
    assert fake.errors == [] and fake.unknown == []


def test_importance_sampling_sends_no_clip_config(fake, engines):
    engine = make_engine(fake, engines, loss="importance_sampling")
    bounded(lambda: engine.train_step(GROUPS[:1]))
    (fb,) = fake.bodies(f"{API}/forward_backward")
    assert fb["loss_fn"] == "importance_sampling" and fb["loss_fn_config"] == {}


def test_optim_steps_follow_the_learning_rate_schedule(fake, engines):
    """[trainer] lr_schedule cosine: each optim_step sends the scheduled rate (algorithms.lr_factor on the steps
    done), and the step metrics carry it."""
    from hermes_stack.trainer.algorithms import lr_factor

    engine = make_engine(fake, engines, learning_rate=1e-3, lr_decay_steps=4, min_lr_ratio=0.1, lr_hold_steps=1)
    metrics = [bounded(lambda: engine.train_step(GROUPS[:1]))["learning_rate"] for _ in range(3)]
    sent = [body.optim_params.learning_rate for body in fake.bodies(f"{API}/optim_step")]
    expected = [1e-3 * lr_factor(step, 4, 0.1, 1) for step in range(3)]
    assert sent == pytest.approx(expected) == metrics
    assert sent[0] == sent[1] == pytest.approx(1e-3) and sent[2] < 1e-3  # held for one step, then decaying


def test_transient_503_is_retried_and_the_step_succeeds(fake, engines):
    engine = make_engine(fake, engines)
    fake.statuses[f"{API}/forward_backward"] = [503]
    bounded(lambda: engine.train_step(GROUPS))
    sent = [c.body for c in fake.calls if c.path == f"{API}/forward_backward"]
    assert sent[0] == "HTTP 503" and len(sent) == 2 and isinstance(sent[1], dict)
    assert engine.step == 1


# ------------------------------------------------------------------ failures, as the user sees them


def test_refused_key_is_one_clear_error_without_the_key(engines):
    with FakeTinker(api_key="tml-the-right-one") as fake, pytest.raises(StackError) as err:
        make_engine(fake, engines, api_key="tml-wrong-secret-123")
    message = str(err.value)
    assert "refused TINKER_API_KEY" in message and "HTTP 401" in message and "Invalid API key" in message
    assert "wrong-secret" not in message
    assert fake.paths().count(f"{API}/client/config") == 1  # a 401 is final: no retry loop
    assert f"{API}/create_session" not in fake.paths()




@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_unreachable_endpoint_fails_in_the_probe_before_the_sdk(monkeypatch, engines, kind):
    built = []
    monkeypatch.setattr(tinker, "ServiceClient", lambda *a, **k: built.append(k))
    silent = socket.socket()  # listens (the kernel completes the handshake) but never answers a byte
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1] if kind == "silent" else free_port()
    try:
        with pytest.raises(StackError, match="not reachable"):
            bounded(lambda: TinkerEngine(base_model="m", algo=GRPO, lora_rank=8, learning_rate=1e-5,
                                         api_key="tml-x", base_url=f"http://127.0.0.1:{port}", probe_timeout_s=0.5))
    finally:
        silent.close()
    assert built == []  # the SDK (and its ~300 s retry loop) was never reached


def test_failed_future_is_one_clear_error_and_no_step_is_counted(fake, engines):
    engine = make_engine(fake, engines)
    fake.fail_futures["ForwardBackward"] = "worker 3 ran out of memory"
    with pytest.raises(StackError, match="forward_backward failed on the server.*worker 3 ran out of memory"):
        bounded(lambda: engine.train_step(GROUPS))
    assert engine.step == 0


# ------------------------------------------------------------------ weights and state


def test_export_downloads_the_adapter_through_the_sessions_server(fake, engines, tmp_path):
    engine = make_engine(fake, engines)
    out = bounded(lambda: engine.export_weights(tmp_path / "adapter"))
    (saved,) = fake.bodies(f"{API}/save_weights_external")
    assert saved.path == "step-0" and saved.model_id == engine.training_client.model_id
    assert saved.ttl_seconds == 3600  # the files are downloaded at once; without a TTL the save never expires
    (asked,) = [c.body for c in fake.calls if c.path.endswith("/external_weights_urls")]
    assert asked == {"run": engine.training_client.model_id, "ckpt": "external_weights/step-0"}
    assert {p.name: p.read_bytes() for p in out.iterdir()} == ADAPTER_FILES


def test_state_round_trip_resumes_on_a_new_training_client(fake, engines):
    engine = make_engine(fake, engines)
    bounded(lambda: engine.train_step(GROUPS))
    state = bounded(engine.state_dict)
    (saved,) = fake.bodies(f"{API}/save_weights")
    assert saved.path == "state-1" and saved.overwrite is True  # saving step 1 twice is not a conflict
    assert state["tinker_state_path"] == f"tinker://{engine.training_client.model_id}/weights/state-1"

    resumed = make_engine(fake, engines)
    bounded(lambda: resumed.load_state_dict(state))
    (load,) = fake.bodies(f"{API}/load_weights")
    assert load.path == state["tinker_state_path"] and load.optimizer is True
    assert load.model_id is None and load.session_id is not None  # create-from-state, not the deprecated load_state
    assert resumed.step == 1 and resumed.training_client.model_id != engine.training_client.model_id
    bounded(lambda: resumed.train_step(GROUPS))
    assert fake.bodies(f"{API}/forward_backward")[-1]["model_id"] == resumed.training_client.model_id
    assert resumed.step == 2

    missing = dict(state, tinker_state_path=f"tinker://{engine.training_client.model_id}/weights/nope")
    with pytest.raises(StackError, match="loading the checkpoint failed on the server"):
        bounded(lambda: resumed.load_state_dict(missing))


# ------------------------------------------------------------------ a service that really trains (torch behind the API)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.fakes.fixture_model import build_fixture_model

    return build_fixture_model(tmp_path_factory.mktemp("tinker-base"))


@pytest.fixture
def trainer(model_dir) -> Iterator[FakeTinker]:
    with FakeTinker(model_dir=model_dir) as server:
        yield server
    assert server.errors == [], server.errors[0]
    assert server.unknown == []


def base_logprobs(model_dir: Path, inputs: list[int], targets: list[int]) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([inputs])).logits[0].float(), -1)
    return logp[range(len(targets)), targets].tolist()


def adapter_state(server: FakeTinker, engine: TinkerEngine) -> dict[str, Any]:
    return server.policy(engine.training_client.model_id).trainable_state()


@pytest.mark.parametrize("loss", ["ppo", "importance_sampling"])
def test_each_loss_trains_the_policy_behind_the_api_by_tinkers_definition(trainer, engines, model_dir, loss):
    import torch

    from tests.fakes.tinker_policy import token_losses

    engine = make_engine(trainer, engines, loss=loss, learning_rate=1e-2)
    before = adapter_state(trainer, engine)
    metrics = bounded(lambda: engine.train_step(GROUPS))
    after = adapter_state(trainer, engine)
    assert any(not torch.equal(before[k], after[k]) for k in before)  # optim_step moved the adapter

    # The loss the service reported is Tinker's, summed over every token of every datum, at the pre-step policy
    # (LoRA starts at B = 0: the base model), from exactly the arrays the SDK sent.
    (fb,) = trainer.bodies(f"{API}/forward_backward")
    config = fb["loss_fn_config"] or None
    expected = 0.0
    for datum in fb["data"]:
        inputs = datum["loss_fn_inputs"]
        logp = base_logprobs(model_dir, datum["tokens"], inputs["target_tokens"]["values"])
        expected += float(token_losses(torch.tensor(logp), torch.tensor(inputs["logprobs"]["values"]),
                                       torch.tensor(inputs["advantages"]["values"]), loss, config).sum())
    assert metrics["tinker/loss:sum"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert metrics["tinker/grad_norm:mean"] > 0


def test_forward_backward_returns_the_policys_real_per_token_logprobs(trainer, engines, model_dir):
    from hermes_stack.trainer.engine_tinker import build_datum, token_arrays

    engine = make_engine(trainer, engines)
    arrays = token_arrays(GROUPS[0][0])
    datum = build_datum(arrays, [0.0] * len(arrays.targets))
    out = bounded(lambda: engine.training_client.forward_backward([datum], "ppo").result(timeout=30))
    got = out.loss_fn_outputs[0]["logprobs"].tolist()
    assert got == pytest.approx(base_logprobs(model_dir, arrays.inputs, arrays.targets), abs=1e-5)


def test_ppo_with_the_local_critic_and_reference_over_http(trainer, engines, model_dir):
    import torch

    from hermes_stack.trainer.engine_tinker import LocalCritic

    ppo = AlgorithmSection(name="ppo", advantage_estimator="gae", gamma=1.0, lam=0.95, clip_epsilon=0.2, entropy_coef=0.01,
                     value_loss_coef=0.5, kl_coef=0.1)
    critic = LocalCritic(str(model_dir), learning_rate=1e-3)
    engine = make_engine(trainer, engines, algo=ppo, critic=critic, learning_rate=1e-2)
    groups = [[seq([1, 5, 6, 7, 8], 2, 1.0)], [seq([1, 9, 10, 11], 2, 0.0)]]
    head_before = [p.detach().clone() for p in critic.head.parameters()]
    metrics = bounded(lambda: engine.train_step(groups))
    assert any(not torch.equal(a, b) for a, b in zip(critic.head.parameters(), head_before))  # critic trained here
    assert metrics["value_loss"] > 0 and "kl" in metrics
    (fb,) = trainer.bodies(f"{API}/forward_backward")
    first = fb["data"][0]["loss_fn_inputs"]["advantages"]["values"]
    assert first[0] == 0.0 and all(v != 0.0 for v in first[1:])  # GAE per completion token, none on the prompt

    state = bounded(engine.state_dict)
    for p in critic.head.parameters():
        p.data.fill_(123.0)
    bounded(lambda: engine.load_state_dict(state))
    assert all(torch.equal(a, b) for a, b in zip(critic.head.state_dict().values(), state["critic"].values()))


def test_exported_adapter_loads_with_peft_and_matches_the_trained_policy(trainer, engines, model_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    engine = make_engine(trainer, engines, learning_rate=1e-2)
    bounded(lambda: engine.train_step(GROUPS))
    out = bounded(lambda: engine.export_weights(tmp_path / "step-1"))
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), out).eval()
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        trained = trainer.policy(engine.training_client.model_id).model(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(model_dir)(input_ids=ids).logits
        assert torch.allclose(served(input_ids=ids).logits, trained, atol=1e-5)
        assert not torch.allclose(trained, base, atol=1e-4)  # the step is in the download


def test_resume_from_state_continues_with_the_same_adam_moments(trainer, engines):
    import torch

    first = make_engine(trainer, engines, learning_rate=1e-2)
    bounded(lambda: first.train_step(GROUPS))
    state = bounded(first.state_dict)
    bounded(lambda: first.train_step(GROUPS))
    expected = adapter_state(trainer, first)

    resumed = make_engine(trainer, engines, learning_rate=1e-2)
    bounded(lambda: resumed.load_state_dict(state))
    bounded(lambda: resumed.train_step(GROUPS))
    got = adapter_state(trainer, resumed)
    assert set(got) == set(expected)
    assert all(torch.allclose(got[k], expected[k], atol=1e-6) for k in got)  # same step 2, optimizer included


# ------------------------------------------------------------------ a server that stops answering: bounded, one line


@pytest.mark.parametrize("how", ["silent", "pending_forever"])
def test_a_server_that_stops_answering_mid_run_is_one_clear_line_within_the_bound(fake, engines, how):
    import time

    engine = make_engine(fake, engines, timeout_s=2.0)
    bounded(lambda: engine.train_step(GROUPS))  # step 1 answered
    if how == "silent":
        fake.silent.set()  # reads every request, answers none
    else:
        fake.pending_forever = True  # answers, but every future stays queued
    began = time.monotonic()
    with pytest.raises(StackError) as err:
        bounded(lambda: engine.train_step(GROUPS), seconds=30)
    message = str(err.value)
    assert "\n" not in message and "forward_backward: no answer from the Tinker API" in message
    assert "within 2 s" in message and "resume from the last checkpoint" in message
    assert time.monotonic() - began < 20
    assert engine.step == 1
    engines.clear()
    # The close is bounded too. A silent server never confirms it; with futures stuck in the queue the SDK may wait
    # for them first, so either it ends in time or it is the same one line.
    if how == "silent":
        with pytest.raises(StackError, match="closing the session: no answer"):
            bounded(engine.close, seconds=30)
        # ... and the SDK's heartbeat stops with it: it would log "Session heartbeat failed" into later output.
        assert engine.service_client._session_holder._closed
    else:
        try:
            bounded(engine.close, seconds=30)
        except StackError as exc:
            assert "closing the session: no answer from the Tinker API" in str(exc)


def test_the_trainer_process_exits_after_the_server_goes_silent(fake, tmp_path):
    """No thread of the SDK (heartbeats, pollers) may keep the trainer's process alive: it must end by itself."""
    import subprocess
    import textwrap

    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(Path(__file__).resolve().parents[2])!r}]
        from hermes_stack.errors import StackError
        from hermes_stack.config.models import AlgorithmSection
        from hermes_stack.trainer.engine import Sequence
        from hermes_stack.trainer.engine_tinker import TinkerEngine
        GRPO = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2,
                          value_loss_coef=0.0, kl_coef=0.0)
        GROUPS = [[Sequence([1, 5, 6], [-100, 5, 6], 1.0, [1.0, -0.5, -0.5]),
                   Sequence([1, 5, 7], [-100, 5, 7], 0.0, [1.0, -0.5, -0.5])]]
        engine = TinkerEngine(base_model="m", algo=GRPO, lora_rank=8, learning_rate=1e-5, api_key={fake.api_key!r},
                              base_url={fake.base_url!r}, timeout_s=2.0)
        engine.train_step(GROUPS)
        print("step 1 ok", flush=True)
        input()  # the test makes the server silent, then says go
        try:
            engine.train_step(GROUPS)
        except StackError as exc:
            print(exc, flush=True)
        try:
            engine.close()
        except StackError as exc:
            print(exc, flush=True)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_")}
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "step 1 ok", proc.stderr.read()
        fake.silent.set()
        out, _ = proc.communicate("go\n", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "forward_backward: no answer from the Tinker API" in out


def test_a_long_run_saves_no_sampler_weights_and_every_export_expires(fake, engines, tmp_path):
    from tests.fakes.tinker_service import KEEP_PER_KIND

    engine = make_engine(fake, engines)
    for step in range(KEEP_PER_KIND + 2):
        bounded(lambda: engine.train_step(GROUPS[:1]))
        bounded(lambda step=step: engine.export_weights(tmp_path / f"step-{step}"))
    kept = fake.models[engine.training_client.model_id].checkpoints
    assert not [p for p in kept if "/sampler_weights/" in p]
    assert {b.ttl_seconds for b in fake.bodies(f"{API}/save_weights_external")} == {3600}
    # (the local service forgets all but the newest exports itself: its own memory bound, not Tinker's behaviour)
    assert sum("/external_weights/" in p for p in kept) == KEEP_PER_KIND
    assert len(fake._exports) == KEEP_PER_KIND  # the pruned downloads' files are gone too


@pytest.mark.parametrize(("files", "named"), [
    ({"adapter_config.json": b'{"r": 8, "target_modules": ["q_proj", "v_proj", "lm_head"]}',
      "adapter_model.safetensors": b"\0" * 16}, "target modules ['lm_head']"),
    ({"model.safetensors": b"\0" * 16, "config.json": b"{}"}, "expected a peft adapter"),
])
def test_an_export_the_inference_server_could_not_load_is_refused_by_name(fake, engines, tmp_path, monkeypatch,
                                                                          files, named):
    """The export's layout is Tinker's: one SGLang would refuse (an lm_head adapter, or no adapter at all) is a named
    error at the export, not a failed push."""
    import tests.fakes.tinker_service as service

    monkeypatch.setattr(service, "STUB_ADAPTER", files)
    engine = make_engine(fake, engines)
    with pytest.raises(StackError, match=r"tinker: the exported weights .*" + re.escape(named)):
        bounded(lambda: engine.export_weights(tmp_path / "adapter"))
