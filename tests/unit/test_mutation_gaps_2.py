"""Small tests that pin behaviour a mutation check found unguarded: checkpoints and the training loop, the GPU
memory model, adapter unloads, run identity, validation rules at their boundaries, and `status`'s readers."""

from __future__ import annotations

import io
import json
import shutil
import threading
from pathlib import Path

import httpx
import pytest
import torch
from trainer_helpers import Feeder, TinyEngine

from hermes_stack import run_identity as ri
from hermes_stack.config import rules
from hermes_stack.config.loader import load_files, load_stack
from hermes_stack.config.memory import GIB, KNOWN_SHAPES, GpuSplit, ModelShape, plan_split, split_refusal
from hermes_stack.config.models import RolloutSection
from hermes_stack.controller import status
from hermes_stack.controller.status import ServiceState
from hermes_stack.trainer import checkpoint as ckpt
from hermes_stack.trainer.atropos_client import AtroposClient
from hermes_stack.trainer.loop import LoopSettings, StopFlag, run_training, save
from hermes_stack.trainer.metrics import MetricsSink
from hermes_stack.trainer.weights_sync import InferenceClient

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


# ---------------------------------------------------------------- checkpoints and the loop


def test_c3_a_manifest_that_lists_no_state_file_is_not_resumed(tmp_path):
    """latest_checkpoint skips a step dir whose complete-looking manifest lists no state.pt."""
    ckpt.save_checkpoint(tmp_path, 3, {"w": torch.ones(1)})
    bare = tmp_path / "step-7"
    bare.mkdir()
    (bare / ckpt.MANIFEST).write_text(json.dumps({"step": 7, "complete": True, "files": {}, "meta": {}}))
    assert ckpt.latest_checkpoint(tmp_path).step == 3


def test_c18_clean_incomplete_removes_a_step_whose_manifest_is_not_json(tmp_path):
    """clean_incomplete removes (and returns) a step dir whose manifest exists but does not parse."""
    ckpt.save_checkpoint(tmp_path, 2, {"w": torch.ones(1)})
    broken = tmp_path / "step-4"
    broken.mkdir()
    (broken / ckpt.MANIFEST).write_text("{")
    assert ckpt.clean_incomplete(tmp_path) == [broken]
    assert not broken.exists() and (tmp_path / "step-2").is_dir()


def test_c13_loop_save_keeps_only_keep_checkpoints(tmp_path):
    """The loop's save prunes to settings.keep_checkpoints, not to a fixed count."""
    settings = LoopSettings(num_steps=3, batch_size_sequences=8, max_token_len=64, checkpoint_dir=tmp_path / "ck",
                            save_interval=1, data_dir=tmp_path, keep_checkpoints=1)
    engine = TinyEngine()
    for step in (1, 2, 3):
        save(engine, settings, step)
    assert [c.step for c in ckpt.list_checkpoints(tmp_path / "ck")] == [3]


class _StopAt(TinyEngine):
    """Requests a stop (as SIGTERM would) while its step `at` is running."""

    def __init__(self, stop: StopFlag, at: int):
        super().__init__()
        self.stop, self.at = stop, at

    def train_step(self, groups):
        metrics = super().train_step(groups)
        if self.steps == self.at:
            self.stop.set()
        return metrics


def test_c16_a_stop_during_the_final_step_writes_no_stopped_event(api, tmp_path):
    """A stop that lands in the last step finished the run: no `stopped` event (status would say not completed)."""
    api.reset()

    def feed() -> None:
        feeder = Feeder(api.url, 4)
        feeder.register()
        feeder.send_random(4, seed=4)

    threading.Thread(target=feed, daemon=True).start()
    settings = LoopSettings(num_steps=2, batch_size_sequences=8, max_token_len=64,
                            checkpoint_dir=tmp_path / "checkpoints", save_interval=5, data_dir=tmp_path,
                            batch_timeout_s=20, inference_wait_s=5)
    stop = StopFlag()
    sink = MetricsSink(tmp_path / "metrics.jsonl", 2, stream=io.StringIO())
    atropos = AtroposClient(api.url)
    try:
        assert run_training(_StopAt(stop, 2), atropos, None, settings, sink, stop) == 2
    finally:
        atropos.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "step" in r] == [1, 2]
    assert "stopped" not in [r.get("event") for r in records]


