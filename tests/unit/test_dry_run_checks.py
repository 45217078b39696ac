"""The dry-run's proof that the loop works where it runs (trainer/prompt_check.py, trainer/memory_check.py,
trainer/policy_checks.py): the prompts fit (tests in test_prompt_room.py), memory measured, a weight push reaching the
served policy and back, the log-prob convention. Each prints one line with its
figure; each fails with one line, before any step, when its invariant is broken.

main() runs in-process with the real TorchEngine on the embedded tiny model, the real run-api, and the real built-in
inference service in this process on a loopback port (trainer_helpers.BuiltinInference). The broken servers are that
same server with one thing changed, each a failure the real stack can meet: log-probs reported at T = 1 while
sampling at 0.8 (SGLang with SGLANG_RETURN_ORIGINAL_LOGPROB set does that:
python/sglang/srt/layers/sampler.py, Sampler.forward), and a weight load that answers success but leaves the old
policy serving (the field's "LoRA adapter silently not applied").
"""

from __future__ import annotations

import re
import signal

import httpx
import pytest
from trainer_helpers import BuiltinInference, embedded_model_dir, write_configs

from hermes_stack.trainer import memory_check
from hermes_stack.trainer.__main__ import main
from hermes_stack.trainer.memory_check import Probe, refusal, search


@pytest.fixture
def env(api, tmp_path, monkeypatch):
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}  # main() installs handlers
    api.reset()
    model = embedded_model_dir()
    data = tmp_path / "data"
    for name in ("HERMES_SERVED_MODEL_NAME", "WANDB_API_KEY", "TINKER_API_KEY", "HERMES_TRAINER_MEMORY_CAP_GIB"):
        monkeypatch.delenv(name, raising=False)
    inference = BuiltinInference(model, data)
    monkeypatch.setenv("HERMES_DATA_DIR", str(data))
    monkeypatch.setenv("HERMES_ATROPOS_URL", api.url)
    monkeypatch.setenv("HERMES_INFERENCE_URL", inference.url)
    monkeypatch.setenv("HERMES_INFERENCE_KEY", inference.key)
    monkeypatch.setenv("HERMES_EMBEDDED_MODEL", str(model))
    yield {"configs": tmp_path / "configs", "inference": inference, "api": api, "data": data}
    inference.stop()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _dry_run(env, algo: str = "grpo") -> int:
    write_configs(env["configs"], algo=algo, group_size=4 if algo == "grpo" else 1)
    return main(["--dry-run", "--algo", algo, "--config-dir", str(env["configs"]), "--profile", "embedded"])


def _nothing_trained(env) -> None:
    assert httpx.get(env["api"].url + "/info").json()["batch_size"] == -1  # never registered
    assert not (env["data"] / "metrics.jsonl").exists() and not (env["data"] / "checkpoints").exists()
    assert not (env["data"] / "weights").exists()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_the_four_checks_pass_with_their_figures_and_nothing_trains(env, capsys, algo) -> None:
    assert _dry_run(env, algo) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("dry-run check ")}
    assert set(lines) == {"dry-run check prompts", "dry-run check memory", "dry-run check weight sync",
                          "dry-run check log-probs"}, out
    # The offline task's train split as the environment samples it (its held-out evaluation has a fixed budget).
    assert re.fullmatch(r"dry-run check prompts: 455 train prompts of 5-6 tokens; rollout\.max_token_length 16 "
                        r"leaves the longest 9 new tokens \(at least 4 needed\); \d+\.\d s",
                        lines["dry-run check prompts"]), lines["dry-run check prompts"]
    assert "one forward and backward measured on cpu: peak " in lines["dry-run check memory"]
    assert "POST /update_weights_from_disk moved the served log-probs" in lines["dry-run check weight sync"]
    assert "first-pass ratio 1" in lines["dry-run check log-probs"]
    temperature = "0.8" if algo == "grpo" else "0.7"
    assert f"at temperature {temperature}, top_p 0.95" in lines["dry-run check log-probs"]
    assert out.index("dry-run check log-probs") < out.index("trainer dry-run ok")
    _nothing_trained(env)
    # The served policy is the trainer's again, and the probe's files are gone.
    backend = env["inference"].backend
    assert backend.weights_path == str(env["data"] / "dry-run" / "policy")
    assert not (env["data"] / "dry-run" / "probe").exists()


