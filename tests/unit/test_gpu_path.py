"""Issue 16: the breaks a GPU VM's first `make up ALGO=grpo` hit, one test (or more) each, without a GPU.

1 online hub access (inference)     3 the trainer takes hub ids      5 the GPU memory split       7 LoRA serving
8 SGLang's output redacted          + LoRA errors in error_message, the driver check, the GPU-unusable notice.
(2 and 4 are image facts: tests/static/test_images.py; all of them together: tests/docker/test_stack_gpu_rehearsal.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import pytest
from fakes.loopback import free_port

from hermes_stack.config import memory
from hermes_stack.config.models import RolloutSection
from hermes_stack.errors import InputError
from hermes_stack.hub import OFFLINE_FLAGS
from hermes_stack.inference.service_config import load_service_config
from hermes_stack.inference.sglang import SGLangBackend, SGLangLaunch, launch_argv
from hermes_stack.service_env import ServiceEnv
from tests.fakes.hub_standin import Repo, serve
from tests.fakes.stack_files import write_stack

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
QWEN3_CONFIG = ROOT / "tests" / "fixtures" / "models" / "qwen3-8b" / "config.json"  # a model folder's config.json
KEY = "hs-internal-0123456789abcdefXYZ"
GIB = memory.GIB


def service_env(config_dir: Path = CONFIGS, profile: str = "gpu", **extra) -> dict[str, str]:
    return {"HERMES_CONFIG_DIR": str(config_dir), "HERMES_ALGO": "grpo", "HERMES_PROFILE": profile,
            "HERMES_INFERENCE_KEY": KEY, **extra}


# ---------------------------------------------------------------- 1: online model access on the gpu profile


@pytest.mark.parametrize("profile, online", [("gpu", True), ("embedded", False)])
def test_inference_service_is_online_exactly_for_a_hub_id_on_the_gpu_profile(monkeypatch, profile, online):
    """The image or a parent may set HF_HUB_OFFLINE=1; with the shipped Qwen/Qwen3-8B on the gpu profile the
    service (and so the SGLang child, which inherits its environment) must be online, and offline otherwise."""
    import hermes_stack.inference.__main__ as entry
    from hermes_stack.inference import service_config

    for name, value in service_env(profile=profile).items():
        monkeypatch.setenv(name, value)
    for name in OFFLINE_FLAGS:  # as a parent may; and monkeypatch then restores what main() sets or clears
        monkeypatch.setenv(name, "1")
    seen = {}

    def stop_here(cfg):
        seen.update({name: os.environ.get(name) for name in OFFLINE_FLAGS})
        seen["child"] = {k: v for k, v in __import__("hermes_stack.inference.sglang", fromlist=["child_env"])
                         .child_env(dict(os.environ)).items() if k in OFFLINE_FLAGS}
        raise InputError([])

    monkeypatch.setattr(service_config, "build_backend", stop_here)
    entry.main()
    if online:
        assert seen["HF_HUB_OFFLINE"] is None and seen["child"] == {}
    else:
        assert seen["HF_HUB_OFFLINE"] == "1" and seen["child"]["HF_HUB_OFFLINE"] == "1"


# ---------------------------------------------------------------- 3: one download, used by inference and trainer


@pytest.fixture()
def hub(tmp_path):
    """The embedded-style tiny repo on a loopback stand-in of the hub's file API."""
    from tests.fakes.fixture_model import build_fixture_model

    model = build_fixture_model(tmp_path / "src-model", hidden=16, layers=1)
    server, state = serve({"hermes-test/tiny": Repo(Path(model))})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in OFFLINE_FLAGS}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**base, **env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300, check=False)


