"""Memory budget: reference parameter counts from published model sizes, KV-cache arithmetic, refusal lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_stack.config import memory
from hermes_stack.config.memory import ModelShape

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











