"""GPU smoke check of the torch paths, for a GPU VM (no hub, no Docker needed). Prints figures, asserts nothing.

1. GRPO and PPO on the embedded tiny model with the torch engine on CUDA (bench/learn.py's loop, shortened).
2. The LoRA path: a randomly initialised Llama-shaped checkpoint (hidden 1024, 8 layers) trained with lora_rank from
   settings.json on CUDA in bf16: rollout, train_step, adapter export; step time and peak GPU memory.
3. The built-in inference server on CUDA through its HTTP front: /v1/models, /generate with logprobs, and a weight
   reload from the adapter-free export.
4. (--split) The GPU memory split's trainer figures against CUDA: a Qwen3-8B-shaped model cut to 4 layers (its real
   hidden, intermediate, heads and 151,936-token vocabulary, random weights, bf16, LoRA rank 32) trains micro-batches
   of m sequences x T tokens; the measured peak over the loaded model is printed next to
   hermes_stack/config/memory.py's activation estimate (what `validate` sizes micro_batch_size with).
5. (--stack, on a GPU VM that reaches a registry and the hub) what the CPU rehearsal could not run: the real SGLang
   image and kernels. `hermes-stack up --algo grpo --device gpu` with the shipped configs, then one line per check:
   SGLang started with the split's --mem-fraction-static and --enable-lora, the model fetched by hub id into the
   hermes-models volume owned by uid 10001 (and flashinfer's JIT cache there), the trainer loaded the same files,
   a LoRA adapter accepted by /load_lora_adapter, training steps, no key in `docker compose logs inference`, and the
   GPU memory each process holds (nvidia-smi) against the split.
6. (--dry-run-checks) the dry-run's checks (trainer/__main__.py loop_checks) on the GPU, GRPO and PPO, with
   the gpu profile's configs, against the built-in server on the same GPU: memory measured with torch.cuda, the
   LoRA weight push and back, the log-prob convention (dry_run_checks).

    python bench/gpu_smoke.py [--steps 150] [--split | --dry-run-checks | --stack [--stack-steps 3]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda"  # --device cpu only to check the script itself on a CPU box
sys.path.insert(0, str(ROOT))


def learn(steps: int) -> None:
    for algo in ("grpo", "ppo"):
        cmd = [sys.executable, str(ROOT / "bench" / "learn.py"), "--algo", algo, "--steps", str(steps), "--device", DEVICE]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=False)


def lora(workdir: Path) -> Path:
    import torch

    from hermes_stack.config.loader import load_stack
    from hermes_stack.config.models import AlgorithmSection
    from hermes_stack.trainer.engine import Sequence
    from hermes_stack.trainer.engine_torch import TorchEngine
    from tests.fakes.fixture_model import build_fixture_model

    tinker = load_stack("grpo", ROOT / "configs", profile="gpu").settings.tinker
    model = build_fixture_model(workdir / "mid-model", hidden=1024, layers=8)
    params = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2, kl_coef=0.1)
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    engine = TorchEngine(model, params, tinker.learning_rate, device=DEVICE, temperature=1.0,  # generate's default
                         lora_rank=tinker.lora_rank)
    prompts = [f"{a}+{b}=" for a, b in zip(range(8), range(8, 16))]
    times = []
    for step in range(3):
        t0 = time.perf_counter()
        groups = []
        for prompt, completions in zip(prompts, engine.generate(prompts, n=8, max_new_tokens=64)):
            ids = engine.tokenizer.encode(prompt)
            groups.append([Sequence(tokens=ids + c.tokens, mask=[-100] * len(ids) + c.tokens,
                                    score=float(len(c.tokens) % 3 == 0), logprobs=[1.0] * len(ids) + c.logprobs)
                           for c in completions])
        metrics = engine.train_step(groups)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"lora step {step}: {times[-1]:.2f} s (64 sequences x <=64 new tokens) "
              + " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())[:6]), flush=True)
    exported = engine.export_weights(workdir / "adapter")
    print(f"lora: rank {tinker.lora_rank}, params trainable "
          f"{sum(p.numel() for p in engine.policy.parameters() if p.requires_grad):,}, "
          f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30 if DEVICE == 'cuda' else 0:.2f} GiB, "
          f"exported {sorted(p.name for p in exported.iterdir())}", flush=True)
    return model


def inference(model: Path) -> None:
    from fastapi.testclient import TestClient

    from hermes_stack.inference.builtin import BuiltinBackend
    from hermes_stack.inference.server import create_app

    backend = BuiltinBackend(str(model), served_model="mid", device=DEVICE, seed=0)
    auth = {"Authorization": "Bearer smoke"}
    with TestClient(create_app(backend, "smoke", data_dir=model.parent)) as client:  # reloads only from there
        print("inference /v1/models:", client.get("/v1/models", headers=auth).json()["data"][0]["id"])
        t0 = time.perf_counter()
        out = client.post("/generate", headers=auth, json={"text": "3+4=", "return_logprob": True,
                                                           "sampling_params": {"max_new_tokens": 32, "n": 8}}).json()
        dt = time.perf_counter() - t0
        first = out[0]["meta_info"]["output_token_logprobs"][:2]
        print(f"inference /generate n=8 x 32 tokens on {DEVICE}: {dt:.2f} s, first logprobs {first}")
        reload = client.post("/update_weights_from_disk", headers=auth, json={"model_path": str(model)}).json()
        print("inference reload:", reload)


def qwen3_8b_shaped(workdir: Path, layers: int):
    """A Qwen3-8B-shaped checkpoint cut to `layers` layers (its hidden, intermediate, heads and 151,936-token
    vocabulary, so the logits weigh what they weigh in the real model), random weights, bf16; and its config."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.fakes.fixture_model import build_tokenizer

    directory = workdir / f"qwen3-8b-shaped-{layers}"
    if (directory / "config.json").is_file():
        return directory, LlamaConfig.from_pretrained(directory)
    directory.mkdir(parents=True)
    tokenizer = build_tokenizer(directory)
    config = LlamaConfig(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=layers,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, torch_dtype="bfloat16")
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(directory)
    return directory, config