def test_inference_downloads_a_hub_id_once_and_the_trainer_loads_the_same_folder(hub, tmp_path):
    """The SGLang backend fetches the hub id into the shared cache before launching SGLang with the folder; the
    trainer (gpu profile, same HF_HOME = the hermes-models volume) then resolves the id without downloading."""
    endpoint, state = hub
    configs = write_stack(tmp_path / "configs", dataset="offline-arith", model_path="hermes-test/tiny")
    env = {**service_env(configs), "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")}
    inference = _python("""
        import asyncio, sys
        from hermes_stack.hub import set_hub_access
        from hermes_stack.inference.service_config import load_service_config, build_backend
        import os
        cfg = load_service_config(os.environ)
        set_hub_access(cfg.online)
        backend = build_backend(cfg)
        asyncio.run(backend._fetch_model())
        print("SGLANG-MODEL-PATH", backend.spec.model_path)
    """, env)
    assert inference.returncode == 0, inference.stderr[-3000:]
    fetched = inference.stdout.split("SGLANG-MODEL-PATH ")[1].strip()
    assert fetched.startswith(str(tmp_path / "hf")) and (Path(fetched) / "config.json").is_file()
    downloads = dict(state.downloads)
    assert downloads and set(downloads.values()) == {1}

    trainer = _python("""
        import argparse
        from hermes_stack.trainer.__main__ import load_config, model_dir
        from hermes_stack.hub import needs_hub, set_hub_access
        from hermes_stack.service_env import ServiceEnv
        from hermes_stack.service_log import setup_logging
        setup_logging("INFO")  # as the trainer's main does: its lines are log records
        args = argparse.Namespace(algo="grpo", config_dir=__import__("pathlib").Path(__import__("os").environ["HERMES_CONFIG_DIR"]), profile="gpu")
        stack = load_config(args, ServiceEnv.from_environ())
        set_hub_access(needs_hub(stack.profile, stack.settings.inference.model_path))
        print("TRAINER-MODEL-DIR", model_dir(stack, ServiceEnv.from_environ()))
    """, env)
    assert trainer.returncode == 0, trainer.stderr[-3000:]
    assert trainer.stdout.split("TRAINER-MODEL-DIR ")[1].strip() == fetched
    assert "trainer: model hermes-test/tiny from the shared cache" in trainer.stdout
    assert state.downloads == downloads  # nothing fetched twice


def test_trainer_resolves_a_relative_model_folder_against_the_config_folder_parent(tmp_path, monkeypatch):
    from argparse import Namespace

    from hermes_stack.trainer.__main__ import load_config, model_dir

    (tmp_path / "models" / "mine").mkdir(parents=True)
    (tmp_path / "models" / "mine" / "config.json").write_text(QWEN3_CONFIG.read_text())
    configs = write_stack(tmp_path / "configs", dataset="offline-arith", model_path="./models/mine")
    monkeypatch.setenv("HERMES_CONFIG_DIR", str(configs))
    monkeypatch.chdir("/")
    service = ServiceEnv.from_environ()
    stack = load_config(Namespace(algo="grpo", config_dir=configs, profile="gpu"), service)
    assert model_dir(stack, service) == tmp_path / "models" / "mine"


# ---------------------------------------------------------------- 5: the GPU memory split


SHIPPED_ROLLOUT = RolloutSection(group_size=8, batch_size=32, max_token_length=2048)  # 256 sequences a step


# What the GPU torch engine keeps for one 2048-token Qwen3-8B row (h 4096, 36 layers, intermediate 12288, 32 heads,
# vocabulary 151,936; bf16), written out by hand from docs/memory.md, per token:
#   kept (gradient checkpointing): 36 layer inputs x 4096 x 2 B + logits and their flat copy 2 x 151,936 x 2 B
#   one recomputed layer: 2 B x (10 x 4096 + 4 x 12288) + float32 LoRA inputs 4 B x (q k v gate up: 5 x 4096,
#   o: 4096, down: 12288) + attention probabilities 32 heads x 2048 x 2 B + logits' gradients 2 x 151,936 x 2 B
QWEN3_8B_KEPT_PER_TOKEN = 36 * 4096 * 2 + 2 * 151_936 * 2
QWEN3_8B_RECOMPUTE_PER_TOKEN = (2 * (10 * 4096 + 4 * 12288) + 4 * (5 * 4096 + 4096 + 12288) + 32 * 2048 * 2
                                + 2 * 151_936 * 2)
