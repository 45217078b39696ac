"""Memory budget: reference parameter counts from published model sizes, KV-cache arithmetic, refusal lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_stack.config import memory
from hermes_stack.config.memory import GIB, ModelShape

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def shape_of(name: str) -> ModelShape:
    return ModelShape.from_config(json.loads((MODELS / name / "config.json").read_text()))


# Published parameter counts (model cards): Llama-3-8B 8.03B, Qwen3-8B 8.19B, Qwen2.5-1.5B 1.54B.
@pytest.mark.parametrize("name, published", [
    ("llama-3-8b", 8.03e9),
    ("qwen3-8b", 8.19e9),
    ("qwen2.5-1.5b", 1.54e9),
])
def test_param_count_matches_published_size(name, published):
    assert memory.param_count(shape_of(name)) == pytest.approx(published, rel=0.005)


def test_tied_embeddings_have_no_separate_lm_head():
    s = shape_of("qwen2.5-1.5b")
    untied = ModelShape(**{**s.__dict__, "tie_word_embeddings": False})
    assert memory.param_count(untied) - memory.param_count(s) == s.vocab_size * s.hidden_size


def test_qwen2_gets_its_implicit_qkv_bias():
    s = shape_of("qwen2.5-1.5b")
    assert s.attention_bias
    assert not shape_of("qwen3-8b").attention_bias


def test_head_dim_defaults_to_hidden_over_heads():
    assert shape_of("llama-3-8b").head_dim == 4096 // 32


def test_kv_bytes_per_token_llama3_8b():
    # 2 (K,V) x 32 layers x 8 kv heads x 128 head dim x 2 bytes (bf16) = 131072 bytes = 128 KiB per token.
    assert memory.kv_bytes_per_token(shape_of("llama-3-8b")) == 131072


def test_lora_rank_32_on_llama3_8b():
    # Rank 32 on all seven linear projections of Llama-3-8B: 83,886,080 trainable parameters (PEFT's count).
    assert memory.lora_param_count(shape_of("llama-3-8b"), 32) == 83_886_080


def test_builtin_table_matches_the_config_json_fixtures():
    assert memory.KNOWN_SHAPES["meta-llama/meta-llama-3-8b"] == shape_of("llama-3-8b")
    assert memory.KNOWN_SHAPES["qwen/qwen3-8b"] == shape_of("qwen3-8b")
    assert memory.KNOWN_SHAPES["qwen/qwen2.5-1.5b"] == shape_of("qwen2.5-1.5b")


def test_find_shape_prefers_local_config_json_then_table():
    assert memory.find_shape(str(MODELS / "qwen3-8b")) == shape_of("qwen3-8b")
    assert memory.find_shape("Qwen/Qwen3-8B") == shape_of("qwen3-8b")
    assert memory.find_shape("qwen3-8b", base_dir=MODELS) == shape_of("qwen3-8b")
    assert memory.find_shape("someone/unknown-model") is None


def test_estimate_adds_weights_lora_and_kv():
    s = shape_of("llama-3-8b")
    b = memory.estimate(s, group_size=8, batch_size=32, tokens=9000, lora_rank=32, gpu_gib=24)
    assert b.sequences == 256
    assert b.kv_bytes == 131072 * 9000 * 256
    assert b.weights_bytes == memory.param_count(s) * 2
    assert b.need_bytes == b.kv_bytes + b.weights_bytes + b.lora_bytes
    assert not b.fits


def test_refusal_names_the_numbers_and_a_batch_size_that_fits():
    s = shape_of("qwen2.5-1.5b")
    b = memory.estimate(s, group_size=8, batch_size=32, tokens=9000, lora_rank=32, gpu_gib=24)
    line = memory.refusal(b)
    best = b.largest_batch_size()
    assert line is not None and line.startswith("group_size 8 × batch_size 32 = 256 sequences × 9000 tokens needs ~")
    assert "this GPU has 24 GiB" in line and line.endswith(f"try batch_size {best}")
    # The suggestion is the largest that fits: it fits, one more does not.
    fits = memory.estimate(s, group_size=8, batch_size=best, tokens=9000, lora_rank=32, gpu_gib=24)
    too_big = memory.estimate(s, group_size=8, batch_size=best + 1, tokens=9000, lora_rank=32, gpu_gib=24)
    assert fits.fits and not too_big.fits


def test_weights_too_big_for_the_gpu():
    b = memory.estimate(shape_of("qwen3-8b"), group_size=1, batch_size=1, tokens=2048, lora_rank=32, gpu_gib=8)
    line = memory.refusal(b)
    assert line is not None and "use a smaller model" in line


def test_large_gpu_fits_the_shipped_grpo_batch():
    b = memory.estimate(shape_of("qwen3-8b"), group_size=8, batch_size=32, tokens=2048, lora_rank=32, gpu_gib=141)
    assert b.fits and memory.refusal(b) is None
    assert b.need_bytes / GIB == pytest.approx(87.4, abs=0.1)


def test_no_nvidia_smi_means_unknown(monkeypatch):
    monkeypatch.setattr(memory.shutil, "which", lambda name: None)
    assert memory.detect_gpu_memory_gib() is None


def test_nvidia_smi_output_is_read_in_mib(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 24576\necho 24576\n")
    fake.chmod(0o755)
    monkeypatch.setattr(memory.shutil, "which", lambda name: str(fake))
    assert memory.detect_gpu_memory_gib() == 24.0