def test_a_server_reporting_logprobs_at_t1_while_sampling_at_08_fails_naming_the_temperature(env, capsys,
                                                                                          monkeypatch) -> None:
    import torch

    from hermes_stack.modelcore import sampling_core

    def at_temperature_one(self, logits, token):  # samples at T as before; reports log softmax(logits)
        return torch.log_softmax(logits, -1).gather(-1, token.unsqueeze(-1)).squeeze(-1)

    monkeypatch.setattr(sampling_core._Chooser, "logprob", at_temperature_one)
    assert _dry_run(env, "grpo") == 1
    line = _one_line(capsys)
    assert line.startswith("trainer: logprobs: the first-pass importance ratio is not 1: mean |log ratio| "), line
    assert "temperature convention" in line and "softmax(logits / 0.8)" in line
    _nothing_trained(env)


def test_a_push_that_does_not_reach_the_served_policy_fails(env, capsys, monkeypatch) -> None:
    from hermes_stack.inference.builtin import BuiltinBackend

    async def answers_success_loads_nothing(self, body):
        return {"success": True, "message": f"Succeeded to update model weights from {body.get('model_path')}"}

    monkeypatch.setattr(BuiltinBackend, "update_weights_from_disk", answers_success_loads_nothing)
    assert _dry_run(env, "grpo") == 1
    line = _one_line(capsys)
    assert line.startswith("trainer: weight-sync: a weight push did not reach the served policy: POST "
                           "/update_weights_from_disk answered success"), line
    assert "they are still the old policy's" in line
    _nothing_trained(env)


def test_a_micro_batch_over_the_stated_memory_cap_fails_before_any_step(env, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_TRAINER_MEMORY_CAP_GIB", "0.01")  # 10 MiB: less than the process itself
    assert _dry_run(env, "ppo") == 1
    line = _one_line(capsys)
    # the micro-batch measured is the largest a step trains: here a minibatch of the profile's 4 (the batch's share)
    assert re.match(r"trainer: memory: micro_batch_size [12] x 16 tokens \(one forward and backward, measured\) "
                    r"peaks at ~", line), line
    assert "the room is 10.2 MiB (HERMES_TRAINER_MEMORY_CAP_GIB=0.01); even 1 x 16 tokens does not fit" in line
    assert not (env["data"] / "dry-run").exists()  # refused before the weight sync's first push
    _nothing_trained(env)


# ---------------------------------------------------------------- the search for what fits (pure)


def linear(fixed: int, per_token: int, calls: list):
    def measure(micro: int, width: int) -> int | None:
        calls.append((micro, width))
        peak = fixed + per_token * micro * width
        return None if peak > 10_000 else peak  # past 10 kB: out of memory

    return measure


FILES = {"settings": "settings_grpo.json", "config": "config_grpo.toml"}


def test_halving_the_micro_batch_finds_the_one_that_fits_by_measuring() -> None:
    calls: list = []
    probes = search(linear(1000, 2, calls), micro=16, width=512, room_bytes=3100)
    assert calls == [(16, 512), (8, 512), (4, 512), (2, 512)]
    assert probes[-1] == Probe(2, 512, 3048)
    line = refusal(probes, 3100, "the cap", FILES, 1000)
    assert line.startswith("micro_batch_size 16 x 512 tokens (one forward and backward, measured) runs out of memory")
    assert line.endswith("measured: micro_batch_size 2 fits (~0.0 MiB). Hint: set trainer.micro_batch_size = 2 in "
                         "settings_grpo.json")


def test_then_the_width_and_when_nothing_fits_the_model_is_named() -> None:
    probes = search(linear(1000, 4, []), micro=2, width=512, room_bytes=1600)
    assert [(p.micro, p.width) for p in probes] == [(2, 512), (1, 512), (1, 256), (1, 128)]
    assert "[rollout] max_token_length = 128 in config_grpo.toml" in refusal(probes, 1600, "x", FILES, 1000)
    probes = search(linear(5000, 1, []), micro=1, width=64, room_bytes=1000)
    assert [(p.micro, p.width) for p in probes] == [(1, 64), (1, 32), (1, 16)]
    assert "even 1 x 16 tokens does not fit" in refusal(probes, 1000, "x", FILES, 5000)


def test_the_probe_step_leaves_weights_optimiser_and_step_count_as_they_were() -> None:
    import torch
    from trainer_helpers import ppo_params

    from hermes_stack.trainer.engine_torch import TorchEngine

    engine = TorchEngine(embedded_model_dir(), ppo_params(), 1e-3, temperature=0.7)
    before = [p.detach().clone() for p in [*engine.policy.parameters(), *engine.critic.parameters()]]
    engine.probe_step(memory_check.probe_sequences(3, 24, engine.policy.config.vocab_size))
    after = [*engine.policy.parameters(), *engine.critic.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(p.grad is None for p in after) and not engine.optimizer.state and engine.steps_done == 0


# ---------------------------------------------------------------- LoRA: /load_lora_adapter, the adapter applied


@pytest.fixture
def lora(tmp_path):
    """A LoRA engine on a tiny random Llama (tests/fakes/fixture_model.py) and the built-in server with the same
    model, talking over loopback; a stack shaped as the checks read it."""
    from types import SimpleNamespace

    from trainer_helpers import grpo_params

    from hermes_stack.trainer.engine_torch import TorchEngine
    from hermes_stack.trainer.weights_sync import InferenceClient
    from tests.fakes.fixture_model import build_fixture_model

    model = build_fixture_model(tmp_path / "model")
    data = tmp_path / "data"
    server = BuiltinInference(model, data)
    engine = TorchEngine(model, grpo_params(), 1e-3, temperature=0.8, lora_rank=4)
    rollout = SimpleNamespace(temperature=0.8, top_p=0.95, max_token_length=64)
    environment = SimpleNamespace(name="gsm8k", dataset="offline-arith", system_prompt=None)
    stack = SimpleNamespace(config=SimpleNamespace(environment=environment, rollout=rollout))
    client = InferenceClient(server.url, server.key)
    yield SimpleNamespace(engine=engine, server=server, client=client, stack=stack, work=data / "dry-run")
    client.close()
    server.stop()


def _train_the_adapter(engine) -> None:
    """As a resumed run's adapter: LoRA B no longer zero, so the policy is not the base model."""
    import torch

    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in engine.policy.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))