QWEN3_8B_ACTIVATIONS_2048 = 2048 * (QWEN3_8B_KEPT_PER_TOKEN + QWEN3_8B_RECOMPUTE_PER_TOKEN)


def test_activation_formula_counts_what_the_checkpointed_lora_engine_keeps():
    """The plan's activations are the engine's: checkpointed layer inputs, logits, and one layer's recompute with
    peft's float32 LoRA input copies (the plan before counted 15.3 GiB of bf16 tensors in every layer and no
    float32 copy at all, while the engine without checkpointing kept ~23 GiB)."""
    shape = memory.KNOWN_SHAPES["qwen/qwen3-8b"]
    assert memory.activation_bytes_per_sequence(shape, 2048) == QWEN3_8B_ACTIVATIONS_2048  # ~3.76 GiB
    assert memory.activation_kept_bytes_per_token(shape) == QWEN3_8B_KEPT_PER_TOKEN
    # the recompute term grows with the padded width (attention probabilities): a longer row costs more per token
    assert (memory.activation_recompute_bytes_per_token(shape, 4096)
            - memory.activation_recompute_bytes_per_token(shape, 2048)) == 32 * 2048 * 2
    # the LoRA state is float32 (peft's default upcast), not the base dtype: weights, gradients, two AdamW moments
    lora = memory.lora_param_count(shape, 32)
    assert memory.trainer_fixed_bytes(shape, 32) == (memory.param_count(shape) * 2 + 4 * lora * 4
                                                     + memory.LOGPROB_WORKING_BYTES)


def test_split_reference_figures_for_qwen3_8b_on_80_gib():
    shape = memory.KNOWN_SHAPES["qwen/qwen3-8b"]
    split = memory.plan_split(shape, SHIPPED_ROLLOUT, lora_rank=32, gpu_gib=80)
    # bf16 weights, from Qwen3-8B's config.json shapes (untied embeddings; its q/k norms, 9,216 parameters, left out)
    per_layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096
    assert split.weights_bytes == 2 * (2 * 151_936 * 4096 + 36 * per_layer + 4096) == 16_381_452_288
    assert split.activation_bytes == QWEN3_8B_ACTIVATIONS_2048
    assert split.micro_batch == 5
    assert split.mem_fraction_static == 0.44
    assert split.trainer_bytes + split.sglang_static_bytes + split.reserve_bytes <= 80 * GIB
    assert split.kv_pool_bytes >= split.kv_bytes_per_sequence * 8  # at least one group at once
    assert memory.split_refusal(split) is None


def test_split_refusals_name_the_model_or_the_micro_batch():
    shape = memory.KNOWN_SHAPES["qwen/qwen3-8b"]
    small = memory.plan_split(shape, SHIPPED_ROLLOUT, lora_rank=32, gpu_gib=24)
    key, line = memory.split_refusal(small)
    assert key == "inference.model_path" and "the model twice" in line and "this GPU has 24 GiB" in line
    forced = memory.plan_split(shape, SHIPPED_ROLLOUT, lora_rank=32, gpu_gib=141, micro_batch=30)
    key, line = memory.split_refusal(forced, 30)
    assert key == "trainer.micro_batch_size" and line.startswith("micro_batch_size 30 x 2048 tokens")
    assert line.endswith("try micro_batch_size 26")  # the largest next to one group's KV cache
    fits = memory.plan_split(shape, SHIPPED_ROLLOUT, lora_rank=32, gpu_gib=141, micro_batch=26)
    assert memory.split_refusal(fits, 26) is None