def dry_run_checks(workdir: Path, directory: Path, algo: str) -> None:
    """6. The dry-run's checks as the trainer runs them (trainer/__main__.py loop_checks) on the GPU: memory
    measured with torch.cuda at the micro_batch_size the GPU memory split plans for this model and config (what `up`
    hands the trainer), in the room SGLang's static pool would leave (HERMES_TRAINER_MEMORY_CAP_GIB), the weight push
    through /load_lora_adapter and back, and the log-prob convention, against the built-in inference server (float32)
    on the same GPU over loopback HTTP, LoRA rank from settings; then the log-prob check once more with the trainer
    in float32, which tells bf16's rounding from a wrong model. One line per check, as the dry-run prints."""
    import gc
    import json
    import socket
    import threading

    import torch
    import uvicorn

    from hermes_stack import service_defaults
    from hermes_stack.config import memory
    from hermes_stack.config.loader import load_stack
    from hermes_stack.errors import HermesError
    from hermes_stack.inference.builtin import BuiltinBackend
    from hermes_stack.inference.server import create_app
    from hermes_stack.trainer import memory_check, policy_checks
    from hermes_stack.trainer.engine_torch import TorchEngine
    from hermes_stack.trainer.weights_sync import InferenceClient

    stack = load_stack(algo, ROOT / "configs", profile="gpu")
    t = stack.settings.tinker
    micro, cap_gib = stack.settings.trainer.micro_batch_size, None
    if DEVICE == "cuda":
        shape = memory.ModelShape.from_config(json.loads((directory / "config.json").read_text()))
        plan = memory.plan_split(shape, stack.config.rollout, lora_rank=t.lora_rank,
                                 gpu_gib=torch.cuda.get_device_properties(0).total_memory / memory.GIB)
        micro = plan.micro_batch
        cap_gib = (plan.gpu_bytes - plan.sglang_static_bytes - memory.SGLANG_RUNTIME_BYTES) / memory.GIB
        print(f"dry-run ({algo}) split for {directory.name}: micro_batch_size {micro}, trainer planned "
              f"{plan.trainer_bytes / memory.GIB:.1f} GiB; the room next to SGLang's pool {cap_gib:.1f} GiB", flush=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = BuiltinBackend(str(directory), served_model="shaped", device=DEVICE, seed=0)
    server = uvicorn.Server(uvicorn.Config(create_app(backend, "smoke", data_dir=workdir), host="127.0.0.1",
                                           port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()

    def engine_in(dtype=None) -> TorchEngine:
        return TorchEngine(directory, stack.config.algorithm, t.learning_rate, device=DEVICE, lora_rank=t.lora_rank,
                           temperature=stack.config.rollout.temperature, epochs=stack.settings.trainer.epochs,
                           minibatches=stack.settings.trainer.minibatches, micro_batch_size=micro, dtype=dtype)

    engine = engine_in()
    deadline = time.monotonic() + 300
    while not (server.started and backend.is_ready()) and time.monotonic() < deadline:
        time.sleep(0.5)
    client = InferenceClient(f"http://127.0.0.1:{port}/v1", "smoke", timeout_s=300)
    tolerance = service_defaults.LOGPROB_TOLERANCE
    checks = [("memory", lambda: memory_check.check_torch_engine(engine, stack, cap_gib)),
              ("weight sync", lambda: policy_checks.check_weight_sync(engine, client, stack, workdir / "dry-run",
                                                                      False, tolerance)),
              ("log-probs", lambda: policy_checks.check_logprobs(engine, client, stack, tolerance))]
    if DEVICE == "cuda":
        checks.append(("log-probs, trainer in float32",
                       lambda: policy_checks.check_logprobs(engine_in(torch.float32), client, stack, tolerance)))
    try:
        for name, check in checks:
            try:
                print(f"dry-run ({algo}, {directory.name}, {DEVICE}) [{name}] check {check()}", flush=True)
            except (memory_check.MemoryCheckFailed, policy_checks.PolicyCheckFailed, HermesError) as exc:
                print(f"dry-run ({algo}) [{name}] check FAILED {type(exc).__name__}: {exc}", flush=True)
    finally:
        server.should_exit = True
        engine = checks = None  # let the GPU memory go before the next algorithm
        gc.collect()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        time.sleep(1)


def split(workdir: Path, layers: int = 4) -> None:
    """Measured trainer memory per micro-batch against the split's estimate (config/memory.py)."""
    import torch

    from hermes_stack.config import memory
    from hermes_stack.config.models import AlgorithmSection
    from hermes_stack.trainer.engine import Sequence
    from hermes_stack.trainer.engine_torch import TorchEngine

    directory, config = qwen3_8b_shaped(workdir, layers)
    shape = memory.ModelShape.from_config(config.to_dict())
    params = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2,
                        kl_coef=0.1)
    engine = TorchEngine(directory, params, 4e-5, device=DEVICE, lora_rank=32, temperature=1.0)
    fixed = memory.trainer_fixed_bytes(shape, 32)
    loaded = torch.cuda.memory_allocated() if DEVICE == "cuda" else 0
    print(f"split: {layers}-layer Qwen3-8B-shaped model, params {memory.param_count(shape):,}; loaded "
          f"{loaded / 2**30:.2f} GiB on the GPU, estimate for weights + LoRA state {fixed / 2**30:.2f} GiB", flush=True)
    gen = torch.Generator().manual_seed(0)
    for tokens in (1024, 2048):
        for micro in (1, 2):
            prompt = 32
            group = []
            for i in range(max(micro, 2)):
                ids = torch.randint(10, 151000, (tokens,), generator=gen).tolist()
                group.append(Sequence(tokens=ids, mask=[-100] * prompt + ids[prompt:], score=float(i % 2),
                                      logprobs=[1.0] * prompt + [-2.0] * (tokens - prompt)))
            if DEVICE == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() if DEVICE == "cuda" else 0
            t0 = time.perf_counter()
            engine.minibatch_size = micro  # one forward/backward over `micro` sequences at a time
            engine.train_step([group[:max(micro, 2)]])
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) if DEVICE == "cuda" else 0
            estimate = micro * memory.activation_bytes_per_sequence(shape, tokens)
            print(f"split: micro-batch {micro} x {tokens} tokens: measured peak over the loaded model "
                  f"{peak / 2**30:.2f} GiB, estimate {estimate / 2**30:.2f} GiB (ratio "
                  f"{peak / estimate if estimate else 0:.2f}), {time.perf_counter() - t0:.2f} s", flush=True)


def stack(steps: int) -> None:
    """The real gpu stack: up, a few steps, one line per check (PASS/FAIL), then down. Needs a registry, the hub
    (or a local model path in settings) and the NVIDIA Container Toolkit."""
    env = {**os.environ}

    def run(*argv: str, timeout: int = 3600) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def check(name: str, ok: bool, detail: str = "") -> None:
        print(f"stack: {'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    hs = [sys.executable, "-m", "hermes_stack"]
    validate = run(*hs, "validate", "--algo", "grpo", "--device", "gpu")
    fraction = next((line.split("--mem-fraction-static ")[1].split()[0] for line in validate.stdout.splitlines()
                     if "--mem-fraction-static" in line), None)
    check("validate prints the GPU memory split", fraction is not None, validate.stdout[-400:] if not fraction else
          f"fraction {fraction}")
    t0 = time.perf_counter()
    up = run(*hs, "up", "--algo", "grpo", "--device", "gpu", "--wait-timeout", "3000")
    check("up --device gpu: healthy, dry-run passed", up.returncode == 0 and "dry-run passed" in up.stdout,
          f"{time.perf_counter() - t0:.0f} s" if up.returncode == 0 else (up.stdout + up.stderr)[-1500:])
    if up.returncode != 0:
        return
    compose = ["docker", "compose", "-f", "compose.grpo.yml"]
    try:
        deadline = time.monotonic() + 3600
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = [ln for ln in run(*compose, "exec", "-T", "trainer", "cat", "/data/metrics.jsonl").stdout
                     .splitlines() if ln.startswith("{")]
            if len(lines) >= steps:
                break
            time.sleep(20)
        check(f"{steps} training steps", len(lines) >= steps, f"{len(lines)} in metrics.jsonl")
        logs = run(*compose, "logs", "inference").stdout
        key = (ROOT / ".hermes" / "inference.key")
        secret = key.read_text().strip() if key.is_file() else ""
        from hermes_stack.keyfile import load_keyfile

        keyfile = load_keyfile(None, register=False)
        secrets = [v for v in ([secret] + list(keyfile.values.values() if not keyfile.offline else [])) if len(v) > 8]
        check("no key in `docker compose logs inference`", not any(s in logs for s in secrets))
        check("SGLang logged server_args, key masked", "server_args=" in logs and "<redacted>" in logs)
        check("SGLang launched with the split's fraction and LoRA", f"--mem-fraction-static {fraction}" in logs
              and "--enable-lora" in logs)
        import httpx

        info = httpx.get("http://127.0.0.1:8001/get_model_info", headers={"Authorization": f"Bearer {secret}"},
                         timeout=30).json()
        check("a LoRA adapter loaded by SGLang", bool(info.get("lora_adapters")), str(info.get("lora_adapters")))
        owners = run(*compose, "exec", "-T", "inference", "sh", "-c",
                     "find /home/hermes/.cache ! -user 10001 | wc -l; ls /home/hermes/.cache | tr '\\n' ' '")
        not_ours, _, folders = owners.stdout.strip().partition("\n")
        check("model cache (and flashinfer's JIT cache) owned by uid 10001", not_ours.strip() == "0",
              f"{not_ours.strip()} entries not owned by 10001; folders: {folders}")
        smi = run("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader")
        check("GPU memory per process (SGLang, trainer)", smi.returncode == 0, " | ".join(smi.stdout.split("\n")))
    finally:
        run(*hs, "down", "--algo", "grpo")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--split", action="store_true", help="only the memory split's measurement (part 4)")
    ap.add_argument("--stack", action="store_true", help="only the real gpu stack (part 5; registry + hub needed)")
    ap.add_argument("--stack-steps", type=int, default=3)
    ap.add_argument("--dry-run-checks", action="store_true",
                    help="only the dry-run's checks on the GPU (part 6), GRPO and PPO")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.stack:
        stack(args.stack_steps)
        return
    import torch

    print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}, "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.split:
            split(Path(tmp))
            return
        if args.dry_run_checks:
            from tests.fakes.fixture_model import build_fixture_model

            # On a CPU box (checking the script itself) a small fixture model stands in for the shaped one.
            model = (qwen3_8b_shaped(Path(tmp), 4)[0] if DEVICE == "cuda"
                     else build_fixture_model(Path(tmp) / "small-model", hidden=64, layers=2))
            for algo in ("grpo", "ppo"):
                dry_run_checks(Path(tmp), model, algo)
            return
        model = lora(Path(tmp))
        inference(model)
        split(Path(tmp))
    learn(args.steps)


if __name__ == "__main__":
    main()