def test_a_fresh_adapter_round_trip_loads_the_probe_and_unloads_it(lora) -> None:
    from hermes_stack.trainer.policy_checks import check_logprobs, check_weight_sync

    line = check_weight_sync(lora.engine, lora.client, lora.stack, lora.work, resumed=False)
    assert "pushed through POST /load_lora_adapter moved the served log-probs" in line
    assert "the probe adapter unloaded" in line
    assert lora.server.backend.adapters == {} and lora.server.backend.default_adapter is None  # as it was
    assert "first-pass ratio 1" in check_logprobs(lora.engine, lora.client, lora.stack)


def test_a_resumed_adapter_is_served_after_the_round_trip(lora) -> None:
    from hermes_stack.trainer.policy_checks import POLICY_NAME, check_logprobs, check_weight_sync

    _train_the_adapter(lora.engine)
    line = check_weight_sync(lora.engine, lora.client, lora.stack, lora.work, resumed=True)
    assert "the trainer's weights pushed" in line
    assert list(lora.server.backend.adapters) == [POLICY_NAME]  # the probe unloaded, the trainer's adapter serves
    assert "first-pass ratio 1" in check_logprobs(lora.engine, lora.client, lora.stack)


def test_a_probe_the_served_tokens_cannot_tell_apart_is_pushed_again_larger_then_fails(lora, monkeypatch) -> None:
    """The pushed policy picks its own greedy tokens, and on those it may barely differ from the old one (a resumed,
    trained policy on a clean clone: |pushed - old| 0.053). The probe is then pushed again with a larger change, at
    most PROBE_PUSHES times, before the check names its own limit. Here no change can be large enough (MIN_MOVE
    out of reach), so every push is tried, each larger than the last."""
    from hermes_stack.trainer import policy_checks
    from hermes_stack.trainer.policy_checks import PROBE_NAME, PolicyCheckFailed, check_weight_sync

    monkeypatch.setattr(policy_checks, "MIN_MOVE", 1e6)
    sizes = []
    real_push = policy_checks._push

    def recording_push(client, engine, directory, name):
        if name == PROBE_NAME:
            sizes.append(sum(float(t.detach().abs().sum()) for t in policy_checks._perturbed(engine)))
        return real_push(client, engine, directory, name)

    monkeypatch.setattr(policy_checks, "_push", recording_push)
    _train_the_adapter(lora.engine)
    with pytest.raises(PolicyCheckFailed, match="the probe cannot tell the pushed policy from the old one"):
        check_weight_sync(lora.engine, lora.client, lora.stack, lora.work, resumed=True)
    assert len(sizes) == policy_checks.PROBE_PUSHES == 3
    assert sizes == sorted(sizes) and len(set(sizes)) == 3