def test_validate_prints_the_split_for_80_gib_and_refuses_44(capsys, tmp_path, monkeypatch):
    from hermes_stack.controller.cli import main

    monkeypatch.chdir(tmp_path)  # no key file here: offline
    monkeypatch.delenv("HERMES_KEYFILE", raising=False)
    args = ["validate", "--algo", "grpo", "--config-dir", str(CONFIGS), "--device", "gpu", "--gpu-memory"]
    assert main([*args, "80"]) == 0
    out = capsys.readouterr().out
    assert "GPU memory split (80 GiB" in out and "SGLang --mem-fraction-static 0.44" in out
    assert "trainer 38.3 GiB" in out and "micro_batch_size 5 x 3.8 GiB activations" in out
    assert "gradient checkpointing keeps 1.7 GiB" in out and "float32 LoRA inputs" in out
    assert main([*args, "44"]) == 2
    out, err = capsys.readouterr()
    # not one sequence fits: the split says so, not "micro_batch_size 0 x ... 256 micro-batches a step"
    assert "no room for one sequence's 3.8 GiB of activations (2048 tokens;" in out
    assert "micro_batch_size 0" not in out and "micro-batches a step" not in out
    assert ("config_grpo.toml: rollout.max_token_length: found 2048, expected a model and batch that fit the GPU "
            "next to SGLang. Hint: micro_batch_size 1 x 2048 tokens needs ~3.8 GiB") in err


def test_up_passes_the_split_to_the_services(tmp_path):
    from hermes_stack.config.loader import evaluate_stack
    from hermes_stack.controller.compose_env import compose_env

    stack, errors = evaluate_stack("grpo", CONFIGS, "gpu", gpu_memory_gib=80)
    assert errors == []
    env = compose_env(stack, KEY, None)
    assert env["HERMES_SGLANG_MEM_FRACTION"] == "0.44" and env["HERMES_MICRO_BATCH_SIZE"] == "5"
    cfg = load_service_config(service_env(HERMES_SGLANG_MEM_FRACTION=env["HERMES_SGLANG_MEM_FRACTION"]))
    argv = launch_argv(SGLangLaunch(model_path="/m", served_model="m", mem_fraction_static=cfg.sglang_mem_fraction),
                       Path("/c"))
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.44"
    with pytest.raises(InputError):
        load_service_config(service_env(HERMES_SGLANG_MEM_FRACTION="1.5"))


# ---------------------------------------------------------------- 7: LoRA serving whenever the policy is an adapter


@pytest.mark.parametrize("engine", ["torch", "tinker", "auto"])
def test_sglang_launches_with_lora_whenever_the_trainer_pushes_adapters(tmp_path, engine):
    settings = json.loads((CONFIGS / "settings_grpo.json").read_text())
    settings["trainer"]["engine"] = engine
    (tmp_path / "settings_grpo.json").write_text(json.dumps(settings))
    # temperature 1: the only one the tinker engine accepts (config/rules.py tinker_temperature)
    (tmp_path / "config_grpo.toml").write_text((CONFIGS / "config_grpo.toml").read_text()
                                               .replace("temperature = 0.8", "temperature = 1.0"))
    cfg = load_service_config(service_env(tmp_path))
    argv = launch_argv(SGLangLaunch(model_path="/m", served_model="m", max_lora_rank=cfg.lora_rank), Path("/c"))
    assert "--enable-lora" in argv and argv[argv.index("--max-lora-rank") + 1] == "32"
    # The attention and MLP projections our adapters train, not "all": SGLang 0.5.18 adds embed_tokens and lm_head
    # to "all" and reserves vocabulary-sized buffers for them.
    start = argv.index("--lora-target-modules") + 1
    assert argv[start:start + 7] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert "all" not in argv


def test_sglang_gets_its_flags_spelled_out_and_the_rollout_context_length():
    """SGLang 0.5.18's server_args names the flag --tp-size (our --tp worked only by argparse's prefix expansion),
    and --context-length was never passed: SGLang served the model's own 40,960 tokens."""
    from hermes_stack.inference.service_config import build_backend

    cfg = load_service_config(service_env(HERMES_SGLANG_TP="2"))
    assert cfg.context_length == 2048  # the shipped [rollout] max_token_length
    backend = build_backend(cfg)
    argv = launch_argv(backend.spec, Path("/c"))
    assert argv[argv.index("--tp-size") + 1] == "2" and "--tp" not in argv
    assert argv[argv.index("--context-length") + 1] == "2048"


# ---------------------------------------------------------------- 8: SGLang's output redacted

