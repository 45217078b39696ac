"""modelcore.weights_layout.adapter_problem: what SGLang 0.5.18's /load_lora_adapter would refuse (lora/mem_pool.py
`can_support`, with the server launched on LORA_TARGET_MODULES), said before the push."""

from __future__ import annotations

import json

import pytest

from hermes_stack.modelcore.weights_layout import LORA_TARGET_MODULES, adapter_problem


def adapter(tmp_path, config, weights=True):
    (tmp_path / "adapter_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights:
        (tmp_path / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    return tmp_path


@pytest.mark.parametrize("modules", [
    list(LORA_TARGET_MODULES),
    ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"],
    "all-linear",
    None,
])
def test_adapters_sglang_loads_pass(tmp_path, modules):
    assert adapter_problem(adapter(tmp_path, {"r": 8, "target_modules": modules})) is None


@pytest.mark.parametrize(("config", "weights", "named"), [
    ({"r": 8, "target_modules": ["q_proj", "lm_head", "embed_tokens"]}, True,
     "target modules ['embed_tokens', 'lm_head'] beyond the served ones"),
    ({"r": 8, "target_modules": ["q_proj"]}, False, "expected a peft adapter"),
    ({"r": 8, "target_modules": "w.*"}, True, "target_modules 'w.*', expected a list of modules"),
    ("[1, 2]", True, "adapter_config.json is not a JSON object"),
    ("{not json", True, "adapter_config.json is not a JSON object"),
])
def test_adapters_sglang_would_refuse_are_named(tmp_path, config, weights, named):
    problem = adapter_problem(adapter(tmp_path, config, weights))
    assert problem is not None and named in problem


def test_a_missing_folder_is_a_problem_not_a_crash(tmp_path):
    assert "found files []" in adapter_problem(tmp_path / "nowhere")


def test_the_torch_engines_peft_adapter_passes(tmp_path):
    """peft's all-linear on the Llama-shaped embedded model saves the seven projections."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    peft_model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())["target_modules"]
    assert {name.rsplit(".", 1)[-1] for name in saved} == set(LORA_TARGET_MODULES)
    assert adapter_problem(tmp_path) is None