def test_a_server_that_ignores_adapters_fails_both_checks_naming_the_adapter(lora, monkeypatch) -> None:
    from hermes_stack.inference.builtin import BuiltinBackend
    from hermes_stack.trainer.policy_checks import PolicyCheckFailed, check_logprobs, check_weight_sync

    monkeypatch.setattr(BuiltinBackend, "_adapter", lambda self, requested: None)  # loads adapters, serves the base
    _train_the_adapter(lora.engine)
    with pytest.raises(PolicyCheckFailed) as failed:
        check_weight_sync(lora.engine, lora.client, lora.stack, lora.work, resumed=True)
    assert failed.value.layer == "weight-sync"
    assert "POST /load_lora_adapter answered success" in str(failed.value)
    with pytest.raises(PolicyCheckFailed) as failed:
        check_logprobs(lora.engine, lora.client, lora.stack)
    assert failed.value.layer == "logprobs" and "likely cause: adapter not applied" in str(failed.value)


def test_the_tinker_engines_local_model_is_measured_and_refused_over_the_cap(tmp_path) -> None:
    from types import SimpleNamespace

    import torch

    from hermes_stack.trainer.engine_tinker import LocalCritic
    from hermes_stack.trainer.memory_check import MemoryCheckFailed, check_local_model

    critic = LocalCritic(str(embedded_model_dir()), with_value_head=True, temperature=0.7)
    rollout = SimpleNamespace(max_token_length=48, sequences_per_step=6)
    stack = SimpleNamespace(algo="ppo", config=SimpleNamespace(rollout=rollout),
                            settings=SimpleNamespace(tinker=SimpleNamespace(max_token_trainer_length=9000)),
                            config_path=tmp_path / "config_ppo.toml")
    before = {k: v.clone() for k, v in critic.head.state_dict().items()}
    line = check_local_model(critic, stack, "cpu", None)
    assert line.startswith("memory: the Tinker engine's local model, 6 sequences x 48 tokens in micro-batches of 6 "
                           "measured on cpu: peak ")
    # The probe's value-head update is undone: the critic trains from where it was.
    assert all(torch.equal(before[k], v) for k, v in critic.head.state_dict().items())
    assert not critic.optimizer.state
    with pytest.raises(MemoryCheckFailed) as failed:
        check_local_model(critic, stack, "cpu", 0.01)
    assert str(failed.value).startswith("the Tinker engine's local model (reference and critic): micro_batch_size 6 "
                                        "x 48 tokens (the reference forward and the value head over 6 sequences, "
                                        "measured)")


def test_the_local_models_refusal_names_a_micro_batch_size_measured_to_fit(tmp_path, monkeypatch) -> None:
    """The probe runs the whole step in micro-batches of m rows; a peak that grows with m (stated here through the
    measurement) is refused at 6 and fits at 3: the hint is trainer.micro_batch_size = 3 (it said
    `trainer.sequences`, a key that does not exist)."""
    from types import SimpleNamespace

    from hermes_stack.trainer.engine_tinker import LocalCritic

    critic = LocalCritic(str(embedded_model_dir()), with_value_head=True, micro_batch_size=6)
    seen: list[int] = []
    real = critic.reference_and_hidden
    monkeypatch.setattr(critic, "reference_and_hidden", lambda arrays: (seen.append(critic.micro_batch_size),
                                                                        real(arrays))[1])

    def measure(fn):
        fn()
        return seen[-1] * memory_check.GIB  # 1 GiB a row of the micro-batch

    monkeypatch.setattr(memory_check, "measure_cpu", measure)
    rollout = SimpleNamespace(max_token_length=48, sequences_per_step=6)
    stack = SimpleNamespace(algo="ppo", config=SimpleNamespace(rollout=rollout),
                            settings=SimpleNamespace(tinker=SimpleNamespace(max_token_trainer_length=9000)),
                            config_path=tmp_path / "config_ppo.toml")
    with pytest.raises(memory_check.MemoryCheckFailed) as failed:
        memory_check.check_local_model(critic, stack, "cpu", 4.0)
    assert seen == [6, 3] and critic.micro_batch_size == 6
    assert str(failed.value).endswith("Hint: set trainer.micro_batch_size = 3 in settings_ppo.json"), failed.value