SERVER_ARGS_CHILD = textwrap.dedent("""
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    key = json.loads(open(args[args.index("--config") + 1]).read().split(":", 1)[1])
    print(f"[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/m', api_key='{key}', admin_api_key=None, "
          f"mem_fraction_static=0.53, enable_lora=True)", flush=True)
    print(f"Bearer {key} seen", flush=True)
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), H).serve_forever()
""")




def test_sglang_child_output_never_shows_the_key(tmp_path, capfd):
    stub = tmp_path / "child.py"
    stub.write_text(SERVER_ARGS_CHILD)
    spec = SGLangLaunch(model_path="/m", served_model="m", port=free_port(), launcher=(sys.executable, str(stub)),
                        start_timeout_s=30)
    backend = SGLangBackend(spec, KEY)

    async def run():
        await backend.start()
        await asyncio.sleep(0.2)
        tail = list(backend._child.tail)
        await backend.stop()
        return tail

    tail = asyncio.run(run())
    out = capfd.readouterr().out
    assert "server_args=ServerArgs(model_path='/m', api_key='<redacted>', admin_api_key=None" in out
    assert "mem_fraction_static=0.53" in out
    assert KEY not in out and not any(KEY in line for line in tail)


def test_redaction_masks_key_fields_even_for_a_key_it_was_not_told():
    from hermes_stack.inference.sglang import redact_child_line

    line = redact_child_line("ServerArgs(api_key='other-secret-123', hf_token=\"hf_abcdef\", tp_size=1)", None)
    assert "other-secret-123" not in line and "hf_abcdef" not in line and "tp_size=1" in line


# ---------------------------------------------------------------- SGLang's LoRA errors come in error_message