# ---------------------------------------------------------------- the GPU memory model


def test_p5_concurrent_sequences_never_exceed_the_step_s_sequences():
    """A KV pool that holds 10 sequences serves at most the step's 2 at once."""
    s = GpuSplit(gpu_bytes=80 * GIB, sequences=2, group_size=2, tokens=256, weights_bytes=GIB,
                 trainer_fixed_bytes=GIB, activation_bytes=GIB, kv_bytes_per_sequence=GIB, micro_batch=1,
                 kv_pool_bytes=10 * GIB)
    assert s.concurrent_sequences == 2


def test_p7_derived_micro_batch_is_capped_at_the_step_s_sequences():
    """batch_size 1 x group_size 2 on a roomy GPU: micro_batch is the step's 2 sequences, not more."""
    s = plan_split(KNOWN_SHAPES["qwen/qwen2.5-1.5b"], RolloutSection(group_size=2, batch_size=1, max_token_length=256),
                   lora_rank=8, gpu_gib=80)
    assert s.micro_batch == 2


def test_p14_suggested_micro_batch_leaves_room_for_one_group_s_kv():
    """The hint's micro_batch_size leaves one group's KV cache: (18.5-6-2-3-4x0.5) GiB / 1 GiB -> 5."""
    s = GpuSplit(gpu_bytes=int(18.5 * GIB), sequences=32, group_size=4, tokens=1024, weights_bytes=2 * GIB,
                 trainer_fixed_bytes=3 * GIB, activation_bytes=GIB, kv_bytes_per_sequence=GIB // 2, micro_batch=8,
                 kv_pool_bytes=0)
    key, line = split_refusal(s, configured_micro_batch=8)
    assert key == "trainer.micro_batch_size" and line.endswith("try micro_batch_size 5")


_HF_CONFIG = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008,
              "vocab_size": 32000}


def test_p17_float32_weights_take_four_bytes():
    """torch_dtype float32 in config.json gives dtype_bytes 4."""
    assert ModelShape.from_config({**_HF_CONFIG, "torch_dtype": "float32"}).dtype_bytes == 4


def test_p12_missing_num_key_value_heads_means_one_kv_head_per_attention_head():
    """Without num_key_value_heads (Hugging Face's default: multi-head attention) KV heads equal attention heads."""
    assert ModelShape.from_config(_HF_CONFIG).num_kv_heads == 32


# ---------------------------------------------------------------- adapter unloads


def _client(handler) -> tuple[InferenceClient, list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)["lora_name"]))
        return handler(request)

    return InferenceClient("http://inference:8001/v1", "k3y", transport=httpx.MockTransport(record)), seen