# ---------------------------------------------------------------- the Tinker engine before its first step


def test_a_fresh_tinker_policy_is_the_base_and_its_convention_is_checked(lora) -> None:
    """The Tinker engine's policy is not held here, but before step 1 it is the base model (Tinker's LoRA B starts at
    zero), which the local critic holds: the served rollouts are scored with it. A served model that is not the
    trainer's base fails, naming it."""
    import torch
    from transformers import AutoTokenizer

    from hermes_stack.trainer.engine_tinker import LocalCritic
    from hermes_stack.trainer.policy_checks import FreshTinkerPolicy, PolicyCheckFailed, check_logprobs

    directory = lora.engine.model_dir
    critic = LocalCritic(str(directory), with_value_head=False, temperature=0.8)
    scorer = FreshTinkerPolicy(critic, AutoTokenizer.from_pretrained(str(directory)))
    line = check_logprobs(scorer, lora.client, lora.stack)
    assert "first-pass ratio 1" in line and "at temperature 0.8, top_p 0.95" in line
    with pytest.raises(PolicyCheckFailed) as failed:  # HERMES_LOGPROB_TOLERANCE is the bound the check applies
        check_logprobs(scorer, lora.client, lora.stack, tolerance=1e-12)
    assert "(tolerance 1e-12, HERMES_LOGPROB_TOLERANCE)" in str(failed.value)
    with torch.no_grad():
        critic.base.get_output_embeddings().weight.mul_(3.0)  # another model than the one served
    with pytest.raises(PolicyCheckFailed) as failed:
        check_logprobs(scorer, lora.client, lora.stack)
    assert "likely cause: the served model is not the trainer's" in str(failed.value)


@pytest.mark.parametrize("resumed", [False, True])
def test_the_dry_run_scores_a_fresh_tinker_run_and_says_why_a_resumed_one_is_not(lora, tmp_path, monkeypatch,
                                                                                 resumed) -> None:
    from types import SimpleNamespace

    from hermes_stack.trainer.__main__ import loop_checks
    from hermes_stack.trainer.engine_tinker import LocalCritic

    monkeypatch.setattr(memory_check, "check_local_model", lambda *a, **k: "memory: measured")
    critic = LocalCritic(str(lora.engine.model_dir), with_value_head=False, temperature=0.8)
    engine = SimpleNamespace(critic=critic, step=3 if resumed else 0)
    stack = SimpleNamespace(**vars(lora.stack), settings=SimpleNamespace(trainer=SimpleNamespace(engine="tinker")))
    settings = SimpleNamespace(checkpoint_dir=tmp_path / "checkpoints", data_dir=tmp_path / "data")
    lines = loop_checks(stack, engine, lora.client, settings, SimpleNamespace(trainer_memory_cap_gib=None,
                                                                             logprob_tolerance=0.02))
    # The Tinker engine holds no tokenizer: the environment counts the prompts when it starts.
    assert re.fullmatch(r"prompts: checked by the environment when it starts \(this engine holds no tokenizer "
                        r"here\); \d+\.\d s", lines[0]), lines[0]
    assert lines[1] == "memory: measured" and lines[2].startswith("weight sync: not checked: the tinker engine's")
    if resumed:
        assert lines[3].endswith("(a resumed run: its policy is no longer the base model)"), lines
    else:
        assert lines[3].startswith("log-probs: the trainer scores the server's rollouts as it samples them"), lines


def test_the_tolerance_stays_below_half_the_probes_least_move_so_a_push_that_missed_cannot_pass():
    """The weight sync check counts a push as reached at |served - pushed| <= tolerance and needs the probe to move
    by MIN_MOVE / 2 from the old policy: a tolerance at or past that would pass a push that never arrived."""
    from hermes_stack.service_defaults import LOGPROB_TOLERANCE
    from hermes_stack.service_env import ServiceEnv
    from hermes_stack.trainer.policy_checks import MIN_MOVE

    bound = next(m.lt for m in ServiceEnv.model_fields["logprob_tolerance"].metadata if getattr(m, "lt", None))
    assert bound == MIN_MOVE / 2
    assert LOGPROB_TOLERANCE < bound
    # the bf16 noise measured on an H200 (0.021-0.029, docs/benchmarks.md) passes the default
    assert LOGPROB_TOLERANCE > 0.029