def test_lora_errors_are_read_from_error_message():
    def upstream(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/load_lora_adapter":
            return httpx.Response(400, json={"success": False, "error_message": "LoRA is not enabled"})
        return httpx.Response(200, json={"success": False, "error_message": "rank 64 > max_lora_rank 32"})

    backend = SGLangBackend(SGLangLaunch(model_path="/m", served_model="m", port=1), KEY,
                            transport=httpx.MockTransport(upstream), spawn=False)

    async def run():
        return (await backend.load_lora_adapter({"lora_name": "a", "lora_path": "/x"}),
                await backend.unload_lora_adapter({"lora_name": "a"}))

    loaded, unloaded = asyncio.run(run())
    assert loaded == {"success": False, "message": "LoRA is not enabled"}
    assert unloaded["message"] == "rank 64 > max_lora_rank 32"


# ---------------------------------------------------------------- driver check, and auto agreeing with up


class Probe:
    def __init__(self, smi: str | None, runtimes: str):
        self.smi, self.runtimes = smi, runtimes

    def which(self, name):
        return "/usr/bin/nvidia-smi" if name == "nvidia-smi" and self.smi else None

    def run(self, argv):
        if argv[0] == "nvidia-smi":
            return (0, self.smi, "") if self.smi else (127, "", "not found")
        return 0, self.runtimes, ""


@pytest.mark.parametrize("image, version, ok, hint", [
    ("lmsysorg/sglang:v0.5.18", "580.65.06", True, ""),
    ("lmsysorg/sglang:v0.5.18", "550.54.15", False, "HERMES_SGLANG_IMAGE=lmsysorg/sglang:v0.5.18-cu129"),
    ("lmsysorg/sglang:v0.5.18-cu129", "550.54.15", True, ""),
    ("lmsysorg/sglang:v0.5.18-cu129", "470.1", False, "R525"),
])
def test_driver_version_is_checked_against_the_sglang_image(image, version, ok, hint):
    from hermes_stack.controller.preflight import check_gpu

    findings = {f.what: f for f in check_gpu(Probe(f"NVIDIA H100 80GB HBM3, 81559 MiB, {version}",
                                                   '{"nvidia":{}}'), image)}
    found = findings["NVIDIA driver version"]
    assert found.ok is ok
    if not ok:
        assert f"{version} is older than" in found.line() and hint in found.line()


H100 = "NVIDIA H100 80GB HBM3, 81559 MiB, 580.65.06"


@pytest.mark.parametrize("smi, runtimes, gib", [
    (None, '{"runc":{}}', None),            # no GPU
    (H100, '{"runc":{}}', 79.6),            # a GPU Docker cannot use (no container toolkit)
    (H100, '{"nvidia":{}}', 79.6),          # a usable GPU
    (H100, '{"nvidia":{}}', None),          # a usable GPU whose memory nvidia-smi does not report
], ids=["no-gpu", "no-toolkit", "gpu", "gpu-memory-unknown"])
def test_validate_and_up_resolve_auto_to_the_same_device(monkeypatch, smi, runtimes, gib):
    """One owner of "auto" (controller.device.auto_device): the profile `validate` picks is the device `up` picks, with the
    same notices, whatever the host; the GPU's size only sizes the memory split."""
    from hermes_stack.controller import device as devices

    probe = Probe(smi, runtimes)
    monkeypatch.setattr(devices, "detect_gpu_memory_gib", lambda: gib)
    up_notes: list[str] = []
    device = devices.resolve_device("auto", probe, notify=up_notes.append)
    profile, found_gib, notes = devices.choose_profile("auto", None, probe)
    assert profile == {"gpu": "gpu", "cpu": "embedded"}[device]
    assert found_gib == (gib if device == "gpu" else None)
    assert up_notes == [n for n in notes if not n.startswith("no GPU found")]


def test_a_gpu_docker_cannot_use_is_said_and_validate_agrees_with_up(monkeypatch):
    from hermes_stack.controller import device as devices

    probe = Probe("NVIDIA H100 80GB HBM3, 81559 MiB, 580.65.06", '{"runc":{}}')
    notes = []
    assert devices.resolve_device("auto", probe, notify=notes.append) == "cpu"
    assert notes and notes[0].startswith("a GPU is present (NVIDIA H100 80GB HBM3, 81559 MiB) but Docker cannot "
                                         "use it: NVIDIA Container Toolkit not installed")
    monkeypatch.setattr(devices, "detect_gpu_memory_gib", lambda: 79.6)
    monkeypatch.setattr(devices, "SystemProbe", lambda: probe)
    profile, gib, validate_notes = devices.choose_profile("auto", None)
    assert (profile, gib) == ("embedded", None) and validate_notes == notes


# ---------------------------------------------------------------- 4: the environment online when the gpu profile needs the hub


@pytest.mark.parametrize("profile, dataset, online", [("gpu", "gsm8k", True), ("gpu", "offline-arith", False),
                                                      ("embedded", "gsm8k", False)])
def test_environment_goes_online_only_for_hub_data_on_the_gpu_profile(tmp_path, monkeypatch, profile, dataset,
                                                                       online):
    from hermes_stack.config.loader import load_stack
    from hermes_stack.environment.runtime import build_configs

    for name in OFFLINE_FLAGS:
        monkeypatch.setenv(name, "1")  # what the old image baked in
    (tmp_path / "config.json").write_text(QWEN3_CONFIG.read_text())  # a local model folder (the tokenizer's)
    configs = write_stack(tmp_path / "configs", dataset=dataset, model_path=str(tmp_path))
    stack = load_stack("grpo", configs, profile)
    environ = {"HERMES_KEYFILE": str(tmp_path / "none"), "TAOTOKEN_API_KEY": "sk-" + "k" * 30,
               "TAOTOKEN_BASE_URL": "https://gateway.invalid/api", "HERMES_EMBEDDED_MODEL": str(tmp_path)}
    build_configs(stack, environ)
    assert all((os.environ.get(name) is None) is online for name in OFFLINE_FLAGS), {
        n: os.environ.get(n) for n in OFFLINE_FLAGS}


def test_a_gpu_user_without_a_key_file_still_loads_gsm8k_from_the_hub(tmp_path, monkeypatch):
    """Finding 4 of issue 24: hub access follows the profile and the dataset, not the key file. Without one the
    environment ran offline and loaded gsm8k only from a cache nobody filled, while inference and trainer used the
    hub; `up` then failed at its last stage."""
    from hermes_stack.config.loader import load_stack
    from hermes_stack.environment.runtime import build_configs

    for name in OFFLINE_FLAGS:
        monkeypatch.setenv(name, "1")
    (tmp_path / "config.json").write_text(QWEN3_CONFIG.read_text())
    configs = write_stack(tmp_path / "configs", dataset="gsm8k", model_path=str(tmp_path))
    stack = load_stack("grpo", configs, "gpu")
    environ = {"HERMES_KEYFILE": str(tmp_path / "none"), "HERMES_EMBEDDED_MODEL": str(tmp_path)}  # no key at all
    env_config, _ = build_configs(stack, environ)
    assert env_config.offline  # no gateway: the judge stays off
    assert env_config.hub_access  # but the dataset comes from the hub, as on inference and trainer
    assert all(os.environ.get(name) is None for name in OFFLINE_FLAGS)


def test_the_trainer_takes_the_split_micro_batch_unless_the_settings_name_one(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from hermes_stack.trainer.__main__ import micro_batch_size

    def stack(value):
        return SimpleNamespace(settings=SimpleNamespace(trainer=SimpleNamespace(micro_batch_size=value)))

    from hermes_stack.service_env import ServiceEnv

    assert micro_batch_size(stack(None), ServiceEnv.from_environ({})) is None
    split = ServiceEnv.from_environ({"HERMES_MICRO_BATCH_SIZE": "16"})  # what `up` passes from the split
    assert micro_batch_size(stack(None), split) == 16
    assert micro_batch_size(stack(4), split) == 4
    with pytest.raises(InputError):  # a refused split's 0 never reaches a service
        ServiceEnv.from_environ({"HERMES_MICRO_BATCH_SIZE": "0"})


def _saved_bytes_per_token(model_dir, checkpointing: bool, width: int) -> float:
    """Bytes autograd keeps per token from the forward pass until backward (every saved tensor's storage once,
    the parameters left out): the torch engine's LoRA policy on a real Llama-shaped checkpoint, float32 on CPU."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hermes_stack.trainer import algorithms as alg
    from hermes_stack.trainer.engine_torch import enable_checkpointing

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if checkpointing:
        enable_checkpointing(base)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    saved: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = max(saved.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    ids = torch.randint(3, base.config.vocab_size, (1, width), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids, use_cache=False).logits
        picked, _ = alg.logprobs_and_entropy(logits[:, :-1], ids[:, 1:], 1.0, with_entropy=False)
        loss = picked.mean()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    loss.backward()
    return sum(n for ptr, n in saved.items() if ptr not in params) / width


@pytest.mark.parametrize("width", [64, 128])
def test_the_activation_plan_agrees_with_what_autograd_keeps(tmp_path, width):
    """The plan's activation figure measured against the engine (issue 24: the plan agrees with a measurement).
    With checkpointing, what the forward keeps is the plan's kept term (layer inputs + logits) within 10 %; the peak
    adds one recomputed layer, which the plan counts from above (at most 2.5x the measured layer: its tensor counts
    are an upper bound). Without checkpointing every layer keeps its tensors: many times the kept term, the ~23 GiB
    a row an 8B model ran out with."""
    import json

    from tests.fakes.fixture_model import build_fixture_model

    model_dir = build_fixture_model(tmp_path / "model", hidden=64, layers=4)
    shape = memory.ModelShape.from_config(json.loads((model_dir / "config.json").read_text()))
    shape = memory.ModelShape(**{**vars(shape), "dtype_bytes": 4})  # float32 here
    kept = _saved_bytes_per_token(model_dir, True, width)
    everything = _saved_bytes_per_token(model_dir, False, width)
    assert kept == pytest.approx(memory.activation_kept_bytes_per_token(shape), rel=0.10)
    one_layer = (everything - kept) / shape.num_layers
    measured_peak = kept + one_layer
    planned = memory.activation_bytes_per_sequence(shape, width) / width
    assert measured_peak <= planned <= 2.5 * measured_peak, (measured_peak, planned)
    assert everything > 5 * memory.activation_kept_bytes_per_token(shape)