def test_w6_an_already_loaded_answer_still_unloads_the_previous_adapter(tmp_path):
    """step-2 answered "already loaded" is served: the adapter loaded before it (step-1) is unloaded."""
    (tmp_path / "adapter_config.json").write_text("{}")

    def handler(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["lora_name"]
        if request.url.path == "/load_lora_adapter" and name == "step-2":
            return httpx.Response(400, json={"success": False,
                                             "message": f"Failed to load LoRA adapter {name} because it is already "
                                                        "loaded"})
        return httpx.Response(200, json={"success": True})

    client, seen = _client(handler)
    client.push_weights(tmp_path, 1)
    client.settle()
    assert client.push_weights(tmp_path, 2)["success"] is True
    client.settle()
    assert seen == [("/load_lora_adapter", "step-1"), ("/load_lora_adapter", "step-2"),
                    ("/unload_lora_adapter", "step-1")]


def test_w8_pushing_the_same_adapter_twice_never_unloads_it(tmp_path):
    """A second push of step-3 (a retry) must not unload step-3, the adapter being served."""
    (tmp_path / "adapter_config.json").write_text("{}")
    client, seen = _client(lambda r: httpx.Response(200, json={"success": True}))
    for _ in range(2):
        client.push_weights(tmp_path, 3)
        client.settle()
    assert seen == [("/load_lora_adapter", "step-3"), ("/load_lora_adapter", "step-3")]


# ---------------------------------------------------------------- run identity


def test_i3_a_refused_decision_has_no_resume_notice():
    """A model change refuses the resume; the learning-rate change beside it gives no "resuming ..." notice."""
    old = {"algo": "grpo", "model": "a", "engine": "torch", "lora_rank": 8, "learning_rate": 0.001}
    decision = ri.decide(old, {**old, "model": "b", "learning_rate": 0.002})
    assert not decision.resume and decision.changed
    assert decision.notice() is None


@pytest.fixture
def project(tmp_path, monkeypatch, isolated_secrets):
    shutil.copytree(CONFIGS, tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    return tmp_path


def test_i7_identity_names_the_catalog_model_not_its_hub_path(project):
    """A stack started with MODEL=smollm2-135m (GPU: served from its hub id) carries the catalog name."""
    stack = load_stack("grpo", "configs", "gpu", model="smollm2-135m")
    assert stack.settings.inference.model_path != "smollm2-135m"  # the hub id: what the mutant would record
    assert ri.identity_of(stack)["model"] == "smollm2-135m"


def test_i9_a_record_that_is_not_an_object_reads_as_none(tmp_path):
    """A run record holding a JSON list is no record."""
    ri.record_path(tmp_path, "hermes-grpo").write_text("[1]")
    assert ri.read_record(tmp_path, "hermes-grpo") is None


# ---------------------------------------------------------------- validation rules at their boundaries


def _inputs(algo: str, config: dict | None = None, settings: dict | None = None) -> rules.Inputs:
    c, s, _, _ = load_files(algo, CONFIGS)
    for dotted, value in (config or {}).items():
        section, name = dotted.split(".")
        c = c.model_copy(update={section: getattr(c, section).model_copy(update={name: value})})
    for dotted, value in (settings or {}).items():
        section, name = dotted.split(".")
        s = s.model_copy(update={section: getattr(s, section).model_copy(update={name: value})})
    return rules.Inputs(algo=algo, config=c, settings=s, config_file=f"config_{algo}.toml",
                        settings_file=f"settings_{algo}.json")


def test_r2_grpo_group_size_four_gets_no_caution():
    """GRPO's group_size rule asks for "4 or more": 4 itself passes."""
    assert rules.grpo_group_size(_inputs("grpo", {"rollout.group_size": 4})) == []


def test_r4_ppo_group_size_two_is_a_problem():
    """PPO wants group_size 1: 2 is refused."""
    got = rules.ppo_group_size(_inputs("ppo", {"rollout.group_size": 2}))
    assert [(p.key, p.found) for p in got] == [("rollout.group_size", "2")]


def test_r17_grpo_greedy_sampling_with_a_group_of_two_is_refused():
    """temperature 0 with group_size 2: both completions are the same, so the GRPO run is refused."""
    got = rules.grpo_groups_can_differ(_inputs("grpo", {"rollout.temperature": 0.0, "rollout.group_size": 2}))
    assert [p.key for p in got] == ["rollout.temperature"] and not isinstance(got[0], rules.Caution)


def test_r18_grpo_small_value_loss_coef_is_a_problem():
    """GRPO wants value_loss_coef 0: even 0.005 is refused."""
    got = rules.grpo_value_loss_coef(_inputs("grpo", {"algorithm.value_loss_coef": 0.005}))
    assert [p.key for p in got] == ["algorithm.value_loss_coef"]


def test_r10_https_url_without_a_port_means_port_443():
    """rollout_server_url https://atropos (no port) is port 443, which agrees with api_port 443."""
    i = _inputs("grpo", {"atropos.api_port": 443}, {"atropos.rollout_server_url": "https://atropos"})
    assert rules.atropos_port_agrees(i) == []


def test_r13_save_interval_equal_to_num_steps_gives_no_caution():
    """An interval of exactly num_steps saves at the last step as intended: no caution ("at most num_steps")."""
    steps = load_files("grpo", CONFIGS)[1].trainer.num_steps
    i = _inputs("grpo", settings={"tinker.save_checkpoint_interval": steps})
    assert rules.checkpoint_interval_reached(i) == []


# ---------------------------------------------------------------- status' readers


def test_s1_a_boolean_step_is_not_a_step_record():
    """{"step": true} is not a whole-number step: parse_metrics drops it."""
    assert status.parse_metrics(json.dumps({"step": True}) + "\n" + json.dumps({"step": 1})) == [{"step": 1}]


def test_s3_a_completed_event_after_a_stop_ends_the_stop():
    """step 5, `stopped`, then a start's `completed`: the run is no longer reported as stopped."""
    text = "\n".join(json.dumps(r) for r in ({"step": 5}, {"event": "stopped", "at_step": 5},
                                             {"event": "completed", "at_step": 5}))
    assert status.stopped_at(text) is None


def test_s5_a_long_error_is_cut_to_exactly_width():
    """width=20: the first 19 characters and an ellipsis, 20 in all."""
    got = status.last_error(["svc | ValueError: " + "x" * 100], width=20)
    assert got == "ValueError: xxxxxxx…" and len(got) == 20


def test_s13_an_error_of_exactly_width_is_unchanged():
    """An error exactly `width` characters long is not cut."""
    exact = "ValueError: " + "y" * 8
    assert len(exact) == 20
    assert status.last_error(["svc | " + exact], width=20) == exact


def test_s7_systemexit_1_is_an_error_not_a_clean_exit():
    """SystemExit: 1 is a failure (only 0, 130 and 143 are clean exits)."""
    assert status.last_error(["x | SystemExit: 1"]) == "SystemExit: 1"


def test_s14_a_trainer_that_exited_1_is_not_called_stopped():
    """Exit 1 beside a stop event at step 5 is a failure, not "stopped after step 5"."""
    line = status.state_line(ServiceState("trainer", "hermes-grpo-trainer-1", "exited", "", 1), 5)
    assert "stopped after step" not in line and line.startswith("!!")


def _tight_gpu_gib(extra_bytes: int, tokens: int = 1024, group_size: int = 4) -> tuple[float, RolloutSection]:
    """A GPU of exactly weights + LoRA state + the documented 6 GiB reserve (docs/memory.md: 4 for SGLang's runtime,
    2 for the trainer's) + `extra_bytes`, for Qwen2.5-1.5B; the parts from the model card's arithmetic."""
    from hermes_stack.config.memory import param_count, trainer_fixed_bytes

    shape = KNOWN_SHAPES["qwen/qwen2.5-1.5b"]
    needed = param_count(shape) * shape.dtype_bytes + trainer_fixed_bytes(shape, 8) + 6 * GIB + extra_bytes
    # +0.5 byte: plan_split truncates gpu_gib * GIB to whole bytes
    return (needed + 0.5) / GIB, RolloutSection(group_size=group_size, batch_size=8, max_token_length=tokens)


def test_p8_one_sequence_fits_only_beside_a_whole_group_s_kv_cache():
    """The fallback micro-batch of 1 needs one sequence's activations and one group's KV (group_size x one
    sequence's): with a byte less than that, nothing fits; with exactly that, one sequence does."""
    from hermes_stack.config.memory import activation_bytes_per_sequence, kv_bytes_per_token

    shape = KNOWN_SHAPES["qwen/qwen2.5-1.5b"]
    act, kv_seq = activation_bytes_per_sequence(shape, 1024), kv_bytes_per_token(shape) * 1024
    assert act > 4 * kv_seq  # so half of the free room is below one sequence and only the fallback can give 1
    gib, rollout = _tight_gpu_gib(act + 4 * kv_seq)
    assert plan_split(shape, rollout, lora_rank=8, gpu_gib=gib).micro_batch == 1
    gib, rollout = _tight_gpu_gib(act + 4 * kv_seq - 1)
    assert plan_split(shape, rollout, lora_rank=8, gpu_gib=gib).micro_batch == 0


def test_p9_p15_the_model_twice_plus_the_6_gib_reserve_filling_the_gpu_is_refused_by_model():
    """Weights twice (with the LoRA state) plus the 6 GiB reserve exactly the GPU's size: no byte left for KV or
    activations, so the model is what to change; a GiB more and the refusal is about the micro-batch instead."""
    shape = KNOWN_SHAPES["qwen/qwen2.5-1.5b"]
    gib, rollout = _tight_gpu_gib(0)
    key, line = split_refusal(plan_split(shape, rollout, lora_rank=8, gpu_gib=gib))
    assert key == "inference.model_path" and "plus 6 GiB reserve" in line, line
    gib, rollout = _tight_gpu_gib(GIB // 2)
    assert split_refusal(plan_split(shape, rollout, lora_rank=8, gpu_gib=gib))[0] == "rollout.max_token_length"
